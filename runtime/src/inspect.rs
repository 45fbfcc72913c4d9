//! Reading checkpoints without running a job: list them, and read one key's
//! state from the latest (the `strata checkpoints` and `strata state` commands).

use crate::checkpoint::cold::cold_reader;
use crate::checkpoint::remote::{self, Remote};
use crate::checkpoint::{CheckpointMetadata, CheckpointStorage};
use crate::config::JobConfig;
use crate::error::{Result, RuntimeError};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use strata_cache::key_group::{key_group_of, KeyGroupRange};
use strata_cache::l3::CassandraTier;
use strata_cache::{snapshot, StateDescriptor, StateStore};

/// One line per completed checkpoint: id, completion time, duration, sizes,
/// source position (records read; for a Kafka input each partition's next
/// offset, `topic/partition:offset`). `dir` may be an object store
/// (`s3://bucket/prefix`). A consumer group's prefix lists every shard's
/// checkpoints, each line led by its shard (`p-<partition>`).
///
/// Errors: no checkpoint at all; a listing or `_metadata` read failed.
pub fn list_checkpoints(dir: &Path) -> Result<Vec<String>> {
    let own = completed(dir)?;
    if !own.is_empty() {
        return Ok(own.iter().map(checkpoint_line).collect());
    }
    let shards = shards_of(dir)?;
    if shards.is_empty() {
        return Err(no_checkpoint(dir, &[]));
    }
    let mut lines = Vec::new();
    for shard in &shards {
        let listed = completed(&crate::checkpoint::shard_location(dir, shard))?;
        lines.extend(
            listed
                .iter()
                .map(|m| format!("{shard:<5} {}", checkpoint_line(m))),
        );
    }
    Ok(lines)
}

/// Every completed checkpoint in `dir` (local or `s3://`), oldest first.
fn completed(dir: &Path) -> Result<Vec<CheckpointMetadata>> {
    if remote::is_remote(dir) {
        Remote::connect(&dir.to_string_lossy(), remote::COMMAND_RETRY_FOR)?.list()
    } else {
        CheckpointStorage::existing(dir)?.list()
    }
}

fn checkpoint_line(m: &CheckpointMetadata) -> String {
    let when = chrono::DateTime::from_timestamp_millis(m.completed_at_ms)
        .map(|t| t.format("%Y-%m-%dT%H:%M:%SZ").to_string())
        .unwrap_or_default();
    let read = if m.source.partitions.is_empty() {
        format!("records={}", m.source.position.records)
    } else {
        let offsets: Vec<String> = m
            .source
            .partitions
            .iter()
            .map(|p| format!("{}/{}:{}", p.topic, p.partition, p.offset))
            .collect();
        format!("offsets={}", offsets.join(","))
    };
    format!(
        "chk-{:<6} {when}  job={} duration={}ms state={}B new={}B {read}{}",
        m.id,
        m.job,
        m.duration_ms,
        m.state_bytes,
        m.new_bytes,
        if m.is_final { " final" } else { "" }
    )
}

/// The shards (`p-<partition>`, by partition) whose checkpoints a consumer
/// group keeps under `dir`; none for a single job's directory.
pub(crate) fn shards_of(dir: &Path) -> Result<Vec<String>> {
    let names: Vec<String> = if remote::is_remote(dir) {
        let objects =
            Remote::connect(&dir.to_string_lossy(), remote::COMMAND_RETRY_FOR)?.objects()?;
        objects
            .keys()
            .filter_map(|k| Some(k.split_once('/')?.0.to_owned()))
            .collect()
    } else {
        match std::fs::read_dir(dir) {
            Ok(entries) => entries
                .filter_map(|e| Some(e.ok()?.file_name().to_string_lossy().into_owned()))
                .collect(),
            Err(_) => Vec::new(),
        }
    };
    let mut shards: Vec<(i32, String)> = names
        .into_iter()
        .filter_map(|n| Some((n.strip_prefix("p-")?.parse().ok()?, n)))
        .collect();
    shards.sort();
    shards.dedup();
    Ok(shards.into_iter().map(|(_, n)| n).collect())
}

/// The latest completed checkpoint in `dir`, or an error saying there is none.
pub fn latest(dir: &Path) -> Result<CheckpointMetadata> {
    CheckpointStorage::existing(dir)?
        .latest()?
        .ok_or_else(|| no_checkpoint(dir, &shards_of(dir).unwrap_or_default()))
}

