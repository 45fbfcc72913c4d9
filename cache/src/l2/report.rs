//! What RocksDB did for a store: bytes written per byte the store handed
//! it (write amplification), compaction CPU, stalls and the files per
//! level, from RocksDB's statistics and per-column-family stats.

use super::options::chunk_cf_name;
use super::L2;
use crate::descriptor::StateKind;
use rocksdb::statistics::Ticker;
use serde::{Deserialize, Serialize};
use std::sync::atomic::Ordering;

/// RocksDB's figures of one store since it was opened.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct L2Report {
    /// Bytes the store handed to RocksDB (list elements, values and map
    /// entries, encoded; the user's bytes).
    pub user_bytes: u64,
    /// Bytes of SST files written by memtable flushes.
    pub flush_bytes: u64,
    /// Bytes of SST files written by compactions.
    pub compaction_bytes: u64,
    /// Bytes of blob files written (the chunk log's payloads).
    pub blob_bytes: u64,
    /// CPU time compactions took, in seconds.
    pub compaction_cpu_s: f64,
    /// Time writes were stalled by RocksDB (too many memtables or L0
    /// files), in seconds.
    pub stall_s: f64,
    /// Per state.
    pub states: Vec<StateL2Report>,
}

/// RocksDB's figures of one state (its column families).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StateL2Report {
    /// The state's name.
    pub name: String,
    /// Bytes the store handed to RocksDB for it.
    pub user_bytes: u64,
    /// Bytes RocksDB wrote for it: flushes, compactions and blob files, in
    /// MB-precision (RocksDB's per-column-family stats).
    pub written_bytes: u64,
    /// Live SST bytes per level, L0 first.
    pub sst_bytes_per_level: Vec<u64>,
    /// Live blob file bytes.
    pub blob_bytes: u64,
}

impl L2Report {
    /// Bytes written to disk per byte handed to RocksDB (0 without writes).
    pub fn write_amplification(&self) -> f64 {
        ratio(
            self.flush_bytes + self.compaction_bytes + self.blob_bytes,
            self.user_bytes,
        )
    }

    /// Adds another store's figures (states matched by name).
    pub fn merge(&mut self, o: &L2Report) {
        crate::stats::add_fields!(
            self,
            o,
            user_bytes,
            flush_bytes,
            compaction_bytes,
            blob_bytes,
            compaction_cpu_s,
            stall_s,
        );
        for s in &o.states {
            match self.states.iter_mut().find(|m| m.name == s.name) {
                Some(m) => m.merge(s),
                None => self.states.push(s.clone()),
            }
        }
    }
}

impl StateL2Report {
    /// Bytes written per byte handed over, for this state.
    pub fn write_amplification(&self) -> f64 {
        ratio(self.written_bytes, self.user_bytes)
    }

    fn merge(&mut self, o: &StateL2Report) {
        crate::stats::add_fields!(self, o, user_bytes, written_bytes, blob_bytes);
        for (i, b) in o.sst_bytes_per_level.iter().enumerate() {
            match self.sst_bytes_per_level.get_mut(i) {
                Some(m) => *m += b,
                None => self.sst_bytes_per_level.push(*b),
            }
        }
    }
}

fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 {
        0.0
    } else {
        a as f64 / b as f64
    }
}

/// One state as [`L2Report::of_rocksdb`] measures it: its name, its
/// column families and the bytes handed to RocksDB for it.
pub struct StateColumns<'a> {
    /// The state's name.
    pub name: &'a str,
    /// Its column families.
    pub column_families: Vec<String>,
    /// Bytes handed to RocksDB for it.
    pub user_bytes: u64,
}

impl L2Report {
    /// The report of a RocksDB instance opened with `db_opts` (statistics
    /// enabled, as [`crate::l2_db_options`] does), for the given states —
    /// strata's L2, or a baseline measured the same way.
    pub fn of_rocksdb(
        db: &rocksdb::DB,
        db_opts: &rocksdb::Options,
        states: &[StateColumns<'_>],
    ) -> Self {
        let t = |ticker| db_opts.get_ticker_count(ticker);
        let files = db.live_files().unwrap_or_default();
        let states = states
            .iter()
            .map(|s| {
                let mut levels = Vec::new();
                for f in files
                    .iter()
                    .filter(|f| s.column_families.contains(&f.column_family_name))
                {
                    let level = f.level.max(0) as usize;
                    if levels.len() <= level {
                        levels.resize(level + 1, 0);
                    }
                    levels[level] += f.size as u64;
                }
                let (written, blob) = s.column_families.iter().fold((0, 0), |(w, b), n| {
                    let (w2, b2) = cf_written(db, n);
                    (w + w2, b + b2)
                });
                StateL2Report {
                    name: s.name.to_owned(),
                    user_bytes: s.user_bytes,
                    written_bytes: written,
                    sst_bytes_per_level: levels,
                    blob_bytes: blob,
                }
            })
            .collect::<Vec<_>>();
        L2Report {
            user_bytes: states.iter().map(|s| s.user_bytes).sum(),
            flush_bytes: t(Ticker::FlushWriteBytes),
            compaction_bytes: t(Ticker::CompactWriteBytes),
            blob_bytes: t(Ticker::BlobDbBlobFileBytesWritten),
            compaction_cpu_s: t(Ticker::CompactionCpuTotalTime) as f64 / 1e6,
            stall_s: t(Ticker::StallMicros) as f64 / 1e6,
            states,
        }
    }
}

impl L2 {
    /// The report of this store (see [`L2Report`]).
    pub(crate) fn report(&self, db_opts: &rocksdb::Options) -> L2Report {
        let states: Vec<StateColumns<'_>> = self
            .states
            .iter()
            .enumerate()
            .map(|(i, s)| {
                let mut column_families = vec![s.name.clone()];
                if s.kind == StateKind::List {
                    column_families.push(chunk_cf_name(&s.name));
                }
                StateColumns {
                    name: &s.name,
                    column_families,
                    user_bytes: self.user_bytes[i].load(Ordering::Relaxed),
                }
            })
            .collect();
        L2Report::of_rocksdb(&self.db, db_opts, &states)
    }
}

/// Bytes RocksDB wrote for column family `name` (flushes, compactions
/// and blob files), and its live blob bytes, from its stats text.
fn cf_written(db: &rocksdb::DB, name: &str) -> (u64, u64) {
    let Some(cf) = db.cf_handle(name) else {
        return (0, 0);
    };
    let text = db
        .property_value_cf(&cf, "rocksdb.cfstats")
        .ok()
        .flatten()
        .unwrap_or_default();
    let live_blob = db
        .property_int_value_cf(&cf, "rocksdb.live-blob-file-size")
        .ok()
        .flatten()
        .unwrap_or(0);
    (parse_written(&text), live_blob)
}

/// The bytes written in a `rocksdb.cfstats` text: the "Sum" row's
/// `Write(GB)` (flushes and compactions) plus its `Wblob(GB)`.
fn parse_written(text: &str) -> u64 {
    let header: Vec<&str> = text
        .lines()
        .find(|l| l.trim_start().starts_with("Level") && l.contains("Write(GB)"))
        .map(|l| l.split_whitespace().collect())
        .unwrap_or_default();
    let Some(sum) = text
        .lines()
        .find(|l| l.trim_start().starts_with("Sum"))
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
    else {
        return 0;
    };
    let column = |name: &str| {
        header
            .iter()
            .position(|h| *h == name)
            // "Files" is printed as "n/m" and "Size" as "x MB": one more field.
            .and_then(|i| sum.get(i + 1))
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    ((column("Write(GB)") + column("Wblob(GB)")) * 1e9) as u64
}
