//! [`StateStore`]: the tiered state store of one operator instance
//! (Flink's keyed state backend), and its [`StoreBuilder`].
//!
//! Reads go L1 → L2 → L3 and promote what they find into L1. Writes are
//! write-back: they land in L1 marked dirty (a list append to a key L1
//! lacks goes to the open L2 write batch, without reading the list), and
//! reach L2 in batches when L1 evicts them and at checkpoints, through the
//! L2 writer thread (see [`crate::tiers`], [`crate::l2`]). A dirty entry
//! leaving L1 is in the open batch before any other read can look for it,
//! so read-your-writes holds under concurrent eviction.

mod builder;
mod fixed;

pub use builder::{StoreBuilder, DEFAULT_MAX_LIST_BYTES, MAX_LIST_BYTES_LIMIT};

use crate::descriptor::StateKind;
use crate::error::{Result, StateError};
use crate::eviction::{ColdEviction, EvictionReport};
use crate::l1::compact::eligible;
use crate::l1::table::Table;
use crate::l2::report::L2Report;
use crate::schema::TypeSchema;
use crate::state::{encode_list, encode_value, ListState, ListValue, MapState, ValueState};
use crate::stats::TierStats;
use crate::tiers::{PendingCheckpoint, Tiers};
use crate::ttl::Clock;
use serde::{de::DeserializeOwned, Serialize};
use std::path::Path;
use std::sync::Arc;

/// A cheap, cloneable handle to a tiered state store.
///
/// Build one with [`StateStore::builder`]; get typed state handles with
/// [`StateStore::value_state`], [`StateStore::list_state`] and
/// [`StateStore::map_state`].
#[derive(Clone)]
pub struct StateStore {
    pub(crate) tiers: Arc<Tiers>,
    eviction: Option<Arc<ColdEviction>>,
}

impl StateStore {
    /// A builder for a store whose L2 lives in directory `path`.
    pub fn builder(path: impl Into<std::path::PathBuf>) -> StoreBuilder {
        StoreBuilder::new(path.into())
    }

    /// A handle to the declared value state `name` holding `T`. A `T` of
    /// at most 16 bytes without heap memory of its own lives in a compact
    /// table of L1 (see [`ValueState`]).
    ///
    /// Errors: [`StateError::UnknownState`], [`StateError::WrongKind`] (a
    /// state of another kind or type), [`StateError::SchemaChanged`].
    pub fn value_state<T>(&self, name: &str) -> Result<ValueState<T>>
    where
        T: Serialize + DeserializeOwned + Clone + Send + Sync + 'static,
    {
        let id = self.register::<T>(
            name,
            StateKind::Value,
            encode_value::<T>,
            TypeSchema::of::<T>,
        )?;
        if eligible::<T>() {
            let mut hot = self.tiers.lock()?;
            let slot = &mut hot.tables[usize::from(id)];
            if slot.is_none() {
                *slot = Some(Box::new(Table::<T> {
                    name: name.to_owned(),
                    table: Default::default(),
                }));
            }
        }
        Ok(ValueState::new(self.tiers.clone(), id))
    }

    /// A handle to the declared list state `name` with elements `T`.
    ///
    /// Errors: as [`StateStore::value_state`]'s.
    pub fn list_state<T>(&self, name: &str) -> Result<ListState<T>>
    where
        T: Serialize + DeserializeOwned + Clone + Send + Sync + 'static,
    {
        let id = self.register::<ListValue<T>>(
            name,
            StateKind::List,
            encode_list::<T>,
            TypeSchema::of::<T>,
        )?;
        Ok(ListState::new(self.tiers.clone(), id))
    }

    /// A handle to the declared map state `name` from `K` to `V`.
    ///
    /// Errors: as [`StateStore::value_state`]'s.
    pub fn map_state<K, V>(&self, name: &str) -> Result<MapState<K, V>>
    where
        K: Serialize + DeserializeOwned + Send + Sync + 'static,
        V: Serialize + DeserializeOwned + Clone + Send + Sync + 'static,
    {
        let id = self.register::<V>(
            name,
            StateKind::Map,
            encode_value::<V>,
            TypeSchema::of::<(K, V)>,
        )?;
        Ok(MapState::new(self.tiers.clone(), id))
    }

