//! Access bits of L2 keys, for cold eviction's CLOCK (second chance): an
//! L2 read or append of a key sets its bit; the eviction hand clears it
//! and spares the key once (see `crate::eviction`).

use std::sync::atomic::{AtomicU64, Ordering};

/// Access bits, one per bucket of L1 hashes (a collision only makes a key
/// look used: it stays in L2 a round longer).
const BITS: usize = 1 << 20;

/// See the module docs. Without cold eviction there are no bits and
/// touching costs nothing.
pub(crate) struct AccessBits {
    words: Vec<AtomicU64>,
}

impl AccessBits {
    /// Bits for a store with cold eviction, or none.
    pub(crate) fn new(enabled: bool) -> Self {
        let words = if enabled { BITS / 64 } else { 0 };
        Self {
            words: (0..words).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    fn bit(&self, hash: u64) -> Option<(&AtomicU64, u64)> {
        if self.words.is_empty() {
            return None;
        }
        let h = hash as usize % BITS;
        Some((&self.words[h / 64], 1 << (h % 64)))
    }

    /// Marks the key of L1 hash `hash` as used.
    pub(crate) fn touch(&self, hash: u64) {
        if let Some((word, mask)) = self.bit(hash) {
            word.fetch_or(mask, Ordering::Relaxed);
        }
    }

    /// Whether the key was used since the hand last passed; clears the bit.
    pub(crate) fn second_chance(&self, hash: u64) -> bool {
        self.bit(hash)
            .is_some_and(|(word, mask)| word.fetch_and(!mask, Ordering::Relaxed) & mask != 0)
    }
}
