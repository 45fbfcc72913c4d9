//! Reads below L1: L2 (with the write batches on their way), then L3; and
//! the read-ahead of L3 for a batch of records.

use super::{Hot, Tiers};
use crate::codec;
use crate::descriptor::{StateDescriptor, StateKind};
use crate::error::Result;
use crate::hash::{KeyBytes, L1Key};
use crate::stats::TierCounters;
use crate::sync::lock;

/// What L2 and L3 hold of a key: its encoded bytes and, for a list whose
/// beginning L3 holds, how many of those bytes came from L3 (0 otherwise).
pub(crate) type Lookup = Option<(Vec<u8>, usize)>;

impl Tiers {
    /// What L2, then L3, hold of an entry or a list L1 lacks.
    pub(crate) fn lower_get(&self, hot: &mut Hot, key: &KeyBytes) -> Result<Lookup> {
        let started = std::time::Instant::now();
        let found = self.lower_untimed(hot, key);
        TierCounters::add(
            &self.counters.lower_wait_ns,
            started.elapsed().as_nanos() as u64,
        );
        found
    }

    fn lower_untimed(&self, hot: &mut Hot, key: &KeyBytes) -> Result<Lookup> {
        let desc = &self.meta(key.state()).desc;
        let is_list = desc.kind == StateKind::List;
        let (in_l2, held) = if is_list {
            let list = self.l2.list(key, &hot.open)?;
            let held = list.as_ref().is_some_and(|l| l.held);
            (list.map(|l| l.bytes), held)
        } else {
            let value = self.l2.value(key, &hot.open)?;
            let held = value.is_some();
            (value, held)
        };
        if in_l2.is_some() {
            self.access.touch(key.hash());
        }
        let c = &self.counters;
        TierCounters::count(held, &c.l2_hits, &c.l2_misses);
        let Some(cold) = &self.cold else {
            return Ok(in_l2.map(|v| (v, 0)));
        };
        match in_l2 {
            Some(v) if !is_list && codec::is_tombstone(&v) => Ok(None),
            Some(v) if !is_list || codec::is_complete_list(&v) => Ok(Some((v, 0))),
            // A list holding appends only (or nothing): L3 holds its beginning.
            appends => {
                let ahead = lock(&self.prefetched).remove(key);
                let older = match ahead {
                    Some(found) => found,
                    None => cold.get(desc, key.stored())?,
                };
                TierCounters::count(older.is_some(), &c.l3_hits, &c.l3_misses);
                Ok(join(desc.kind, older, appends))
            }
        }
    }

    /// Reads ahead from L3, concurrently, what the value and list states
    /// of `keys` will need (see `StateStore::prefetch`).
    pub(crate) fn prefetch<'a>(&self, keys: impl IntoIterator<Item = &'a [u8]>) -> Result<()> {
        let Some(cold) = &self.cold else {
            return Ok(());
        };
        let states: Vec<u16> = (0..self.states.len() as u16)
            .filter(|s| {
                let desc = &self.meta(*s).desc;
                desc.kind != StateKind::Map && !desc.is_internal()
            })
            .collect();
        let mut wanted = std::collections::BTreeMap::new();
        {
            let mut hot = self.lock()?;
            lock(&self.prefetched).clear();
            for key in keys {
                for &state in &states {
                    let buf = hot.key(self, state, key, &[]);
                    let k = KeyBytes::new(&buf);
                    if !wanted.contains_key(k.bytes()) && self.needs_l3(&hot, k, key)? {
                        wanted.insert(k.bytes().to_vec(), state);
                    }
                    hot.give_back(buf);
                }
            }
        }
        if wanted.is_empty() {
            return Ok(());
        }
        let asks: Vec<(&StateDescriptor, &[u8])> = wanted
            .iter()
            .map(|(k, state)| (&self.meta(*state).desc, KeyBytes::new(k).stored()))
            .collect();
        let found = cold.get_many(&asks)?;
        let _hot = self.lock()?;
        lock(&self.prefetched).extend(
            wanted
                .keys()
                .map(|k| L1Key::from_bytes(KeyBytes::new(k)))
                .zip(found),
        );
        Ok(())
    }

    /// Whether a lookup of `key` would need L3: L1 lacks it and L2 (with
    /// the batches on their way) holds no authoritative copy (none, or a
    /// list's appends only).
    fn needs_l3(&self, hot: &Hot, key: &KeyBytes, record_key: &[u8]) -> Result<bool> {
        let state = key.state();
        let in_table = hot
            .tables
            .get(usize::from(state))
            .and_then(Option::as_ref)
            .is_some_and(|t| t.contains(key.hash(), record_key));
        if in_table || self.l1.contains(key) {
            return Ok(false);
        }
        if self.meta(state).desc.kind == StateKind::List {
            let held = self
                .l2
                .db
                .get_pinned_cf(&self.l2.cf(state)?, key.stored())?;
            return Ok(held.is_none_or(|v| !codec::is_complete_list(&v)));
        }
        Ok(self.l2.value(key, &hot.open)?.is_none())
    }
}

/// A list read from L3 (`older`) followed by the appends L2 holds; for
/// other kinds, what L3 holds.
fn join(kind: StateKind, older: Option<Vec<u8>>, appends: Option<Vec<u8>>) -> Lookup {
    if kind != StateKind::List {
        return older.map(|v| (v, 0));
    }
    match (older, appends) {
        (None, None) => None,
        // L3 holds nothing older: the appends are the whole list.
        (None, Some(appends)) => {
            let mut list = codec::list_base_marker().to_vec();
            list.extend_from_slice(&appends);
            Some((list, 0))
        }
        (Some(mut older), appends) => {
            let from_l3 = older.len();
            older.extend_from_slice(&appends.unwrap_or_default());
            Some((older, from_l3))
        }
    }
}
