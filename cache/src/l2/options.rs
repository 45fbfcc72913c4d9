//! RocksDB options of L2: the memory budget, the options every column
//! family shares (public so that a baseline can use the very same), and
//! those of list states — the per-key lists' merge operator and the chunk
//! log's blob files.

use crate::codec;
use crate::descriptor::{StateDescriptor, StateKind};
use crate::ttl::{Clock, TtlFilterFactory};
use rocksdb::{BlockBasedOptions, Options};
use std::sync::Arc;

/// One memory budget for RocksDB's block cache and memtables, shareable by
/// every store of a process (`state.l2.memory`).
///
/// Memtable memory is charged to the block cache through a write-buffer
/// manager, so the total stays within `bytes`.
#[derive(Clone)]
pub struct L2Budget {
    cache: rocksdb::Cache,
    write_buffers: rocksdb::WriteBufferManager,
    bytes: usize,
}

impl L2Budget {
    /// A budget of `bytes` (block cache plus memtables).
    pub fn new(bytes: usize) -> Self {
        let cache = rocksdb::Cache::new_lru_cache(bytes);
        let write_buffers = rocksdb::WriteBufferManager::new_write_buffer_manager_with_cache(
            bytes / 2,
            false,
            cache.clone(),
        );
        Self {
            cache,
            write_buffers,
            bytes,
        }
    }

    /// The budget in bytes.
    pub fn bytes(&self) -> usize {
        self.bytes
    }
}

impl std::fmt::Debug for L2Budget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("L2Budget")
            .field("bytes", &self.bytes)
            .finish()
    }
}

/// The column-family options of every L2 state, before its merge operator
/// and TTL filter (public so that a baseline can use the very same):
///
/// * block cache from the [`L2Budget`], index and filter blocks charged to
///   it (so the budget bounds them too) and L0's pinned (read on every get);
/// * a 10-bit bloom filter per key: a get of a key L2 lacks (every first
///   touch of a key, every L1 miss of a new key) costs no block read;
/// * no compression in levels 0 and 1, LZ4 below: fresh data is rewritten
///   soon by compaction, so compressing it costs CPU on every flush for
///   little, and state values are often incompressible (random payloads,
///   hashes); the bottom levels hold most of the bytes and compress what
///   compresses (RocksDB's tuning guide recommends the same split);
/// * memtables of at most 64 MiB each or the budget's write-buffer share
///   over 4, whichever is smaller, so that several states fit the budget.
pub fn l2_cf_options(budget: &L2Budget) -> Options {
    let mut table = BlockBasedOptions::default();
    table.set_block_cache(&budget.cache);
    table.set_bloom_filter(10.0, false);
    table.set_cache_index_and_filter_blocks(true);
    table.set_pin_l0_filter_and_index_blocks_in_cache(true);
    let mut opts = Options::default();
    opts.set_block_based_table_factory(&table);
    use rocksdb::DBCompressionType::{Lz4, None as Plain};
    opts.set_compression_per_level(&[Plain, Plain, Lz4, Lz4, Lz4, Lz4, Lz4]);
    opts.set_write_buffer_size((budget.bytes / 8).clamp(4 << 20, 64 << 20));
    opts
}

/// The database options of L2: memtables charged to the [`L2Budget`]'s
/// write-buffer manager; at most 2 background jobs per store (flushes
/// and compactions run in RocksDB's process-wide thread pools, which
/// grow to the largest such figure, so stores share them rather than
/// multiply them); 2 info logs kept; statistics on (without timers, the
/// cheap level) for the tiers' reports.
pub fn l2_db_options(budget: &L2Budget) -> Options {
    let mut db_opts = Options::default();
    db_opts.set_write_buffer_manager(&budget.write_buffers);
    db_opts.set_max_background_jobs(2);
    db_opts.set_keep_log_file_num(2);
    db_opts.enable_statistics();
    db_opts.set_statistics_level(rocksdb::statistics::StatsLevel::ExceptTimers);
    db_opts
}

/// The name of the column family that holds list state `state`'s chunk log.
pub(crate) fn chunk_cf_name(state: &str) -> String {
    format!("{state}.chunks")
}

/// Options of a state's per-key column family.
pub(crate) fn cf_options(desc: &StateDescriptor, budget: &L2Budget, clock: &Arc<Clock>) -> Options {
    let mut opts = l2_cf_options(budget);
    if desc.kind == StateKind::List {
        set_list_merge(&mut opts, desc.ttl.map(|ttl| (ttl, clock.clone())));
    }
    if let Some(ttl) = desc.ttl {
        opts.set_compaction_filter_factory(TtlFilterFactory {
            name: std::ffi::CString::new(format!("strata-ttl-{}", desc.name)).unwrap_or_default(),
            state: desc.name.clone(),
            ttl,
            is_list: desc.kind == StateKind::List,
            clock: clock.clone(),
        });
    }
    opts
}

/// Options to open a list state's column family outside a store (a
/// checkpoint opened read-only to inspect it, say): RocksDB's defaults and
/// strata's list merge operator, without TTL. A list value may be stored
/// as merge operands, which RocksDB refuses to read without it.
pub fn list_read_options() -> Options {
    let mut opts = Options::default();
    set_list_merge(&mut opts, None);
    opts
}

