//! The tiers working together: what the state handles, cold eviction and
//! checkpoints build on.
//!
//! [`Tiers`] joins L1 ([`crate::l1`]), L2 ([`crate::l2`]) and an optional
//! L3 ([`crate::ColdTier`]). Everything a state access changes lives under
//! one lock, [`Hot`] (uncontended when one task owns the store): the
//! compact tables, the open L2 write batch and a reused key buffer. An
//! access builds its L1 key once, with the hash the record brought
//! ([`Tiers::set_current_key`]), and every tier indexes by that hash.
//!
//! Writes are write-back: a value or list changed in L1 reaches L2 when L1
//! evicts it or a checkpoint flushes it, always through the open batch,
//! which is handed to the L2 writer when full. Reads go L1 → open batch →
//! batches on their way → RocksDB → L3, and promote what they find.

mod compact;
mod lower;
pub(crate) mod snapshot;

pub(crate) use compact::{compact_get, compact_insert, compact_remove, has_table};
pub use snapshot::PendingCheckpoint;

use crate::cold::ColdTier;
use crate::descriptor::StateDescriptor;
use crate::error::{Result, StateError};
use crate::hash::{hash_key, l1_hash, put_l1_key, KeyBytes, L1Map};
use crate::l1::table::AnyTable;
use crate::l1::{Slot, L1};
use crate::l2::access::AccessBits;
use crate::l2::batch::{Batch, Op};
use crate::l2::L2;
use crate::stats::TierCounters;
use crate::sync::lock;
use crate::ttl::{Clock, TimeDomain};
use std::any::TypeId;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

/// Encodes an L1 slot for L2: `None` when L2 holds all of it already;
/// `with_cold` says whether lists must say whether they are complete (see
/// [`crate::codec`]). A list's encoder also marks what it encodes as held
/// by L2.
pub(crate) type EncodeFn = fn(&str, &Slot, bool) -> Result<Option<(Op, Vec<u8>)>>;

/// A declared state and what its first handle fixed.
pub(crate) struct StateMeta {
    pub(crate) desc: StateDescriptor,
    pub(crate) encoder: OnceLock<(TypeId, &'static str, EncodeFn)>,
    /// `None` bytes an old value may need to decode (see [`crate::schema`]).
    pub(crate) pad: OnceLock<usize>,
}

impl StateMeta {
    pub(crate) fn new(desc: StateDescriptor) -> Self {
        Self {
            desc,
            encoder: OnceLock::new(),
            pad: OnceLock::new(),
        }
    }
}

/// What a state access changes, under the tier lock.
pub(crate) struct Hot {
    /// The reused L1-key buffer (taken by [`Hot::key`], given back after).
    buf: Vec<u8>,
    /// The compact table of each state whose values live in one.
    pub(crate) tables: Vec<Option<Box<dyn AnyTable>>>,
    /// The open L2 write batch.
    pub(crate) open: Batch,
    /// The key buffer of entries leaving the compact tables.
    pub(crate) spill_buf: Vec<u8>,
    /// The buffer a list append encodes its element into.
    pub(crate) element_buf: Vec<u8>,
    current_key: Vec<u8>,
    current_hash: u64,
    /// Compact-table accesses since the ballast was last touched.
    pub(crate) table_ops: u32,
    /// Admission to moka of values met on a miss.
    door: crate::l1::doorkeeper::Doorkeeper,
}

impl Hot {
    /// The L1 key of (`state`, `key`, `suffix`) in the reused buffer (give
    /// it back with [`Hot::give_back`]).
    pub(crate) fn key(&mut self, tiers: &Tiers, state: u16, key: &[u8], suffix: &[u8]) -> Vec<u8> {
        let record = if key == self.current_key.as_slice() {
            self.current_hash
        } else {
            hash_key(key)
        };
        let mut buf = std::mem::take(&mut self.buf);
        let kg = crate::key_group::key_group_of_hash(record, tiers.max_parallelism);
        put_l1_key(
            &mut buf,
            l1_hash(record, state, suffix),
            state,
            kg,
            key,
            suffix,
        );
        buf
    }

