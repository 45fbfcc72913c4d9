//! The L1 front index: a direct-mapped table in front of moka, so that a
//! hot key's access costs a hash and one probe instead of a moka lookup.
//!
//! moka stays the L1: it owns every entry, weighs it, decides evictions and
//! tells the eviction listener, which marks the slot gone. The index only
//! points at slots moka holds ([`Weak`] references, so it keeps no value
//! alive): a probe that finds a slot that is gone, or another key, is a
//! miss and the lookup goes to moka. Measured on this machine, a moka
//! `get` costs 1–2 µs with 100,000–1,000,000 entries (cache misses in its
//! hash table, entry and access-order nodes) where a hash-map probe costs
//! 0.1–0.6 µs (docs/benchmarks.md).
//!
//! Replacement is CLOCK-like per entry: a slot found through the index is
//! marked used; a moka hit of another key mapped to the same entry clears
//! the mark the first time and takes the entry the second, so a hot key is
//! not pushed out by a stream of cold ones. Hits served here do not reach
//! moka's access order; one lookup in [`REFRESH_EVERY`] also asks moka,
//! so that the keys hit most often stay the most recent there too (the
//! idea of Caffeine's sampled read buffers, which moka follows).

use super::slot::Slot;
use crate::hash::KeyBytes;
use crate::sync::lock;
use std::sync::{Arc, Mutex, Weak};

/// One front hit in this many also looks the key up in moka.
pub(crate) const REFRESH_EVERY: u32 = 32;

/// The smallest index kept: below it, an L1 too small to spare an eighth.
const MIN_ENTRIES: u64 = 16;

/// Bytes one index entry may keep allocated: the entry itself, and the
/// allocation of a slot moka dropped while the entry still points at it.
pub(crate) const ENTRY_BYTES: u64 =
    (std::mem::size_of::<Entry>() + std::mem::size_of::<Slot>() + 16) as u64;

struct Entry {
    hash: u64,
    slot: Weak<Slot>,
    used: bool,
}

struct Table {
    entries: Box<[Entry]>,
    since_refresh: u32,
}

/// What a probe found.
pub(crate) enum Probe {
    /// The key's slot, still in L1.
    Hit(Arc<Slot>),
    /// The key's slot, still in L1; time to refresh its recency in moka.
    HitRefresh(Arc<Slot>),
    Miss,
}

/// See the module docs.
pub(crate) struct FrontIndex {
    table: Mutex<Table>,
    mask: u64,
}

impl FrontIndex {
    /// An index that may keep at most an eighth of `l1_capacity` (a power
    /// of two of entries, 16 to 1,048,576), or none when an eighth holds
    /// fewer than 16 (an L1 under 12 KiB); [`FrontIndex::bytes`] says how
    /// much it keeps.
    pub(crate) fn for_capacity(l1_capacity: u64) -> Self {
        let fit = l1_capacity / 8 / ENTRY_BYTES;
        let n = match fit {
            0..MIN_ENTRIES => 0,
            _ => (1u64 << (63 - fit.leading_zeros())).min(1 << 20),
        };
        let entries = (0..n)
            .map(|_| Entry {
                hash: 0,
                slot: Weak::new(),
                used: false,
            })
            .collect();
        Self {
            table: Mutex::new(Table {
                entries,
                since_refresh: 0,
            }),
            mask: n.saturating_sub(1),
        }
    }

    /// The most memory the index keeps (charged to L1's capacity).
    pub(crate) fn bytes(&self) -> u64 {
        lock(&self.table).entries.len() as u64 * ENTRY_BYTES
    }

    /// Looks `l1_key` up.
    pub(crate) fn probe(&self, l1_key: &KeyBytes) -> Probe {
        let hash = l1_key.hash();
        let mut table = lock(&self.table);
        let Some(entry) = table.entries.get_mut((hash & self.mask) as usize) else {
            return Probe::Miss;
        };
        if entry.hash != hash {
            return Probe::Miss;
        }
        let Some(slot) = entry
            .slot
            .upgrade()
            .filter(|s| !s.is_gone() && *s.key == *l1_key)
        else {
            return Probe::Miss;
        };
        entry.used = true;
        table.since_refresh += 1;
        if table.since_refresh >= REFRESH_EVERY {
            table.since_refresh = 0;
            return Probe::HitRefresh(slot);
        }
        Probe::Hit(slot)
    }

