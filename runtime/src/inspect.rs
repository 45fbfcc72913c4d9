//! Reading checkpoints without running a job: list them, and read one key's
//! state from the latest (the `strata checkpoints` and `strata state` commands).

use crate::checkpoint::remote::{self, Remote};
use crate::checkpoint::{CheckpointMetadata, CheckpointStorage};
use crate::error::{Result, RuntimeError};
use std::path::{Path, PathBuf};
use strata_cache::key_group::{key_group_of, KeyGroupRange};
use strata_cache::{snapshot, StateDescriptor, StateStore};

/// One line per completed checkpoint: id, completion time, duration, sizes,
/// source position. `dir` may be an object store (`s3://bucket/prefix`).
pub fn list_checkpoints(dir: &Path) -> Result<Vec<String>> {
    let all = if remote::is_remote(dir) {
        Remote::connect(&dir.to_string_lossy(), remote::COMMAND_RETRY_FOR)?.list()?
    } else {
        CheckpointStorage::existing(dir)?.list()?
    };
    if all.is_empty() {
        return Err(no_checkpoint(dir));
    }
    Ok(all
        .iter()
        .map(|m| {
            let when = chrono::DateTime::from_timestamp_millis(m.completed_at_ms)
                .map(|t| t.format("%Y-%m-%dT%H:%M:%SZ").to_string())
                .unwrap_or_default();
            format!(
                "chk-{:<6} {when}  job={} duration={}ms state={}B new={}B records={}{}",
                m.id,
                m.job,
                m.duration_ms,
                m.state_bytes,
                m.new_bytes,
                m.source.position.records,
                if m.is_final { " final" } else { "" }
            )
        })
        .collect())
}

/// The latest completed checkpoint in `dir`, or an error saying there is none.
pub fn latest(dir: &Path) -> Result<CheckpointMetadata> {
    CheckpointStorage::existing(dir)?
        .latest()?
        .ok_or_else(|| no_checkpoint(dir))
}

fn no_checkpoint(dir: &Path) -> RuntimeError {
    let hint = if dir.join("_checkpoints").is_dir() {
        format!(" (did you mean {}?)", dir.join("_checkpoints").display())
    } else {
        String::new()
    };
    RuntimeError::checkpoint(dir, format!("holds no completed checkpoint{hint}"))
}

/// Restores the operator instance that owns `key` from the latest checkpoint
/// into a temporary directory and calls `read` with its store. The store sees
/// the checkpoint's watermark, so expired state stays hidden.
pub fn with_key_state<T>(
    dir: &Path,
    states: &[StateDescriptor],
    key: &[u8],
    read: impl FnOnce(&StateStore, &CheckpointMetadata) -> Result<T>,
) -> Result<T> {
    let meta = latest(dir)?;
    let kg = key_group_of(key, meta.max_parallelism);
    let index = KeyGroupRange::operator_for(kg, meta.max_parallelism, meta.parallelism) as usize;
    let tmp = tempdir(dir)?;
    let store = open_operator(dir, &meta, index, states, tmp.path())?;
    read(&store, &meta)
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
        .map(|i| open_operator(dir, &meta, i, states, &work.join(format!("op-{i}"))))
        .collect::<Result<_>>()?;
    Ok(CheckpointState { meta, stores })
}

/// Restores operator instance `index` of checkpoint `meta` into `path` and
/// opens its store at the instance's watermark.
fn open_operator(
    dir: &Path,
    meta: &CheckpointMetadata,
    index: usize,
    states: &[StateDescriptor],
    path: &Path,
) -> Result<StateStore> {
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
        .state(StateDescriptor::value(crate::task::keyed::TIMERS_STATE));
    for s in states {
        builder = builder.state(s.clone());
    }
    let store = builder.open()?;
    store.clock().advance_watermark(op.watermark);
    Ok(store)
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
        return Err(no_checkpoint(dir));
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