    /// Gives the key buffer back.
    pub(crate) fn give_back(&mut self, buf: Vec<u8>) {
        self.buf = buf;
    }
}

/// Full batches the store lets queue for the L2 writer before it waits.
const QUEUED_BATCHES: usize = 2;

/// L2 write batches that exist at once outside a checkpoint: the open
/// one, those queued, and the one the writer has copied into RocksDB's
/// write batch. Their bytes are charged to L1's capacity (measured: a
/// 64 MB L1 fed 400,000 lists grew RSS 2.3× the capacity while only one
/// batch was charged, 2.0× with all of them).
pub(crate) const BATCHES_IN_FLIGHT: u64 = QUEUED_BATCHES as u64 + 2;

/// Sizes and switches fixed when the store is built.
pub(crate) struct Settings {
    pub(crate) path: PathBuf,
    pub(crate) max_parallelism: u32,
    pub(crate) max_list_bytes: u64,
    pub(crate) flush_on_drop: bool,
    /// The open batch is handed over once it holds this many bytes.
    pub(crate) batch_bytes: usize,
}

/// See the module docs.
pub(crate) struct Tiers {
    pub(crate) l1: Arc<L1>,
    pub(crate) l2: Arc<L2>,
    pub(crate) cold: Option<Arc<dyn ColdTier>>,
    pub(crate) states: Vec<StateMeta>,
    hot: Mutex<Hot>,
    pub(crate) clock: Arc<Clock>,
    record_ts: AtomicI64,
    pub(crate) max_parallelism: u32,
    pub(crate) max_list_bytes: u64,
    batch_bytes: usize,
    pub(crate) access: Arc<AccessBits>,
    /// L3 answers read ahead for a batch of keys (see `prefetch`).
    pub(crate) prefetched: Mutex<L1Map<Option<Vec<u8>>>>,
    pub(crate) counters: TierCounters,
    pub(crate) path: PathBuf,
    closed: AtomicBool,
    flush_on_drop: bool,
    writer: Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl Tiers {
    /// The tiers of a store, with its L2 writer started.
    pub(crate) fn new(
        l1: L1,
        l2: L2,
        cold: Option<Arc<dyn ColdTier>>,
        states: Vec<StateMeta>,
        access: AccessBits,
        settings: Settings,
    ) -> Result<Self> {
        let l2 = Arc::new(l2);
        let writer_l2 = l2.clone();
        let writer = std::thread::Builder::new()
            .name("strata-l2-writer".into())
            .spawn(move || crate::l2::writer::run(writer_l2))
            .map_err(|e| StateError::Config(format!("cannot start the L2 writer thread: {e}")))?;
        let tables = states.iter().map(|_| None).collect();
        let door = l1.doorkeeper();
        Ok(Self {
            l1: Arc::new(l1),
            clock: l2.clock.clone(),
            l2,
            cold,
            states,
            hot: Mutex::new(Hot {
                buf: Vec::new(),
                tables,
                open: Batch::default(),
                spill_buf: Vec::new(),
                element_buf: Vec::new(),
                current_key: Vec::new(),
                current_hash: 0,
                table_ops: 0,
                door,
            }),
            record_ts: AtomicI64::new(i64::MIN),
            max_parallelism: settings.max_parallelism,
            max_list_bytes: settings.max_list_bytes,
            batch_bytes: settings.batch_bytes,
            access: Arc::new(access),
            prefetched: Mutex::default(),
            counters: TierCounters::default(),
            path: settings.path,
            closed: AtomicBool::new(false),
            flush_on_drop: settings.flush_on_drop,
            writer: Mutex::new(Some(writer)),
        })
    }

    /// Takes the tier lock; refuses a closed or failed store.
    pub(crate) fn lock(&self) -> Result<MutexGuard<'_, Hot>> {
        let hot = lock(&self.hot);
        if self.closed.load(Ordering::Acquire) {
            return Err(StateError::Closed(self.path.clone()));
        }
        self.l2.check()?;
        Ok(hot)
    }

    /// Marks the store closed (every later access fails).
    pub(crate) fn close(&self) {
        self.closed.store(true, Ordering::Release);
    }

    pub(crate) fn meta(&self, state: u16) -> &StateMeta {
        &self.states[usize::from(state)]
    }

    pub(crate) fn name(&self, state: u16) -> &str {
        &self.meta(state).desc.name
    }

    /// Sets the timestamp (ms) of the record being processed.
    pub(crate) fn set_record_timestamp(&self, ts: i64) {
        self.record_ts.store(ts, Ordering::Relaxed);
    }

    /// Sets the key of the record being processed and its
    /// [`hash_key`], which state accesses of that key reuse.
    pub(crate) fn set_current_key(&self, key: &[u8], hash: u64) {
        let mut hot = lock(&self.hot);
        hot.current_key.clear();
        hot.current_key.extend_from_slice(key);
        hot.current_hash = hash;
    }

    /// The write timestamp for a value of `state` written now.
    pub(crate) fn write_ts(&self, state: u16) -> i64 {
        match self.meta(state).desc.ttl.map(|t| t.domain) {
            Some(TimeDomain::ProcessingTime) => crate::ttl::wall_clock_millis(),
            _ => self.record_ts.load(Ordering::Relaxed),
        }
    }

    /// Whether a value of `state` written at `ts` has expired now.
    pub(crate) fn expired(&self, state: u16, ts: i64) -> bool {
        self.expiry_cutoff(state).is_some_and(|cutoff| ts <= cutoff)
    }

    /// Values of `state` written at or before this time have expired now;
    /// `None` when nothing can have (no TTL, or no watermark yet).
    pub(crate) fn expiry_cutoff(&self, state: u16) -> Option<i64> {
        self.l2.cutoff(state)
    }

    /// The moka slot of `key`, counted as an L1 hit or miss.
    pub(crate) fn l1_get(&self, hot: &mut Hot, key: &KeyBytes) -> Result<Option<Arc<Slot>>> {
        let got = self.l1_peek(hot, key)?;
        let c = &self.counters;
        TierCounters::count(got.is_some(), &c.l1_hits, &c.l1_misses);
        Ok(got)
    }