/// Sets strata's list merge operator ("strata-list-v2": operands appended
/// in order, a replacing operand dropping what came before, elements
/// older than the TTL's cutoff dropped).
fn set_list_merge(opts: &mut Options, ttl: Option<(crate::ttl::Ttl, Arc<Clock>)>) {
    let (full, partial) = (ttl.clone(), ttl);
    opts.set_merge_operator(
        "strata-list-v2",
        move |_key: &[u8], existing: Option<&[u8]>, ops: &rocksdb::MergeOperands| {
            Some(merge_lists(existing, ops.iter(), cutoff(&full), false))
        },
        move |_key: &[u8], _existing: Option<&[u8]>, ops: &rocksdb::MergeOperands| {
            Some(merge_lists(None, ops.iter(), cutoff(&partial), true))
        },
    );
}

/// Options of a list state's chunk log: chunks (tens to hundreds of KB
/// each) go to blob files when their memtable is flushed, so compactions
/// move only small blob references and a chunk's bytes are written once
/// (RocksDB's integrated BlobDB); a chunk is deleted whole when folded or
/// expired, and a blob file whose chunks are all deleted is deleted once
/// compactions dropped their references. Blob garbage collection (which
/// rewrites the live blobs of old files) is off: chunks expire and are
/// folded by key group, so whole files fall out, and rewriting them would
/// be write amplification bought for space.
pub(crate) fn chunk_cf_options(budget: &L2Budget) -> Options {
    let mut opts = l2_cf_options(budget);
    opts.set_enable_blob_files(true);
    opts.set_min_blob_size(4096);
    opts.set_blob_file_size(32 << 20);
    opts.set_enable_blob_gc(false);
    opts
}

/// The expiry cutoff now of a TTL measured against `clock`.
fn cutoff(ttl: &Option<(crate::ttl::Ttl, Arc<Clock>)>) -> Option<i64> {
    let (ttl, clock) = ttl.as_ref()?;
    let now = clock.now(ttl.domain);
    (now != i64::MIN).then(|| now.saturating_sub(ttl.millis))
}

/// The merge of list operands (see [`crate::codec`]): what comes before the
/// last replacing operand is dropped; the rest is concatenated. With a
/// cutoff, the elements written at or before it are left out (so lists
/// written only by appends — whose operands the compaction filter never
/// sees — are trimmed whenever RocksDB merges them). A full merge gives a
/// value; a partial merge an operand, replacing if any of its operands
/// was. A part that does not parse is kept whole: trimming never loses
/// data it does not understand.
pub(crate) fn merge_lists<'a>(
    existing: Option<&'a [u8]>,
    ops: impl Iterator<Item = &'a [u8]>,
    cutoff: Option<i64>,
    partial: bool,
) -> Vec<u8> {
    let ops: Vec<&[u8]> = ops.collect();
    let last_replace = ops.iter().rposition(|op| codec::replacing(op).is_some());
    let (base, rest) = match last_replace {
        Some(i) => (codec::replacing(ops[i]), &ops[i + 1..]),
        None => (existing, &ops[..]),
    };
    let mut out = Vec::with_capacity(
        base.map_or(0, <[u8]>::len) + rest.iter().map(|o| o.len()).sum::<usize>() + 12,
    );
    if partial && last_replace.is_some() {
        out.extend_from_slice(&codec::list_replace_marker());
    }
    let start = out.len();
    let parts = base.into_iter().chain(rest.iter().copied());
    if let Some(cutoff) = cutoff {
        if codec::trim_list_into(&mut out, base, parts.clone(), cutoff) {
            return out;
        }
        out.truncate(start);
    }
    parts.for_each(|p| out.extend_from_slice(p));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn replacing(l: &[u8]) -> Vec<u8> {
        [&codec::list_replace_marker()[..], l].concat()
    }

    #[test]
    fn a_replacing_operand_drops_what_came_before_it() {
        let (a, b, c) = (
            codec::list_of(&[(1, b"a")]),
            codec::list_of(&[(2, b"b")]),
            codec::list_of(&[(3, b"c")]),
        );
        let r = replacing(&b);
        let full = merge_lists(Some(&a), [&r[..], &c[..]].into_iter(), None, false);
        assert_eq!(full, [b.clone(), c.clone()].concat());
        let partial = merge_lists(None, [&a[..], &r[..], &c[..]].into_iter(), None, true);
        assert_eq!(partial, replacing(&[b.clone(), c.clone()].concat()));
        // The partial result merged onto an older value still replaces it.
        let again = merge_lists(Some(&a), [&partial[..]].into_iter(), None, false);
        assert_eq!(again, [b, c].concat());
        let appends = merge_lists(None, [&a[..], &a[..]].into_iter(), None, true);
        assert_eq!(appends, [a.clone(), a].concat());
    }

    #[test]
    fn merging_trims_expired_elements_but_keeps_the_base_marker() {
        let mut complete = codec::list_base_marker().to_vec();
        complete.extend_from_slice(&codec::list_of(&[(1, b"old"), (9, b"new")]));
        let appended = codec::list_of(&[(2, b"x"), (10, b"y")]);
        let merged = merge_lists(Some(&complete), [&appended[..]].into_iter(), Some(5), false);
        let mut want = codec::list_base_marker().to_vec();
        want.extend_from_slice(&codec::list_of(&[(9, b"new"), (10, b"y")]));
        assert_eq!(merged, want);
    }
}
