//! Key hashes, computed once per record key, and the L1 key that carries
//! its hash.
//!
//! A record key's hash is `xxh3_64(key)` ([`hash_key`]); its key group is
//! that hash modulo the number of key groups
//! ([`crate::key_group::key_group_of`]). The strata runtime's source
//! computes it once and it travels with the record; a state access of the
//! record's own key reuses it ([`crate::StateStore::set_current_key`]).
//!
//! Every structure of the tiers — moka, the front index, the compact
//! tables, the L2 write batches and the access bits of cold eviction — is
//! indexed by the *L1 hash*: the record hash mixed with the state id (and,
//! for a map entry, the hash of its user key). It is carried in the first
//! eight bytes of the L1 key itself, and the hashers of those structures
//! pass it through (`PassThrough`), so none of them hashes key bytes.

use std::borrow::Borrow;
use std::hash::{BuildHasher, Hash, Hasher};
use std::sync::Arc;

/// The hash of a record key: XXH3-64, stable across Rust versions and
/// platforms (key groups are stored with the state).
pub fn hash_key(key: &[u8]) -> u64 {
    xxhash_rust::xxh3::xxh3_64(key)
}

/// The final mix of MurmurHash3 (`fmix64`): every input bit reaches every
/// output bit.
fn fmix(mut h: u64) -> u64 {
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^ (h >> 33)
}

/// The L1 hash of state `state`'s entry for a record key of hash
/// `record_hash` (and map user key `suffix`, empty for values and lists).
pub(crate) fn l1_hash(record_hash: u64, state: u16, suffix: &[u8]) -> u64 {
    let mut h = record_hash ^ (u64::from(state) + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    if !suffix.is_empty() {
        h ^= hash_key(suffix).rotate_left(29);
    }
    fmix(h)
}

/// Bytes of the L1 key before the stored key: the hash and the state id.
pub(crate) const L1_HEADER: usize = 10;

/// An L1 key as bytes: `[L1 hash: u64 LE][state id: u16 BE][stored key]`.
/// Hashing it writes the carried hash only.
#[repr(transparent)]
#[derive(PartialEq, Eq)]
pub(crate) struct KeyBytes([u8]);

impl KeyBytes {
    /// Views `bytes` (at least [`L1_HEADER`] long, as [`put_l1_key`]
    /// writes them) as an L1 key.
    pub(crate) fn new(bytes: &[u8]) -> &KeyBytes {
        debug_assert!(bytes.len() >= L1_HEADER);
        // SAFETY: `KeyBytes` is a `repr(transparent)` wrapper of `[u8]`,
        // so the two references have the same layout and metadata.
        unsafe { &*(bytes as *const [u8] as *const KeyBytes) }
    }

    /// The carried L1 hash.
    pub(crate) fn hash(&self) -> u64 {
        let mut h = [0; 8];
        h.copy_from_slice(&self.0[..8]);
        u64::from_le_bytes(h)
    }

    /// The state id.
    pub(crate) fn state(&self) -> u16 {
        u16::from_be_bytes([self.0[8], self.0[9]])
    }

    /// The stored key (`[key group][key length][key][map user key]`).
    pub(crate) fn stored(&self) -> &[u8] {
        &self.0[L1_HEADER..]
    }

    /// The key group (the stored key's first two bytes).
    pub(crate) fn key_group(&self) -> u16 {
        u16::from_be_bytes([self.0[L1_HEADER], self.0[L1_HEADER + 1]])
    }

    /// All bytes.
    pub(crate) fn bytes(&self) -> &[u8] {
        &self.0
    }
}

impl Hash for KeyBytes {
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write_u64(self.hash());
    }
}

/// Writes the L1 key of (`state`, `key_group`, `key`, `suffix`) with L1
/// hash `hash` into `out` (cleared first).
pub(crate) fn put_l1_key(
    out: &mut Vec<u8>,
    hash: u64,
    state: u16,
    key_group: u16,
    key: &[u8],
    suffix: &[u8],
) {
    out.clear();
    out.extend_from_slice(&hash.to_le_bytes());
    out.extend_from_slice(&state.to_be_bytes());
    crate::codec::put_stored_key(out, key_group, key);
    out.extend_from_slice(suffix);
}

/// An owned L1 key (moka's key type): shared bytes as [`KeyBytes`].
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct L1Key(Arc<[u8]>);

impl L1Key {
    /// An owned copy of `key`.
    pub(crate) fn from_bytes(key: &KeyBytes) -> Self {
        Self(key.bytes().into())
    }
}

impl std::ops::Deref for L1Key {
    type Target = KeyBytes;
    fn deref(&self) -> &KeyBytes {
        KeyBytes::new(&self.0)
    }
}

impl Borrow<KeyBytes> for L1Key {
    fn borrow(&self) -> &KeyBytes {
        self
    }
}

impl Hash for L1Key {
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write_u64(KeyBytes::hash(self));
    }
}

impl PartialOrd for L1Key {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for L1Key {
    /// State, then stored key (the order of L2).
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0[8..].cmp(&other.0[8..])
    }
}

/// A hasher that passes a written `u64` through (the carried L1 hash);
/// other input — never written by this crate's keys — is hashed with XXH3.
#[derive(Default)]
pub(crate) struct PassThroughHasher(u64);

impl Hasher for PassThroughHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        self.0 = xxhash_rust::xxh3::xxh3_64_with_seed(bytes, self.0);
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

/// The [`BuildHasher`] of every map keyed by L1 keys or L1 hashes.
#[derive(Default, Clone, Copy)]
pub(crate) struct PassThrough;

impl BuildHasher for PassThrough {
    type Hasher = PassThroughHasher;
    fn build_hasher(&self) -> PassThroughHasher {
        PassThroughHasher::default()
    }
}

/// A hash map keyed by L1 keys.
pub(crate) type L1Map<V> = std::collections::HashMap<L1Key, V, PassThrough>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_l1_key_carries_its_hash_and_parts() {
        let mut buf = Vec::new();
        let h = l1_hash(hash_key(b"LAS-PHL"), 3, b"");
        put_l1_key(&mut buf, h, 3, 17, b"LAS-PHL", b"x");
        let k = KeyBytes::new(&buf);
        assert_eq!((k.hash(), k.state(), k.key_group()), (h, 3, 17));
        assert_eq!(
            crate::codec::split_stored_key(k.stored()),
            Some((17, &b"LAS-PHL"[..], &b"x"[..]))
        );
        let owned = L1Key::from_bytes(k);
        assert_eq!(PassThrough.hash_one(&owned), h);
    }

    #[test]
    fn states_and_map_keys_get_different_hashes() {
        let r = hash_key(b"user");
        assert_ne!(l1_hash(r, 0, b""), l1_hash(r, 1, b""));
        assert_ne!(l1_hash(r, 0, b"a"), l1_hash(r, 0, b"b"));
        assert_eq!(l1_hash(r, 2, b"a"), l1_hash(r, 2, b"a"));
    }
}
