//! Spawning a run's tasks and joining them: the sinks, the keyed operator
//! instances (each with its store, restored or fresh), the source and the
//! checkpoint coordinator, all in one join set, so that the first real
//! failure of any of them — not a closed channel it caused — is the error
//! the job ends with.

use super::targets::Target;
use crate::channel::{edge, InputGate, Message, Output, TaskTimes};
use crate::checkpoint::coordinator::{Coordinator, Outcome};
use crate::checkpoint::files::blame_corrupt;
use crate::checkpoint::{Ack, CheckpointMetadata, CheckpointStorage, Trigger};
use crate::config::JobConfig;
use crate::error::{Result, RuntimeError};
use crate::function::Keyed;
use crate::function::KeyedProcessFunction;
use crate::function::TIMERS_STATE;
use crate::function::{KeyFn, TimestampFn};
use crate::progress::{Progress, TaskClock};
use crate::query::{StateQuery, QUEUE_PER_INSTANCE};
use crate::task::input::Input;
use crate::task::keyed::{KeyedEdges, KeyedTask};
use crate::task::sink::{OutputSink, SinkTask};
use crate::task::source::{SourceEdges, SourceTask};
use crate::task::Links;
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use strata_cache::key_group::KeyGroupRange;
use strata_cache::l3::CassandraTier;
use strata_cache::snapshot::{self, IncrementalUploader};
use strata_cache::{L2Budget, StateDescriptor, StateStore};
use strata_connectors::Throttle;
use tokio::sync::{mpsc, watch};

/// Where a run's sinks and dead letters write.
pub(super) struct Targets {
    pub(super) output: Target,
    pub(super) dead_letter: Target,
    /// Kafka sinks' pre-committed epochs.
    pub(super) staging: PathBuf,
}

/// The source and what it routes to, for [`Wiring::spawn_source`].
pub(super) struct SourceParts<I> {
    pub(super) source: Input<I>,
    pub(super) key_of: KeyFn<I>,
    pub(super) timestamp_of: TimestampFn<I>,
    pub(super) to_ops: Vec<mpsc::Sender<Message<Keyed<I>>>>,
    pub(super) triggers: mpsc::Receiver<Trigger>,
}

/// What the tasks of one run share while they are being spawned.
pub(super) struct Wiring {
    pub(super) config: JobConfig,
    storage: CheckpointStorage,
    pub(super) restored: Option<CheckpointMetadata>,
    targets: Targets,
    pub(super) work: PathBuf,
    budget: L2Budget,
    run_id: String,
    pub(super) progress: Arc<Progress>,
    acks: mpsc::Sender<Ack>,
    pub(super) completed: watch::Receiver<u64>,
    pub(super) tasks: tokio::task::JoinSet<Result<()>>,
    pub(super) clocks: Vec<TaskClock>,
    cold: Option<Arc<CassandraTier>>,
    /// With a query service: each keyed instance's query queue.
    pub(super) query_queues: Option<Vec<mpsc::Sender<StateQuery>>>,
}

impl Wiring {
    #[allow(clippy::too_many_arguments)]
    pub(super) fn new(
        config: JobConfig,
        storage: CheckpointStorage,
        restored: Option<CheckpointMetadata>,
        targets: Targets,
        work: PathBuf,
        acks: mpsc::Sender<Ack>,
        completed: watch::Receiver<u64>,
        cold: Option<Arc<CassandraTier>>,
    ) -> Self {
        Self {
            budget: L2Budget::new(config.l2_memory as usize),
            run_id: format!(
                "{:x}",
                chrono::Utc::now().timestamp_nanos_opt().unwrap_or_default()
                    ^ i64::from(std::process::id())
            ),
            config,
            storage,
            restored,
            targets,
            work,
            progress: Arc::new(Progress::default()),
            acks,
            completed,
            tasks: tokio::task::JoinSet::new(),
            clocks: Vec::new(),
            cold,
            query_queues: None,
        }
    }

