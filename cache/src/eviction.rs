//! Cold eviction: moving the coldest L2 keys to L3, gated by checkpoints.
//!
//! At the barrier of checkpoint N, after L1 is flushed, a store whose L2
//! holds more than its capacity picks the coldest keys with the CLOCK
//! algorithm (second chance): every L2 read or append sets the key's access
//! bit; a hand sweeps L2 in key order, skips keys L1 holds, clears the bit
//! of keys used since it last passed (they get a second chance), and takes
//! the others until the excess is covered. It remembers them with
//! their bytes *as of checkpoint N*. The list of picked keys is written into
//! L2 itself before the RocksDB checkpoint, so checkpoint N carries it.
//!
//! Nothing reaches L3 before the notification that checkpoint N (or a later
//! one: notifications can be lost) completed. Then the picked entries are
//! written to L3 with the checkpoint's version, and only after that write
//! succeeded is each key deleted from L2 — and only if L2 still holds
//! exactly the bytes written (a key changed since the barrier stays in L2,
//! whose newer value wins). A crash anywhere in between restores checkpoint
//! N, whose L2 still holds every picked key and the list of them; the
//! restored store repeats the eviction (the same writes with the same
//! version are harmless). So at no moment does no tier hold a key's newest
//! committed value, and no value of a checkpoint that never completed
//! reaches L3.

use crate::codec;
use crate::error::{Result, StateError};
use crate::state::StateKind;
use crate::store::{ColdWrite, StateStore, StoreInner};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// The key in L2's default column family that holds the picked keys.
const PENDING_KEY: &[u8] = b"strata.pending-eviction";
/// At most this many bytes are picked at one checkpoint (they are held in
/// memory until the checkpoint completes).
const MAX_PICK_BYTES: u64 = 64 << 20;
/// Picked keys are moved this many at a time (written to L3, then removed
/// from L2), so that the L3 requests in flight stay small in memory.
const MOVE_CHUNK: usize = 2048;
/// A pick brings L2 down to this fraction of its capacity, so that a store
/// hovering at its capacity does not evict at every checkpoint.
const LOW_WATER: f64 = 0.8;

/// Keys picked at one checkpoint: `(L1 key, encoded bytes at the barrier)`,
/// and per state the expiry cutoff at the barrier (`None`: nothing
/// expires). The cutoffs travel with the pick (in L2, so in the
/// checkpoint): a move repeated after a restore leaves out exactly the
/// elements the first attempt left out, so a given (key, version) always
/// writes the same cells to L3.
pub(crate) struct Pending {
    checkpoint_id: u64,
    cutoffs: Vec<Option<i64>>,
    entries: Vec<(Vec<u8>, Vec<u8>)>,
}

/// Access bits of the CLOCK algorithm, one per hash bucket of L1 keys (a
/// collision only makes a key look used: it stays in L2 a round longer).
const ACCESS_BITS: usize = 1 << 20;

/// The eviction state of one store.
pub(crate) struct Eviction {
    capacity: Option<u64>,
    pending: Mutex<Option<Pending>>,
    /// Where the clock hand stands: (state id, stored key).
    hand: Mutex<(u16, Vec<u8>)>,
    accessed: Vec<AtomicU64>,
}

