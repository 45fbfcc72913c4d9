//! Cold eviction: moving the coldest L2 keys to L3, gated by checkpoints.
//!
//! At the barrier of checkpoint N, the L2 writer — after the batches the
//! barrier closed, before the RocksDB checkpoint — picks the coldest keys
//! of a store whose L2 holds more than its capacity, with the CLOCK
//! algorithm (second chance): every L2 read or append sets the key's access
//! bit ([`crate::l2::access`]); a hand sweeps L2 in key order (list states'
//! chunks folded first, so a list is read whole), skips keys moka holds,
//! clears the bit of keys used since it last passed (they get a second
//! chance), and takes the others until the excess is covered. It remembers
//! them with their bytes *as of checkpoint N*, in L2 itself, so checkpoint
//! N carries the pick.
//!
//! Nothing reaches L3 before the notification that checkpoint N (or a later
//! one: notifications can be lost) completed. Then the picked entries are
//! written to L3 with the checkpoint's version, and only after that write
//! succeeded is each key deleted from L2 — and only if L1 and the write
//! batches do not hold it and L2 still holds exactly the bytes written (a
//! key changed since the barrier stays in L2, whose newer value wins). A
//! crash anywhere in between restores checkpoint N, whose L2 still holds
//! every picked key and the list of them; the restored store repeats the
//! eviction (the same writes with the same version are harmless). So at no
//! moment does no tier hold a key's newest committed value, and no value
//! of a checkpoint that never completed reaches L3.
//!
//! [`ColdEviction`] works over the tiers' interfaces: the pick over L2 and
//! moka (on the writer thread), the move over the tier lock (on the task).

mod moves;
mod sweep;

use crate::codec;
use crate::error::{Result, StateError};
use crate::l1::L1;
use crate::l2::access::AccessBits;
use crate::l2::writer::Work;
use crate::l2::L2;
use crate::sync::lock;
use crate::tiers::Tiers;
use std::sync::{Arc, Mutex};

/// The key in L2's default column family that holds the picked keys.
const PENDING_KEY: &[u8] = b"strata.pending-eviction";
/// At most this many bytes are picked at one checkpoint (they are held in
/// memory until the checkpoint completes).
const MAX_PICK_BYTES: u64 = 64 << 20;
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

impl Pending {
    /// The pick a restored L2 holds, with each key's bytes there (those of
    /// its checkpoint); `None` without one.
    fn read(l2: &L2) -> Result<Option<Self>> {
        let Some(raw) = l2.db.get(PENDING_KEY)? else {
            return Ok(None);
        };
        let (checkpoint_id, cutoffs, keys): (u64, Vec<Option<i64>>, Vec<Vec<u8>>) =
            codec::decode("(eviction)", &raw)?;
        let mut entries = Vec::with_capacity(keys.len());
        for key in keys {
            let k = crate::hash::KeyBytes::new(&key);
            if let Some(bytes) = l2.db.get_cf(&l2.cf(k.state())?, k.stored())? {
                entries.push((key, bytes));
            }
        }
        Ok(Some(Self {
            checkpoint_id,
            cutoffs,
            entries,
        }))
    }
}

/// For a store restored from a completed checkpoint only to be read: the
/// keys that checkpoint picked whose move to L3 already ran — L3 holds
/// what the move writes, at the end of what it holds — are removed from
/// this store's L2, as the move removed them from the job's; L3 is only
/// read. A read then sees each element once, where L2's copy of a list's
/// appends would have followed L3's copy of the same appends. Returns how
/// many keys it removed.
///
/// Errors: L3's reads; L2's.
pub(crate) fn settle_moved(tiers: &Tiers) -> Result<usize> {
    let (Some(cold), Some(pending)) = (&tiers.cold, Pending::read(&tiers.l2)?) else {
        return Ok(0);
    };
    let l2 = &tiers.l2;
    let mut batch = rocksdb::WriteBatch::default();
    let mut settled = 0;
    for (key, picked) in &pending.entries {
        let k = crate::hash::KeyBytes::new(key);
        let state = usize::from(k.state());
        let cutoff = pending.cutoffs.get(state).copied().flatten();
        let written = moves::drop_expired(tiers, k, picked, cutoff)?;
        let desc = &tiers.meta(k.state()).desc;
        let Some(held) = cold.get(desc, k.stored())? else {
            continue;
        };
        let moved = if desc.kind == crate::descriptor::StateKind::List {
            let elements = written.strip_prefix(&codec::list_base_marker()[..]);
            held.ends_with(elements.unwrap_or(&written))
        } else {
            held == written
        };
        if moved {
            batch.delete_cf(&l2.cf(k.state())?, k.stored());
            settled += 1;
        }
    }
    l2.db.write_opt(batch, &l2.write_opts)?;
    Ok(settled)
}

