//! The [`Pipeline`] builder: source (a file, Kafka topics or a generator) →
//! key-by → keyed process function → sink (JSON-lines files, a Kafka topic,
//! or a discarding sink), with checkpoints and recovery.
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

pub(crate) mod restore;
pub(crate) mod targets;
mod wiring;

use crate::channel::edge;
use crate::checkpoint::coordinator::{self, Coordinator};
use crate::checkpoint::remote::{self, Remote, TransferFigures};
use crate::checkpoint::{CheckpointMetadata, CheckpointStats, CheckpointStorage};
use crate::config::JobConfig;
use crate::dir_lock::lock_dir;
use crate::error::{Result, RuntimeError};
use crate::fresh_dirs::FreshDirs;
use crate::function::KeyedProcessFunction;
use crate::group::Shard;
use crate::local_dir::LocalDir;
use crate::signals::shutdown_signal;
use crate::task::input::{GeneratorInput, Input, InputKind, KafkaDecoding, KafkaInput};
use serde::Serialize;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};
use strata_cache::l3::L3Stats;
use strata_cache::TierStats;
use strata_connectors::kafka::{KafkaEndpoint, KafkaSource};
use strata_connectors::{FileSource, Format, Position, RecordError, Row, Schema, SourceOptions};
use targets::Target;
use tokio::sync::{mpsc, watch};
use wiring::{join_all, SourceParts, Wiring};

pub(crate) type ParseFn<I> =
    Arc<dyn Fn(Row, &Schema) -> std::result::Result<I, RecordError> + Send + Sync>;
pub(crate) type KeyFn<I> = Arc<dyn Fn(&I) -> Vec<u8> + Send + Sync>;
pub(crate) type TimestampFn<I> = Arc<dyn Fn(&I) -> i64 + Send + Sync>;
pub(crate) type GenerateFn<I> = Arc<dyn Fn(u64) -> I + Send + Sync>;

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
    /// Checkpoints that failed in this run (tolerated; see
    /// `checkpoint.tolerable-failures`).
    pub checkpoints_failed: u32,
    /// Tier figures summed over operator instances.
    pub tiers: TierStats,
    /// What RocksDB did (L2), summed over operator instances.
    pub l2: strata_cache::L2Report,
    /// L3 request figures (`None` without L3).
    pub l3: Option<L3Stats>,
    /// What went to and came from the object store holding the
    /// checkpoints (`None` for a checkpoint directory).
    pub object_store: Option<TransferFigures>,
    /// From the start of the run (restore included) to the first record
    /// read; `None` if none was.
    pub first_record_after: Option<Duration>,
}

/// Which completed checkpoint a run continues from (Flink's `-s`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RestoreFrom {
    /// The newest completed checkpoint; with none (a run killed before its
    /// first checkpoint), the run starts over, as nothing was committed.
    Latest,
    /// Checkpoint `chk-<id>`. An older one than the newest is restored only
    /// once the output newer ones committed is moved away; the newer
    /// checkpoints are then removed, and this run numbers its own after
    /// the newest id used.
    Checkpoint(u64),
    /// The newest completed checkpoint if the storage holds one, else a
    /// fresh start: a shard of a consumer group taking its partition over
    /// (see [`crate::group`]).
    LatestIfAny,
}

enum SourceSpec<I> {
    Rows {
        /// A file path or a `kafka://` address.
        input: OsString,
        schema: Schema,
        parse: ParseFn<I>,
    },
    Generator {
        name: String,
        total: u64,
        generate: GenerateFn<I>,
    },
}

/// Where output goes.
enum SinkSpec {
    /// A directory or a `kafka://` address.
    Named(OsString),
    Discard,
}

/// The input as [`Pipeline::take_parts`] checked it.
enum CheckedInput {
    File(PathBuf, Format),
    Kafka(KafkaEndpoint),
    Generator,
}

