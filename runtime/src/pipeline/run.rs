//! One run of a pipeline, in four steps: [`Pipeline::start`] checks what it
//! was given and takes its directories, storage and restore point;
//! [`Pipeline::spawn`] connects L3 and starts every task; [`Running::wait`]
//! waits for the tasks (or a signal); [`Running::finish`] releases what the
//! run held and reports.

use super::parts::Parts;
use super::restore::RestorePoint;
use super::source::open_source;
use super::wiring::{self, join_all, SourceParts, Wiring};
use super::{restore, JobReport, Pipeline, KAFKA_STAGING};
use crate::channel::edge;
use crate::checkpoint::cold::Cold;
use crate::checkpoint::coordinator::{self, Coordinator, Outcome};
use crate::checkpoint::remote::{Lease, Remote};
use crate::checkpoint::{CheckpointMetadata, CheckpointStorage};
use crate::dir_lock::{lock_dir, DirLock};
use crate::error::{Result, RuntimeError};
use crate::fresh_dirs::FreshDirs;
use crate::function::KeyedProcessFunction;
use crate::local_dir::LocalDir;
use crate::query::Registration;
use crate::signals::shutdown_signal;
use crate::task::input::Input;
use serde::Serialize;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use strata_cache::StateStore;
use tokio::sync::{mpsc, watch};

/// What a run took before it spawned its tasks.
struct Started<I> {
    parts: Parts<I>,
    storage: CheckpointStorage,
    _lease: Option<Arc<Lease>>,
    output_lock: Option<DirLock>,
    fresh: FreshDirs,
    restored: Option<CheckpointMetadata>,
    next_id: u64,
    source: Input<I>,
    local: LocalDir,
}

/// A run whose tasks are spawned.
pub(super) struct Running {
    started: Instant,
    w: Wiring,
    stores: Vec<StateStore>,
    storage: CheckpointStorage,
    /// The object store prefix's lease, held until the run ends.
    _lease: Option<Arc<Lease>>,
    output_lock: Option<DirLock>,
    local: LocalDir,
    cold: Option<Cold>,
    checkpoints: Arc<Mutex<Outcome>>,
    restore_time: Duration,
    show_progress: bool,
    _queries: Option<Registration>,
}