/// "holds no completed checkpoint", with a hint: the `_checkpoints` folder
/// of an output directory, or a consumer group's `shards`.
fn no_checkpoint(dir: &Path, shards: &[String]) -> RuntimeError {
    let hint = if let Some(first) = shards.first() {
        format!(
            " of its own: it is a consumer group's, whose shards {} each hold theirs (name one, e.g. {}; `strata checkpoints list` lists them all)",
            shards.join(", "),
            crate::checkpoint::shard_location(dir, first).display()
        )
    } else if dir.join("_checkpoints").is_dir() {
        format!(" (did you mean {}?)", dir.join("_checkpoints").display())
    } else {
        String::new()
    };
    RuntimeError::checkpoint(dir, format!("holds no completed checkpoint{hint}"))
}

/// Restores the operator instance that owns `key` from the latest checkpoint
/// into a temporary directory and calls `read` with its store. The store sees
/// the checkpoint's watermark, so expired state stays hidden. A checkpoint
/// that moved cold keys to L3 is read through L3 with `config`'s
/// `state.l3.*` settings (see [`read_key_state`]).
///
/// Errors: those of [`read_key_state`], and `read`'s.
pub fn with_key_state<T>(
    dir: &Path,
    states: &[StateDescriptor],
    key: &[u8],
    config: &JobConfig,
    read: impl FnOnce(&StateStore, &CheckpointMetadata) -> Result<T>,
) -> Result<T> {
    let opened = open_key_store(dir, states, key, config)?;
    opened.store.clock().advance_watermark(opened.watermark);
    read(&opened.store, &opened.meta)
}

/// What a checkpoint holds of one key's state.
#[derive(Debug, Clone, PartialEq)]
pub enum KeyState<T> {
    /// The key's live state, as `read` returned it.
    Live(T),
    /// The key has state, all of it past its TTL at the checkpoint's
    /// watermark. Compaction and the L3 TTL sweep remove such state in
    /// time; the key then reads as [`KeyState::Absent`].
    Expired,
    /// No tier holds state of the key.
    Absent,
}

/// Reads one key's state from the latest checkpoint in `dir` (of a job
/// declaring `states`) with `read` (`None`: nothing live), telling a key
/// whose state expired from one that has none: `read` runs once before
/// the store sees the checkpoint's watermark (nothing has expired then;
/// event-time TTLs) and once after. The idea is Flink's State Processor
/// API: a checkpoint read as a store, without the job.
///
/// A checkpoint that moved cold keys to L3 is read through L3: contact
/// points, login and migration settings from `config`, the table the
/// checkpoint recorded; no claim is made, so a running job is undisturbed.
/// Rows its later checkpoints moved there are read too (L3 keeps the
/// newest version).
///
/// Errors: no completed checkpoint; a consumer group's prefix (name one
/// shard's `p-N`); L3 needed but off in `config`, or unreachable; a
/// manifest file missing or corrupt; `states` not those the job declared.
pub fn read_key_state<T>(
    dir: &Path,
    states: &[StateDescriptor],
    key: &[u8],
    config: &JobConfig,
    read: impl Fn(&StateStore) -> Result<Option<T>>,
) -> Result<(CheckpointMetadata, KeyState<T>)> {
    let opened = open_key_store(dir, states, key, config)?;
    let held = read(&opened.store)?;
    opened.store.clock().advance_watermark(opened.watermark);
    let found = match (read(&opened.store)?, held) {
        (Some(live), _) => KeyState::Live(live),
        (None, Some(_)) => KeyState::Expired,
        (None, None) => KeyState::Absent,
    };
    Ok((opened.meta, found))
}

/// The store of the operator instance that owns a key, restored into a
/// temporary directory (removed with it), before the watermark.
struct KeyStore {
    meta: CheckpointMetadata,
    watermark: i64,
    store: StateStore,
    _tmp: TempDir,
}

fn open_key_store(
    dir: &Path,
    states: &[StateDescriptor],
    key: &[u8],
    config: &JobConfig,
) -> Result<KeyStore> {
    let meta = latest(dir)?;
    let cold = cold_reader(config, dir, &meta)?;
    let kg = key_group_of(key, meta.max_parallelism);
    let index = KeyGroupRange::operator_for(kg, meta.max_parallelism, meta.parallelism) as usize;
    let tmp = tempdir(dir)?;
    let (store, watermark) = open_operator(dir, &meta, index, states, tmp.path(), cold)?;
    Ok(KeyStore {
        meta,
        watermark,
        store,
        _tmp: tmp,
    })
}

