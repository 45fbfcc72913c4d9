//! L2: the embedded RocksDB tier.
//!
//! One RocksDB instance per store (per operator instance), one column family
//! per declared state. List states get a concatenating merge operator, so
//! `ListState::add` is a blind write; states with a TTL get a compaction
//! filter. The WAL is off: durability comes from checkpoints, never from the
//! live directory. Block cache and memtables draw on one [`L2Budget`].

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

fn concat_merge(
    _key: &[u8],
    existing: Option<&[u8]>,
    operands: &rocksdb::MergeOperands,
) -> Option<Vec<u8>> {
    let len = existing.map_or(0, <[u8]>::len) + operands.iter().map(<[u8]>::len).sum::<usize>();
    let mut out = Vec::with_capacity(len);
    out.extend_from_slice(existing.unwrap_or_default());
    for op in operands {
        out.extend_from_slice(op);
    }
    Some(out)
}

fn cf_options(desc: &StateDescriptor, budget: &L2Budget, clock: &Arc<Clock>) -> Options {
    let mut table = BlockBasedOptions::default();
    table.set_block_cache(&budget.cache);
    table.set_bloom_filter(10.0, false);
    table.set_cache_index_and_filter_blocks(true);
    table.set_pin_l0_filter_and_index_blocks_in_cache(true);
    let mut opts = Options::default();
    opts.set_block_based_table_factory(&table);
    opts.set_compression_type(rocksdb::DBCompressionType::Lz4);
    if desc.kind == StateKind::List {
        opts.set_merge_operator_associative("strata-list-concat", concat_merge);
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
    let mut db_opts = Options::default();
    db_opts.create_if_missing(true);
    db_opts.create_missing_column_families(true);
    db_opts.set_write_buffer_manager(&budget.write_buffers);
    db_opts.set_max_background_jobs(2);
    db_opts.set_keep_log_file_num(2);
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
    Ok(DB::open_cf_descriptors(&db_opts, path, cfs)?)
}

/// Bytes RocksDB holds for column family `name`: live SST files plus memtables.
pub(crate) fn bytes_of(db: &DB, name: &str) -> u64 {
    let Some(cf) = db.cf_handle(name) else {
        return 0;
    };
    let prop = |p: &str| db.property_int_value_cf(&cf, p).ok().flatten().unwrap_or(0);
    prop("rocksdb.live-sst-files-size") + prop("rocksdb.cur-size-all-mem-tables")
}