impl<F> Pipeline<F>
where
    F: KeyedProcessFunction,
    F::Out: Serialize,
{
    pub(super) async fn run_async(mut self) -> Result<JobReport> {
        let started = Instant::now();
        let run = self.start().await?;
        self.spawn(run, started).await?.wait().await?.finish()
    }

    /// Checks the parts, reaches Kafka, opens the checkpoint storage (with
    /// its lease or the shard's fence), locks the output, picks the
    /// checkpoint to restore and opens the source there.
    async fn start(&mut self) -> Result<Started<F::In>> {
        let parts = self.take_parts()?;
        if self.shard.is_none() {
            // A shard's process reached Kafka before joining its group.
            let brokers = parts.kafka_brokers();
            if !brokers.is_empty() {
                crate::kafka_contact::reach(&self.config.kafka.security, &brokers).await?;
            }
        }
        let fresh = FreshDirs::note(
            parts
                .output
                .dir()
                .into_iter()
                .chain([parts.checkpoint_dir.as_path()])
                .chain(self.config.local_dir.as_deref()),
        );
        if let Some(addr) = self.metrics_addr {
            crate::metrics::serve(addr)?;
        }
        let had_local_copy = parts.checkpoint_dir.exists();
        let (storage, lease) = self.open_storage(&parts)?;
        let output_lock = match parts.output.dir() {
            Some(dir) => Some(lock_dir(dir, "output directory")?),
            None => None,
        };
        let RestorePoint { restored, next_id } =
            tokio::task::block_in_place(|| self.restore_point(&storage, had_local_copy))?;
        if let (Some(m), Some(dir)) = (&restored, parts.output.dir()) {
            restore::refuse_newer_output(dir, m)?;
        }
        let source = tokio::task::block_in_place(|| {
            open_source(
                &parts,
                &self.config,
                &self.name,
                restored.as_ref(),
                &storage,
                self.shard.as_ref(),
            )
        })?;
        let local = LocalDir::claim(
            self.config.local_dir.as_deref(),
            parts.output.dir().unwrap_or(storage.root()),
            storage.root(),
        )?;
        Ok(Started {
            parts,
            storage,
            _lease: lease,
            output_lock,
            fresh,
            restored,
            next_id,
            source,
            local,
        })
    }

    /// The checkpoint storage: a directory, mirrored to an object store if
    /// the parts name one. A shard's group fences it; a job alone holds
    /// its prefix's lease (returned).
    fn open_storage(
        &self,
        parts: &Parts<F::In>,
    ) -> Result<(CheckpointStorage, Option<Arc<Lease>>)> {
        let mut storage = CheckpointStorage::open(&parts.checkpoint_dir)?;
        if let Some(url) = &parts.remote {
            storage = storage.with_remote(Remote::connect(url, self.config.storage_retry_for)?);
        }
        if let Some(shard) = &self.shard {
            return Ok((storage.with_fence(shard.fence.clone()), None));
        }
        let lease = tokio::task::block_in_place(|| storage.lease())?;
        Ok((storage, lease))
    }

    /// Connects L3, removes checkpoints newer than the restored one, and
    /// spawns the sinks, the keyed instances, the source and the
    /// checkpoint coordinator.
    async fn spawn(&self, run: Started<F::In>, started: Instant) -> Result<Running> {
        let (parts, storage, restored, next_id) =
            (run.parts, run.storage, run.restored, run.next_id);
        let restore_started = Instant::now();
        let cold = self.connect_l3(&storage, restored.as_ref()).await?;
        // Newer checkpoints exist (here or in the store) only if this run
        // numbers its checkpoints after a newer one.
        if let Some(m) = restored.as_ref().filter(|m| next_id > m.id + 1) {
            tokio::task::block_in_place(|| restore::discard_newer(&storage, m.id))?;
        }
        let (par, sink_par) = restored.as_ref().map_or(
            (self.config.parallelism, self.config.sink_parallelism()),
            |m| (m.parallelism, m.sinks.len() as u32),
        );
        let (ack_tx, ack_rx) = mpsc::channel(2 * (par + sink_par) as usize + 4);
        let (trigger_tx, trigger_rx) = mpsc::channel(1);
        let (done_tx, done_rx) = watch::channel(restored.as_ref().map_or(0, |m| m.id));
        let l3_version = restored.as_ref().and_then(|m| m.l3_version);
        let mut w = Wiring::new(
            self.config.clone(),
            storage.clone(),
            restored,
            wiring::Targets {
                output: parts.output.clone(),
                dead_letter: parts.dead_letter.clone(),
                staging: storage.root().join(KAFKA_STAGING),
            },
            run.local.path().to_owned(),
            ack_tx,
            done_rx,
            cold.as_ref().map(|c| c.tier.clone()),
        );
        if let Some(shard) = &self.shard {
            w.progress = shard.progress.clone();
        }
        if self.queries.is_some() {
            w.query_queues = Some(Vec::new());
        }
        let stores =
            self.spawn_operators(&mut w, (par, sink_par), run.source, &parts, trigger_rx)?;
        let queries = self.register_queries(&mut w, &stores);
        let restore_time = restore_started.elapsed();
        let coordinator = Coordinator::new(
            storage.clone(),
            coordinator::Settings {
                job: self.name.clone(),
                interval: w.config.checkpoint_interval,
                timeout: w.config.checkpoint_timeout,
                tolerable_failures: w.config.tolerable_failures,
                retained: w.config.checkpoints_retained,
                max_parallelism: w.config.max_parallelism,
                parallelism: par,
                sinks: sink_par,
                states: (self.factory)().states(),
            },
            next_id,
            coordinator::Channels {
                trigger: trigger_tx,
                acks: ack_rx,
                completed: done_tx,
            },
            cold.clone(),
            l3_version.unwrap_or(i64::MIN),
        );
        let checkpoints = w.spawn_coordinator(coordinator);
        run.fresh.keep();
        Ok(Running {
            started,
            w,
            stores,
            storage,
            _lease: run._lease,
            output_lock: run.output_lock,
            local: run.local,
            cold,
            checkpoints,
            restore_time,
            show_progress: self.shard.is_none(),
            _queries: queries,
        })
    }

    /// Spawns `sink_par` sinks, `par` keyed instances (returning their
    /// stores) and the source that feeds them.
    fn spawn_operators(
        &self,
        w: &mut Wiring,
        (par, sink_par): (u32, u32),
        source: Input<F::In>,
        parts: &Parts<F::In>,
        triggers: mpsc::Receiver<crate::checkpoint::Trigger>,
    ) -> Result<Vec<StateStore>> {
        let to_sinks = w.spawn_sinks::<F::Out>(par, sink_par)?;
        let mut to_ops = Vec::new();
        let mut stores = Vec::new();
        for (i, to_sink) in to_sinks.into_iter().enumerate() {
            let (tx, rx) = edge(w.config.channel_capacity);
            to_ops.push(tx);
            stores.push(w.spawn_keyed((self.factory)(), i as u32, par, rx, to_sink)?);
        }
        w.spawn_source(SourceParts {
            source,
            key_of: parts.key_of.clone(),
            timestamp_of: parts.timestamp_of.clone(),
            to_ops,
            triggers,
        })?;
        Ok(stores)
    }

    /// Lets the query service (if any) reach the keyed instances while
    /// the run lasts.
    fn register_queries(&self, w: &mut Wiring, stores: &[StateStore]) -> Option<Registration> {
        let service = self.queries.as_ref()?;
        Some(service.register(
            self.shard.as_ref().map(|s| s.partition),
            crate::query::ShardQueries {
                instances: w.query_queues.take().unwrap_or_default(),
                max_parallelism: w.config.max_parallelism,
                clocks: stores.iter().map(|s| s.clock().clone()).collect(),
                completed: w.completed.clone(),
                progress: w.progress.clone(),
            },
        ))
    }
}