    /// Points the entry of the slot's hash at `slot`, found in moka or just
    /// put there: at once when the entry is free, stale or holds the same
    /// key; else only when its slot was not used since it was last passed over.
    pub(crate) fn offer(&self, slot: &Arc<Slot>) {
        let hash = slot.key.hash();
        let mut table = lock(&self.table);
        let Some(entry) = table.entries.get_mut((hash & self.mask) as usize) else {
            return;
        };
        let held = entry.slot.upgrade();
        let free = held
            .as_ref()
            .is_none_or(|s| s.is_gone() || (entry.hash == hash && s.key == slot.key));
        if free || !entry.used {
            *entry = Entry {
                hash,
                slot: Arc::downgrade(slot),
                used: false,
            };
        } else {
            entry.used = false;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hash::{put_l1_key, L1Key};
    use std::sync::atomic::Ordering;

    /// A slot whose L1 hash is `hash`.
    fn slot(hash: u64, key: &[u8]) -> Arc<Slot> {
        let mut buf = Vec::new();
        put_l1_key(&mut buf, hash, 0, 0, key, b"");
        Slot::new(
            L1Key::from_bytes(KeyBytes::new(&buf)),
            0,
            Arc::new(1u64),
            8,
            false,
        )
    }

    fn probe(front: &FrontIndex, s: &Arc<Slot>) -> Probe {
        front.probe(&s.key)
    }

    /// The smallest L1 with an index.
    const SMALL: u64 = 8 * MIN_ENTRIES * ENTRY_BYTES;

    #[test]
    fn an_l1_too_small_to_spare_an_eighth_has_no_index() {
        let none = FrontIndex::for_capacity(SMALL - 1);
        assert_eq!(none.bytes(), 0);
        let a = slot(7, b"a");
        none.offer(&a);
        assert!(matches!(probe(&none, &a), Probe::Miss));
        let some = FrontIndex::for_capacity(SMALL);
        assert_eq!(some.bytes(), SMALL / 8);
        let big = FrontIndex::for_capacity(1 << 40);
        assert_eq!(big.bytes(), (1 << 20) * ENTRY_BYTES);
    }

    #[test]
    fn a_probe_finds_only_the_same_key_still_in_l1() {
        let front = FrontIndex::for_capacity(SMALL);
        let a = slot(7, b"a");
        front.offer(&a);
        assert!(matches!(probe(&front, &a), Probe::Hit(s) if Arc::ptr_eq(&s, &a)));
        // Another key with the same hash is a miss.
        assert!(matches!(probe(&front, &slot(7, b"b")), Probe::Miss));
        // A slot moka removed is a miss.
        a.gone.store(true, Ordering::Release);
        assert!(matches!(probe(&front, &a), Probe::Miss));
        // A slot dropped is a miss.
        let b = slot(9, b"b");
        front.offer(&b);
        let again = slot(9, b"b");
        drop(b);
        assert!(matches!(probe(&front, &again), Probe::Miss));
    }

    #[test]
    fn a_used_entry_survives_one_offer_of_another_key() {
        let front = FrontIndex::for_capacity(SMALL);
        let n = front.mask + 1;
        let (hot, cold) = (slot(1, b"hot"), slot(1 + n, b"cold"));
        front.offer(&hot);
        assert!(matches!(probe(&front, &hot), Probe::Hit(_)));
        front.offer(&cold);
        assert!(
            matches!(probe(&front, &hot), Probe::Hit(_)),
            "second chance"
        );
        front.offer(&cold);
        front.offer(&cold);
        assert!(matches!(probe(&front, &cold), Probe::Hit(_)));
        assert!(matches!(probe(&front, &hot), Probe::Miss));
    }

    #[test]
    fn one_hit_in_refresh_every_asks_moka() {
        let front = FrontIndex::for_capacity(SMALL);
        let a = slot(3, b"a");
        front.offer(&a);
        let refreshes = (0..REFRESH_EVERY * 3)
            .filter(|_| matches!(probe(&front, &a), Probe::HitRefresh(_)))
            .count();
        assert_eq!(refreshes, 3);
    }
}