impl Eviction {
    pub(crate) fn new(capacity: Option<u64>) -> Self {
        let words = if capacity.is_some() {
            ACCESS_BITS / 64
        } else {
            0
        };
        Self {
            capacity,
            pending: Mutex::new(None),
            hand: Mutex::new((0, Vec::new())),
            accessed: (0..words).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    fn bit(&self, l1_key: &[u8]) -> Option<(&AtomicU64, u64)> {
        if self.accessed.is_empty() {
            return None;
        }
        let h = xxhash_rust::xxh3::xxh3_64(l1_key) as usize % ACCESS_BITS;
        Some((&self.accessed[h / 64], 1 << (h % 64)))
    }

    /// Marks an L2 key as used (an L2 read or append).
    pub(crate) fn touch(&self, l1_key: &[u8]) {
        if let Some((word, mask)) = self.bit(l1_key) {
            word.fetch_or(mask, Ordering::Relaxed);
        }
    }

    /// Whether the key was used since the hand last passed; clears the bit.
    fn second_chance(&self, l1_key: &[u8]) -> bool {
        self.bit(l1_key)
            .is_some_and(|(word, mask)| word.fetch_and(!mask, Ordering::Relaxed) & mask != 0)
    }
}

/// What one completed eviction did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct EvictionReport {
    /// The checkpoint the keys were picked at (0 when nothing was pending).
    pub checkpoint_id: u64,
    /// Keys picked at that checkpoint.
    pub picked: usize,
    /// Keys written to L3 and removed from L2 (the others were used or
    /// changed since the barrier and stay).
    pub moved: usize,
}

impl StateStore {
    /// Picks the coldest keys beyond the L2 capacity (see the module docs).
    /// A pick of an earlier checkpoint that has not completed yet is
    /// replaced: its keys are still in L2 and are picked again if still cold.
    pub(crate) fn pick_cold(&self, checkpoint_id: u64) -> Result<()> {
        let inner = &self.inner;
        let Some(capacity) = inner.eviction.capacity else {
            return Ok(());
        };
        let _tiers = inner.lock_tiers()?;
        let used = self.stats().l2_bytes;
        let excess = used.saturating_sub((capacity as f64 * LOW_WATER) as u64);
        self.pick(checkpoint_id, if used > capacity { excess } else { 0 })?;
        Ok(())
    }

    /// Picks up to `bytes` (at most [`MAX_PICK_BYTES`]) of keys for
    /// checkpoint `checkpoint_id`, replacing an earlier pick; returns how
    /// many. The caller holds the tier lock.
    fn pick(&self, checkpoint_id: u64, bytes: u64) -> Result<usize> {
        let inner = &self.inner;
        let entries = if bytes > 0 {
            inner.sweep(bytes.min(MAX_PICK_BYTES))?
        } else {
            Vec::new()
        };
        let lower = &inner.lower;
        if entries.is_empty() {
            lower.db.delete(PENDING_KEY)?;
            *lock(&inner.eviction.pending) = None;
            return Ok(0);
        }
        let picked = entries.len();
        let keys: Vec<&[u8]> = entries.iter().map(|(k, _)| k.as_slice()).collect();
        let cutoffs: Vec<Option<i64>> = (0..lower.states.len() as u16)
            .map(|state| inner.expiry_cutoff(state))
            .collect();
        lower.db.put(
            PENDING_KEY,
            codec::encode("(eviction)", &(checkpoint_id, &cutoffs, keys))?,
        )?;
        *lock(&inner.eviction.pending) = Some(Pending {
            checkpoint_id,
            cutoffs,
            entries,
        });
        Ok(picked)
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
        if self.inner.cold.is_none() || self.inner.eviction.capacity.is_none() {
            return Err(StateError::Config(
                "drain_to_cold needs a cold tier and an L2 capacity".into(),
            ));
        }
        self.flush()?;
        let mut moved = self.checkpoint_completed(checkpoint_id)?.moved;
        loop {
            let picked = {
                let _tiers = self.inner.lock_tiers()?;
                self.pick(checkpoint_id, MAX_PICK_BYTES)?
            };
            if picked == 0 {
                return Ok(moved);
            }
            let round = self.checkpoint_completed(checkpoint_id)?.moved;
            if round == 0 {
                return Err(StateError::L3(format!(
                    "{picked} keys picked for L3 did not move (they changed in L2 meanwhile)"
                )));
            }
            moved += round;
        }
    }

