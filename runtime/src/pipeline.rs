//! The [`Pipeline`] builder: file source → key-by → keyed process function →
//! JSON-lines sink, with checkpoints and recovery.
//!
//! ```no_run
//! use strata_runtime::{JobConfig, Pipeline};
//! # fn demo<F: strata_runtime::KeyedProcessFunction<Out = serde_json::Value> + Default>() -> strata_runtime::Result<()> {
//! # let schema = strata_connectors::Schema::new(&[]);
//! # let parse = |_r: strata_connectors::Row, _s: &strata_connectors::Schema| -> Result<F::In, strata_connectors::RecordError> { unimplemented!() };
//! let report = Pipeline::new("my-job", JobConfig::default(), F::default)
//!     .file_source("in.parquet", schema, parse)
//!     .key_by(|r: &F::In| Vec::new())
//!     .timestamps(|r: &F::In| 0)
//!     .jsonl_sink("out/")
//!     .checkpoint_dir("checkpoints/")
//!     .run()?;
//! println!("{} records in", report.records_in);
//! # Ok(()) }
//! ```
//!
//! The source runs with parallelism 1; the keyed operator and the sink run
//! with `parallelism` instances each, operator instance i feeding sink
//! instance i. Every edge is bounded (`channel.capacity` batches of
//! `channel.batch-size` records).

