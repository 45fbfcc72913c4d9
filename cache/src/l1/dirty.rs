//! The dirty set of moka's entries: the slots made dirty since the last
//! flush, so that a checkpoint writes those and does not scan L1.

use super::slot::Slot;
use std::sync::{Arc, Weak};

/// The slots made dirty since the last flush (weak: an evicted slot's
/// value is freed at once; its write left L1 with it).
#[derive(Default)]
pub(crate) struct DirtySet {
    slots: Vec<Weak<Slot>>,
    /// Length after which dead entries are dropped (grows with the live ones).
    compact_at: usize,
}

impl DirtySet {
    pub(crate) fn push(&mut self, slot: &Arc<Slot>) {
        self.slots.push(Arc::downgrade(slot));
        if self.slots.len() > self.compact_at {
            self.slots
                .retain(|w| w.upgrade().is_some_and(|s| s.is_dirty() && !s.is_gone()));
            self.compact_at = (2 * self.slots.len()).max(4096);
        }
    }

    /// The slots still in L1 and dirty, in L1-key order; the set is empty after.
    pub(crate) fn take_live(&mut self) -> Vec<Arc<Slot>> {
        let mut live: Vec<Arc<Slot>> = std::mem::take(&mut self.slots)
            .iter()
            .filter_map(Weak::upgrade)
            .filter(|s| !s.is_gone() && s.is_dirty())
            .collect();
        live.sort_unstable_by(|a, b| a.key.cmp(&b.key));
        live.dedup_by(|a, b| Arc::ptr_eq(a, b));
        self.compact_at = 0;
        live
    }
}