    /// Reads the keys a restored checkpoint had picked, with their bytes in
    /// the restored L2 (which are those of that checkpoint).
    pub(crate) fn load_pending_eviction(&self) -> Result<()> {
        let lower = &self.inner.lower;
        let Some(raw) = lower.db.get(PENDING_KEY)? else {
            return Ok(());
        };
        let (checkpoint_id, cutoffs, keys): (u64, Vec<Option<i64>>, Vec<Vec<u8>>) =
            codec::decode("(eviction)", &raw)?;
        let mut entries = Vec::with_capacity(keys.len());
        for key in keys {
            let state = u16::from_be_bytes([key[0], key[1]]);
            if let Some(bytes) = lower.db.get_cf(&lower.cf(state)?, &key[2..])? {
                entries.push((key, bytes));
            }
        }
        *lock(&self.inner.eviction.pending) = Some(Pending {
            checkpoint_id,
            cutoffs,
            entries,
        });
        Ok(())
    }

    /// Tells the store that checkpoint `completed_id` completed: keys picked
    /// at it or at an earlier checkpoint move to L3 now (written there, then
    /// deleted from L2). Call it again after a failure: the keys stay
    /// picked. A store without a cold tier or capacity does nothing.
    ///
    /// Errors: [`StateError::L3`] if L3 refused the writes (after its own
    /// retries); L2 errors.
    pub fn checkpoint_completed(&self, completed_id: u64) -> Result<EvictionReport> {
        let inner = &self.inner;
        let pending = {
            let mut slot = lock(&inner.eviction.pending);
            match slot.as_ref() {
                Some(p) if p.checkpoint_id <= completed_id => slot.take(),
                _ => None,
            }
        };
        let Some(pending) = pending else {
            return Ok(EvictionReport::default());
        };
        let result = self.evict(&pending);
        if result.is_err() {
            let mut slot = lock(&inner.eviction.pending);
            slot.get_or_insert(pending);
        }
        result
    }

    /// Moves the picked keys under the tier lock (nothing can load one into
    /// L1 or change it in L2 meanwhile), [`MOVE_CHUNK`] at a time: decides
    /// which still move, writes them to L3, then removes from L2 what L3 now
    /// holds. A failure leaves the rest picked; a repeat skips the keys
    /// already gone from L2.
    fn evict(&self, pending: &Pending) -> Result<EvictionReport> {
        let inner = &self.inner;
        let cold = inner
            .cold
            .as_ref()
            .ok_or_else(|| StateError::Config("cold eviction without a cold tier".into()))?;
        let _tiers = inner.lock_tiers()?;
        let mut moved = 0;
        for chunk in pending.entries.chunks(MOVE_CHUNK) {
            moved += inner.move_chunk(cold.as_ref(), chunk, pending)?;
        }
        let lower = &inner.lower;
        lower.db.delete_opt(PENDING_KEY, &lower.write_opts)?;
        inner.compact_picked(&pending.entries)?;
        Ok(EvictionReport {
            checkpoint_id: pending.checkpoint_id,
            picked: pending.entries.len(),
            moved,
        })
    }
}

impl StoreInner {
    /// Moves what still moves of `entries` to L3; returns how many keys.
    fn move_chunk(
        &self,
        cold: &dyn crate::store::ColdTier,
        entries: &[(Vec<u8>, Vec<u8>)],
        pending: &Pending,
    ) -> Result<usize> {
        let checkpoint_id = pending.checkpoint_id;
        let moves = self.moves(entries)?;
        let unexpired: Vec<Vec<u8>> = moves
            .iter()
            .map(|m| {
                let cutoff = pending
                    .cutoffs
                    .get(usize::from(state_of(m.key)))
                    .copied()
                    .flatten();
                self.drop_expired(m.key, m.picked, cutoff)
            })
            .collect::<Result<_>>()?;
        let writes: Vec<ColdWrite<'_>> = moves
            .iter()
            .zip(&unexpired)
            .map(|(m, bytes)| ColdWrite {
                state: &self.meta(state_of(m.key)).desc,
                stored_key: &m.key[2..],
                bytes,
            })
            .collect();
        crash_point("before-l3-write");
        cold.write(&writes, checkpoint_id)?;
        crash_point("before-l2-delete");
        // L3 changed: what was read ahead from it may be stale.
        self.lock_prefetched().clear();
        self.forget_moved(&moves)?;
        let c = &self.lower.counters;
        c.l3_evictions
            .fetch_add(moves.len() as u64, Ordering::Relaxed);
        let bytes: usize = unexpired.iter().map(Vec::len).sum();
        c.l3_evicted_bytes
            .fetch_add(bytes as u64, Ordering::Relaxed);
        Ok(moves.len())
    }
}

/// One picked key that moves to L3: the bytes picked at the barrier, and
/// what L2 keeps once L3 holds them (nothing, or a list's later appends).
struct Move<'a> {
    key: &'a [u8],
    picked: &'a [u8],
    rest: Vec<u8>,
}

