//! The compact table: L1 for small fixed-size values, key and value inline.
//!
//! A moka entry costs about 489 bytes of memory whatever its value (its
//! hash-table slot, entry info, access-order node, the shared key, the
//! slot and the boxed value: measured by strata-bench's `l1_memory`
//! example), so a count or a timestamp per user spends most of L1 on
//! bookkeeping. A `ValueState<T>` whose `T` is at most 16 bytes and owns
//! no heap memory (numbers, small structs and tuples of them) keeps the
//! entries of record keys of up to [`KEY_INLINE`] bytes here instead: one
//! open-addressing array per state of `(hash tag, key group, key, write
//! time, value, flags)`, 40 bytes for a `u64`, owned by the store's task
//! (under the tier lock, no lock of its own).
//!
//! * Lookups use Robin Hood linear probing (the idea of Celis' 1986
//!   thesis): an entry is never further from its home slot than the
//!   entries it passed, so a miss stops early, and a removal shifts the
//!   following entries back instead of leaving a tombstone. The home slot
//!   is the carried L1 hash scaled to the table's size, which need not be
//!   a power of two: a table grows by a quarter, so it stays between 68 %
//!   and 85 % full.
//! * Eviction is CLOCK (second chance): an access sets the entry's *used*
//!   flag; the hand clears used flags and evicts the first entry without
//!   one. A dirty entry evicted is handed back to the store for L2.
//! * Dirtiness is a flag per entry and a count per table; a checkpoint
//!   scans the dense array of a table with dirty entries (at memory speed:
//!   a 500,000-entry table is 20 MB).
//!
//! How much of L1 the tables take is decided by [`crate::l1::L1`], which
//! charges their bytes to moka's capacity.

use std::num::NonZeroU32;

/// The longest record key an entry holds inline; longer keys' values live
/// in moka.
pub(crate) const KEY_INLINE: usize = 16;

/// Whether values of type `T` may live in a compact table: at most 16
/// bytes and no heap memory of their own (no drop glue), so an entry's
/// size is its whole cost.
pub(crate) fn eligible<T: 'static>() -> bool {
    std::mem::size_of::<T>() <= 16 && !std::mem::needs_drop::<T>()
}

/// The most a table is filled before it grows (or evicts).
const MAX_LOAD: f64 = 0.85;
/// The smallest table.
const MIN_SLOTS: usize = 64;

const DIRTY: u8 = 1;
const USED: u8 = 2;

/// One entry: 24 bytes of header and key, the write time and the value.
#[derive(Clone)]
struct Entry<T> {
    /// The upper half of the L1 hash with its lowest bit set (never 0, so
    /// `Option<Entry>` needs no room of its own).
    tag: NonZeroU32,
    key_group: u16,
    len: u8,
    flags: u8,
    key: [u8; KEY_INLINE],
    ts: i64,
    value: T,
}

impl<T> Entry<T> {
    fn key(&self) -> &[u8] {
        &self.key[..usize::from(self.len)]
    }
}

/// An entry leaving the table (evicted, or taken at a checkpoint).
pub(crate) struct Leaving<'a, T> {
    pub(crate) key_group: u16,
    pub(crate) key: &'a [u8],
    pub(crate) ts: i64,
    pub(crate) value: &'a T,
}

/// The home slot of `tag` in a table of `n` slots: the tag scaled to `n`.
fn home_of(tag: NonZeroU32, n: usize) -> usize {
    ((u64::from(tag.get()) * n as u64) >> 32) as usize
}

/// How far slot `pos` is from the home of `tag`, in a table of `n` slots.
fn distance_of(pos: usize, tag: NonZeroU32, n: usize) -> usize {
    (pos + n - home_of(tag, n)) % n
}

/// The tag of an L1 hash.
pub(crate) fn tag_of(hash: u64) -> NonZeroU32 {
    NonZeroU32::new((hash >> 32) as u32 | 1).unwrap_or(NonZeroU32::MIN)
}

/// See the module docs.
pub(crate) struct CompactTable<T> {
    slots: Box<[Option<Entry<T>>]>,
    len: usize,
    dirty: usize,
    hand: usize,
}

impl<T: Clone> Default for CompactTable<T> {
    fn default() -> Self {
        Self::with_slots(MIN_SLOTS)
    }
}

/// Where a key is, or where its lookup stopped.
pub(crate) enum Found {
    At(usize),
    Absent,
}