    /// The clock (watermark) this store measures event-time TTL against.
    pub fn clock(&self) -> &Arc<Clock> {
        &self.tiers.clock
    }

    /// Sets the timestamp (ms since the epoch) of the record being processed;
    /// event-time TTL stamps writes with it.
    pub fn set_record_timestamp(&self, ts: i64) {
        self.tiers.set_record_timestamp(ts);
    }

    /// Sets the key of the record being processed and its hash,
    /// [`crate::hash::hash_key`]`(key)` — the strata runtime passes the one
    /// its source computed to route the record — so that state accesses of
    /// that key do not hash it again. Optional: an access of another key
    /// hashes it. A wrong hash files the key under the wrong key group.
    pub fn set_current_key(&self, key: &[u8], hash: u64) {
        debug_assert_eq!(hash, crate::hash::hash_key(key));
        self.tiers.set_current_key(key, hash);
    }

    /// The number of key groups keys are spread over.
    pub fn max_parallelism(&self) -> u32 {
        self.tiers.max_parallelism
    }

    /// The directory L2 lives in.
    pub fn path(&self) -> &Path {
        &self.tiers.path
    }

    /// Flushes the dirty L1 entries to L2 — for entries never flushed, L1
    /// holds their only copy — and closes the store: every handle of it
    /// (state handles included) fails with [`StateError::Closed`] from then
    /// on, so no write can come after the flush that reported its errors.
    /// Call it when an embedding program is done with a store: dropping the
    /// last handle also flushes, but can only print a failure to stderr.
    ///
    /// Errors: L2 errors of the flush.
    pub fn close(self) -> Result<()> {
        self.flush()?;
        self.tiers.close();
        Ok(())
    }

    /// Writes every dirty L1 entry to L2 and waits until L2 holds it.
    ///
    /// Errors: a failed write fails this call and every later operation
    /// of the store ([`StateError::Failed`]): what it took from L1 is not
    /// all in L2.
    pub fn flush(&self) -> Result<()> {
        self.tiers.flush()
    }

    /// The synchronous part of a checkpoint: encodes the dirty L1 entries
    /// into the open write batch and hands it to the L2 writer, which then
    /// — behind every earlier batch and before any later one — picks the
    /// coldest keys beyond the L2 capacity for eviction to L3 (see
    /// [`StoreBuilder::l2_capacity`]) and writes a RocksDB checkpoint (hard
    /// links where possible) of L2 into `dir`, which must not exist yet.
    /// The caller goes on processing at once; [`PendingCheckpoint::wait`]
    /// waits for the directory (Flink's asynchronous snapshot phase).
    /// `checkpoint_id` is the id of the checkpoint this snapshot belongs
    /// to; [`StateStore::checkpoint_completed`] with it (or a later id)
    /// moves the picked keys to L3.
    ///
    /// Errors: [`StateError::Config`] if `dir` exists; a failed encoding
    /// or write fails the store.
    pub fn begin_checkpoint(&self, dir: &Path, checkpoint_id: u64) -> Result<PendingCheckpoint> {
        if dir.exists() {
            return Err(StateError::Config(format!(
                "checkpoint directory {} exists already: give a new one",
                dir.display()
            )));
        }
        let pick = self.eviction.as_ref().map(|e| {
            e.pick_work(
                self.tiers.l1.clone(),
                self.tiers.access.clone(),
                checkpoint_id,
            )
        });
        self.tiers.begin_checkpoint(dir, pick)
    }

    /// [`StateStore::begin_checkpoint`], waiting for the directory.
    pub fn checkpoint(&self, dir: &Path, checkpoint_id: u64) -> Result<()> {
        self.begin_checkpoint(dir, checkpoint_id)?.wait()
    }

