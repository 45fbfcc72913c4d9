//! The way back from a migration: `strata migration write-back` hands a
//! job's whole state, as of its latest checkpoint, to L3 — a migrated list
//! state into the old job's table, in its schema — so that the old job can
//! take over again where strata stopped.
//!
//! Every operator instance's L2 files of the checkpoint are laid out in a
//! temporary directory and drained to L3 as cold eviction moves keys
//! (`StateStore::drain_to_cold`): complete lists replace what the table
//! holds of their key, at a version newer than any strata wrote before;
//! elements past their TTL at the checkpoint's watermark are left out.
//! The job's L3 fence moves past the checkpoint, so no strata run can
//! continue from it (it would be a zombie): a marker file in the
//! checkpoint directory says so at the next `--restore`.

use crate::checkpoint::cold::connect_cold;
use crate::checkpoint::{CheckpointMetadata, CheckpointStorage};
use crate::config::JobConfig;
use crate::error::{Result, RuntimeError};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};
use strata_cache::{snapshot, StateDescriptor, StateStore};

/// The file of a checkpoint directory whose state was written back.
const MARKER: &str = "_written_back";

/// What a write-back did.
#[derive(Debug, Clone)]
pub struct WriteBack {
    /// The checkpoint whose state went to L3.
    pub checkpoint: u64,
    /// Keys written to L3 (all operator instances, all states).
    pub keys: usize,
    /// The L3 tables written: strata's own, and the old job's of a
    /// migrated state (`a.b and c.d`).
    pub tables: String,
    /// Wall-clock time.
    pub elapsed: Duration,
}

/// Writes the state of job `job` (declaring `states`) from the latest
/// checkpoint in `dir` to the L3 that `config` names (`state.l3.*`, the
/// job's settings), then marks `dir` as written back.
///
/// Errors: no such directory or completed checkpoint; a checkpoint of
/// another job; L3 off in `config`; a directory already written back; the
/// L3 and L2 errors of the moves (a repeat is harmless: writes are
/// versioned).
pub fn write_back(
    dir: &Path,
    job: &str,
    states: &[StateDescriptor],
    config: &JobConfig,
) -> Result<WriteBack> {
    let started = Instant::now();
    let storage = CheckpointStorage::existing(dir).and_then(|_| CheckpointStorage::open(dir))?;
    let meta = checkpoint_to_write_back(&storage, job)?;
    if !config.l3.enabled() {
        return Err(RuntimeError::Usage(
            "write-back needs the job's L3 settings (state.l3.contact-points, keyspace, migration.*): pass its --config or -D state.l3.…".into(),
        ));
    }
    // The claim is for the checkpoint after the restored one, whose
    // version the moves use: a write-back killed half-way, which moved the
    // fence there, can be run again.
    let cold = connect_cold(config, &storage, Some(&meta), meta.id + 1)?.ok_or_else(|| {
        RuntimeError::Usage("write-back needs L3 (state.l3.contact-points)".into())
    })?;
    let mut keys = 0;
    for op in &meta.operators {
        let tmp = crate::inspect::tempdir(dir)?;
        snapshot::restore(storage.root(), &op.manifest, tmp.path())?;
        let mut builder = StateStore::builder(tmp.path())
            .max_parallelism(meta.max_parallelism)
            .l1_capacity(1 << 20)
            .l2_memory(64 << 20)
            .l2_capacity(1)
            .cold_tier(cold.tier.clone() as Arc<dyn strata_cache::ColdTier>)
            .state(StateDescriptor::value(crate::function::TIMERS_STATE));
        for s in states {
            builder = builder.state(s.clone());
        }
        let store = builder.open()?;
        store.clock().advance_watermark(op.watermark);
        keys += store.drain_to_cold(meta.id + 1)?;
        store.close()?;
    }
    let tables = std::iter::once(cold.tier.table())
        .chain(cold.migration_table.as_deref())
        .collect::<Vec<_>>()
        .join(" and ");
    mark(&storage, &meta, &tables)?;
    Ok(WriteBack {
        checkpoint: meta.id,
        keys,
        tables,
        elapsed: started.elapsed(),
    })
}

/// [`write_back`] of a job's checkpoint directory, or of each shard of a
/// consumer group's (`<dir>/p-<N>`, with the shard's L3 table
/// `<state.l3.table>_p<N>`): one entry per shard written, named (`None`
/// for a job alone). A shard already written back (a repeat after a
/// failure) is skipped.
///
/// Errors: those of [`write_back`], for the first shard that fails.
pub fn write_back_all(
    dir: &Path,
    job: &str,
    states: &[StateDescriptor],
    config: &JobConfig,
) -> Result<Vec<(Option<String>, WriteBack)>> {
    let shards = crate::inspect::shards_of(dir)?;
    let own_checkpoints = !CheckpointStorage::existing(dir)?.list()?.is_empty();
    if shards.is_empty() || own_checkpoints {
        return Ok(vec![(None, write_back(dir, job, states, config)?)]);
    }
    let mut done = Vec::new();
    for shard in shards {
        let shard_dir = dir.join(&shard);
        if shard_dir.join(MARKER).exists() {
            eprintln!("strata: {shard}: already written back, skipped");
            continue;
        }
        let mut config = config.clone();
        if let Some(p) = shard.strip_prefix("p-").and_then(|p| p.parse().ok()) {
            config.l3.for_shard(p);
        }
        done.push((Some(shard), write_back(&shard_dir, job, states, &config)?));
    }
    Ok(done)
}

/// The latest checkpoint of `job` in `storage`, if not written back yet.
fn checkpoint_to_write_back(storage: &CheckpointStorage, job: &str) -> Result<CheckpointMetadata> {
    refuse_written_back(storage)?;
    let meta = storage
        .latest()?
        .ok_or_else(|| RuntimeError::checkpoint(storage.root(), "holds no completed checkpoint"))?;
    if meta.job != job {
        return Err(RuntimeError::checkpoint(
            storage.root(),
            format!("holds checkpoints of job '{}', not '{job}'", meta.job),
        ));
    }
    Ok(meta)
}

/// Refuses a checkpoint directory whose state was written back to L3.
pub(crate) fn refuse_written_back(storage: &CheckpointStorage) -> Result<()> {
    let path = storage.root().join(MARKER);
    match std::fs::read_to_string(&path) {
        Ok(what) => Err(RuntimeError::checkpoint(
            storage.root(),
            format!(
                "its state was written back to L3 ({}): the old job owns it now; to move to strata again, start fresh in an empty checkpoint directory",
                what.trim()
            ),
        )),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(RuntimeError::io(&path)(e)),
    }
}

fn mark(storage: &CheckpointStorage, meta: &CheckpointMetadata, tables: &str) -> Result<()> {
    let at = chrono::Utc::now().format("%Y-%m-%dT%H:%M:%SZ");
    let text = format!(
        "checkpoint {} written to {tables} by strata migration write-back at {at}",
        meta.id
    );
    crate::checkpoint::files::write_durably(&storage.root().join(MARKER), &text)
}