impl<T: Clone> CompactTable<T> {
    fn with_slots(n: usize) -> Self {
        Self {
            slots: (0..n.max(MIN_SLOTS)).map(|_| None).collect(),
            len: 0,
            dirty: 0,
            hand: 0,
        }
    }

    /// Bytes one slot takes.
    pub(crate) fn slot_bytes() -> u64 {
        std::mem::size_of::<Option<Entry<T>>>() as u64
    }

    /// Bytes the table's array takes.
    pub(crate) fn bytes(&self) -> u64 {
        self.slots.len() as u64 * Self::slot_bytes()
    }

    /// Entries held.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Dirty entries held.
    pub(crate) fn dirty(&self) -> usize {
        self.dirty
    }

    fn home(&self, tag: NonZeroU32) -> usize {
        home_of(tag, self.slots.len())
    }

    fn distance(&self, pos: usize, tag: NonZeroU32) -> usize {
        distance_of(pos, tag, self.slots.len())
    }

    /// Finds the entry of (`hash`, `key`).
    pub(crate) fn find(&self, hash: u64, key: &[u8]) -> Found {
        let tag = tag_of(hash);
        let n = self.slots.len();
        let mut pos = self.home(tag);
        for d in 0..n {
            match &self.slots[pos] {
                None => return Found::Absent,
                Some(e) if self.distance(pos, e.tag) < d => return Found::Absent,
                Some(e) if e.tag == tag && e.key() == key => return Found::At(pos),
                Some(_) => {}
            }
            pos = (pos + 1) % n;
        }
        Found::Absent
    }

    /// The value at `pos` (from [`CompactTable::find`]) and its write time,
    /// marked used.
    pub(crate) fn get(&mut self, pos: usize) -> Option<(i64, &mut T)> {
        let e = self.slots.get_mut(pos)?.as_mut()?;
        e.flags |= USED;
        Some((e.ts, &mut e.value))
    }

    /// Marks the entry at `pos` written at `ts` and dirty.
    pub(crate) fn set_dirty(&mut self, pos: usize, ts: i64) {
        if let Some(e) = self.slots.get_mut(pos).and_then(Option::as_mut) {
            e.ts = ts;
            if e.flags & DIRTY == 0 {
                e.flags |= DIRTY;
                self.dirty += 1;
            }
        }
    }

    /// Whether one more entry fits without passing the load limit.
    pub(crate) fn has_room(&self) -> bool {
        ((self.len + 1) as f64) <= self.slots.len() as f64 * MAX_LOAD
    }

    /// The slot count a table grown from this one gets.
    pub(crate) fn grown_slots(&self) -> usize {
        (self.slots.len() + self.slots.len() / 4).max(MIN_SLOTS)
    }

    /// Inserts an entry for a key not in the table (there must be room:
    /// [`CompactTable::has_room`]); returns its position. `key` is at most
    /// [`KEY_INLINE`] bytes.
    pub(crate) fn insert(
        &mut self,
        hash: u64,
        key_group: u16,
        key: &[u8],
        ts: i64,
        value: T,
        dirty: bool,
    ) -> usize {
        let mut inline = [0; KEY_INLINE];
        inline[..key.len()].copy_from_slice(key);
        let entry = Entry {
            tag: tag_of(hash),
            key_group,
            len: key.len() as u8,
            flags: USED | if dirty { DIRTY } else { 0 },
            key: inline,
            ts,
            value,
        };
        self.len += 1;
        self.dirty += usize::from(dirty);
        self.place(entry)
    }

    /// Robin Hood insertion: takes the slot of the first entry closer to
    /// its home than the carried one is, and carries that one on.
    fn place(&mut self, entry: Entry<T>) -> usize {
        let n = self.slots.len();
        let mut carried = entry;
        let mut pos = self.home(carried.tag);
        let mut d = 0;
        let mut placed = None;
        loop {
            match &mut self.slots[pos] {
                slot @ None => {
                    *slot = Some(carried);
                    return placed.unwrap_or(pos);
                }
                Some(held) => {
                    let held_d = distance_of(pos, held.tag, n);
                    if held_d < d {
                        std::mem::swap(held, &mut carried);
                        placed.get_or_insert(pos);
                        d = held_d;
                    }
                }
            }
            pos = (pos + 1) % n;
            d += 1;
        }
    }

