//! The move of picked keys to L3, once their checkpoint completed.

use super::{ColdEviction, EvictionReport, Pending, PENDING_KEY};
use crate::codec;
use crate::cold::{ColdTier, ColdWrite};
use crate::descriptor::StateKind;
use crate::error::{Result, StateError};
use crate::hash::KeyBytes;
use crate::stats::TierCounters;
use crate::sync::lock;
use crate::tiers::{Hot, Tiers};

/// Picked keys are moved this many at a time (written to L3, then removed
/// from L2), so that the L3 requests in flight stay small in memory.
const MOVE_CHUNK: usize = 2048;

/// One picked key that moves to L3: the bytes picked at the barrier, and
/// what L2 keeps once L3 holds them (nothing, or a list's later appends).
struct Move<'a> {
    key: &'a KeyBytes,
    picked: &'a [u8],
    rest: Vec<u8>,
}

impl ColdEviction {
    /// Moves the picked keys under the tier lock (nothing can load one into
    /// L1 or change it meanwhile), [`MOVE_CHUNK`] at a time: decides which
    /// still move, writes them to L3, then removes from L2 what L3 now
    /// holds. A failure leaves the rest picked; a repeat skips the keys
    /// already gone from L2.
    pub(super) fn evict(&self, tiers: &Tiers, pending: &Pending) -> Result<EvictionReport> {
        let cold = tiers
            .cold
            .as_ref()
            .ok_or_else(|| StateError::Config("cold eviction without a cold tier".into()))?;
        let mut hot = tiers.lock()?;
        let mut moved = 0;
        for chunk in pending.entries.chunks(MOVE_CHUNK) {
            moved += move_chunk(tiers, &mut hot, cold.as_ref(), chunk, pending)?;
        }
        let l2 = &tiers.l2;
        l2.db.delete_opt(PENDING_KEY, &l2.write_opts)?;
        compact_picked(tiers, &pending.entries)?;
        Ok(EvictionReport {
            checkpoint_id: pending.checkpoint_id,
            picked: pending.entries.len(),
            moved,
        })
    }
}

/// Moves what still moves of `entries` to L3; returns how many keys.
fn move_chunk(
    tiers: &Tiers,
    hot: &mut Hot,
    cold: &dyn ColdTier,
    entries: &[(Vec<u8>, Vec<u8>)],
    pending: &Pending,
) -> Result<usize> {
    let moves = moves(tiers, hot, entries)?;
    let unexpired: Vec<Vec<u8>> = moves
        .iter()
        .map(|m| {
            let cutoff = pending
                .cutoffs
                .get(usize::from(m.key.state()))
                .copied()
                .flatten();
            drop_expired(tiers, m.key, m.picked, cutoff)
        })
        .collect::<Result<_>>()?;
    let writes: Vec<ColdWrite<'_>> = moves
        .iter()
        .zip(&unexpired)
        .map(|(m, bytes)| ColdWrite {
            state: &tiers.meta(m.key.state()).desc,
            stored_key: m.key.stored(),
            bytes,
        })
        .collect();
    crate::fault::crash_point("before-l3-write");
    cold.write(&writes, pending.checkpoint_id)?;
    crate::fault::crash_point("before-l2-delete");
    // L3 changed: what was read ahead from it may be stale.
    lock(&tiers.prefetched).clear();
    forget_moved(tiers, &moves)?;
    let c = &tiers.counters;
    TierCounters::add(&c.l3_evictions, moves.len() as u64);
    TierCounters::add(
        &c.l3_evicted_bytes,
        unexpired.iter().map(|b| b.len() as u64).sum(),
    );
    Ok(moves.len())
}

/// The bytes to write to L3 for an entry: list elements written at or
/// before `cutoff` left out (never written to L3), a value written then
/// as a tombstone.
pub(super) fn drop_expired(
    tiers: &Tiers,
    key: &KeyBytes,
    bytes: &[u8],
    cutoff: Option<i64>,
) -> Result<Vec<u8>> {
    let state = key.state();
    let Some(cutoff) = cutoff else {
        return Ok(bytes.to_vec());
    };
    let name = tiers.name(state);
    if tiers.meta(state).desc.kind != StateKind::List {
        let (ts, _) = codec::split_entry(name, bytes)?;
        return Ok(if ts <= cutoff && !codec::is_tombstone(bytes) {
            codec::tombstone()
        } else {
            bytes.to_vec()
        });
    }
    let mut out = Vec::with_capacity(bytes.len());
    if !codec::trim_list_into(&mut out, Some(bytes), std::iter::once(bytes), cutoff) {
        return Err(StateError::Corrupt {
            state: name.to_owned(),
            reason: "a picked list does not parse".into(),
        });
    }
    Ok(out)
}

/// Which picked keys still move: not in L1 again (hot), not written since
/// (no write batch holds them), and in L2 either unchanged since the
/// barrier or — a list of appends only — grown by later appends, which L2
/// keeps. A key changed otherwise stays in L2, whose newer value wins.
fn moves<'a>(tiers: &Tiers, hot: &Hot, entries: &'a [(Vec<u8>, Vec<u8>)]) -> Result<Vec<Move<'a>>> {
    let l2 = &tiers.l2;
    let mut moves = Vec::new();
    for (key, picked) in entries {
        let key = KeyBytes::new(key);
        let state = key.state();
        let in_table = crate::codec::split_stored_key(key.stored())
            .zip(hot.tables.get(usize::from(state)).and_then(Option::as_ref))
            .is_some_and(|((_, record, _), t)| t.contains(key.hash(), record));
        let written = hot.open.holds(key)
            || l2.pending.with_batches(|batches| {
                let mut held = false;
                for b in batches {
                    held |= b.holds(key);
                }
                held
            });
        if in_table || written || tiers.l1.contains(key) {
            continue;
        }
        let Some(now) = l2.db.get_pinned_cf(&l2.cf(state)?, key.stored())? else {
            continue;
        };
        let appends_only =
            tiers.meta(state).desc.kind == StateKind::List && !codec::is_complete_list(picked);
        if now.as_ref() == picked.as_slice() || (appends_only && now.starts_with(picked)) {
            let rest = now[picked.len()..].to_vec();
            moves.push(Move { key, picked, rest });
        }
    }
    Ok(moves)
}

/// Removes from L2 what L3 now holds (keeping a list's later appends).
fn forget_moved(tiers: &Tiers, moves: &[Move<'_>]) -> Result<()> {
    let l2 = &tiers.l2;
    let mut batch = rocksdb::WriteBatch::default();
    for m in moves {
        let cf = l2.cf(m.key.state())?;
        if m.rest.is_empty() {
            batch.delete_cf(&cf, m.key.stored());
        } else {
            batch.put_cf(&cf, m.key.stored(), &m.rest);
        }
    }
    l2.db.write_opt(batch, &l2.write_opts)?;
    Ok(())
}

/// Compacts, per state, the key range the picked keys spanned, so that
/// L2's size shows the space the moves freed.
fn compact_picked(tiers: &Tiers, entries: &[(Vec<u8>, Vec<u8>)]) -> Result<()> {
    let l2 = &tiers.l2;
    for state in 0..l2.states.len() as u16 {
        let keys = entries
            .iter()
            .map(|(k, _)| KeyBytes::new(k))
            .filter(|k| k.state() == state)
            .map(|k| k.stored());
        if let (Some(first), Some(last)) = (keys.clone().min(), keys.max()) {
            l2.db
                .compact_range_cf(&l2.cf(state)?, Some(first), Some(last));
        }
    }
    Ok(())
}