/// The state of a checkpoint: every keyed operator instance's store,
/// restored (see [`open_checkpoint`]).
pub struct CheckpointState {
    /// The checkpoint.
    pub meta: CheckpointMetadata,
    /// Instance i's store, restored under `<work>/op-<i>`.
    pub stores: Vec<StateStore>,
}

impl CheckpointState {
    /// The index of the instance that owns `key` (its key group's).
    pub fn instance_of(&self, key: &[u8]) -> usize {
        let m = &self.meta;
        let kg = key_group_of(key, m.max_parallelism);
        KeyGroupRange::operator_for(kg, m.max_parallelism, m.parallelism) as usize
    }
}

/// Restores every keyed operator instance of the latest checkpoint in `dir`
/// into directory `work` (which must be absent or empty) and opens its store
/// with `states` (the job's declared states), at the checkpoint's
/// watermark: what a restored run would start from, to read it whole.
///
/// Errors: no completed checkpoint, a checkpoint of a job with L3 (its
/// cold keys are in Cassandra, which this does not read), a manifest file
/// missing or unreadable, `states` not those the job declared.
pub fn open_checkpoint(
    dir: &Path,
    states: &[StateDescriptor],
    work: &Path,
) -> Result<CheckpointState> {
    let meta = latest(dir)?;
    if let Some(table) = &meta.l3_table {
        return Err(RuntimeError::checkpoint(
            dir,
            format!(
                "checkpoint {} keeps cold keys in L3 ({table}): opening its local state alone would miss them",
                meta.id
            ),
        ));
    }
    let stores = (0..meta.operators.len())
        .map(|i| {
            let work = work.join(format!("op-{i}"));
            let (store, watermark) = open_operator(dir, &meta, i, states, &work, None)?;
            store.clock().advance_watermark(watermark);
            Ok(store)
        })
        .collect::<Result<_>>()?;
    Ok(CheckpointState { meta, stores })
}

/// Restores operator instance `index` of checkpoint `meta` into `path` and
/// opens its store (reading `cold` on L2 misses, if given), before any
/// watermark; returns it with the instance's watermark.
fn open_operator(
    dir: &Path,
    meta: &CheckpointMetadata,
    index: usize,
    states: &[StateDescriptor],
    path: &Path,
    cold: Option<Arc<CassandraTier>>,
) -> Result<(StateStore, i64)> {
    let op = meta.operators.get(index).ok_or_else(|| {
        RuntimeError::checkpoint(
            dir,
            format!("checkpoint {} lacks operator {index}", meta.id),
        )
    })?;
    snapshot::restore(dir, &op.manifest, path)?;
    let mut builder = StateStore::builder(path)
        .max_parallelism(meta.max_parallelism)
        .l2_memory(16 << 20)
        .state(StateDescriptor::value(crate::function::TIMERS_STATE));
    let reads_l3 = cold.is_some();
    if let Some(cold) = cold {
        builder = builder.cold_tier(cold);
    }
    for s in states {
        builder = builder.state(s.clone());
    }
    let store = builder.open()?;
    if reads_l3 {
        store.settle_moves_for_reading()?;
    }
    Ok((store, op.watermark))
}

/// The local checkpoint directory to read `dir` from: `dir` itself, or for
/// an object store (`s3://…`) a temporary local copy holding its newest
/// checkpoint (downloaded whole; removed when the guard drops).
///
/// Errors: the object store holds no checkpoint, a download failed.
pub(crate) fn local_view(dir: &Path) -> Result<(PathBuf, Option<TempDir>)> {
    if !remote::is_remote(dir) {
        return Ok((dir.to_owned(), None));
    }
    let copy = tempdir(&std::env::temp_dir())?;
    let storage = CheckpointStorage::open(copy.path())?.with_remote(Remote::connect(
        &dir.to_string_lossy(),
        remote::COMMAND_RETRY_FOR,
    )?);
    if storage.fetch(None)?.is_none() {
        return Err(no_checkpoint(dir, &shards_of(dir)?));
    }
    Ok((copy.path().to_owned(), Some(copy)))
}

pub(crate) fn tempdir(near: &Path) -> Result<TempDir> {
    let path = near.join(format!("_inspect-{}", std::process::id()));
    std::fs::create_dir_all(&path).map_err(RuntimeError::io(&path))?;
    Ok(TempDir(path))
}

/// A directory removed when dropped.
pub(crate) struct TempDir(std::path::PathBuf);

impl TempDir {
    pub(crate) fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