/// The cold eviction of one store (see the module docs).
pub(crate) struct ColdEviction {
    capacity: u64,
    pending: Mutex<Option<Pending>>,
    /// Where the clock hand stands: (state id, stored key).
    hand: Mutex<(u16, Vec<u8>)>,
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

impl ColdEviction {
    /// Eviction beyond `capacity` bytes of L2.
    pub(crate) fn new(capacity: u64) -> Self {
        Self {
            capacity,
            pending: Mutex::new(None),
            hand: Mutex::new((0, Vec::new())),
        }
    }

    /// The writer's part of checkpoint `checkpoint_id`: picks the coldest
    /// keys beyond the L2 capacity. A pick of an earlier checkpoint that
    /// has not completed yet is replaced: its keys are still in L2 and are
    /// picked again if still cold.
    pub(crate) fn pick_work(
        self: &Arc<Self>,
        l1: Arc<L1>,
        access: Arc<AccessBits>,
        checkpoint_id: u64,
    ) -> Work {
        let this = self.clone();
        Box::new(move |l2| {
            let used: u64 = (0..l2.states.len() as u16).map(|s| l2.bytes_of(s)).sum();
            let excess = used.saturating_sub((this.capacity as f64 * LOW_WATER) as u64);
            let bytes = if used > this.capacity { excess } else { 0 };
            this.pick(l2, &l1, &access, checkpoint_id, bytes)
                .map(|_| ())
        })
    }

    /// Picks up to `bytes` (at most [`MAX_PICK_BYTES`]) of keys for
    /// checkpoint `checkpoint_id`, replacing an earlier pick; returns how
    /// many. Nothing else writes L2 meanwhile (the writer's thread, or a
    /// store whose writer is idle).
    fn pick(
        &self,
        l2: &L2,
        l1: &L1,
        access: &AccessBits,
        checkpoint_id: u64,
        bytes: u64,
    ) -> Result<usize> {
        let entries = if bytes > 0 {
            self.sweep(l2, l1, access, bytes.min(MAX_PICK_BYTES))?
        } else {
            Vec::new()
        };
        if entries.is_empty() {
            l2.db.delete(PENDING_KEY)?;
            *lock(&self.pending) = None;
            return Ok(0);
        }
        let picked = entries.len();
        let keys: Vec<&[u8]> = entries.iter().map(|(k, _)| k.as_slice()).collect();
        let cutoffs: Vec<Option<i64>> = (0..l2.states.len() as u16).map(|s| l2.cutoff(s)).collect();
        l2.db.put(
            PENDING_KEY,
            codec::encode("(eviction)", &(checkpoint_id, &cutoffs, keys))?,
        )?;
        *lock(&self.pending) = Some(Pending {
            checkpoint_id,
            cutoffs,
            entries,
        });
        Ok(picked)
    }

    /// Reads the keys a restored checkpoint had picked, with their bytes in
    /// the restored L2 (which are those of that checkpoint).
    pub(crate) fn load_pending(&self, l2: &L2) -> Result<()> {
        if let Some(pending) = Pending::read(l2)? {
            *lock(&self.pending) = Some(pending);
        }
        Ok(())
    }

    /// Moves the keys picked at checkpoint `completed_id` or earlier to L3
    /// (written there, then deleted from L2). Again after a failure: the
    /// keys stay picked.
    pub(crate) fn completed(&self, tiers: &Tiers, completed_id: u64) -> Result<EvictionReport> {
        let pending = {
            let mut slot = lock(&self.pending);
            match slot.as_ref() {
                Some(p) if p.checkpoint_id <= completed_id => slot.take(),
                _ => None,
            }
        };
        let Some(pending) = pending else {
            return Ok(EvictionReport::default());
        };
        let result = self.evict(tiers, &pending);
        if result.is_err() {
            lock(&self.pending).get_or_insert(pending);
        }
        result
    }

    /// Moves every key of L2 that L1 does not hold to the cold tier, with
    /// the version of checkpoint `checkpoint_id` (see
    /// [`crate::StateStore::drain_to_cold`]); returns the keys moved.
    pub(crate) fn drain(&self, tiers: &Tiers, checkpoint_id: u64) -> Result<usize> {
        tiers.flush()?;
        let mut moved = self.completed(tiers, checkpoint_id)?.moved;
        loop {
            let picked = {
                let _hot = tiers.lock()?;
                self.pick(
                    &tiers.l2,
                    &tiers.l1,
                    &tiers.access,
                    checkpoint_id,
                    MAX_PICK_BYTES,
                )?
            };
            if picked == 0 {
                return Ok(moved);
            }
            let round = self.completed(tiers, checkpoint_id)?.moved;
            if round == 0 {
                return Err(StateError::L3(format!(
                    "{picked} keys picked for L3 did not move (they changed in L2 meanwhile)"
                )));
            }
            moved += round;
        }
    }
}