    /// Removes the entry at `pos`, shifting the entries after it back;
    /// returns it.
    fn take(&mut self, pos: usize) -> Option<Entry<T>> {
        let taken = self.slots[pos].take()?;
        self.len -= 1;
        if taken.flags & DIRTY != 0 {
            self.dirty -= 1;
        }
        let n = self.slots.len();
        let (mut hole, mut next) = (pos, (pos + 1) % n);
        while let Some(e) = &self.slots[next] {
            if self.distance(next, e.tag) == 0 {
                break;
            }
            self.slots[hole] = self.slots[next].take();
            hole = next;
            next = (next + 1) % n;
        }
        Some(taken)
    }

    /// Removes the entry of (`hash`, `key`); whether there was one.
    pub(crate) fn remove(&mut self, hash: u64, key: &[u8]) -> bool {
        match self.find(hash, key) {
            Found::At(pos) => self.take(pos).is_some(),
            Found::Absent => false,
        }
    }

    /// Evicts one entry by CLOCK; a dirty one is passed to `spill`.
    pub(crate) fn evict_one<E>(
        &mut self,
        spill: &mut dyn FnMut(Leaving<'_, T>) -> Result<(), E>,
    ) -> Result<(), E> {
        if self.len == 0 {
            return Ok(());
        }
        let n = self.slots.len();
        loop {
            self.hand = (self.hand + 1) % n;
            let Some(e) = &mut self.slots[self.hand] else {
                continue;
            };
            if e.flags & USED != 0 {
                e.flags &= !USED;
                continue;
            }
            let hand = self.hand;
            // The entries shifted back into the hand's slot get their turn.
            self.hand = (hand + n - 1) % n;
            let Some(gone) = self.take(hand) else {
                return Ok(());
            };
            return if gone.flags & DIRTY != 0 {
                spill(leaving(&gone))
            } else {
                Ok(())
            };
        }
    }

    /// Evicts one entry by CLOCK, the hand starting at the home slot of
    /// `hash` (the entry about to be inserted). A hand that sweeps in
    /// order leaves every free slot behind it, so at a full table an
    /// insert elsewhere probes across the whole filled rest (measured: 4 M
    /// inserts into a table held at its share did not finish in 300 s);
    /// starting where the insert lands keeps the free slots spread as
    /// uniformly as the homes are.
    pub(crate) fn evict_near<E>(
        &mut self,
        hash: u64,
        spill: &mut dyn FnMut(Leaving<'_, T>) -> Result<(), E>,
    ) -> Result<(), E> {
        let n = self.slots.len();
        self.hand = (self.home(tag_of(hash)) + n - 1) % n;
        self.evict_one(spill)
    }

    /// Slots of the array, used or not.
    pub(crate) fn slot_count(&self) -> usize {
        self.slots.len()
    }

    /// A table of `slots` slots holding this one's entries (there must be
    /// room for them).
    pub(crate) fn resized(&mut self, slots: usize) -> Self {
        let mut next = Self::with_slots(slots);
        for e in self.slots.iter_mut().filter_map(Option::take) {
            next.len += 1;
            next.dirty += usize::from(e.flags & DIRTY != 0);
            next.place(e);
        }
        next
    }

    /// The slot count that holds `len` entries at the load limit.
    pub(crate) fn slots_for(len: usize) -> usize {
        ((len as f64 / MAX_LOAD).ceil() as usize + 1).max(MIN_SLOTS)
    }

    /// A copy of the table, dirty flags included, and this one marked
    /// clean: the dirty set of a checkpoint, taken in one copy of the array.
    pub(crate) fn snapshot(&mut self) -> Self {
        let copy = Self {
            slots: self.slots.clone(),
            len: self.len,
            dirty: self.dirty,
            hand: 0,
        };
        for e in self.slots.iter_mut().flatten() {
            e.flags &= !DIRTY;
        }
        self.dirty = 0;
        copy
    }

    /// The write time and value of the entry of (`hash`, `key`) if it is dirty.
    pub(crate) fn dirty_entry(&self, hash: u64, key: &[u8]) -> Option<(i64, &T)> {
        let Found::At(pos) = self.find(hash, key) else {
            return None;
        };
        let e = self.slots[pos].as_ref()?;
        (e.flags & DIRTY != 0).then_some((e.ts, &e.value))
    }

    /// Passes every dirty entry to `f`.
    pub(crate) fn for_each_dirty<E>(
        &self,
        f: &mut dyn FnMut(Leaving<'_, T>) -> Result<(), E>,
    ) -> Result<(), E> {
        for e in self.slots.iter().flatten().filter(|e| e.flags & DIRTY != 0) {
            f(leaving(e))?;
        }
        Ok(())
    }
}

fn leaving<T>(e: &Entry<T>) -> Leaving<'_, T> {
    Leaving {
        key_group: e.key_group,
        key: e.key(),
        ts: e.ts,
        value: &e.value,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hash::{hash_key, l1_hash};

    fn h(k: u64) -> u64 {
        l1_hash(hash_key(&k.to_be_bytes()), 0, b"")
    }

    fn insert(t: &mut CompactTable<u64>, k: u64) {
        if !t.has_room() {
            *t = t.resized(t.grown_slots());
        }
        t.insert(h(k), 0, &k.to_be_bytes(), 0, k * 10, false);
    }

    #[test]
    fn a_u64_entry_takes_40_bytes() {
        assert_eq!(CompactTable::<u64>::slot_bytes(), 40);
        assert!(eligible::<u64>() && eligible::<(u32, f64)>() && !eligible::<Vec<u8>>());
        assert!(!eligible::<[u64; 3]>());
    }

    #[test]
    fn every_inserted_key_is_found_and_removed_keys_are_not() {
        let mut t = CompactTable::<u64>::default();
        for k in 0..10_000 {
            insert(&mut t, k);
        }
        assert_eq!(t.len(), 10_000);
        let load = t.len() as f64 / t.slots.len() as f64;
        assert!((0.6..=MAX_LOAD).contains(&load), "load {load}");
        for k in (0..10_000).step_by(3) {
            assert!(t.remove(h(k), &k.to_be_bytes()));
        }
        for k in 0..10_000u64 {
            let found = match t.find(h(k), &k.to_be_bytes()) {
                Found::At(pos) => t.get(pos).map(|(_, v)| *v),
                Found::Absent => None,
            };
            let want = (k % 3 != 0).then_some(k * 10);
            assert_eq!(found, want, "key {k}");
        }
    }

    #[test]
    fn clock_spares_used_entries_and_spills_only_dirty_ones() {
        let mut t = CompactTable::<u64>::with_slots(MIN_SLOTS);
        for k in 0..40 {
            t.insert(h(k), 7, &k.to_be_bytes(), k as i64, k, k % 2 == 0);
        }
        // Clear every used flag once, then touch key 5.
        let mut none = |_: Leaving<'_, u64>| -> Result<(), ()> { Ok(()) };
        for e in t.slots.iter_mut().flatten() {
            e.flags &= !USED;
        }
        if let Found::At(pos) = t.find(h(5), &5u64.to_be_bytes()) {
            t.get(pos);
        }
        let mut spilled = Vec::new();
        let mut spill = |e: Leaving<'_, u64>| -> Result<(), ()> {
            assert_eq!(e.key_group, 7);
            spilled.push(*e.value);
            Ok(())
        };
        for _ in 0..39 {
            t.evict_one(&mut spill).unwrap();
        }
        assert_eq!(t.len(), 1);
        assert!(matches!(t.find(h(5), &5u64.to_be_bytes()), Found::At(_)));
        spilled.sort_unstable();
        assert_eq!(spilled, (0..40).filter(|k| k % 2 == 0).collect::<Vec<_>>());
        assert_eq!(t.dirty(), 0);
        t.evict_one(&mut none).unwrap();
        assert_eq!(t.len(), 0);
    }

    #[test]
    fn a_snapshot_takes_the_dirty_set_and_leaves_the_table_clean() {
        let mut t = CompactTable::<u64>::default();
        for k in 0..100 {
            insert(&mut t, k);
            if let Found::At(pos) = t.find(h(k), &k.to_be_bytes()) {
                if k % 4 == 0 {
                    t.set_dirty(pos, 99);
                }
            }
        }
        let copy = t.snapshot();
        assert_eq!(
            (t.dirty(), copy.dirty()),
            (0, 25),
            "the copy took the dirty set"
        );
        let mut seen = Vec::new();
        copy.for_each_dirty(&mut |e: Leaving<'_, u64>| -> Result<(), ()> {
            seen.push((e.ts, *e.value));
            Ok(())
        })
        .unwrap();
        seen.sort_unstable();
        assert_eq!(
            seen,
            (0..100)
                .step_by(4)
                .map(|k| (99, k * 10))
                .collect::<Vec<_>>()
        );
        assert_eq!(
            copy.dirty_entry(h(4), &4u64.to_be_bytes()).map(|(_, v)| *v),
            Some(40)
        );
        assert!(
            copy.dirty_entry(h(5), &5u64.to_be_bytes()).is_none(),
            "a clean entry"
        );
    }
}
