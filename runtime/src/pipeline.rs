//! The [`Pipeline`] builder: file source → key-by → keyed process function →
//! JSON-lines sink, with checkpoints and recovery.
//!
//! ```no_run
//! use strata_runtime::jobs::route_history::{self, RouteHistory};
//! use strata_runtime::{JobConfig, Pipeline};
//! let report = Pipeline::new("route-history", JobConfig::default(), RouteHistory::default)
//!     .file_source("flights.parquet", route_history::schema(), route_history::parse)
//!     .key_by(route_history::key)
//!     .timestamps(|flight| flight.date)
//!     .jsonl_sink("out/")
//!     .checkpoint_dir("checkpoints/")
//!     .run()?;
//! println!("{} records in", report.records_in);
//! # Ok::<(), strata_runtime::RuntimeError>(())
//! ```
//!
//! The source runs with parallelism 1; the keyed operator with
//! `parallelism` instances and the sink with `sink.parallelism`, keyed
//! instance i feeding sink i mod `sink.parallelism`. Every edge is bounded
//! (`channel.capacity` batches of `channel.batch-size` records).

use crate::channel::Message;
use crate::channel::{edge, InputGate, Output, TaskTimes};
use crate::checkpoint::{
    Ack, CheckpointMetadata, CheckpointStats, CheckpointStorage, Coordinator, Trigger,
};
use crate::config::JobConfig;
use crate::error::{Result, RuntimeError};
use crate::function::KeyedProcessFunction;
use crate::progress::{Progress, TaskClock};
use crate::task::keyed::{KeyedTask, TIMERS_STATE};
use crate::task::sink::SinkTask;
use crate::task::source::SourceTask;
use crate::task::Keyed;
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use strata_cache::key_group::KeyGroupRange;
use strata_cache::l3::{CassandraTier, L3Stats};
use strata_cache::snapshot::{self, IncrementalUploader};
use strata_cache::{L2Budget, StateDescriptor, StateStore, TierStats};
use strata_connectors::{
    FileSink, FileSource, Format, Position, RecordError, Row, Schema, Throttle,
};
use tokio::sync::{mpsc, watch};

pub(crate) type ParseFn<I> =
    Arc<dyn Fn(Row, &Schema) -> std::result::Result<I, RecordError> + Send + Sync>;
pub(crate) type KeyFn<I> = Arc<dyn Fn(&I) -> Vec<u8> + Send + Sync>;
pub(crate) type TimestampFn<I> = Arc<dyn Fn(&I) -> i64 + Send + Sync>;

/// What a finished run did.
#[derive(Debug, Clone, Serialize)]
pub struct JobReport {
    /// Records the source read in this run (good and bad).
    pub records_in: u64,
    /// Records the sinks wrote in this run.
    pub records_out: u64,
    /// Bad records sent to the dead-letter output in this run.
    pub dead_letters: u64,
    /// Wall-clock time of the run.
    pub elapsed: Duration,
    /// The checkpoint the run restored from, if any.
    pub restored_from: Option<u64>,
    /// Time spent restoring state before processing started.
    pub restore_time: Duration,
    /// Checkpoints completed in this run.
    pub checkpoints: Vec<CheckpointStats>,
    /// Tier figures summed over operator instances.
    pub tiers: TierStats,
    /// L3 request figures (`None` without L3).
    pub l3: Option<L3Stats>,
}

struct SourceSpec<I> {
    path: PathBuf,
    schema: Schema,
    parse: ParseFn<I>,
}

/// A job under construction. See the module docs.
pub struct Pipeline<F: KeyedProcessFunction> {
    name: String,
    config: JobConfig,
    factory: Box<dyn Fn() -> F>,
    source: Option<SourceSpec<F::In>>,
    key_of: Option<KeyFn<F::In>>,
    timestamp_of: Option<TimestampFn<F::In>>,
    output: Option<PathBuf>,
    checkpoint_dir: Option<PathBuf>,
    restore: bool,
    metrics_addr: Option<std::net::SocketAddr>,
}

