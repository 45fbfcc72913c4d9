//! One moka entry of L1: a deserialised value, its write time and flags.

use crate::hash::L1Key;
use std::any::Any;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

/// A deserialised state value, shared copy-on-write.
pub(crate) type AnyValue = Arc<dyn Any + Send + Sync>;

/// One L1 entry: a deserialised value, its write timestamp and whether L2
/// lacks it. The value sits behind a mutex so that a list can be appended
/// to in place (no copy, no re-insertion) while moka holds the entry.
pub(crate) struct Slot {
    pub(crate) key: L1Key,
    ts: AtomicI64,
    value: Mutex<AnyValue>,
    pub(crate) weight: AtomicU32,
    /// Bytes the value grew by in place beyond `weight` (moka re-weighs
    /// an entry only on insertion): charged to L1's ballast instead (see
    /// [`crate::l1::L1::regrow`]).
    pub(crate) extra: AtomicU32,
    pub(crate) dirty: AtomicBool,
    /// Set when moka removed the entry (evicted, replaced or invalidated):
    /// a slot found by a lookup whose own housekeeping removed it must not
    /// be changed in place (the change would be lost).
    pub(crate) gone: AtomicBool,
}

impl Slot {
    /// A slot for L1 key `key`. A dirty one must be put in L1 with
    /// [`crate::l1::L1::insert`], which adds it to the dirty set.
    pub(crate) fn new(
        key: L1Key,
        ts: i64,
        value: AnyValue,
        weight: usize,
        dirty: bool,
    ) -> Arc<Self> {
        Arc::new(Self {
            key,
            ts: AtomicI64::new(ts),
            value: Mutex::new(value),
            weight: AtomicU32::new(weight.min(u32::MAX as usize) as u32),
            extra: AtomicU32::new(0),
            dirty: AtomicBool::new(dirty),
            gone: AtomicBool::new(false),
        })
    }

    /// The state id.
    pub(crate) fn state(&self) -> u16 {
        self.key.state()
    }

    /// A new slot taking over this one's value, timestamp and dirtiness,
    /// weighing `weight` (moka re-weighs an entry only when it is inserted
    /// anew; this slot is then replaced and marked gone).
    pub(crate) fn reweighed(&self, weight: usize) -> Arc<Self> {
        let value = self.update(|v| std::mem::replace(v, Arc::new(())));
        let dirty = self.dirty.swap(false, Ordering::AcqRel);
        Self::new(self.key.clone(), self.ts(), value, weight, dirty)
    }

    /// When the value was written (ms; drives TTL).
    pub(crate) fn ts(&self) -> i64 {
        self.ts.load(Ordering::Relaxed)
    }

    /// Sets the write timestamp (ms).
    pub(crate) fn set_ts(&self, ts: i64) {
        self.ts.store(ts, Ordering::Relaxed);
    }

    /// The value (a cheap `Arc` clone).
    pub(crate) fn value(&self) -> AnyValue {
        self.update(|v| v.clone())
    }

    /// Mutates the value in place.
    pub(crate) fn update<R>(&self, f: impl FnOnce(&mut AnyValue) -> R) -> R {
        f(&mut crate::sync::lock(&self.value))
    }

    /// The recorded weight.
    pub(crate) fn weight(&self) -> usize {
        self.weight.load(Ordering::Relaxed) as usize
    }

    pub(crate) fn is_dirty(&self) -> bool {
        self.dirty.load(Ordering::Acquire)
    }

    pub(crate) fn is_gone(&self) -> bool {
        self.gone.load(Ordering::Acquire)
    }
}
