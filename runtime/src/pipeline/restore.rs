//! Where a run starts from: the checkpoint it restores (checked against
//! the job and its configuration), the leftovers of failed or crashed
//! checkpoints it removes, and its claim on L3.

use super::{Pipeline, RestoreFrom};
use crate::checkpoint::cold::{connect_cold, Cold};
use crate::checkpoint::{CheckpointMetadata, CheckpointStorage};
use crate::error::{Result, RuntimeError};
use crate::function::KeyedProcessFunction;
use serde::Serialize;
use std::path::Path;
use strata_connectors::committed_parts;

impl<F> Pipeline<F>
where
    F: KeyedProcessFunction,
    F::Out: Serialize,
{
    /// Migration mode must name a list state of this job.
    fn check_migrated_state(&self) -> Result<()> {
        let Some([state, ..]) = &self.config.l3.migration else {
            return Ok(());
        };
        let states = (self.factory)().states();
        if states
            .iter()
            .any(|s| &s.name == state && s.kind == strata_cache::StateKind::List)
        {
            return Ok(());
        }
        let lists: Vec<&str> = states
            .iter()
            .filter(|s| s.kind == strata_cache::StateKind::List)
            .map(|s| s.name.as_str())
            .collect();
        Err(RuntimeError::Config {
            key: "state.l3.migration.state".into(),
            reason: format!(
                "'{state}' is not a list state of job '{}' (its list states: {})",
                self.name,
                if lists.is_empty() {
                    "none".into()
                } else {
                    lists.join(", ")
                }
            ),
        })
    }

    /// Connects to L3 when the configuration turns it on (see
    /// [`connect_cold`]), after checking that migration mode names a list
    /// state of this job.
    pub(super) async fn connect_l3(
        &self,
        storage: &CheckpointStorage,
        restored: Option<&CheckpointMetadata>,
    ) -> Result<Option<Cold>> {
        if self.config.l3.enabled() {
            self.check_migrated_state()?;
        }
        let (config, storage, restored) = (self.config.clone(), storage.clone(), restored.cloned());
        let claim = restored.as_ref().map_or(0, |m| m.id);
        tokio::task::spawn_blocking(move || {
            connect_cold(&config, &storage, restored.as_ref(), claim)
        })
        .await
        .map_err(|e| RuntimeError::Function(format!("L3 connect: {e}")))?
    }

    /// The checkpoint to restore (`None`: start from the beginning) and
    /// the id of this run's first checkpoint. What failed or crashed
    /// checkpoints left in the directory is removed first: no checkpoint is
    /// in flight now.
    pub(super) fn restore_point(
        &self,
        storage: &CheckpointStorage,
        had_local_copy: bool,
    ) -> Result<RestorePoint> {
        let stored = self.fetch(storage, had_local_copy)?;
        storage.sweep_incomplete()?;
        crate::write_back::refuse_written_back(storage)?;
        let completed = storage.list()?;
        let newest = completed.last().map(|m| m.id).max(stored);
        let next_id = newest.map_or(1, |id| id + 1);
        let fresh = RestorePoint {
            restored: None,
            next_id,
        };
        let Some(from) = self.restore else {
            if let Some(m) = completed.last() {
                return Err(RuntimeError::Usage(format!(
                    "checkpoint directory {} already holds checkpoint {} of an earlier run: pass --restore latest to continue it, or use an empty checkpoint directory",
                    storage.root().display(),
                    m.id
                )));
            }
            return Ok(fresh);
        };
        let meta = match from {
            RestoreFrom::Latest | RestoreFrom::LatestIfAny => match completed.last() {
                Some(m) => m.clone(),
                None if from == RestoreFrom::LatestIfAny => return Ok(fresh),
                None => {
                    // Killed before its first checkpoint: nothing was
                    // committed, so the run starts over (the sinks delete
                    // the uncommitted files).
                    eprintln!(
                        "strata: no completed checkpoint in {} (the earlier run stopped before its first): starting from the beginning",
                        storage.root().display()
                    );
                    return Ok(fresh);
                }
            },
            RestoreFrom::Checkpoint(id) => pick(storage, &completed, id)?,
        };
        if meta.job != self.name {
            return Err(RuntimeError::checkpoint(
                storage.root(),
                format!(
                    "holds checkpoints of job '{}', not '{}'",
                    meta.job, self.name
                ),
            ));
        }
        if meta.max_parallelism != self.config.max_parallelism {
            return Err(RuntimeError::Usage(format!(
                "checkpoint {} was written with max-parallelism {m} (the key groups, fixed for a job's life), not {}: restore with -D max-parallelism={m}",
                meta.id,
                self.config.max_parallelism,
                m = meta.max_parallelism
            )));
        }
        meta.validate(&self.config).map_err(|reason| {
            RuntimeError::checkpoint(
                storage.root(),
                format!("checkpoint {} is inconsistent: {reason}", meta.id),
            )
        })?;
        self.note_fixed_settings(&meta);
        Ok(RestorePoint {
            restored: Some(meta),
            next_id,
        })
    }

    /// With checkpoints in an object store: brings the checkpoint to
    /// restore into the local copy (a fresh run only checks that the object
    /// store holds none).
    /// Returns the object store's newest checkpoint. `--restore latest` of
    /// an empty store starts over only where a local copy shows a run that
    /// stopped before its first checkpoint; elsewhere the prefix is wrong.
    fn fetch(&self, storage: &CheckpointStorage, had_local_copy: bool) -> Result<Option<u64>> {
        let Some(remote) = storage.remote() else {
            return Ok(None);
        };
        match self.restore {
            None => match remote.list()?.last() {
                None => remote.refuse_foreign().map(|()| None),
                Some(m) => Err(RuntimeError::Usage(format!(
                    "{} already holds checkpoint {} of an earlier run: pass --restore latest to continue it, or use an empty prefix",
                    remote.url(),
                    m.id
                ))),
            },
            Some(RestoreFrom::Latest) => match storage.fetch(None)? {
                None if !had_local_copy => Err(RuntimeError::Usage(format!(
                    "cannot restore the latest checkpoint: {} holds none, and this machine has no local copy ({}) of a run that stopped before its first (check the prefix; without --restore a run starts fresh)",
                    remote.url(),
                    storage.root().display()
                ))),
                stored => Ok(stored),
            },
            Some(RestoreFrom::Checkpoint(id)) => storage.fetch(Some(id)),
            Some(RestoreFrom::LatestIfAny) => storage.fetch(None),
        }
    }

    /// Says which settings a restore takes from the checkpoint rather than
    /// from the configuration, when the two differ.
    fn note_fixed_settings(&self, meta: &CheckpointMetadata) {
        let (par, sinks) = (meta.parallelism, meta.sinks.len() as u32);
        let (want_par, want_sinks) = (self.config.parallelism, self.config.sink_parallelism());
        if (par, sinks) != (want_par, want_sinks) {
            eprintln!(
                "strata: note: checkpoint {} was taken at parallelism {par}, sink.parallelism {sinks}; this run uses the same (the configuration says {want_par} and {want_sinks}, which apply to fresh starts: changing them on restore is not supported yet)",
                meta.id
            );
        }
    }
}

