//! Checkpoints: storage layout, metadata, and the coordinator.
//!
//! ## Protocol (asynchronous barrier snapshots)
//! Every `checkpoint.interval`, the coordinator asks the source to start
//! checkpoint N. The source records its position and emits barrier N on all
//! its edges. A keyed operator, once barrier N has arrived on all its inputs,
//! flushes L1's dirty entries to L2, takes a RocksDB checkpoint (hard
//! links), forwards the barrier at once, and moves the new SST files to
//! storage off the processing path. A sink closes its part file as pending.
//! Each task acknowledges with its `TaskSnapshot`. When all have, the
//! coordinator writes `chk-N/_metadata` atomically (temporary file, fsync,
//! rename) — only then does checkpoint N exist — and publishes "N completed"
//! on a watch channel, so a task that misses a notice sees the later one,
//! which subsumes it. Sinks commit then. At most one checkpoint is in flight.
//!
//! ## Layout of a checkpoint directory
//! ```text
//! <dir>/chk-<N>/_metadata        JSON CheckpointMetadata (present = completed)
//! <dir>/chk-<N>/op-<i>/...       private RocksDB files of operator instance i
//! <dir>/shared/<run>-<n>.sst     SST files, shared by successive checkpoints
//! <dir>/_work/                   live RocksDB directories (never restored from)
//! ```
//! A consumer group keeps each shard's checkpoints in a directory of this
//! layout of its own, `<dir>/p-<partition>` (`shard_location`).
//! Retention keeps the last `checkpoint.retained` completed checkpoints and
//! deletes the files only dropped ones used ([`storage`]).
//!
//! ## Failures
//! A checkpoint fails when a task declines it (a background upload failed),
//! when its metadata cannot be written, or when it is not complete
//! `checkpoint.timeout` after its trigger (`coordinator`). Its directory is
//! removed and the next one is triggered at the next interval; after more
//! than `checkpoint.tolerable-failures` failures in a row the job fails with
//! the last one's cause (which checkpoint, which task, which file, which OS
//! error). A step whose failure leaves a task's own state uncertain (L1
//! flush, RocksDB checkpoint, a sink's pre-commit) fails the job at once.
//!
//! ## Format
//! `_metadata` is JSON with a `format_version` ([`FORMAT_VERSION`]); a
//! restore refuses another version and any field it does not know, naming
//! them.

pub(crate) mod cold;
pub(crate) mod coordinator;
pub(crate) mod files;
pub mod remote;
pub mod storage;

pub use storage::CheckpointStorage;

/// `<dir>/<shard>`, the checkpoint location of a consumer group's shard
/// (`p-<partition>`), also under an `s3://` prefix.
pub(crate) fn shard_location(dir: &std::path::Path, shard: &str) -> std::path::PathBuf {
    let text = dir.to_string_lossy();
    std::path::PathBuf::from(format!("{}/{shard}", text.trim_end_matches('/')))
}

use crate::error::RuntimeError;
use serde::{Deserialize, Serialize};
use strata_cache::key_group::KeyGroupRange;
use strata_cache::snapshot::SnapshotManifest;
use strata_connectors::{InputIdentity, Position, SinkState};

/// The version of the `_metadata` format this strata writes and reads.
/// Version 2 added the version itself, the input identity, the L3 table and
/// composite route keys; version 1 (no `format_version` field) is refused.
pub const FORMAT_VERSION: u32 = 2;

/// The source's part of a checkpoint.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SourceSnapshot {
    /// Where to resume reading.
    pub position: Position,
    /// The dead-letter output's pending files.
    pub dead_letter: SinkState,
    /// Bad records routed to the dead-letter output so far.
    pub dead_letters: u64,
    /// The input as read so far: a restore refuses another file.
    pub input: InputIdentity,
    /// The newest record timestamp read (ms): lateness after a restore is
    /// judged as it would have been without the crash.
    pub max_timestamp: i64,
    /// A Kafka input: each partition's next offset and newest timestamp.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub partitions: Vec<PartitionSnapshot>,
    /// A generator input: its name (a restore refuses another generator;
    /// `position.records` is the index of the next record).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generator: Option<String>,
}

/// One Kafka partition's part of a source snapshot.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PartitionSnapshot {
    /// Topic.
    pub topic: String,
    /// Partition.
    pub partition: i32,
    /// The offset of the next message to read.
    pub offset: i64,
    /// The newest record timestamp read from it (ms).
    pub max_timestamp: i64,
}

/// One keyed operator instance's part of a checkpoint.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OperatorSnapshot {
    /// The instance's index.
    pub index: u32,
    /// The key groups it owns.
    pub key_groups: KeyGroupRange,
    /// Its watermark at the barrier (ms).
    pub watermark: i64,
    /// Its L2 files.
    pub manifest: SnapshotManifest,
    /// Bytes this checkpoint newly stored for it.
    pub new_bytes: u64,
}

