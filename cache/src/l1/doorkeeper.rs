//! Admission to moka for entries met on an L1 miss: TinyLFU's
//! *doorkeeper* (Einziger, Friedman and Manes, "TinyLFU: A Highly
//! Efficient Cache Admission Policy", 2017).
//!
//! A value read from L2 for a read-modify-write is admitted to moka only
//! if its key missed L1 once before, recently: a key touched once (most
//! keys of a uniform stream far larger than L1) has its new value written
//! straight to the store's write batch instead, which spares moka an
//! insertion, an eviction and a second encoding of the value, and keeps L1
//! for keys used again. The bits are one hashed bit per key, cleared once
//! as many keys were let through as the filter has bytes (so at most one
//! bit in eight is set and a false "seen" stays rare). While moka still
//! has room everything is admitted.

/// See the module docs.
pub(crate) struct Doorkeeper {
    words: Vec<u64>,
    /// Keys marked since the bits were last cleared.
    marked: usize,
}

impl Doorkeeper {
    /// A doorkeeper for an L1 of `capacity` bytes: a bit per 64 bytes of
    /// L1 (several bits per entry moka can hold), between 64 Kib and 16 Mib.
    pub(crate) fn for_capacity(capacity: u64) -> Self {
        let bits = (capacity / 64).clamp(1 << 16, 1 << 24).next_power_of_two();
        Self {
            words: vec![0; (bits / 64) as usize],
            marked: 0,
        }
    }

    /// Whether a key of L1 hash `hash` missed L1 since the bits were last
    /// cleared; marks it if not.
    pub(crate) fn seen_before(&mut self, hash: u64) -> bool {
        let bits = self.words.len() * 64;
        // The top bits: moka and the front index use the low ones.
        let h = (hash >> 32) as usize % bits;
        let (word, mask) = (h / 64, 1u64 << (h % 64));
        if self.words[word] & mask != 0 {
            return true;
        }
        self.words[word] |= mask;
        self.marked += 1;
        if self.marked >= bits / 8 {
            self.words.iter_mut().for_each(|w| *w = 0);
            self.marked = 0;
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_passes_on_its_second_miss_and_is_forgotten_after_a_reset() {
        let mut d = Doorkeeper::for_capacity(0);
        let key = 0xdead_beef_0000_0001u64;
        assert!(!d.seen_before(key));
        assert!(d.seen_before(key));
        // Other keys (each its own bit) until the bits are cleared: one
        // bit in eight is set then.
        for i in 0..(1u64 << 16) / 8 - 1 {
            assert!(!d.seen_before(i << 32));
        }
        assert!(!d.seen_before(key));
    }
}
