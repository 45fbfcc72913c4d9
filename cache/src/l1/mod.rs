//! L1: the deserialised, in-memory tier.
//!
//! Three parts share one byte budget (`state.l1.capacity`):
//!
//! * **moka** holds lists, maps and large values as [`Slot`]s, weighs them
//!   and decides their eviction (W-TinyLFU);
//! * the **front index** ([`front`]) finds hot moka slots with one probe
//!   instead of a moka lookup;
//! * **compact tables** ([`compact`], held per state as [`table`]) hold small fixed-size values inline
//!   (a count costs 40 bytes of table instead of ~489 of moka entry). Their
//!   bytes are charged to moka as *ballast* entries, so moka makes room
//!   for them as for its own entries; a ballast entry moka evicts anyway
//!   tells the tables to shrink.
//!
//! A list or value changed in place keeps the weight moka recorded when it
//! was inserted; what it grew by since is charged to the ballast too (in
//! steps of 1/256 of L1, at most 1 MiB, after the operation: see
//! [`L1::recharge`]), so L1's real bytes stay within its budget without
//! a moka insertion per append ([`L1::regrow`]).
//!
//! L1 is write-back: dirty moka slots are remembered in a dirty set
//! ([`dirty`]), and the dirty slots moka evicts wait in a queue that the
//! store drains into its L2 write batch right after the moka operation
//! that evicted them (moka calls its listener inside that operation), so
//! a dirty entry leaving L1 is never invisible to the next read.
//! L1 knows nothing of L2: it hands back what leaves it.

pub(crate) mod compact;
mod dirty;
pub(crate) mod doorkeeper;
pub(crate) mod front;
pub(crate) mod slot;
pub(crate) mod table;

use crate::hash::{put_l1_key, KeyBytes, L1Key, PassThrough};
use crate::sync::lock;
use dirty::DirtySet;
use front::{FrontIndex, Probe};
use moka::notification::RemovalCause;
pub(crate) use slot::{AnyValue, Slot};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Bytes an L1 entry costs beyond its key and its value's weight: moka's
/// entry (its hash table slot, entry info and access-order node), the slot,
/// the shared key and the boxed value. Measured: 1 M `u64` values in moka
/// raise RSS by 489 bytes each, 32 of them key and value
/// (`examples/l1_memory.rs` in strata-bench).
pub(crate) const SLOT_OVERHEAD: u32 = 456;

/// The state id of ballast entries (no declared state has it).
const BALLAST_STATE: u16 = u16::MAX;
/// The most one ballast entry weighs (moka weighs entries in `u32`).
const BALLAST_PIECE: u64 = 1 << 30;
/// The most of L1 the compact tables together may take: moka keeps the rest.
pub(crate) const TABLE_SHARE: f64 = 0.875;

/// What moka's eviction listener hands back.
#[derive(Default)]
struct Departures {
    /// Dirty slots moka evicted, waiting for the store's write batch.
    evicted: Mutex<Vec<Arc<Slot>>>,
    any: AtomicBool,
    /// Slots per state moka may hold (inserts less removals told).
    per_state: Vec<AtomicU64>,
    /// Set when moka evicted a ballast entry.
    ballast_lost: AtomicBool,
    /// The `extra` bytes of the slots moka holds, in all.
    growth: AtomicI64,
}

impl Departures {
    fn on_removal(&self, slot: Arc<Slot>, cause: RemovalCause) {
        slot.gone.store(true, Ordering::SeqCst);
        let extra = slot.extra.swap(0, Ordering::SeqCst);
        self.growth.fetch_sub(i64::from(extra), Ordering::SeqCst);
        let state = slot.state();
        if state == BALLAST_STATE {
            if cause.was_evicted() {
                self.ballast_lost.store(true, Ordering::Release);
            }
            return;
        }
        if let Some(n) = self.per_state.get(usize::from(state)) {
            n.fetch_sub(1, Ordering::Relaxed);
        }
        if cause.was_evicted() && slot.dirty.swap(false, Ordering::AcqRel) {
            lock(&self.evicted).push(slot);
            self.any.store(true, Ordering::Release);
        }
    }
}

/// See the module docs.
pub(crate) struct L1 {
    moka: moka::sync::Cache<L1Key, Arc<Slot>, PassThrough>,
    front: FrontIndex,
    dirty: Mutex<DirtySet>,
    departures: Arc<Departures>,
    capacity: u64,
    ballast: Mutex<Ballast>,
    /// The growth the ballast carries (see [`L1::regrow`]).
    charged_growth: AtomicU64,
}