/// What a task acknowledges a checkpoint with.
#[derive(Debug, Clone)]
pub(crate) enum TaskSnapshot {
    Source(SourceSnapshot),
    Operator(OperatorSnapshot),
    Sink(u32, SinkState),
}

/// The coordinator's request to the source: start checkpoint `id`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Trigger {
    pub(crate) id: u64,
    /// The last checkpoint: the source has read all its input.
    pub(crate) is_final: bool,
}

/// Messages to the coordinator.
#[derive(Debug)]
pub(crate) enum Ack {
    /// Task part of checkpoint `id`.
    Snapshot(u64, TaskSnapshot),
    /// A task could not take its part of checkpoint `id`: `cause` says
    /// which step failed, on which file, with which OS error. The checkpoint
    /// fails (see [`coordinator`]).
    Declined { id: u64, cause: RuntimeError },
    /// The source read all its input: take the final checkpoint now.
    SourceFinished,
}

/// `chk-N/_metadata`: a completed checkpoint.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CheckpointMetadata {
    /// The metadata format ([`FORMAT_VERSION`]).
    pub format_version: u32,
    /// Checkpoint id (grows across restores).
    pub id: u64,
    /// The job's name.
    pub job: String,
    /// Wall-clock completion time, ms since the epoch.
    pub completed_at_ms: i64,
    /// Key groups.
    pub max_parallelism: u32,
    /// Keyed operator instances.
    pub parallelism: u32,
    /// The source's position.
    pub source: SourceSnapshot,
    /// Keyed operator instances, by index.
    pub operators: Vec<OperatorSnapshot>,
    /// Sink instances' states, by index.
    pub sinks: Vec<SinkState>,
    /// Trigger to completion, ms.
    pub duration_ms: u64,
    /// Total bytes of the state files the checkpoint references.
    pub state_bytes: u64,
    /// Bytes this checkpoint newly stored (incremental size).
    pub new_bytes: u64,
    /// Whether this is the final checkpoint of a finished input.
    pub is_final: bool,
    /// The job's identity in L3 (fixed at its first start; L3's fence row
    /// is kept per lineage). `None` for a job without L3.
    pub l3_lineage: Option<i64>,
    /// Where the job's cold state lives, `keyspace.table` (`None` without
    /// L3): a restore refuses another table.
    pub l3_table: Option<String>,
    /// The old job's table a migrated list state lives in (migration mode),
    /// `keyspace.table`: a restore or a write-back refuses another.
    #[serde(default)]
    pub l3_migration_table: Option<String>,
    /// The version (CQL write timestamp, µs) of the L3 writes of the keys
    /// this checkpoint picked for eviction: the wall clock at completion,
    /// or two above the previous checkpoint's if that is later, so versions
    /// grow across checkpoints and restores.
    pub l3_version: Option<i64>,
}

/// The field of `_metadata` that holds its checksum.
const CHECKSUM: &str = "checksum";

/// xxh3 of the compact JSON of `value` (every field but the checksum), as
/// 16 hex digits.
fn metadata_checksum(value: &serde_json::Value) -> serde_json::Result<String> {
    let bytes = serde_json::to_vec(value)?;
    Ok(format!("{:016x}", xxhash_rust::xxh3::xxh3_64(&bytes)))
}

impl CheckpointMetadata {
    /// The `_metadata` bytes: the JSON with a `checksum` field, the xxh3
    /// of the compact JSON of every other field (see [`Self::decode`]).
    pub(crate) fn encode(&self) -> serde_json::Result<Vec<u8>> {
        let mut value = serde_json::to_value(self)?;
        let sum = metadata_checksum(&value)?;
        if let serde_json::Value::Object(fields) = &mut value {
            fields.insert(CHECKSUM.into(), sum.into());
        }
        serde_json::to_vec_pretty(&value)
    }

    /// Reads `_metadata` text of this format version; another version, a
    /// field this version does not know, or a `checksum` that does not
    /// match the rest (a flipped digit would restore wrong positions) is
    /// an error naming it. Metadata written before checksums has none and
    /// is read unchecked.
    pub fn decode(text: &str) -> std::result::Result<Self, String> {
        let mut value: serde_json::Value = serde_json::from_str(text).map_err(|e| e.to_string())?;
        let recorded = value
            .as_object_mut()
            .and_then(|fields| fields.remove(CHECKSUM));
        match value.get("format_version").map(serde_json::Value::as_u64) {
            None => {
                return Err(format!(
                    "it has no format_version: an older strata (format 1) wrote it, and this one reads format {FORMAT_VERSION} only; start the job afresh in a new checkpoint directory"
                ))
            }
            Some(Some(v)) if v == u64::from(FORMAT_VERSION) => {}
            Some(v) => {
                return Err(format!(
                    "format_version {} is not {FORMAT_VERSION}, the format this strata reads",
                    v.map_or("(not a number)".to_string(), |v| v.to_string())
                ))
            }
        }
        if let Some(recorded) = recorded {
            let found = metadata_checksum(&value).map_err(|e| e.to_string())?;
            if recorded.as_str() != Some(found.as_str()) {
                return Err(format!(
                    "its checksum is {recorded}, but its content sums to \"{found}\": the file is corrupt"
                ));
            }
        }
        serde_json::from_value(value).map_err(|e| e.to_string())
    }