impl<F> Pipeline<F>
where
    F: KeyedProcessFunction,
    F::Out: Serialize,
{
    /// A job named `name`; `factory` makes one function instance per
    /// parallel operator instance.
    pub fn new(name: &str, config: JobConfig, factory: impl Fn() -> F + 'static) -> Self {
        Self {
            name: name.to_owned(),
            config,
            factory: Box::new(factory),
            source: None,
            key_of: None,
            timestamp_of: None,
            output: None,
            checkpoint_dir: None,
            restore: false,
            metrics_addr: None,
        }
    }

    /// Reads `path` (format from its extension) as rows of `schema`,
    /// turned into records by `parse`.
    pub fn file_source(
        mut self,
        path: impl Into<PathBuf>,
        schema: Schema,
        parse: impl Fn(Row, &Schema) -> std::result::Result<F::In, RecordError> + Send + Sync + 'static,
    ) -> Self {
        self.source = Some(SourceSpec {
            path: path.into(),
            schema,
            parse: Arc::new(parse),
        });
        self
    }

    /// The key of a record, as bytes.
    pub fn key_by(mut self, key: impl Fn(&F::In) -> Vec<u8> + Send + Sync + 'static) -> Self {
        self.key_of = Some(Arc::new(key));
        self
    }

    /// The event timestamp of a record, ms since the epoch.
    pub fn timestamps(mut self, ts: impl Fn(&F::In) -> i64 + Send + Sync + 'static) -> Self {
        self.timestamp_of = Some(Arc::new(ts));
        self
    }

    /// Writes output as JSON lines into directory `dir`.
    pub fn jsonl_sink(mut self, dir: impl Into<PathBuf>) -> Self {
        self.output = Some(dir.into());
        self
    }

    /// Checkpoint storage directory (default `<output>/_checkpoints`).
    pub fn checkpoint_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.checkpoint_dir = Some(dir.into());
        self
    }

    /// Restore from the latest completed checkpoint instead of starting fresh.
    pub fn restore_latest(mut self, restore: bool) -> Self {
        self.restore = restore;
        self
    }

    /// Serve Prometheus metrics on `addr`.
    pub fn metrics_addr(mut self, addr: Option<std::net::SocketAddr>) -> Self {
        self.metrics_addr = addr;
        self
    }

    /// Runs the job to the end of its input; the final checkpoint commits
    /// all output. Errors are one-line reasons (see [`RuntimeError`]).
    pub fn run(self) -> Result<JobReport> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(self.config.parallelism.clamp(2, 64) as usize)
            .enable_all()
            .build()
            .map_err(RuntimeError::io(Path::new("tokio runtime")))?;
        runtime.block_on(self.run_async())
    }

    fn missing(what: &str) -> RuntimeError {
        RuntimeError::Config {
            key: what.into(),
            reason: "the pipeline has none".into(),
        }
    }

    async fn run_async(mut self) -> Result<JobReport> {
        let started = Instant::now();
        if let Some(addr) = self.metrics_addr {
            crate::metrics::serve(addr)?;
        }
        let spec = self.source.take().ok_or_else(|| Self::missing("source"))?;
        let key_of = self.key_of.take().ok_or_else(|| Self::missing("key_by"))?;
        let timestamp_of = self
            .timestamp_of
            .take()
            .ok_or_else(|| Self::missing("timestamps"))?;
        let output = self.output.clone().ok_or_else(|| Self::missing("sink"))?;
        let checkpoint_dir = self
            .checkpoint_dir
            .clone()
            .unwrap_or_else(|| output.join("_checkpoints"));
        let storage = CheckpointStorage::open(&checkpoint_dir)?;
        let _output_lock = crate::checkpoint::lock_dir(&output, "output directory")?;
        let restored = self.restore_point(&storage)?;
        let position = restored
            .as_ref()
            .map_or(Position::default(), |m| m.source.position);
        let source = FileSource::open(
            &spec.path,
            Format::from_path(&spec.path)?,
            &spec.schema,
            position,
        )?;
        if let Some(m) = restored
            .as_ref()
            .filter(|m| m.source.input_bytes != source.input_bytes())
        {
            return Err(RuntimeError::checkpoint(
                storage.root(),
                format!(
                    "checkpoint {} was taken reading a {}-byte input, but {} has {} bytes: restore needs the same input file",
                    m.id,
                    m.source.input_bytes,
                    spec.path.display(),
                    source.input_bytes()
                ),
            ));
        }

        let restore_started = Instant::now();
        let lineage = restored
            .as_ref()
            .and_then(|m| m.l3_lineage)
            .unwrap_or_else(|| chrono::Utc::now().timestamp_micros());
        let cold = self.connect_l3(lineage, restored.as_ref()).await?;
        let (par, sink_par) = restored.as_ref().map_or(
            (self.config.parallelism, self.config.sink_parallelism()),
            |m| (m.parallelism, m.sinks.len() as u32),
        );
        let (ack_tx, ack_rx) = mpsc::channel(2 * (par + sink_par) as usize + 4);
        let (trigger_tx, trigger_rx) = mpsc::channel(1);
        let (done_tx, done_rx) = watch::channel(restored.as_ref().map_or(0, |m| m.id));
        let mut w = Wiring {
            work: self
                .config
                .local_dir
                .clone()
                .unwrap_or_else(|| storage.root().join("_work")),
            budget: L2Budget::new(self.config.l2_memory as usize),
            run_id: format!(
                "{:x}",
                chrono::Utc::now().timestamp_nanos_opt().unwrap_or_default()
                    ^ i64::from(std::process::id())
            ),
            config: self.config.clone(),
            storage: storage.clone(),
            restored,
            output,
            progress: Arc::new(Progress::default()),
            acks: ack_tx,
            completed: done_rx,
            tasks: tokio::task::JoinSet::new(),
            clocks: Vec::new(),
            cold: cold.clone(),
        };
        let to_sinks = w.spawn_sinks::<F::Out>(par, sink_par)?;
        let mut to_ops = Vec::new();
        let mut stores = Vec::new();
        for (i, to_sink) in to_sinks.into_iter().enumerate() {
            let (tx, rx) = edge(w.config.channel_capacity);
            to_ops.push(tx);
            stores.push(w.spawn_keyed((self.factory)(), i as u32, par, rx, to_sink)?);
        }
        let restore_time = restore_started.elapsed();
        w.spawn_source(SourceParts {
            source,
            spec,
            key_of,
            timestamp_of,
            to_ops,
            triggers: trigger_rx,
        })?;
        let coordinator = tokio::spawn(
            Coordinator {
                storage,
                job: self.name.clone(),
                interval: w.config.checkpoint_interval,
                retained: w.config.checkpoints_retained,
                max_parallelism: w.config.max_parallelism,
                parallelism: par,
                sinks: sink_par,
                next_id: w.restored.as_ref().map_or(1, |m| m.id + 1),
                trigger: trigger_tx,
                acks: ack_rx,
                completed: done_tx,
                cold: cold.clone().map(|c| (c, lineage)),
                l3_version: w
                    .restored
                    .as_ref()
                    .and_then(|m| m.l3_version)
                    .unwrap_or(i64::MIN),
            }
            .run(),
        );
        let progress = w.progress.clone();
        let reporter = tokio::spawn(crate::progress::report(
            progress.clone(),
            stores.clone(),
            std::mem::take(&mut w.clocks),
        ));
        let outcome = tokio::select! {
            outcome = join_all(&mut w.tasks) => outcome,
            signal = shutdown_signal() => Err(RuntimeError::Interrupted { signal, checkpoint: *w.completed.borrow() }),
        };
        reporter.abort();
        outcome?;
        let checkpoints = coordinator
            .await
            .map_err(|e| RuntimeError::Function(format!("checkpoint coordinator: {e}")))??;
        let tiers = crate::progress::tier_totals(&stores);
        // The final checkpoint holds everything: the live RocksDB
        // directories are no longer needed once their stores are closed.
        drop(stores);
        let _ = reporter.await;
        std::fs::remove_dir_all(&w.work).map_err(RuntimeError::io(&w.work))?;
        use std::sync::atomic::Ordering::Relaxed;
        Ok(JobReport {
            records_in: progress.records_in.load(Relaxed),
            records_out: progress.records_out.load(Relaxed),
            dead_letters: progress.dead_letters.load(Relaxed),
            elapsed: started.elapsed(),
            restored_from: w.restored.as_ref().map(|m| m.id),
            restore_time: if w.restored.is_some() {
                restore_time
            } else {
                Duration::ZERO
            },
            checkpoints,
            tiers,
            l3: cold.map(|c| c.stats()),
        })
    }

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

    /// Connects to L3 when the configuration turns it on, claims it for
    /// this run (a table another job uses, or a zombie, is refused; see
    /// `strata_cache::l3`), and pins the version of the restored checkpoint
    /// (whose picked keys a restored store moves again).
    async fn connect_l3(
        &self,
        lineage: i64,
        restored: Option<&CheckpointMetadata>,
    ) -> Result<Option<Arc<CassandraTier>>> {
        if !self.config.l3.enabled() {
            return Ok(None);
        }
        self.check_migrated_state()?;
        let config = self.config.l3.client_config(lineage);
        let restored_id = restored.map_or(0, |m| m.id);
        let run = chrono::Utc::now().timestamp_nanos_opt().unwrap_or_default()
            ^ i64::from(std::process::id());
        let tier = tokio::task::spawn_blocking(move || {
            let tier = CassandraTier::connect(config)?;
            tier.claim(run, restored_id)?;
            Ok::<_, strata_cache::StateError>(tier)
        })
        .await
        .map_err(|e| RuntimeError::Function(format!("L3 connect: {e}")))??;
        if let Some((id, version)) = restored.and_then(|m| Some((m.id, m.l3_version?))) {
            tier.pin_version(id, version);
        }
        Ok(Some(Arc::new(tier)))
    }

    fn restore_point(&self, storage: &CheckpointStorage) -> Result<Option<CheckpointMetadata>> {
        let latest = storage.latest()?;
        if !self.restore {
            if let Some(m) = latest {
                return Err(RuntimeError::checkpoint(
                    storage.root(),
                    format!("already holds checkpoint {} of an earlier run: pass --restore latest to continue it, or use an empty checkpoint directory", m.id),
                ));
            }
            return Ok(None);
        }
        let Some(meta) = latest else {
            // Killed before its first checkpoint: nothing was committed, so
            // the run starts over (the sinks delete the uncommitted files).
            eprintln!(
                "strata: no completed checkpoint in {}: starting from the beginning",
                storage.root().display()
            );
            return Ok(None);
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
        meta.validate(&self.config).map_err(|reason| {
            RuntimeError::checkpoint(
                storage.root(),
                format!("checkpoint {} is inconsistent: {reason}", meta.id),
            )
        })?;
        storage.sweep_incomplete()?;
        Ok(Some(meta))
    }
}