/// The ballast: moka entries that weigh what L1 holds outside moka's own
/// weights — the compact tables, and the growth of values changed in place.
#[derive(Default)]
struct Ballast {
    keys: Vec<L1Key>,
    /// The compact tables' bytes.
    tables: u64,
}

impl L1 {
    /// An L1 of `capacity` bytes for `states` declared states, of which
    /// `reserved` bytes are spent beside it (the store's L2 write batches
    /// on their way, see [`crate::tiers::BATCHES_IN_FLIGHT`]).
    pub(crate) fn new(capacity: u64, states: usize, reserved: u64) -> Self {
        let front = FrontIndex::for_capacity(capacity);
        let departures = Arc::new(Departures {
            per_state: (0..states).map(|_| AtomicU64::new(0)).collect(),
            ..Departures::default()
        });
        let listener = departures.clone();
        // moka stores nothing at capacity 0 and tells no listener, so
        // dirty entries would vanish; at 1 byte every entry spills to L2.
        let capacity = capacity.saturating_sub(front.bytes() + reserved).max(1);
        let moka = moka::sync::Cache::builder()
            .max_capacity(capacity)
            .weigher(|k: &L1Key, s: &Arc<Slot>| {
                (k.bytes().len() as u32)
                    .saturating_add(s.weight.load(Ordering::Relaxed))
                    .saturating_add(SLOT_OVERHEAD)
            })
            .eviction_listener(move |_k: Arc<L1Key>, s: Arc<Slot>, cause| {
                listener.on_removal(s, cause)
            })
            .build_with_hasher(PassThrough);
        Self {
            moka,
            front,
            dirty: Mutex::default(),
            departures,
            capacity,
            ballast: Mutex::default(),
            charged_growth: AtomicU64::new(0),
        }
    }

    /// The slot of `key` if moka holds it: a probe of the front index,
    /// else one moka lookup. moka runs its housekeeping after the lookup,
    /// so the very call that found an entry may evict (and spill) it; an
    /// entry gone by the time the call returns is not returned (a change
    /// made to it in place would be lost).
    pub(crate) fn get(&self, key: &KeyBytes) -> Option<Arc<Slot>> {
        let in_l1 = |slot: &Arc<Slot>| !slot.is_gone();
        match self.front.probe(key) {
            Probe::Hit(slot) => return Some(slot),
            Probe::HitRefresh(slot) => {
                // Keeps moka's access order near the truth; its
                // housekeeping may evict the slot meanwhile.
                let _ = self.moka.get(key);
                return Some(slot).filter(in_l1);
            }
            Probe::Miss => {}
        }
        let slot = self.moka.get(key).filter(in_l1)?;
        self.front.offer(&slot);
        Some(slot)
    }

    /// Whether moka may hold an entry of `state` at all (a blind list
    /// append skips the lookup when it holds none).
    pub(crate) fn may_hold(&self, state: u16) -> bool {
        self.departures
            .per_state
            .get(usize::from(state))
            .is_some_and(|n| n.load(Ordering::Relaxed) > 0)
    }

    /// Whether moka holds `key` (no access recorded).
    pub(crate) fn contains(&self, key: &KeyBytes) -> bool {
        self.moka.contains_key(key)
    }

    /// Puts a slot in moka (replacing what it held of its key), and a
    /// dirty one in the dirty set.
    pub(crate) fn insert(&self, slot: Arc<Slot>) {
        if slot.is_dirty() {
            self.mark_listed(&slot);
        }
        if let Some(n) = self.departures.per_state.get(usize::from(slot.state())) {
            n.fetch_add(1, Ordering::Relaxed);
        }
        self.moka.insert(slot.key.clone(), slot.clone());
        // moka may have evicted it at once (larger than L1).
        if !slot.is_gone() {
            self.front.offer(&slot);
        }
    }

    /// Marks a slot dirty, adding it to the dirty set if it was clean.
    pub(crate) fn mark_dirty(&self, slot: &Arc<Slot>) {
        if !slot.dirty.swap(true, Ordering::AcqRel) {
            self.mark_listed(slot);
        }
    }

    fn mark_listed(&self, slot: &Arc<Slot>) {
        lock(&self.dirty).push(slot);
    }

    /// Removes `key` from moka: gone at once, whenever moka tells its
    /// listener, so the front index no longer finds it.
    pub(crate) fn remove(&self, key: &KeyBytes) {
        if let Some(slot) = self.moka.remove(key) {
            slot.gone.store(true, Ordering::Release);
        }
    }