    /// Checks that the metadata describes a runnable job: instance counts,
    /// key-group ranges and ids agree with each other and with `config`.
    pub fn validate(&self, config: &crate::JobConfig) -> std::result::Result<(), String> {
        let (par, max) = (self.parallelism, self.max_parallelism);
        if par == 0 || par > max || max > strata_cache::key_group::MAX_KEY_GROUPS {
            return Err(format!(
                "parallelism {par} and max-parallelism {max} do not fit"
            ));
        }
        if max != config.max_parallelism {
            return Err(format!(
                "it was written with max-parallelism {max}; restore with -D max-parallelism={max}"
            ));
        }
        if self.operators.len() != par as usize {
            return Err(format!(
                "{} operator snapshots for parallelism {par}",
                self.operators.len()
            ));
        }
        for (i, op) in self.operators.iter().enumerate() {
            if op.index as usize != i
                || op.key_groups != KeyGroupRange::for_operator(max, par, i as u32)
            {
                return Err(format!(
                    "operator snapshot {i} has index {} and key groups {:?}",
                    op.index, op.key_groups
                ));
            }
        }
        if self.sinks.is_empty() || self.sinks.len() > par as usize {
            return Err(format!(
                "{} sink states for parallelism {par}",
                self.sinks.len()
            ));
        }
        if self.id == u64::MAX {
            return Err("its id is at the end of the id range".into());
        }
        Ok(())
    }
}

/// Figures of one completed checkpoint, for the run's report.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct CheckpointStats {
    /// Its id.
    pub id: u64,
    /// Trigger to completion, ms.
    pub duration_ms: u64,
    /// When it completed, ms since the Unix epoch (it was triggered
    /// `duration_ms` before).
    pub completed_at_ms: u64,
    /// Total referenced state bytes.
    pub state_bytes: u64,
    /// Newly stored bytes.
    pub new_bytes: u64,
}

#[cfg(test)]
impl CheckpointMetadata {
    /// A completed checkpoint `id` of `job` with one operator and one sink.
    pub(crate) fn for_tests(job: &str, id: u64) -> Self {
        Self {
            format_version: FORMAT_VERSION,
            id,
            job: job.into(),
            completed_at_ms: 0,
            max_parallelism: 128,
            parallelism: 1,
            source: SourceSnapshot::default(),
            operators: vec![OperatorSnapshot {
                index: 0,
                key_groups: KeyGroupRange::for_operator(128, 1, 0),
                watermark: 0,
                manifest: SnapshotManifest::default(),
                new_bytes: 0,
            }],
            sinks: vec![SinkState::default()],
            duration_ms: 0,
            state_bytes: 0,
            new_bytes: 0,
            is_final: false,
            l3_lineage: None,
            l3_table: None,
            l3_migration_table: None,
            l3_version: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metadata_of_another_format_or_with_unknown_fields_is_refused_by_name() {
        let meta = CheckpointMetadata::for_tests("job", 7);
        let text = String::from_utf8(meta.encode().unwrap()).unwrap();
        assert_eq!(CheckpointMetadata::decode(&text).unwrap(), meta);
        let older = text.replace("\"format_version\": 2,", "");
        assert!(CheckpointMetadata::decode(&older)
            .unwrap_err()
            .contains("format 1"));
        let newer = text.replace("\"format_version\": 2", "\"format_version\": 3");
        assert!(CheckpointMetadata::decode(&newer)
            .unwrap_err()
            .contains("format_version 3"));
        // A digit changed: the checksum no longer matches.
        let flipped = text.replace("\"id\": 7,", "\"id\": 8,");
        assert!(CheckpointMetadata::decode(&flipped)
            .unwrap_err()
            .contains("the file is corrupt"));
        // Without a checksum (written before checksums): read unchecked,
        // and a field this version does not know is named.
        let legacy: String = text
            .lines()
            .filter(|l| !l.contains("\"checksum\""))
            .collect::<Vec<_>>()
            .join("\n");
        assert_eq!(CheckpointMetadata::decode(&legacy).unwrap(), meta);
        let unknown = legacy.replace("\"id\": 7,", "\"id\": 7, \"surprise\": true,");
        assert!(CheckpointMetadata::decode(&unknown)
            .unwrap_err()
            .contains("surprise"));
    }
}
