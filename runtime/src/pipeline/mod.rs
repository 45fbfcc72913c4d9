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

mod parts;
pub(crate) mod restore;
mod run;
mod source;
pub(crate) mod targets;
mod wiring;

use crate::checkpoint::remote::TransferFigures;
use crate::checkpoint::CheckpointStats;
use crate::config::JobConfig;
use crate::error::Result;
use crate::function::{GenerateFn, KeyFn, KeyedProcessFunction, ParseFn, TimestampFn};
use crate::shard::Shard;
use serde::Serialize;
use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use strata_cache::l3::L3Stats;
use strata_cache::TierStats;
use strata_connectors::{RecordError, Row, Schema};

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

impl RestoreFrom {
    /// "the latest checkpoint" or "checkpoint N", for messages.
    pub(crate) fn describe(self) -> String {
        match self {
            RestoreFrom::Latest | RestoreFrom::LatestIfAny => "the latest checkpoint".into(),
            RestoreFrom::Checkpoint(id) => format!("checkpoint {id}"),
        }
    }
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

    /// Lets `service` answer queries on this run's keyed state while it
    /// runs (see [`crate::query`]); the states it reads are the ones
    /// [`KeyedProcessFunction::queryable_states`] declares.
    pub fn query_service(mut self, service: Option<Arc<crate::query::QueryService>>) -> Self {
        self.queries = service;
        self
    }

    /// Runs the pipeline as shard `shard` of a consumer group (see
    /// [`crate::group`]): it reads only the shard's partition, asks the
    /// shard's fence before each checkpoint goes out, ends with a final
    /// checkpoint when released, and leaves progress and metrics to the
    /// group.
    pub(crate) fn shard(mut self, shard: Shard) -> Self {
        self.shard = Some(shard);
        self
    }

    /// Runs the job to the end of its input; the final checkpoint commits
    /// all output. Errors are one-line reasons (see
    /// [`crate::RuntimeError`]). It runs on the process's tokio runtime,
    /// which it starts on first use: call it from a thread outside that
    /// runtime (a `main`, a thread of your own), not from async code.
    pub fn run(self) -> Result<JobReport> {
        crate::executor::block_on(self.run_async())?
    }
}

/// The folder of a checkpoint directory where Kafka sinks keep their
/// pre-committed epochs (`strata_connectors::kafka::KafkaSink`).
const KAFKA_STAGING: &str = "_kafka";