/// The source and what it routes to, for [`Wiring::spawn_source`].
struct SourceParts<I> {
    source: FileSource,
    spec: SourceSpec<I>,
    key_of: KeyFn<I>,
    timestamp_of: TimestampFn<I>,
    to_ops: Vec<mpsc::Sender<Message<Keyed<I>>>>,
    triggers: mpsc::Receiver<Trigger>,
}

/// What the tasks of one run share while they are being spawned.
struct Wiring {
    config: JobConfig,
    storage: CheckpointStorage,
    restored: Option<CheckpointMetadata>,
    output: PathBuf,
    work: PathBuf,
    budget: L2Budget,
    run_id: String,
    progress: Arc<Progress>,
    acks: mpsc::Sender<Ack>,
    completed: watch::Receiver<u64>,
    tasks: tokio::task::JoinSet<Result<()>>,
    clocks: Vec<TaskClock>,
    cold: Option<Arc<CassandraTier>>,
}

impl Wiring {
    fn times(&mut self, name: String) -> Arc<TaskTimes> {
        let times = Arc::new(TaskTimes::default());
        self.clocks.push(TaskClock::new(name, times.clone()));
        times
    }

    /// Spawns `sinks` sink instances; keyed instance i feeds sink i % sinks
    /// (so a key's records stay in order). Returns the edge of each keyed
    /// instance.
    fn spawn_sinks<O: Serialize + Send + 'static>(
        &mut self,
        keyed: u32,
        sinks: u32,
    ) -> Result<Vec<mpsc::Sender<Message<O>>>> {
        let (senders, mut receivers): (Vec<_>, Vec<_>) = (0..keyed)
            .map(|_| edge(self.config.channel_capacity))
            .unzip();
        let throttle = self.config.sink_rate.map(Throttle::new);
        for j in (0..sinks).rev() {
            let inputs: Vec<_> = (0..receivers.len())
                .rev()
                .filter(|i| *i as u32 % sinks == j)
                .map(|i| receivers.remove(i))
                .collect();
            let times = self.times(format!("sink-{j}"));
            let restored = self.restored.as_ref().map(|m| m.sinks[j as usize].clone());
            let sink = SinkTask::<O> {
                index: j,
                gate: InputGate::new(inputs, times),
                sink: FileSink::open(&self.output, "part", j, restored)?,
                throttle: throttle.clone(),
                acks: self.acks.clone(),
                completed: self.completed.clone(),
                progress: self.progress.clone(),
            };
            self.tasks.spawn(sink.run());
        }
        Ok(senders)
    }

    /// Opens (or restores) keyed instance `i`'s store and spawns the instance.
    fn spawn_keyed<F: KeyedProcessFunction>(
        &mut self,
        function: F,
        i: u32,
        parallelism: u32,
        input: mpsc::Receiver<Message<Keyed<F::In>>>,
        output: mpsc::Sender<Message<F::Out>>,
    ) -> Result<StateStore> {
        let snapshot = self.restored.as_ref().map(|m| &m.operators[i as usize]);
        let manifest = snapshot.map(|s| &s.manifest);
        let store = open_store(
            &self.work.join(format!("op-{i}")),
            &function.states(),
            self,
            parallelism,
            manifest,
        )?;
        let mut uploader =
            IncrementalUploader::new(self.storage.root(), &format!("{}-op{i}", self.run_id));
        if let Some(s) = snapshot {
            store.clock().advance_watermark(s.watermark);
            uploader.seed(&s.manifest);
        }
        let times = self.times(format!("keyed-{i}"));
        let keyed = KeyedTask {
            index: i,
            key_groups: KeyGroupRange::for_operator(self.config.max_parallelism, parallelism, i),
            function,
            timers: KeyedTask::<F>::restore_timers(&store)?,
            store: store.clone(),
            gate: InputGate::new(vec![input], times.clone()),
            out: Output::new(vec![output], times),
            batch_size: self.config.batch_size,
            uploader: Arc::new(Mutex::new(uploader)),
            local_checkpoints: self.work.join(format!("op-{i}-checkpoints")),
            acks: self.acks.clone(),
            progress: self.progress.clone(),
            completed: self.completed.clone(),
        };
        self.tasks.spawn(keyed.run());
        Ok(store)
    }

    fn spawn_source<I: Send + 'static>(&mut self, parts: SourceParts<I>) -> Result<()> {
        let times = self.times("source".into());
        let c = &self.config;
        let restored = self.restored.as_ref().map(|m| &m.source);
        let dead_letter = FileSink::open(
            &self.output,
            "dead-letter",
            0,
            restored.map(|s| s.dead_letter.clone()),
        )?;
        let task = SourceTask {
            source: parts.source,
            schema: parts.spec.schema,
            parse: parts.spec.parse,
            key_of: parts.key_of,
            timestamp_of: parts.timestamp_of,
            out: Output::new(parts.to_ops, times),
            max_parallelism: c.max_parallelism,
            batch_size: c.batch_size,
            throttle: c.source_rate.map(Throttle::new),
            policy: c.bad_input,
            dead_letter,
            dead_letters: restored.map_or(0, |s| s.dead_letters),
            out_of_orderness_ms: c.out_of_orderness_ms,
            watermark_interval: c.watermark_interval,
            max_timestamp: restored.map_or(i64::MIN, |s| s.max_timestamp),
            triggers: parts.triggers,
            acks: self.acks.clone(),
            completed: self.completed.clone(),
            progress: self.progress.clone(),
        };
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

/// Resolves when the process receives SIGINT or SIGTERM, naming it.
async fn shutdown_signal() -> &'static str {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut int), Ok(mut term)) = (
        signal(SignalKind::interrupt()),
        signal(SignalKind::terminate()),
    ) else {
        return std::future::pending().await;
    };
    tokio::select! {
        _ = int.recv() => "SIGINT",
        _ = term.recv() => "SIGTERM",
    }
}

/// Waits for every task; the first real failure (not a disconnection it
/// caused) aborts the rest and is returned.
async fn join_all(tasks: &mut tokio::task::JoinSet<Result<()>>) -> Result<()> {
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