impl Running {
    /// Reports progress while the tasks run; ends at the first real
    /// failure or at SIGINT/SIGTERM (an error naming the checkpoint the
    /// committed output reaches).
    async fn wait(mut self) -> Result<Self> {
        let reporter = tokio::spawn(crate::progress::report(
            self.w.progress.clone(),
            self.stores.clone(),
            std::mem::take(&mut self.w.clocks),
            self.show_progress,
        ));
        let outcome = tokio::select! {
            outcome = join_all(&mut self.w.tasks) => outcome,
            signal = shutdown_signal() => Err(RuntimeError::Interrupted { signal, checkpoint: *self.w.completed.borrow() }),
        };
        reporter.abort();
        let _ = reporter.await;
        outcome?;
        // What the sinks committed after the final checkpoint (published
        // staged epochs) leaves the object store too.
        if self.storage.remote().is_some() {
            let keep = self.w.config.checkpoints_retained;
            if let Err(e) = tokio::task::block_in_place(|| self.storage.retain(keep)) {
                eprintln!("strata: warning: retention after the final checkpoint: {e}");
            }
        }
        Ok(self)
    }

    /// Closes the stores, clears the live state directories, removes the
    /// locks, and reports what the run did.
    fn finish(self) -> Result<JobReport> {
        let checkpoints =
            std::mem::take(&mut *self.checkpoints.lock().unwrap_or_else(|p| p.into_inner()));
        let tiers = crate::progress::tier_totals(&self.stores);
        let l2 = self
            .stores
            .iter()
            .fold(strata_cache::L2Report::default(), |mut all, s| {
                all.merge(&s.l2_report());
                all
            });
        // The final checkpoint holds everything: the live RocksDB
        // directories are no longer needed once their stores are closed.
        drop(self.stores);
        self.local.clear()?;
        // A normal end leaves no `_lock` behind in the directories it used.
        self.storage.remove_lock_at_release();
        if let Some(lock) = &self.output_lock {
            lock.remove_at_release();
        }
        let progress = &self.w.progress;
        let restored = self.w.restored.as_ref();
        Ok(JobReport {
            records_in: progress.records_in.load(Relaxed),
            records_out: progress.records_out.load(Relaxed),
            dead_letters: progress.dead_letters.load(Relaxed),
            elapsed: self.started.elapsed(),
            restored_from: restored.map(|m| m.id),
            restore_time: restored.map_or(Duration::ZERO, |_| self.restore_time),
            checkpoints: checkpoints.completed,
            checkpoints_failed: checkpoints.failed,
            tiers,
            l2,
            l3: self.cold.map(|c| c.tier.stats()),
            object_store: self.storage.remote().map(Remote::transfers),
            first_record_after: progress
                .first_record
                .get()
                .map(|at| at.duration_since(self.started)),
        })
    }
}