    /// Spawns the checkpoint coordinator into the join set; what it did is
    /// in the returned slot once it ends.
    pub(super) fn spawn_coordinator(&mut self, coordinator: Coordinator) -> Arc<Mutex<Outcome>> {
        let slot = Arc::new(Mutex::new(Outcome::default()));
        let filled = slot.clone();
        self.tasks.spawn(async move {
            let outcome = coordinator.run().await?;
            *filled.lock().unwrap_or_else(|p| p.into_inner()) = outcome;
            Ok(())
        });
        slot
    }

    /// What each task shares with the run.
    fn links(&self) -> Links {
        Links {
            acks: self.acks.clone(),
            completed: self.completed.clone(),
            progress: self.progress.clone(),
        }
    }

    fn times(&mut self, name: String) -> Arc<TaskTimes> {
        let times = Arc::new(TaskTimes::default());
        self.clocks.push(TaskClock::new(name, times.clone()));
        times
    }

    /// Spawns `sinks` sink instances; keyed instance i feeds sink i % sinks
    /// (so a key's records stay in order). Returns the edge of each keyed
    /// instance.
    pub(super) fn spawn_sinks<O: Serialize + Send + 'static>(
        &mut self,
        keyed: u32,
        sinks: u32,
    ) -> Result<Vec<mpsc::Sender<Message<Keyed<O>>>>> {
        let (senders, receivers): (Vec<_>, Vec<_>) = (0..keyed)
            .map(|_| edge(self.config.channel_capacity))
            .unzip();
        // Sink j reads the edges of keyed instances j, j + sinks, j + 2·sinks, …
        let mut inputs_of: Vec<Vec<_>> = (0..sinks).map(|_| Vec::new()).collect();
        for (i, rx) in receivers.into_iter().enumerate() {
            inputs_of[i % sinks as usize].push(rx);
        }
        let throttle = self.config.sink_rate.map(Throttle::new);
        for (j, inputs) in (0..sinks).zip(inputs_of) {
            let times = self.times(format!("sink-{j}"));
            let restored = self.restored.as_ref().map(|m| m.sinks[j as usize].clone());
            let t = &self.targets;
            let opened: OutputSink = tokio::task::block_in_place(|| {
                t.output.open_sink(j, restored, &t.staging, &self.config)
            })?;
            let gate = InputGate::new(inputs, times);
            let sink = SinkTask::<O>::new(j, gate, opened, throttle.clone(), self.links());
            self.tasks.spawn(sink.run());
        }
        Ok(senders)
    }

    /// Opens (or restores) keyed instance `i`'s store and spawns the instance.
    pub(super) fn spawn_keyed<F: KeyedProcessFunction>(
        &mut self,
        function: F,
        i: u32,
        parallelism: u32,
        input: mpsc::Receiver<Message<Keyed<F::In>>>,
        output: mpsc::Sender<Message<Keyed<F::Out>>>,
    ) -> Result<StateStore> {
        let snapshot = self.restored.as_ref().map(|m| &m.operators[i as usize]);
        let manifest = snapshot.map(|s| &s.manifest);
        let store = open_store(
            &self.work.join(format!("op-{i}")),
            &function.states(),
            self,
            parallelism,
            manifest,
        )
        .map_err(|e| match &self.restored {
            Some(m) => blame_corrupt(m.id, e, &self.storage.all_completed()),
            None => e,
        })?;
        let mut uploader =
            IncrementalUploader::new(self.storage.root(), &format!("{}-op{i}", self.run_id));
        if let Some(s) = snapshot {
            store.clock().advance_watermark(s.watermark);
            uploader.seed(&s.manifest);
        }
        let times = self.times(format!("keyed-{i}"));
        let edges = KeyedEdges {
            input: InputGate::new(vec![input], times.clone()),
            output: Output::new(vec![output], times),
            batch_size: self.config.batch_size,
            queries: self.query_queues.as_mut().map(|queues| {
                let (tx, rx) = mpsc::channel(QUEUE_PER_INSTANCE);
                queues.push(tx);
                rx
            }),
            positions: self.restored_positions(),
        };
        let keyed = KeyedTask::new(
            (
                i,
                KeyGroupRange::for_operator(self.config.max_parallelism, parallelism, i),
            ),
            function,
            store.clone(),
            edges,
            (uploader, self.work.join(format!("op-{i}-checkpoints"))),
            self.links(),
        )?;
        self.tasks.spawn(keyed.run());
        Ok(store)
    }

    /// Per source split, the position the restored checkpoint read to
    /// (where a query's answer stands before the first record).
    fn restored_positions(&self) -> Vec<u64> {
        let Some(source) = self.restored.as_ref().map(|m| &m.source) else {
            return Vec::new();
        };
        if source.partitions.is_empty() {
            return vec![source.position.records];
        }
        source
            .partitions
            .iter()
            .map(|p| p.offset.max(0) as u64)
            .collect()
    }

    pub(super) fn spawn_source<I: Send + 'static>(&mut self, parts: SourceParts<I>) -> Result<()> {
        let times = self.times("source".into());
        if let Some(k) = parts.source.kafka() {
            let _ = self.progress.kafka.set(k.source.stats());
        }
        let c = &self.config;
        let restored = self.restored.as_ref().map(|m| &m.source);
        let t = &self.targets;
        let dead_letter = tokio::task::block_in_place(|| {
            t.dead_letter
                .open_dead_letter(restored.map(|s| s.dead_letter.clone()), &t.staging, c)
        })?;
        let edges = SourceEdges {
            key_of: parts.key_of,
            timestamp_of: parts.timestamp_of,
            output: Output::new(parts.to_ops, times),
            triggers: parts.triggers,
        };
        let task = SourceTask::new(parts.source, edges, dead_letter, restored, c, self.links());
        self.tasks.spawn(task.run());
        Ok(())
    }
}

