//! Per-tier counters of a store and their snapshot, [`TierStats`].

use std::sync::atomic::{AtomicU64, Ordering};

/// Per-tier counters of one store, all counts since the store was opened.
#[derive(Debug, Default)]
pub(crate) struct TierCounters {
    pub(crate) l1_hits: AtomicU64,
    pub(crate) l1_misses: AtomicU64,
    pub(crate) l2_hits: AtomicU64,
    pub(crate) l2_misses: AtomicU64,
    pub(crate) l3_hits: AtomicU64,
    pub(crate) l3_misses: AtomicU64,
    pub(crate) l1_spills: AtomicU64,
    pub(crate) lower_wait_ns: AtomicU64,
    pub(crate) l3_evictions: AtomicU64,
    pub(crate) l3_evicted_bytes: AtomicU64,
}

impl TierCounters {
    /// Adds one to the hit or the miss counter of a tier.
    pub(crate) fn count(hit: bool, hits: &AtomicU64, misses: &AtomicU64) {
        let c = if hit { hits } else { misses };
        c.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn add(c: &AtomicU64, n: u64) {
        c.fetch_add(n, Ordering::Relaxed);
    }
}

/// A snapshot of a store's tier statistics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct TierStats {
    /// Reads answered by L1.
    pub l1_hits: u64,
    /// Reads L1 could not answer.
    pub l1_misses: u64,
    /// L1 misses answered by L2. A list read that finds only appends of
    /// the write batch still filling (a first-seen key's first records,
    /// never in L1 or L2 before) is a miss.
    pub l2_hits: u64,
    /// L1 misses L2 could not answer either.
    pub l2_misses: u64,
    /// L2 misses answered by L3.
    pub l3_hits: u64,
    /// L2 misses L3 could not answer (or no L3).
    pub l3_misses: u64,
    /// Dirty entries L1 evicted and wrote to L2.
    pub l1_spills: u64,
    /// Time spent waiting on L2 and L3 reads after L1 misses, in milliseconds.
    pub lower_wait_ms: u64,
    /// Entries written to L3 and then deleted from L2 (cold eviction).
    pub l3_evictions: u64,
    /// Bytes of those entries (encoded, before L3's own compression).
    pub l3_evicted_bytes: u64,
    /// Bytes L1 holds (by the weigher, the compact tables included).
    pub l1_bytes: u64,
    /// Bytes L2 holds (live SST and blob files plus memtables).
    pub l2_bytes: u64,
}

/// Adds the named fields of `$o` to those of `$s` (the merges of figures
/// gathered per store into a process-wide total).
macro_rules! add_fields {
    ($s:expr, $o:expr, $($f:ident),+ $(,)?) => {
        $($s.$f += $o.$f;)+
    };
}
pub(crate) use add_fields;

impl TierStats {
    pub(crate) fn from_counters(c: &TierCounters) -> Self {
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        Self {
            l1_hits: get(&c.l1_hits),
            l1_misses: get(&c.l1_misses),
            l2_hits: get(&c.l2_hits),
            l2_misses: get(&c.l2_misses),
            l3_hits: get(&c.l3_hits),
            l3_misses: get(&c.l3_misses),
            l1_spills: get(&c.l1_spills),
            lower_wait_ms: get(&c.lower_wait_ns) / 1_000_000,
            l3_evictions: get(&c.l3_evictions),
            l3_evicted_bytes: get(&c.l3_evicted_bytes),
            l1_bytes: 0,
            l2_bytes: 0,
        }
    }

    /// Adds another store's figures (for a process-wide total).
    pub fn merge(&mut self, o: &TierStats) {
        add_fields!(
            self,
            o,
            l1_hits,
            l1_misses,
            l2_hits,
            l2_misses,
            l3_hits,
            l3_misses,
            l1_spills,
            lower_wait_ms,
            l3_evictions,
            l3_evicted_bytes,
            l1_bytes,
            l2_bytes,
        );
    }

    /// Fraction of reads answered by L1 (0 when there were none).
    pub fn l1_hit_ratio(&self) -> f64 {
        ratio(self.l1_hits, self.l1_misses)
    }

    /// Fraction of L1 misses answered by L2 (0 when there were none).
    pub fn l2_hit_ratio(&self) -> f64 {
        ratio(self.l2_hits, self.l2_misses)
    }

    /// Fraction of L2 misses answered by L3 (0 when there were none).
    pub fn l3_hit_ratio(&self) -> f64 {
        ratio(self.l3_hits, self.l3_misses)
    }
}

fn ratio(hits: u64, misses: u64) -> f64 {
    if hits + misses == 0 {
        0.0
    } else {
        hits as f64 / (hits + misses) as f64
    }
}