/// Where a run starts.
pub(super) struct RestorePoint {
    /// The checkpoint it continues from (`None`: the beginning).
    pub(super) restored: Option<CheckpointMetadata>,
    /// The id of its first checkpoint: after the newest in the directory,
    /// also when an older one is restored.
    pub(super) next_id: u64,
}

/// Completed checkpoint `id`, or an error listing the completed ones. A
/// checkpoint older than the newest is restored with a notice.
fn pick(
    storage: &CheckpointStorage,
    completed: &[CheckpointMetadata],
    id: u64,
) -> Result<CheckpointMetadata> {
    let Some(meta) = completed.iter().find(|m| m.id == id) else {
        let ids: Vec<String> = completed.iter().map(|m| m.id.to_string()).collect();
        return Err(RuntimeError::Usage(format!(
            "checkpoint directory {} has no completed checkpoint {id}; completed: {} (see strata checkpoints list {})",
            storage.root().display(),
            if ids.is_empty() {
                "none".into()
            } else {
                ids.join(", ")
            },
            storage.root().display()
        )));
    };
    Ok(meta.clone())
}

/// Refuses to continue from `meta` while the output holds part files
/// written after it (by newer checkpoints, or another run): they would be
/// written again. Lists them, for every sink, before any sink opens.
pub(super) fn refuse_newer_output(output: &Path, meta: &CheckpointMetadata) -> Result<()> {
    let mut newer = Vec::new();
    for (j, sink) in meta.sinks.iter().enumerate() {
        newer.extend(committed_parts(
            output,
            "part",
            Some(j as u32),
            sink.next_seq,
        )?);
    }
    let dead_letters = meta.source.dead_letter.next_seq;
    newer.extend(committed_parts(
        output,
        "dead-letter",
        Some(0),
        dead_letters,
    )?);
    if newer.is_empty() {
        return Ok(());
    }
    let shown: Vec<&str> = newer.iter().take(6).map(String::as_str).collect();
    Err(RuntimeError::Usage(format!(
        "output directory {} holds {} part file(s) written after checkpoint {} ({}{}): continuing from it would write their records again. Restore the newest checkpoint, or move these files out of the directory first",
        output.display(),
        newer.len(),
        meta.id,
        shown.join(", "),
        if newer.len() > shown.len() { ", …" } else { "" }
    )))
}

/// Removes the completed checkpoints newer than `restored`, once a restore
/// of it has passed every check: a branch cannot go on without the output
/// it committed, and `latest` must never pick one up again.
pub(super) fn discard_newer(storage: &CheckpointStorage, restored: u64) -> Result<()> {
    let newer = storage.newer_than(restored)?;
    if newer.is_empty() {
        return Ok(());
    }
    storage.forget(&newer)?;
    let ids: Vec<String> = newer.iter().map(u64::to_string).collect();
    eprintln!(
        "strata: restoring checkpoint {restored}: the newer checkpoints {} are removed (their output was moved away; a run cannot go on from them)",
        ids.join(", ")
    );
    Ok(())
}
