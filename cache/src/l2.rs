//! L2: the embedded RocksDB tier.
//!
//! One RocksDB instance per store (per operator instance), one column family
//! per declared state. List states get a concatenating merge operator, so
//! `ListState::add` is a blind write; states with a TTL get a compaction
//! filter. The WAL is off: durability comes from checkpoints, never from the
//! live directory. Block cache and memtables draw on one [`L2Budget`].

use crate::codec;
use crate::error::{Result, StateError};
use crate::state::{StateDescriptor, StateKind};
use crate::ttl::{Clock, TtlFilterFactory};
use rocksdb::{BlockBasedOptions, ColumnFamilyDescriptor, Options, DB};
use std::path::Path;
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

/// The merge operator of list states: concatenation (`ListState::add`
/// never reads the list). With a TTL it also leaves out the elements that
/// have expired by now, so lists written only by blind appends — whose
/// merge operands the compaction filter never sees — are trimmed whenever
/// RocksDB merges them (in compactions and reads). A value it cannot parse
/// is kept whole: trimming never loses data it does not understand.
fn list_merge(
    ttl: Option<(crate::ttl::Ttl, Arc<Clock>)>,
) -> impl Fn(&[u8], Option<&[u8]>, &rocksdb::MergeOperands) -> Option<Vec<u8>>
       + Clone
       + Send
       + Sync
       + 'static {
    move |_key, existing, operands| {
        let parts = || existing.into_iter().chain(operands.iter());
        let len = parts().map(<[u8]>::len).sum::<usize>();
        let cutoff = ttl.as_ref().and_then(|(ttl, clock)| {
            let now = clock.now(ttl.domain);
            (now != i64::MIN).then(|| now.saturating_sub(ttl.millis))
        });
        let mut out = Vec::with_capacity(len);
        match cutoff {
            Some(cutoff) if trim_into(&mut out, existing, parts(), cutoff) => {}
            _ => {
                out.clear();
                parts().for_each(|p| out.extend_from_slice(p));
            }
        }
        Some(out)
    }
}

/// Writes the elements of `parts` written after `cutoff` into `out` (with
/// the base marker if `existing` has one); false if a part does not parse.
fn trim_into<'a>(
    out: &mut Vec<u8>,
    existing: Option<&[u8]>,
    parts: impl Iterator<Item = &'a [u8]>,
    cutoff: i64,
) -> bool {
    if existing.is_some_and(codec::is_complete_list) {
        out.extend_from_slice(&codec::list_base_marker());
    }
    for part in parts {
        for element in codec::list_elements("", part) {
            let Ok((ts, body)) = element else {
                return false;
            };
            if ts > cutoff {
                codec::put_list_element(out, ts, body);
            }
        }
    }
    true
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
/// multiply them); 2 info logs kept.
pub fn l2_db_options(budget: &L2Budget) -> Options {
    let mut db_opts = Options::default();
    db_opts.set_write_buffer_manager(&budget.write_buffers);
    db_opts.set_max_background_jobs(2);
    db_opts.set_keep_log_file_num(2);
    db_opts
}

fn cf_options(desc: &StateDescriptor, budget: &L2Budget, clock: &Arc<Clock>) -> Options {
    let mut opts = l2_cf_options(budget);
    if desc.kind == StateKind::List {
        let ttl = desc.ttl.map(|ttl| (ttl, clock.clone()));
        opts.set_merge_operator_associative("strata-list-concat", list_merge(ttl));
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

/// Opens (or creates) the RocksDB instance at `path` with a column family
/// per declared state. Column families found on disk but not declared are
/// opened too (with default options) so that a restored store never drops
/// state silently.
pub(crate) fn open(
    path: &Path,
    states: &[StateDescriptor],
    budget: &L2Budget,
    clock: &Arc<Clock>,
) -> Result<DB> {
    let mut db_opts = l2_db_options(budget);
    db_opts.create_if_missing(true);
    db_opts.create_missing_column_families(true);
    let mut cfs: Vec<ColumnFamilyDescriptor> = states
        .iter()
        .map(|s| ColumnFamilyDescriptor::new(&s.name, cf_options(s, budget, clock)))
        .collect();
    let existing = DB::list_cf(&db_opts, path).unwrap_or_default();
    for name in existing {
        if name != "default" && !states.iter().any(|s| s.name == name) {
            return Err(StateError::Config(format!(
                "the restored state has a state '{name}' that this job does not declare"
            )));
        }
    }
    cfs.push(ColumnFamilyDescriptor::new("default", Options::default()));
    DB::open_cf_descriptors(&db_opts, path, cfs).map_err(|e| {
        if e.to_string().contains("LOCK") {
            StateError::InUse(path.to_owned())
        } else {
            StateError::L2(e)
        }
    })
}

/// Bytes RocksDB holds for column family `name`: live SST files plus memtables.
pub(crate) fn bytes_of(db: &DB, name: &str) -> u64 {
    let Some(cf) = db.cf_handle(name) else {
        return 0;
    };
    let prop = |p: &str| db.property_int_value_cf(&cf, p).ok().flatten().unwrap_or(0);
    prop("rocksdb.live-sst-files-size") + prop("rocksdb.cur-size-all-mem-tables")
}