/// A crash-test hook: with `STRATA_CRASH_AT=<point>:<n>` in the
/// environment, the process aborts (as a SIGKILL would stop it) the n-th
/// time it reaches `<point>` — `before-l3-write` (a checkpoint completed,
/// its picked keys are not in L3 yet) or `before-l2-delete` (they are in L3
/// and still in L2). Unset, it costs one check of a cached value.
fn crash_point(point: &str) {
    static AT: std::sync::OnceLock<Option<(String, u64)>> = std::sync::OnceLock::new();
    static HITS: AtomicU64 = AtomicU64::new(0);
    let at = AT.get_or_init(|| {
        let v = std::env::var("STRATA_CRASH_AT").ok()?;
        let (p, n) = v.rsplit_once(':')?;
        Some((p.to_owned(), n.parse().ok()?))
    });
    if let Some((p, n)) = at {
        if p == point && HITS.fetch_add(1, Ordering::Relaxed) + 1 == *n {
            eprintln!("strata: STRATA_CRASH_AT={point}:{n} reached: aborting");
            std::process::abort();
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn state_of(l1_key: &[u8]) -> u16 {
    u16::from_be_bytes([l1_key[0], l1_key[1]])
}

impl StoreInner {
    /// Sweeps the clock hand over L2 until `target` bytes of keys that L1
    /// does not hold are picked. A key used since the hand last passed is
    /// spared once (its bit cleared); the hand goes round at most twice, so
    /// the capacity holds even when every key of L2 is in use.
    fn sweep(&self, target: u64) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        let mut picked = Vec::new();
        let mut seen = std::collections::HashSet::new();
        let mut bytes = 0u64;
        for _round in 0..2 {
            if self.sweep_round(target, &mut picked, &mut seen, &mut bytes)? {
                break;
            }
        }
        Ok(picked)
    }

    /// One turn of the hand; true once `target` bytes are picked.
    fn sweep_round(
        &self,
        target: u64,
        picked: &mut Vec<(Vec<u8>, Vec<u8>)>,
        seen: &mut std::collections::HashSet<Vec<u8>>,
        bytes: &mut u64,
    ) -> Result<bool> {
        let states = self.lower.states.len() as u16;
        let mut hand = lock(&self.eviction.hand);
        let (first_state, first_key) = (hand.0 % states.max(1), hand.1.clone());
        // States from the hand's onwards, then the hand's own state again
        // from its start up to the hand.
        for step in 0..=states {
            let state = (first_state + step) % states;
            // The runtime's own states (`__…`, e.g. timers) stay local:
            // a task loads them whole from L2 when it starts.
            if self.name(state).starts_with("__") {
                continue;
            }
            let (from, until) = match step {
                0 => (first_key.as_slice(), None),
                s if s == states => (&[][..], Some(first_key.as_slice())),
                _ => (&[][..], None),
            };
            let mut it = self.lower.db.raw_iterator_cf(&self.lower.cf(state)?);
            it.seek(from);
            while let (Some(k), Some(v)) = (it.key(), it.value()) {
                if until.is_some_and(|u| k >= u) {
                    break;
                }
                let mut l1_key = state.to_be_bytes().to_vec();
                l1_key.extend_from_slice(k);
                if !self.l1.contains_key(l1_key.as_slice())
                    && !self.eviction.second_chance(&l1_key)
                    && seen.insert(l1_key.clone())
                {
                    *bytes += (k.len() + v.len()) as u64;
                    picked.push((l1_key, v.to_vec()));
                }
                if *bytes >= target {
                    let mut next = k.to_vec();
                    next.push(0);
                    *hand = (state, next);
                    return Ok(true);
                }
                it.next();
            }
            it.status()?;
        }
        Ok(false)
    }

    /// The bytes to write to L3 for an entry: list elements written at or
    /// before `cutoff` left out (never written to L3), a value written then
    /// as a tombstone.
    fn drop_expired(&self, l1_key: &[u8], bytes: &[u8], cutoff: Option<i64>) -> Result<Vec<u8>> {
        let state = state_of(l1_key);
        let Some(cutoff) = cutoff else {
            return Ok(bytes.to_vec());
        };
        let name = self.name(state);
        if self.meta(state).desc.kind != StateKind::List {
            let (ts, _) = codec::split_entry(name, bytes)?;
            return Ok(if ts <= cutoff && !codec::is_tombstone(bytes) {
                codec::tombstone()
            } else {
                bytes.to_vec()
            });
        }
        let mut out = Vec::with_capacity(bytes.len());
        if codec::is_complete_list(bytes) {
            out.extend_from_slice(&codec::list_base_marker());
        }
        for element in codec::list_elements(name, bytes) {
            let (ts, body) = element?;
            if ts > cutoff {
                codec::put_list_element(&mut out, ts, body);
            }
        }
        Ok(out)
    }

    /// Which picked keys still move: not in L1 again (hot), and in L2
    /// either unchanged since the barrier or — a list of appends only —
    /// grown by later appends, which L2 keeps. A key changed otherwise
    /// stays in L2, whose newer value wins.
    fn moves<'a>(&self, entries: &'a [(Vec<u8>, Vec<u8>)]) -> Result<Vec<Move<'a>>> {
        let lower = &self.lower;
        lower.write_spills()?;
        let mut moves = Vec::new();
        for (key, picked) in entries {
            if self.l1.contains_key(key.as_slice()) {
                continue;
            }
            let cf = lower.cf(state_of(key))?;
            let Some(now) = lower.db.get_pinned_cf(&cf, &key[2..])? else {
                continue;
            };
            let appends_only = self.meta(state_of(key)).desc.kind == StateKind::List
                && !codec::is_complete_list(picked);
            if now.as_ref() == picked.as_slice() || (appends_only && now.starts_with(picked)) {
                let rest = now[picked.len()..].to_vec();
                moves.push(Move { key, picked, rest });
            }
        }
        Ok(moves)
    }

    /// Removes from L2 what L3 now holds (keeping a list's later appends).
    fn forget_moved(&self, moves: &[Move<'_>]) -> Result<()> {
        let lower = &self.lower;
        let mut batch = rocksdb::WriteBatch::default();
        for m in moves {
            let cf = lower.cf(state_of(m.key))?;
            if m.rest.is_empty() {
                batch.delete_cf(&cf, &m.key[2..]);
            } else {
                batch.put_cf(&cf, &m.key[2..], &m.rest);
            }
        }
        lower.db.write_opt(batch, &lower.write_opts)?;
        Ok(())
    }

    /// Compacts, per state, the key range the picked keys spanned, so that
    /// L2's size shows the space the moves freed.
    fn compact_picked(&self, entries: &[(Vec<u8>, Vec<u8>)]) -> Result<()> {
        let lower = &self.lower;
        for state in 0..lower.states.len() as u16 {
            let keys = entries
                .iter()
                .filter(|(k, _)| state_of(k) == state)
                .map(|(k, _)| &k[2..]);
            if let (Some(first), Some(last)) = (keys.clone().min(), keys.max()) {
                lower
                    .db
                    .compact_range_cf(&lower.cf(state)?, Some(first), Some(last));
            }
        }
        Ok(())
    }
}