/// A job under construction. See the module docs.
pub struct Pipeline<F: KeyedProcessFunction> {
    name: String,
    config: JobConfig,
    factory: Box<dyn Fn() -> F>,
    source: Option<SourceSpec<F::In>>,
    key_of: Option<KeyFn<F::In>>,
    timestamp_of: Option<TimestampFn<F::In>>,
    output: Option<SinkSpec>,
    checkpoint_dir: Option<PathBuf>,
    restore: Option<RestoreFrom>,
    metrics_addr: Option<std::net::SocketAddr>,
    queries: Option<Arc<crate::query::QueryService>>,
    shard: Option<Shard>,
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
            restore: None,
            metrics_addr: None,
            queries: None,
            shard: None,
        }
    }

    /// Reads `input` as rows of `schema`, turned into records by `parse`:
    /// a file (format from its extension), or Kafka topics given as
    /// `kafka://host:port[,host:port]/topic[,topic][?group=G&start=earliest|latest]`
    /// (`group`, default `strata-<job>`, receives the offsets of completed
    /// checkpoints for lag monitoring; the CLI's `?group=` runs a consumer
    /// group of processes instead, see [`crate::group`])
    /// (each message's value one JSON object; see `strata_connectors::kafka`).
    pub fn file_source(
        mut self,
        input: impl Into<OsString>,
        schema: Schema,
        parse: impl Fn(Row, &Schema) -> std::result::Result<F::In, RecordError> + Send + Sync + 'static,
    ) -> Self {
        self.source = Some(SourceSpec::Rows {
            input: input.into(),
            schema,
            parse: Arc::new(parse),
        });
        self
    }

    /// Generates records `generate(0)`, `generate(1)`, … `generate(total -
    /// 1)` as the input (Flink's `fromSequence` followed by a map). The
    /// position a checkpoint records is the index of the next record, so
    /// `generate` must be a pure function of its index for a restored run
    /// to continue exactly; a restore refuses a generator of another `name`.
    pub fn generator_source(
        mut self,
        name: &str,
        total: u64,
        generate: impl Fn(u64) -> F::In + Send + Sync + 'static,
    ) -> Self {
        self.source = Some(SourceSpec::Generator {
            name: name.to_owned(),
            total,
            generate: Arc::new(generate),
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

    /// Writes output as JSON lines into directory `output`, or, given
    /// `kafka://host:port/topic`, to that topic: exactly once through
    /// transactions, each record keyed by its key (then a checkpoint
    /// directory must be given).
    pub fn jsonl_sink(mut self, output: impl Into<OsString>) -> Self {
        self.output = Some(SinkSpec::Named(output.into()));
        self
    }

    /// Drops the output (Flink's `DiscardingSink`): for jobs whose result is
    /// their state, and for benchmarks. The records emitted are counted, not
    /// serialised; a checkpoint directory must be given.
    pub fn discard_sink(mut self) -> Self {
        self.output = Some(SinkSpec::Discard);
        self
    }

    /// Checkpoint storage directory (default `<output>/_checkpoints`; a
    /// Kafka output needs one).
    pub fn checkpoint_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.checkpoint_dir = Some(dir.into());
        self
    }

    /// Restore from the latest completed checkpoint instead of starting
    /// fresh (`false`: start fresh). Same as
    /// `.restore(restore.then_some(RestoreFrom::Latest))`.
    pub fn restore_latest(self, restore: bool) -> Self {
        self.restore(restore.then_some(RestoreFrom::Latest))
    }

    /// Continue from checkpoint `from` of the checkpoint directory (`None`:
    /// start fresh, refusing a directory that holds checkpoints already).
    /// Errors at run: the checkpoint directory does not exist, the
    /// requested checkpoint is not a completed one (the error lists those),
    /// or the output holds part files written after it (listed).
    pub fn restore(mut self, from: Option<RestoreFrom>) -> Self {
        self.restore = from;
        self
    }

    /// Serve Prometheus metrics on `addr`.
    pub fn metrics_addr(mut self, addr: Option<std::net::SocketAddr>) -> Self {
        self.metrics_addr = addr;
        self
    }

    /// Runs the pipeline as shard `shard` of a consumer group (see
    /// [`crate::group`]): it reads only the shard's partition, asks the
    /// shard's fence before each checkpoint goes out, ends with a final
    /// checkpoint when released, and leaves progress and metrics to the
    /// group.
    /// Lets `service` answer queries on this run's keyed state while it
    /// runs (see [`crate::query`]); the states it reads are the ones
    /// [`KeyedProcessFunction::queryable_states`] declares.
    pub fn query_service(mut self, service: Option<Arc<crate::query::QueryService>>) -> Self {
        self.queries = service;
        self
    }

    pub(crate) fn shard(mut self, shard: Shard) -> Self {
        self.shard = Some(shard);
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

    fn source_options(&self) -> SourceOptions {
        SourceOptions {
            csv_multiline_fields: self.config.csv_multiline_fields,
            max_record_bytes: self.config.max_record_bytes,
        }
    }

    /// Everything the builder must have been given, checked before
    /// anything is created on disk.
    fn take_parts(&mut self) -> Result<Parts<F::In>> {
        let spec = self.source.take().ok_or_else(|| Self::missing("source"))?;
        let key_of = self.key_of.take().ok_or_else(|| Self::missing("key_by"))?;
        let timestamp_of = self
            .timestamp_of
            .take()
            .ok_or_else(|| Self::missing("timestamps"))?;
        let output = match self.output.as_ref().ok_or_else(|| Self::missing("sink"))? {
            SinkSpec::Named(output) => Target::output(output, &self.name, &self.config)?,
            SinkSpec::Discard => Target::Discard,
        };
        let remote = self
            .checkpoint_dir
            .as_deref()
            .filter(|d| remote::is_remote(d))
            .map(|d| d.to_string_lossy().into_owned());
        let checkpoint_dir = match (&self.checkpoint_dir, &output) {
            (Some(_), _) if remote.is_some() => self.local_copy(&output)?,
            (Some(dir), _) => dir.clone(),
            (None, Target::Dir(out)) => out.join("_checkpoints"),
            (None, Target::Kafka { .. }) => {
                return Err(RuntimeError::Usage(
                    "a Kafka output needs --checkpoint-dir (where checkpoints and the sink's pre-committed epochs live)".into(),
                ))
            }
            (None, Target::Discard) => {
                return Err(RuntimeError::Usage(
                    "a discarding sink needs a checkpoint directory (Pipeline::checkpoint_dir)"
                        .into(),
                ))
            }
        };
        if let Some(out) = output.dir() {
            check_directory(out, "output directory")?;
        }
        check_directory(&checkpoint_dir, "checkpoint directory")?;
        if let Some(local) = &self.config.local_dir {
            check_directory(local, "local state directory (state.local-dir)")?;
        }
        // A shard of a group restores "the latest, if any": its directory
        // appears with its first checkpoint.
        let must_exist = self.restore.filter(|r| *r != RestoreFrom::LatestIfAny);
        if let (Some(from), false, None) = (must_exist, checkpoint_dir.exists(), &remote) {
            return Err(RuntimeError::Usage(format!(
                "cannot restore {}: checkpoint directory {} does not exist (check the path; without --restore a run starts fresh)",
                from.describe(),
                checkpoint_dir.display()
            )));
        }
        if let (None, Some(out)) = (self.restore, output.dir()) {
            refuse_committed_output(out)?;
        }
        let input = self.check_input(&spec)?;
        let kafka_in = match &input {
            CheckedInput::Kafka(e) => Some(e),
            CheckedInput::File(..) | CheckedInput::Generator => None,
        };
        let dead_letter = targets::dead_letter_target(
            &self.config,
            kafka_in,
            &output,
            &self.name,
            &checkpoint_dir.join(KAFKA_STAGING),
        )?;
        Ok(Parts {
            options: self.source_options(),
            spec,
            input,
            key_of,
            timestamp_of,
            output,
            dead_letter,
            checkpoint_dir,
            remote,
        })
    }

    /// Where a job with checkpoints in an object store keeps its local copy
    /// of them: `checkpoint.local-copy`, else `<output>/_checkpoints`.
    fn local_copy(&self, output: &Target) -> Result<PathBuf> {
        match (&self.config.checkpoint_local_copy, output.dir()) {
            (Some(dir), _) => Ok(dir.clone()),
            (None, Some(out)) => Ok(out.join("_checkpoints")),
            (None, None) => Err(RuntimeError::Usage(
                "checkpoints in an object store need a local copy: set -D checkpoint.local-copy=<dir> (a Kafka or discarding output has no output directory to hold it)".into(),
            )),
        }
    }

    /// Checks the input: a readable file of a known format with the
    /// schema's columns, or a well-formed `kafka://` address.
    fn check_input(&self, spec: &SourceSpec<F::In>) -> Result<CheckedInput> {
        let SourceSpec::Rows { input, schema, .. } = spec else {
            return Ok(CheckedInput::Generator);
        };
        if let Some(uri) = input.to_str().filter(|t| KafkaEndpoint::is_kafka(t)) {
            let e = KafkaEndpoint::parse(uri)?;
            targets::source_options(&e, &self.name, &self.config)?;
            return Ok(CheckedInput::Kafka(e));
        }
        let path = PathBuf::from(input);
        if path.is_dir() {
            return Err(RuntimeError::Usage(format!(
                "input {} is a directory: give a .parquet, .csv or .jsonl file",
                path.display()
            )));
        }
        // Open the input once to check it (exists, format, columns).
        let format = Format::from_path(&path)?;
        FileSource::open_with(
            &path,
            format,
            schema,
            Position::default(),
            &self.source_options(),
        )?;
        Ok(CheckedInput::File(path, format))
    }

    async fn run_async(mut self) -> Result<JobReport> {
        let started = Instant::now();
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
        let mut storage = CheckpointStorage::open(&parts.checkpoint_dir)?;
        if let Some(url) = &parts.remote {
            storage = storage.with_remote(Remote::connect(url, self.config.storage_retry_for)?);
        }
        // A shard's group fences it; a job alone holds its prefix's lease.
        let _lease = match &self.shard {
            Some(shard) => {
                storage = storage.with_fence(shard.fence.clone());
                None
            }
            None => tokio::task::block_in_place(|| storage.lease())?,
        };
        let output_lock = match parts.output.dir() {
            Some(dir) => Some(lock_dir(dir, "output directory")?),
            None => None,
        };
        let restore::RestorePoint { restored, next_id } =
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
        let mut w = Wiring::new(
            self.config.clone(),
            storage.clone(),
            restored,
            wiring::Targets {
                output: parts.output.clone(),
                dead_letter: parts.dead_letter.clone(),
                staging: storage.root().join(KAFKA_STAGING),
            },
            local.path().to_owned(),
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
        let to_sinks = w.spawn_sinks::<F::Out>(par, sink_par)?;
        let mut to_ops = Vec::new();
        let mut stores = Vec::new();
        for (i, to_sink) in to_sinks.into_iter().enumerate() {
            let (tx, rx) = edge(w.config.channel_capacity);
            to_ops.push(tx);
            stores.push(w.spawn_keyed((self.factory)(), i as u32, par, rx, to_sink)?);
        }
        let _queries = self.queries.as_ref().map(|service| {
            service.register(
                self.shard.as_ref().map(|s| s.partition),
                crate::query::ShardQueries {
                    instances: w.query_queues.take().unwrap_or_default(),
                    max_parallelism: w.config.max_parallelism,
                    clocks: stores.iter().map(|s| s.clock().clone()).collect(),
                    completed: w.completed.clone(),
                    progress: w.progress.clone(),
                },
            )
        });
        let restore_time = restore_started.elapsed();
        w.spawn_source(SourceParts {
            source,
            key_of: parts.key_of,
            timestamp_of: parts.timestamp_of,
            to_ops,
            triggers: trigger_rx,
        })?;
        let remote_storage = storage.clone();
        let coordinator = Coordinator {
            storage,
            settings: coordinator::Settings {
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
            trigger: trigger_tx,
            acks: ack_rx,
            completed: done_tx,
            cold: cold.clone(),
            l3_version: w
                .restored
                .as_ref()
                .and_then(|m| m.l3_version)
                .unwrap_or(i64::MIN),
            sweep: None,
        };
        let checkpoints = w.spawn_coordinator(coordinator);
        fresh.keep();
        let progress = w.progress.clone();
        let reporter = tokio::spawn(crate::progress::report(
            progress.clone(),
            stores.clone(),
            std::mem::take(&mut w.clocks),
            self.shard.is_none(),
        ));
        let outcome = tokio::select! {
            outcome = join_all(&mut w.tasks) => outcome,
            signal = shutdown_signal() => Err(RuntimeError::Interrupted { signal, checkpoint: *w.completed.borrow() }),
        };
        reporter.abort();
        outcome?;
        // What the sinks committed after the final checkpoint (published
        // staged epochs) leaves the object store too.
        if remote_storage.remote().is_some() {
            let keep = w.config.checkpoints_retained;
            if let Err(e) = tokio::task::block_in_place(|| remote_storage.retain(keep)) {
                eprintln!("strata: warning: retention after the final checkpoint: {e}");
            }
        }
        let checkpoints =
            std::mem::take(&mut *checkpoints.lock().unwrap_or_else(|p| p.into_inner()));
        let tiers = crate::progress::tier_totals(&stores);
        let l2 = stores
            .iter()
            .fold(strata_cache::L2Report::default(), |mut all, s| {
                all.merge(&s.l2_report());
                all
            });
        // The final checkpoint holds everything: the live RocksDB
        // directories are no longer needed once their stores are closed.
        drop(stores);
        let _ = reporter.await;
        local.clear()?;
        // A normal end leaves no `_lock` behind in the directories it used.
        remote_storage.remove_lock_at_release();
        if let Some(lock) = &output_lock {
            lock.remove_at_release();
        }
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
            checkpoints: checkpoints.completed,
            checkpoints_failed: checkpoints.failed,
            tiers,
            l2,
            l3: cold.map(|c| c.tier.stats()),
            object_store: remote_storage.remote().map(Remote::transfers),
            first_record_after: progress
                .first_record
                .get()
                .map(|at| at.duration_since(started)),
        })
    }
}

/// Refuses a directory argument that is, or lies under, something other
/// than a directory, naming the path the user gave (before anything is
/// created, so a failed start leaves nothing behind).
fn check_directory(path: &Path, role: &str) -> Result<()> {
    let Some(blocker) = path.ancestors().find(|p| p.exists()) else {
        return Ok(());
    };
    if blocker.is_dir() {
        return Ok(());
    }
    let at = if blocker == path {
        "it is a file".to_owned()
    } else {
        format!("{} is a file", blocker.display())
    };
    Err(RuntimeError::Usage(format!(
        "{role} {}: {at}, not a directory",
        path.display()
    )))
}

/// A fresh run refuses an output directory that already holds committed
/// output (its part files would be mixed with this run's).
fn refuse_committed_output(output: &Path) -> Result<()> {
    for prefix in ["part", "dead-letter"] {
        if let Some(name) = strata_connectors::committed_parts(output, prefix, None, 0)?.first() {
            return Err(RuntimeError::Usage(
                strata_connectors::already_holds(output, name).to_string(),
            ));
        }
    }
    Ok(())
}

impl RestoreFrom {
    /// "the latest checkpoint" or "checkpoint N", for messages.
    pub(crate) fn describe(self) -> String {
        match self {
            RestoreFrom::Latest | RestoreFrom::LatestIfAny => "the latest checkpoint".into(),
            RestoreFrom::Checkpoint(id) => format!("checkpoint {id}"),
        }
    }
}

/// What [`Pipeline::take_parts`] checked.
struct Parts<I> {
    options: SourceOptions,
    spec: SourceSpec<I>,
    input: CheckedInput,
    key_of: KeyFn<I>,
    timestamp_of: TimestampFn<I>,
    output: Target,
    dead_letter: Target,
    /// The local checkpoint directory (the local copy, with `remote`).
    checkpoint_dir: PathBuf,
    /// The object store the checkpoints live in (`s3://…`), if any.
    remote: Option<String>,
}

impl<I> Parts<I> {
    /// The Kafka clusters the run reads or writes (input, output, dead
    /// letters), possibly repeated.
    fn kafka_brokers(&self) -> Vec<&str> {
        let input = match &self.input {
            CheckedInput::Kafka(e) => Some(e.brokers.as_str()),
            CheckedInput::File(..) | CheckedInput::Generator => None,
        };
        input
            .into_iter()
            .chain(self.output.brokers())
            .chain(self.dead_letter.brokers())
            .collect()
    }
}

/// The folder of a checkpoint directory where Kafka sinks keep their
/// pre-committed epochs (`strata_connectors::kafka::KafkaSink`).
const KAFKA_STAGING: &str = "_kafka";

/// Opens the source at the restored position (or the start), checking that
/// it is the input the restored checkpoint read. Blocking (Kafka calls).
fn open_source<I>(
    parts: &Parts<I>,
    config: &JobConfig,
    job: &str,
    restored: Option<&CheckpointMetadata>,
    storage: &CheckpointStorage,
    shard: Option<&Shard>,
) -> Result<Input<I>> {
    let (schema, parse) = match &parts.spec {
        SourceSpec::Rows { schema, parse, .. } => (schema.clone(), parse.clone()),
        SourceSpec::Generator { .. } => (Schema::new(&[]), unparsed::<I>()),
    };
    if let Some(m) = restored {
        let (read, reads) = (what_was_read(&m.source), what_is_read(parts));
        if read != reads {
            return Err(RuntimeError::checkpoint(
                storage.root(),
                format!(
                    "checkpoint {}: it read {read}, not {reads}: restore needs the same input",
                    m.id
                ),
            ));
        }
    }
    let kind = match (&parts.input, &parts.spec) {
        (CheckedInput::Kafka(e), _) => open_kafka(e, config, job, restored, &schema, shard)?,
        (CheckedInput::File(path, format), _) => {
            let position = restored.map_or(Position::default(), |m| m.source.position);
            let mut source =
                FileSource::open_with(path, *format, &schema, position, &parts.options)?;
            if let Some(m) = restored {
                source.verify(&m.source.input).map_err(|reason| {
                    RuntimeError::checkpoint(
                        storage.root(),
                        format!(
                            "checkpoint {}: {reason}: restore needs the same input file",
                            m.id
                        ),
                    )
                })?;
            }
            InputKind::File {
                source,
                start: position,
            }
        }
        (
            CheckedInput::Generator,
            SourceSpec::Generator {
                name,
                total,
                generate,
            },
        ) => {
            let start = restored.map_or(0, |m| m.source.position.records);
            InputKind::Generator(GeneratorInput {
                name: name.clone(),
                generate: generate.clone(),
                next: start,
                total: *total,
                start,
            })
        }
        (CheckedInput::Generator, SourceSpec::Rows { .. }) => {
            unreachable!("check_input names rows a file or Kafka")
        }
    };
    Ok(Input {
        kind,
        schema,
        parse,
    })
}

/// A generator's records are never parsed: its inputs are not rows.
fn unparsed<I>() -> ParseFn<I> {
    Arc::new(|_, _| {
        Err(RecordError {
            record: 0,
            field: None,
            reason: "a generator source has no rows to parse".into(),
            ..Default::default()
        })
    })
}

/// What a restored source snapshot read, for messages.
fn what_was_read(s: &crate::checkpoint::SourceSnapshot) -> String {
    match (&s.generator, s.partitions.is_empty()) {
        (Some(name), _) => format!("generator '{name}'"),
        (None, false) => "Kafka topics".into(),
        (None, true) => "a file".into(),
    }
}

/// What this run reads, in the words of [`what_was_read`].
fn what_is_read<I>(parts: &Parts<I>) -> String {
    match (&parts.input, &parts.spec) {
        (_, SourceSpec::Generator { name, .. }) => format!("generator '{name}'"),
        (CheckedInput::Kafka(_), _) => "Kafka topics".into(),
        _ => "a file".into(),
    }
}

/// `source.kafka.format=csv`: per field of `schema`, its cell in a record
/// (`source.kafka.csv-columns`, else the schema's order).
///
/// Errors: a field of the schema that the columns do not name.
fn csv_cells(config: &JobConfig, schema: &Schema) -> Result<Option<Vec<usize>>> {
    if !config.kafka.csv {
        if config.kafka.csv_columns.is_some() {
            return Err(RuntimeError::Usage(
                "source.kafka.csv-columns needs source.kafka.format=csv".into(),
            ));
        }
        return Ok(None);
    }
    let Some(columns) = &config.kafka.csv_columns else {
        return Ok(Some((0..schema.fields.len()).collect()));
    };
    let cells = schema.fields.iter().map(|(name, _)| {
        columns.iter().position(|c| c == name).ok_or_else(|| {
            RuntimeError::Usage(format!(
                "source.kafka.csv-columns ({}) does not name the job's column '{name}' (the job reads {})",
                columns.join(","),
                schema.fields.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>().join(",")
            ))
        })
    });
    Ok(Some(cells.collect::<Result<_>>()?))
}

/// Opens the Kafka source at the restored offsets (or the group's start).
fn open_kafka<I>(
    e: &KafkaEndpoint,
    config: &JobConfig,
    job: &str,
    restored: Option<&CheckpointMetadata>,
    schema: &Schema,
    shard: Option<&Shard>,
) -> Result<InputKind<I>> {
    let mut options = targets::source_options(e, job, config)?;
    options.partitions = shard.map(|s| vec![s.partition]);
    let offsets: Option<Vec<_>> = restored.map(|m| {
        m.source
            .partitions
            .iter()
            .map(|p| strata_connectors::kafka::PartitionOffset {
                topic: p.topic.clone(),
                partition: p.partition,
                offset: p.offset,
            })
            .collect()
    });
    let decoding = KafkaDecoding {
        require_key: config.kafka.require_key,
        record_time: config.kafka.record_time,
        max_bytes: config.kafka.max_message_bytes as usize,
        csv_cells: csv_cells(config, schema)?,
    };
    options.decode = Some(decoding.decoder(schema));
    let source = KafkaSource::open(&options, offsets.as_deref())?;
    if let (Some(shard), Some(&[end])) = (shard, source.end_offsets()) {
        shard.control.set_end(end);
    }
    let mut input = KafkaInput::new(source, schema.clone(), decoding);
    input.shard = shard.map(|s| s.control.clone());
    Ok(InputKind::Kafka(Box::new(input)))
}