    /// Tells the store that checkpoint `completed_id` completed: keys picked
    /// at it or at an earlier checkpoint move to L3 now (written there, then
    /// deleted from L2). Call it again after a failure: the keys stay
    /// picked. A store without a cold tier or capacity does nothing.
    ///
    /// Errors: [`StateError::L3`] if L3 refused the writes (after its own
    /// retries); L2 errors.
    pub fn checkpoint_completed(&self, completed_id: u64) -> Result<EvictionReport> {
        match &self.eviction {
            Some(e) => e.completed(&self.tiers, completed_id),
            None => Ok(EvictionReport::default()),
        }
    }

    /// Prepares a store opened from a completed checkpoint, with the job's
    /// cold tier, to be read and not run (the idea of Flink's State
    /// Processor API; `strata state get`): the keys that checkpoint picked
    /// for L3 whose move already ran are removed from this store's L2, as
    /// the move removed them from the job's, so a read sees L3's copy
    /// alone and each list element once. It never writes L3. Returns how
    /// many keys it removed. Without a cold tier or a pick it does nothing.
    ///
    /// Errors: [`StateError::L3`] on a failed L3 read; L2 errors.
    pub fn settle_moves_for_reading(&self) -> Result<usize> {
        crate::eviction::settle_moved(&self.tiers)
    }

    /// Moves every key of L2 that L1 does not hold to the cold tier, as
    /// cold eviction does, with the version of checkpoint `checkpoint_id`
    /// (which must be newer than every checkpoint whose keys moved before);
    /// the runtime's own states (`__…`) stay. A pick left by a restored
    /// checkpoint is moved first, with its own version. Returns the keys
    /// moved. For handing a store's state over to L3 for good — e.g. from a
    /// store just opened from a checkpoint, whose L1 is empty — not for a
    /// store that goes on taking checkpoints.
    ///
    /// Errors: those of [`StateStore::checkpoint_completed`]; a store
    /// without a cold tier or L2 capacity is [`StateError::Config`].
    pub fn drain_to_cold(&self, checkpoint_id: u64) -> Result<usize> {
        match &self.eviction {
            Some(e) => e.drain(&self.tiers, checkpoint_id),
            None => Err(StateError::Config(
                "drain_to_cold needs a cold tier and an L2 capacity".into(),
            )),
        }
    }

    /// Compacts every state's L2 data now, the chunk logs folded first
    /// (TTL-expired entries are dropped by the compaction filter). RocksDB
    /// also compacts in the background.
    pub fn compact(&self) -> Result<()> {
        self.flush()?;
        let l2 = &self.tiers.l2;
        for state in 0..l2.states.len() as u16 {
            if l2.states[usize::from(state)].kind == StateKind::List {
                l2.fold_all(state)?;
                l2.compact_chunks(state)?;
            }
            l2.db
                .compact_range_cf(&l2.cf(state)?, None::<&[u8]>, None::<&[u8]>);
        }
        Ok(())
    }

    /// Reads ahead from L3, concurrently, what the value and list states
    /// of `keys` will need (not the runtime's own, named `__…`) (keys L1
    /// and L2 cannot answer), so processing a batch of records waits on
    /// one round of L3 reads instead of one per record (the idea of Flink
    /// 2.0's asynchronous state access). The answers stay until they are
    /// used or L3 changes (cold eviction). Without a cold tier it does
    /// nothing.
    ///
    /// Errors: [`StateError::L3`] if L3 fails (after its retries).
    pub fn prefetch<'a>(&self, keys: impl IntoIterator<Item = &'a [u8]>) -> Result<()> {
        self.tiers.prefetch(keys)
    }

    /// Counters and sizes per tier.
    pub fn stats(&self) -> TierStats {
        let t = &self.tiers;
        let mut stats = TierStats::from_counters(&t.counters);
        stats.l1_bytes = t.l1.bytes();
        stats.l2_bytes = (0..t.states.len() as u16).map(|s| t.l2.bytes_of(s)).sum();
        stats
    }

    /// What RocksDB did for this store: write amplification, compaction
    /// CPU, stalls, files per level (see [`L2Report`]).
    pub fn l2_report(&self) -> L2Report {
        self.tiers.l2.stats_report()
    }
}