    /// [`Tiers::l1_get`] without counting (for writes).
    pub(crate) fn l1_peek(&self, hot: &mut Hot, key: &KeyBytes) -> Result<Option<Arc<Slot>>> {
        let got = self.l1.get(key);
        self.settle(hot)?;
        Ok(got)
    }

    /// Whether a value of `key` met on an L1 miss goes into moka: while
    /// moka has room, or once its key missed before (see
    /// [`crate::l1::doorkeeper`]); else it goes straight to the write batch.
    pub(crate) fn admits(&self, hot: &mut Hot, key: &KeyBytes) -> bool {
        self.l1.has_room() || hot.door.seen_before(key.hash())
    }

    /// Puts a slot in moka (a dirty one in the dirty set).
    pub(crate) fn l1_insert(&self, hot: &mut Hot, slot: Arc<Slot>) -> Result<()> {
        self.l1.insert(slot);
        self.settle(hot)
    }

    /// Charges L1 what its entries grew by in place (if it moved by a
    /// step), then moves the dirty slots moka evicted into the open batch
    /// (right after the moka operation that evicted them: never invisible
    /// to a read).
    pub(crate) fn settle(&self, hot: &mut Hot) -> Result<()> {
        self.l1.recharge();
        for slot in self.l1.take_evicted() {
            TierCounters::add(&self.counters.l1_spills, 1);
            if let Some((op, bytes)) = self.encode_slot(&slot)? {
                hot.open.push(&slot.key, op, &bytes);
            }
        }
        self.maybe_hand_over(hot);
        Ok(())
    }

    /// Encodes a moka slot for L2 (see [`EncodeFn`]).
    pub(crate) fn encode_slot(&self, slot: &Slot) -> Result<Option<(Op, Vec<u8>)>> {
        let meta = self.meta(slot.state());
        let (_, _, encode) = meta
            .encoder
            .get()
            .ok_or_else(|| StateError::UnknownState(meta.desc.name.clone()))?;
        encode(&meta.desc.name, slot, self.cold.is_some())
    }

    /// Adds a write to the open batch (handing it over if full).
    pub(crate) fn push(&self, hot: &mut Hot, key: &KeyBytes, op: Op, data: &[u8]) {
        hot.open.push(key, op, data);
        self.maybe_hand_over(hot);
    }

    fn maybe_hand_over(&self, hot: &mut Hot) {
        if hot.open.bytes() >= self.batch_bytes {
            self.hand_over(hot);
            // Backpressure: at most two full batches on their way, or six
            // while a checkpoint's RocksDB part holds the writer, so that
            // processing goes on through it.
            self.l2
                .pending
                .wait_below(QUEUED_BATCHES * self.batch_bytes, 6 * self.batch_bytes);
        }
    }

    /// Hands the open batch to the L2 writer.
    pub(crate) fn hand_over(&self, hot: &mut Hot) {
        self.l2.hand_over(std::mem::take(&mut hot.open));
    }

    /// Hands the open batch over and waits until L2 holds everything.
    pub(crate) fn settle_l2(&self, hot: &mut Hot) -> Result<()> {
        self.hand_over(hot);
        self.l2.wait_idle()
    }

    /// Removes a key from every tier this store writes. With a cold tier,
    /// L2 keeps a tombstone (an empty complete list for list state) until
    /// the deletion reaches L3; the runtime's own states never reach L3.
    pub(crate) fn remove(&self, hot: &mut Hot, key: &KeyBytes) -> Result<()> {
        self.l1.remove(key);
        self.settle(hot)?;
        let desc = &self.meta(key.state()).desc;
        let keep_tombstone = self.cold.is_some() && !desc.is_internal();
        let (op, bytes) = match (desc.kind, keep_tombstone) {
            (crate::StateKind::List, true) => {
                (Op::Replace, crate::codec::list_base_marker().to_vec())
            }
            (crate::StateKind::List, false) => (Op::Replace, Vec::new()),
            (_, true) => (Op::Put, crate::codec::tombstone()),
            (_, false) => (Op::Delete, Vec::new()),
        };
        self.push(hot, key, op, &bytes);
        Ok(())
    }

    /// Stops the writer after what is queued (waits for it).
    fn stop_writer(&self) {
        let handle = lock(&self.writer).take();
        if let Some(handle) = handle {
            self.l2.pending.push(crate::l2::writer::Job::Stop);
            let _ = handle.join();
        }
    }
}

impl Drop for Tiers {
    /// The last handle is gone: flush what only L1 holds (or say it is
    /// lost), then stop the writer once it wrote what it holds.
    fn drop(&mut self) {
        if self.flush_on_drop && !self.closed.load(Ordering::Acquire) {
            if let Err(e) = self.flush() {
                eprintln!(
                    "strata-cache: warning: dirty state of the store in {} could not be written to L2 and is lost: {e} (call StateStore::close to see such errors)",
                    self.path.display()
                );
            }
        }
        self.stop_writer();
    }
}
