//! Key groups: the unit in which keyed state is partitioned and rescaled.
//!
//! A record's key (bytes) maps to a key group `hash(key) % max_parallelism`
//! (the idea and the range arithmetic come from Apache Flink's
//! `KeyGroupRangeAssignment`). Each parallel operator instance owns a
//! contiguous range of key groups, and every stored key begins with its key
//! group as a big-endian `u16`, so a range of key groups is a contiguous key
//! range in every tier.
//!
//! ```
//! use strata_cache::key_group::{key_group_of, KeyGroupRange};
//! let kg = key_group_of(b"LAS-PHL", 128);
//! let owner = KeyGroupRange::operator_for(kg, 128, 2);
//! assert!(KeyGroupRange::for_operator(128, 2, owner).contains(kg));
//! ```

use std::ops::RangeInclusive;

/// Largest allowed `max_parallelism` (key groups are stored as `u16`).
pub const MAX_KEY_GROUPS: u32 = 1 << 15;

/// The `max_parallelism` of a store (and of the runtime's jobs) unless
/// configured: 128 key groups, Flink's default for small parallelism.
pub const DEFAULT_MAX_PARALLELISM: u32 = 128;

/// The key group of `key`: a stable hash (XXH3, independent of the Rust
/// version and platform) modulo `max_parallelism`.
///
/// `max_parallelism` must be in `1..=MAX_KEY_GROUPS`.
pub fn key_group_of(key: &[u8], max_parallelism: u32) -> u16 {
    key_group_of_hash(crate::hash::hash_key(key), max_parallelism)
}

/// The key group of a key whose [`crate::hash::hash_key`] is `hash` (the
/// runtime's source hashes each key once and routes by this).
pub fn key_group_of_hash(hash: u64, max_parallelism: u32) -> u16 {
    (hash % u64::from(max_parallelism.max(1))) as u16
}

/// A contiguous, inclusive range of key groups owned by one operator instance.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KeyGroupRange {
    /// First key group of the range.
    pub start: u16,
    /// Last key group of the range (inclusive).
    pub end: u16,
}

impl KeyGroupRange {
    /// The range of operator instance `index` out of `parallelism`, for
    /// `max_parallelism` key groups (Flink's formula, so ranges are as even
    /// as possible and never overlap).
    pub fn for_operator(max_parallelism: u32, parallelism: u32, index: u32) -> Self {
        let (max, par, i) = (
            u64::from(max_parallelism),
            u64::from(parallelism),
            u64::from(index),
        );
        let start = (i * max).div_ceil(par);
        let end = ((i + 1) * max - 1) / par;
        Self {
            start: start as u16,
            end: end as u16,
        }
    }

    /// The operator instance (out of `parallelism`) that owns `key_group`.
    pub fn operator_for(key_group: u16, max_parallelism: u32, parallelism: u32) -> u32 {
        (u64::from(key_group) * u64::from(parallelism) / u64::from(max_parallelism)) as u32
    }

    /// Whether `key_group` lies in this range.
    pub fn contains(&self, key_group: u16) -> bool {
        (self.start..=self.end).contains(&key_group)
    }

    /// The range as a Rust range.
    pub fn as_range(&self) -> RangeInclusive<u16> {
        self.start..=self.end
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn operator_ranges_partition_all_key_groups_without_overlap() {
        for par in 1..=7u32 {
            let mut next = 0u32;
            for i in 0..par {
                let r = KeyGroupRange::for_operator(128, par, i);
                assert_eq!(u32::from(r.start), next, "parallelism {par}, operator {i}");
                for kg in r.as_range() {
                    assert_eq!(KeyGroupRange::operator_for(kg, 128, par), i);
                }
                next = u32::from(r.end) + 1;
            }
            assert_eq!(next, 128);
        }
    }

    #[test]
    fn key_group_is_stable_and_in_range() {
        let kg = key_group_of(b"LAS-PHL", 128);
        assert_eq!(kg, key_group_of(b"LAS-PHL", 128));
        assert!(kg < 128);
    }
}