    /// The dirty slots moka evicted since the last call.
    pub(crate) fn take_evicted(&self) -> Vec<Arc<Slot>> {
        if !self.departures.any.swap(false, Ordering::AcqRel) {
            return Vec::new();
        }
        std::mem::take(&mut *lock(&self.departures.evicted))
    }

    /// The dirty set: the slots made dirty since the last call that are
    /// still in moka and dirty, in key order.
    pub(crate) fn take_dirty(&self) -> Vec<Arc<Slot>> {
        lock(&self.dirty).take_live()
    }

    /// Whether moka has an eighth of its capacity free: entries met on a
    /// miss are admitted then without asking the doorkeeper.
    pub(crate) fn has_room(&self) -> bool {
        self.moka.weighted_size() < self.capacity - self.capacity / 8
    }

    /// A [`doorkeeper::Doorkeeper`] sized for this L1.
    pub(crate) fn doorkeeper(&self) -> doorkeeper::Doorkeeper {
        doorkeeper::Doorkeeper::for_capacity(self.capacity)
    }

    /// Bytes moka holds by its weigher, ballast included.
    pub(crate) fn weighted_size(&self) -> u64 {
        self.moka.weighted_size()
    }

    /// Bytes the compact tables may take in all.
    pub(crate) fn table_limit(&self) -> u64 {
        (self.capacity as f64 * TABLE_SHARE) as u64
    }

    /// Charges `bytes` of compact tables to moka: sets the ballast to that
    /// weight, plus the growth (moka evicts its own entries to make room).
    /// False if it is over [`L1::table_limit`].
    pub(crate) fn charge_tables(&self, bytes: u64) -> bool {
        if bytes > self.table_limit() {
            return false;
        }
        let mut ballast = lock(&self.ballast);
        ballast.tables = bytes;
        self.charge(&mut ballast);
        self.departures.ballast_lost.store(false, Ordering::Release);
        true
    }

    /// Records that `slot`'s value weighs `weight` now. `false` if that is
    /// too far from the weight moka recorded (over 16 times, or under
    /// half): the caller puts a [`Slot::reweighed`] copy in moka instead.
    /// Else the growth is counted, and [`L1::recharge`] charges it to the
    /// ballast once the growth of all slots moved by a step (so that
    /// appends to a list L1 holds cost no moka insertion each; moka's own
    /// weight of an entry only decides how much room its eviction makes,
    /// and the listener takes the entry's growth off the count then).
    /// No moka operation: the slot cannot be evicted by this call.
    pub(crate) fn regrow(&self, slot: &Slot, weight: usize) -> bool {
        let recorded = slot.weight();
        if weight > 16 * recorded.max(64) || 2 * weight < recorded {
            return false;
        }
        let extra = weight.saturating_sub(recorded).min(u32::MAX as usize) as u32;
        let before = slot.extra.swap(extra, Ordering::SeqCst);
        let d = &self.departures;
        d.growth
            .fetch_add(i64::from(extra) - i64::from(before), Ordering::SeqCst);
        if slot.is_gone() {
            // Removed meanwhile: its listener may have missed this extra.
            let left = slot.extra.swap(0, Ordering::SeqCst);
            d.growth.fetch_sub(i64::from(left), Ordering::SeqCst);
        }
        true
    }

    /// Charges the growth to the ballast if it moved by a step (1/256 of
    /// L1, at most 1 MiB) since it was last charged, either way: grown
    /// entries that left give their room back. Cheap when it did not (two
    /// atomic loads): the store calls it after every L1 operation.
    pub(crate) fn recharge(&self) {
        let growth = self.departures.growth.load(Ordering::Relaxed).max(0) as u64;
        let step = (self.capacity / 256).clamp(64 << 10, 1 << 20);
        if growth.abs_diff(self.charged_growth.load(Ordering::Relaxed)) >= step {
            let mut ballast = lock(&self.ballast);
            self.charge(&mut ballast);
        }
    }

    /// Sets the ballast to the tables' bytes plus the growth.
    fn charge(&self, ballast: &mut Ballast) {
        let growth = self.departures.growth.load(Ordering::SeqCst).max(0) as u64;
        self.charged_growth.store(growth, Ordering::Relaxed);
        let bytes = ballast.tables + growth;
        let pieces = bytes.div_ceil(BALLAST_PIECE) as usize;
        while ballast.keys.len() > pieces {
            if let Some(key) = ballast.keys.pop() {
                self.moka.invalidate(&key);
            }
        }
        for i in 0..pieces {
            let weight = (bytes - i as u64 * BALLAST_PIECE).min(BALLAST_PIECE);
            let key = ballast_key(i as u32);
            if ballast.keys.len() <= i {
                // A new key of no recorded use would lose moka's admission
                // (W-TinyLFU) to any entry in use: make it look as used as
                // the hottest (its sketch counts reads of absent keys).
                for _ in 0..16 {
                    let _ = self.moka.get(&key);
                }
                self.moka.run_pending_tasks();
            }
            let slot = Slot::new(key.clone(), 0, Arc::new(()), weight as usize, false);
            self.moka.insert(key.clone(), slot);
            if ballast.keys.len() <= i {
                ballast.keys.push(key);
            }
        }
    }