/// Opens one operator instance's store, restoring its files when a
/// snapshot manifest is given (never from the previous run's live directory).
fn open_store(
    dir: &Path,
    states: &[StateDescriptor],
    w: &Wiring,
    parallelism: u32,
    manifest: Option<&snapshot::SnapshotManifest>,
) -> Result<StateStore> {
    let c = &w.config;
    match manifest {
        Some(m) => snapshot::restore(w.storage.root(), m, dir)?,
        None if dir.exists() => std::fs::remove_dir_all(dir).map_err(RuntimeError::io(dir))?,
        None => {}
    }
    let mut builder = StateStore::builder(dir)
        .l1_capacity((c.l1_capacity / u64::from(parallelism)).max(1))
        .l2_budget(w.budget.clone())
        .max_parallelism(c.max_parallelism)
        .max_list_bytes(c.max_list_bytes)
        .flush_on_drop(false)
        .state(StateDescriptor::value(TIMERS_STATE));
    if let Some(cold) = &w.cold {
        builder = builder.cold_tier(cold.clone());
        if let Some(capacity) = c.l2_capacity {
            builder = builder.l2_capacity(capacity);
        }
    }
    for s in states {
        builder = builder.state(s.clone());
    }
    Ok(builder.open()?)
}

/// Waits for every task; the first real failure (not a disconnection it
/// caused) aborts the rest and is returned.
pub(super) async fn join_all(tasks: &mut tokio::task::JoinSet<Result<()>>) -> Result<()> {
    let mut first_disconnect = None;
    while let Some(joined) = tasks.join_next().await {
        let result = joined.map_err(|e| RuntimeError::Function(format!("task panicked: {e}")))?;
        match result {
            Ok(()) => {}
            Err(RuntimeError::Disconnected) => first_disconnect = Some(RuntimeError::Disconnected),
            Err(e) => {
                tasks.abort_all();
                return Err(e);
            }
        }
    }
    first_disconnect.map_or(Ok(()), Err)
}