use crate::channel::{edge, InputGate, Output, TaskTimes};
use crate::checkpoint::{CheckpointMetadata, CheckpointStats, CheckpointStorage, Coordinator};
use crate::config::JobConfig;
use crate::error::{Result, RuntimeError};
use crate::function::KeyedProcessFunction;
use crate::progress::{Progress, TaskClock};
use crate::task::keyed::{KeyedTask, TIMERS_STATE};
use crate::task::sink::SinkTask;
use crate::task::source::SourceTask;
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use strata_cache::key_group::KeyGroupRange;
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

    async fn run_async(self) -> Result<JobReport> {
        let started = Instant::now();
        if let Some(addr) = self.metrics_addr {
            crate::metrics::serve(addr)?;
        }
        let source_spec = self
            .source
            .as_ref()
            .ok_or_else(|| Self::missing("source"))?;
        let output = self.output.clone().ok_or_else(|| Self::missing("sink"))?;
        let storage = CheckpointStorage::open(
            &self
                .checkpoint_dir
                .clone()
                .unwrap_or_else(|| output.join("_checkpoints")),
        )?;
        let restored = self.restore_point(&storage)?;
        let c = &self.config;
        let par = restored.as_ref().map_or(c.parallelism, |m| m.parallelism);
        let format = Format::from_path(&source_spec.path)?;
        let position = restored
            .as_ref()
            .map_or(Position::default(), |m| m.source.position);
        let source = FileSource::open(&source_spec.path, format, &source_spec.schema, position)?;

        let restore_started = Instant::now();
        let progress = Arc::new(Progress::default());
        let (ack_tx, ack_rx) = mpsc::channel(4 * par as usize + 4);
        let (trigger_tx, trigger_rx) = mpsc::channel(1);
        let (done_tx, done_rx) = watch::channel(restored.as_ref().map_or(0, |m| m.id));
        let run_id = format!(
            "{:x}",
            chrono::Utc::now().timestamp_nanos_opt().unwrap_or_default()
                ^ i64::from(std::process::id())
        );
        let work = c
            .local_dir
            .clone()
            .unwrap_or_else(|| storage.root().join("_work"));
        let budget = L2Budget::new(c.l2_memory as usize);

        let sink_throttle = c.sink_rate.map(Throttle::new);
        let mut tasks = tokio::task::JoinSet::new();
        let mut clocks = Vec::new();
        let mut stores = Vec::new();
        let mut to_ops = Vec::new();
        for i in 0..par {
            let (tx, rx) = edge(c.channel_capacity);
            to_ops.push(tx);
            let (sink_tx, sink_rx) = edge(c.channel_capacity);
            let op_times = Arc::new(TaskTimes::default());
            let sink_times = Arc::new(TaskTimes::default());
            clocks.push(TaskClock::new(format!("keyed-{i}"), op_times.clone()));
            clocks.push(TaskClock::new(format!("sink-{i}"), sink_times.clone()));
            let snapshot = restored.as_ref().map(|m| &m.operators[i as usize]);
            let function = (self.factory)();
            let store = open_store(
                &work.join(format!("op-{i}")),
                &function.states(),
                c,
                par,
                &budget,
                storage.root(),
                snapshot.map(|s| &s.manifest),
            )?;
            if let Some(s) = snapshot {
                store.clock().advance_watermark(s.watermark);
            }
            let mut uploader = IncrementalUploader::new(storage.root(), &format!("{run_id}-op{i}"));
            if let Some(s) = snapshot {
                uploader.seed(&s.manifest);
            }
            stores.push(store.clone());
            let keyed = KeyedTask {
                index: i,
                key_groups: KeyGroupRange::for_operator(c.max_parallelism, par, i),
                function,
                timers: KeyedTask::<F>::restore_timers(&store)?,
                store,
                gate: InputGate::new(vec![rx], op_times.clone()),
                out: Output::new(vec![sink_tx], op_times),
                batch_size: c.batch_size,
                uploader: Arc::new(Mutex::new(uploader)),
                local_checkpoints: work.join(format!("op-{i}-checkpoints")),
                acks: ack_tx.clone(),
                progress: progress.clone(),
            };
            tasks.spawn(keyed.run());
            let sink = SinkTask::<F::Out> {
                index: i,
                gate: InputGate::new(vec![sink_rx], sink_times),
                sink: FileSink::open(
                    &output,
                    "part",
                    i,
                    restored.as_ref().map(|m| m.sinks[i as usize].clone()),
                )?,
                throttle: sink_throttle.clone(),
                acks: ack_tx.clone(),
                completed: done_rx.clone(),
                progress: progress.clone(),
            };
            tasks.spawn(sink.run());
        }
        let restore_time = restore_started.elapsed();
        let source_times = Arc::new(TaskTimes::default());
        clocks.push(TaskClock::new("source".into(), source_times.clone()));
        let dead_letter_state = restored.as_ref().map(|m| m.source.dead_letter.clone());
        let spec = self.source.ok_or_else(|| Self::missing("source"))?;
        let source_task = SourceTask {
            source,
            schema: spec.schema,
            parse: spec.parse,
            key_of: self.key_of.ok_or_else(|| Self::missing("key_by"))?,
            timestamp_of: self
                .timestamp_of
                .ok_or_else(|| Self::missing("timestamps"))?,
            out: Output::new(to_ops, source_times),
            max_parallelism: c.max_parallelism,
            batch_size: c.batch_size,
            throttle: c.source_rate.map(Throttle::new),
            policy: c.bad_input,
            dead_letter: FileSink::open(&output, "dead-letter", 0, dead_letter_state)?,
            dead_letters: restored.as_ref().map_or(0, |m| m.source.dead_letters),
            out_of_orderness_ms: c.out_of_orderness_ms,
            watermark_interval: c.watermark_interval,
            triggers: trigger_rx,
            acks: ack_tx,
            completed: done_rx,
            progress: progress.clone(),
        };
        tasks.spawn(source_task.run());
        let coordinator = Coordinator {
            storage,
            job: self.name.clone(),
            interval: c.checkpoint_interval,
            retained: c.checkpoints_retained,
            max_parallelism: c.max_parallelism,
            parallelism: par,
            next_id: restored.as_ref().map_or(1, |m| m.id + 1),
            trigger: trigger_tx,
            acks: ack_rx,
            completed: done_tx,
        };
        let coordinator = tokio::spawn(coordinator.run());
        let reporter = tokio::spawn(crate::progress::report(
            progress.clone(),
            stores.clone(),
            clocks,
        ));
        let outcome = join_all(&mut tasks).await;
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
        std::fs::remove_dir_all(&work).map_err(RuntimeError::io(&work))?;
        use std::sync::atomic::Ordering::Relaxed;
        Ok(JobReport {
            records_in: progress.records_in.load(Relaxed),
            records_out: progress.records_out.load(Relaxed),
            dead_letters: progress.dead_letters.load(Relaxed),
            elapsed: started.elapsed(),
            restored_from: restored.map(|m| m.id),
            restore_time,
            checkpoints,
            tiers,
        })
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
        let meta = latest.ok_or_else(|| {
            RuntimeError::checkpoint(
                storage.root(),
                "--restore latest: there is no completed checkpoint",
            )
        })?;
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
            return Err(RuntimeError::checkpoint(
                storage.root(),
                format!(
                    "was written with max-parallelism {}; restore with the same value",
                    meta.max_parallelism
                ),
            ));
        }
        storage.sweep_incomplete()?;
        Ok(Some(meta))
    }
}

/// Opens one operator instance's store, restoring its files when a
/// snapshot manifest is given (never from the previous run's live directory).
fn open_store(
    dir: &Path,
    states: &[StateDescriptor],
    c: &JobConfig,
    parallelism: u32,
    budget: &L2Budget,
    storage_root: &Path,
    manifest: Option<&snapshot::SnapshotManifest>,
) -> Result<StateStore> {
    match manifest {
        Some(m) => snapshot::restore(storage_root, m, dir)?,
        None if dir.exists() => std::fs::remove_dir_all(dir).map_err(RuntimeError::io(dir))?,
        None => {}
    }
    let mut builder = StateStore::builder(dir)
        .l1_capacity((c.l1_capacity / u64::from(parallelism)).max(1))
        .l2_budget(budget.clone())
        .max_parallelism(c.max_parallelism)
        .state(StateDescriptor::value(TIMERS_STATE));
    for s in states {
        builder = builder.state(s.clone());
    }
    Ok(builder.open()?)
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