    /// Whether moka evicted ballast since the tables were last charged.
    pub(crate) fn ballast_lost(&self) -> bool {
        self.departures.ballast_lost.load(Ordering::Acquire)
    }

    /// Records an access of the ballast, so that moka's policy sees it as
    /// hot as the tables' entries are (the tables call it now and then).
    pub(crate) fn touch_ballast(&self) {
        let ballast = lock(&self.ballast);
        for key in &ballast.keys {
            let _ = self.moka.get(key);
        }
    }

    /// Makes moka apply pending evictions (so its size is current).
    pub(crate) fn settle(&self) {
        self.moka.run_pending_tasks();
    }

    /// Bytes of L1 in use: moka's weighted size (the ballast is the
    /// tables' bytes).
    pub(crate) fn bytes(&self) -> u64 {
        self.weighted_size()
    }
}

fn ballast_key(index: u32) -> L1Key {
    let mut buf = Vec::new();
    put_l1_key(
        &mut buf,
        u64::from(index).wrapping_mul(0x9e37_79b9_7f4a_7c15),
        BALLAST_STATE,
        0,
        &index.to_be_bytes(),
        b"",
    );
    L1Key::from_bytes(KeyBytes::new(&buf))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slot(key: &[u8], weight: usize, dirty: bool) -> Arc<Slot> {
        let mut buf = Vec::new();
        put_l1_key(&mut buf, crate::hash::hash_key(key), 0, 0, key, b"");
        Slot::new(
            L1Key::from_bytes(KeyBytes::new(&buf)),
            0,
            Arc::new(0u64),
            weight,
            dirty,
        )
    }

    #[test]
    fn ballast_makes_moka_evict_its_own_entries_and_dirty_ones_come_back() {
        let l1 = L1::new(1 << 20, 1, 0);
        for i in 0..500u32 {
            l1.insert(slot(&i.to_be_bytes(), 1000, true));
        }
        l1.settle();
        let before = l1.weighted_size();
        assert!(before > 700_000, "{before}");
        assert!(l1.charge_tables(600_000));
        l1.settle();
        let evicted = l1.take_evicted();
        assert!(!evicted.is_empty());
        assert!(evicted.iter().all(|s| s.is_gone() && !s.is_dirty()));
        assert!(l1.weighted_size() <= l1.capacity);
        assert!(!l1.charge_tables(l1.capacity), "over the tables' share");
    }

    #[test]
    fn growth_in_place_is_charged_and_leaves_with_its_entry() {
        let l1 = L1::new(64 << 20, 1, 0);
        let slots: Vec<_> = (0..100u32)
            .map(|i| slot(&i.to_be_bytes(), 1000, false))
            .collect();
        for s in &slots {
            l1.insert(s.clone());
        }
        l1.settle();
        let before = l1.weighted_size();
        // Each value grows to 10x in place: within what moka keeps.
        for s in &slots {
            assert!(l1.regrow(s, 10_000));
        }
        l1.recharge();
        l1.settle();
        let grown = l1.weighted_size() - before;
        // Charged within a step, plus the ballast entry's own overhead.
        let (step, entry) = ((64 << 20) / 256, 1024);
        assert!(
            grown + step >= 100 * 9000 && grown <= 100 * 9000 + entry,
            "growth charged within a step: {grown}"
        );
        // Over 16x (or under half) moka must re-weigh the entry.
        assert!(!l1.regrow(&slots[0], 1000 * 16 * 2));
        assert!(!l1.regrow(&slots[0], 400));
        for (i, _) in slots.iter().enumerate() {
            let mut buf = Vec::new();
            let key = (i as u32).to_be_bytes();
            put_l1_key(&mut buf, crate::hash::hash_key(&key), 0, 0, &key, b"");
            l1.remove(KeyBytes::new(&buf));
        }
        l1.settle();
        l1.recharge();
        l1.settle();
        assert!(
            l1.weighted_size() < before,
            "the removed entries' growth left the ballast: {} of {before}",
            l1.weighted_size()
        );
    }
}
