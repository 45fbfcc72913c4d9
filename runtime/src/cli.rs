//! The `strata` command line.
//!
//! ```text
//! strata run route-history|user-history --input <file> --output <dir> [--checkpoint-dir <dir>]
//!        [--restore latest|ID|PATH] [--config <file.toml>] [-D key=value ...] [--metrics-addr <host:port>]
//!        [--query-addr <host:port>]
//! strata checkpoints list <checkpoint-dir>
//! strata state get <checkpoint-dir> <state-name> <key>...
//! strata state get --job http://<query-addr> [--since T] [--limit N] [--entry K] <state-name> <key>...
//! strata migration write-back <job> --checkpoint-dir <dir> [--config <file.toml>] [-D key=value ...]
//! strata topic load <file> --brokers <host:port> --topic <T> --key <col>[,<col>...] [--partitions N]
//! strata topic read --brokers <host:port> --topic <T> [--read-committed] [--output <file.jsonl>]
//! ```
//!
//! `--input` and `--output` of `run` also take `kafka://host:port/topic`.

use crate::config::JobConfig;
use crate::error::{Result, RuntimeError};
use crate::function::KeyedProcessFunction;
use crate::inspect::KeyState;
pub use crate::job_spec::{JobSpec, PipelineRun};
use crate::jobs::route_history::{self, RouteHistory};
use crate::jobs::user_history::{self, UserHistory};
use crate::pipeline::{JobReport, Pipeline, RestoreFrom};
use clap::{Parser, Subcommand, ValueEnum};
use std::path::PathBuf;

/// strata: a stream processor with tiered keyed state.
#[derive(Debug, Parser)]
#[command(name = "strata", version, about)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run a built-in job to the end of its input.
    Run {
        /// The job to run.
        job: Job,
        #[command(flatten)]
        args: RunArgs,
    },
    /// Inspect checkpoints.
    Checkpoints {
        #[command(subcommand)]
        command: CheckpointsCommand,
    },
    /// Read keyed state from the latest completed checkpoint, or from a running job (--job).
    State {
        #[command(subcommand)]
        command: StateCommand,
    },
    /// Tools for moving a Cassandra-backed job to strata and back.
    Migration {
        #[command(subcommand)]
        command: MigrationCommand,
    },
    /// Jobs run by several processes (a consumer group).
    Jobs {
        #[command(subcommand)]
        command: JobsCommand,
    },
    /// Load a file into a Kafka topic, or read a topic out.
    Topic {
        #[command(subcommand)]
        command: crate::topic::TopicCommand,
    },
}

#[derive(Debug, Subcommand)]
enum JobsCommand {
    /// Which process owns which partition of a job run with
    /// `--input kafka://…/topic?group=G`, each shard's last checkpoint and lag.
    Status {
        /// Kafka brokers, host:port[,host:port].
        #[arg(long)]
        brokers: String,
        /// The consumer group (`group=` of `--input`).
        #[arg(long)]
        group: String,
        /// The input topic [default: the one the group's members read].
        #[arg(long)]
        topic: Option<String>,
        #[command(flatten)]
        settings: ConfigArgs,
    },
}

/// Where a command that does not run a job finds the settings it needs
/// (`kafka.*` for TLS and SASL, `state.l3.*` to read L3): the job's
/// configuration file and `-D` overrides.
#[derive(Debug, clap::Args)]
pub(crate) struct ConfigArgs {
    /// The job's TOML configuration file (only the keys this command needs are used).
    #[arg(long)]
    config: Option<PathBuf>,
    /// Set a configuration key, e.g. -D kafka.security.protocol=sasl_ssl (repeatable).
    #[arg(short = 'D', value_name = "KEY=VALUE")]
    overrides: Vec<String>,
}

impl ConfigArgs {
    /// The configuration, checked as a run checks it.
    pub(crate) fn load(&self) -> Result<JobConfig> {
        JobConfig::load(self.config.as_deref(), &self.overrides)
    }

    /// The settings every Kafka client of the command uses, after a first
    /// contact with `brokers` (see `kafka_contact`).
    pub(crate) fn reach(&self, brokers: &str) -> Result<strata_connectors::kafka::KafkaSecurity> {
        crate::kafka_contact::reach_blocking(&self.load()?.kafka.security, &[brokers])
    }
}

#[derive(Debug, Subcommand)]
enum MigrationCommand {
    /// The way back: write the job's state from its latest checkpoint to
    /// L3 — a migrated list state into the old job's table, in its schema —
    /// so that the old job can take over where strata stopped. Give the
    /// job's own L3 settings. Afterwards the checkpoint directory can no
    /// longer be restored.
    WriteBack {
        /// The job whose checkpoints these are.
        job: Job,
        /// The job's checkpoint directory; for a consumer group, the
        /// shared one, whose every shard (`p-<N>`) is written back.
        #[arg(long)]
        checkpoint_dir: PathBuf,
        #[command(flatten)]
        settings: ConfigArgs,
    },
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub(crate) enum Job {
    /// Per flight: count and mean delay of its route's flights in the last 60 days.
    RouteHistory,
    /// Per user event: the user's events and payload bytes in the last 60
    /// days (input columns user_id, event_time, payload).
    UserHistory,
}

/// How a job runs: `strata run <job>`'s flags, and those of a program
/// that runs a job of its own ([`main_for`]).
#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// Input file (.parquet, .csv or .jsonl), or Kafka topics:
    /// kafka://host:port[,host:port]/topic[,topic][?start=earliest|latest].
    /// With `?group=G` (one topic) the process joins consumer group G and
    /// runs the partitions the group gives it, each as a shard with its
    /// own checkpoints in <checkpoint-dir>/p-<partition>: start the same
    /// command on several machines to share the work. A group needs a
    /// Kafka --output, --checkpoint-dir (s3://… with -D
    /// checkpoint.local-copy=<dir>, or a shared directory), and
    /// -D source.kafka.bounded=true to end at the topic's end.
    #[arg(long)]
    pub(crate) input: std::ffi::OsString,
    /// Output directory (JSON-lines part files appear on checkpoint
    /// completion), or a Kafka topic: kafka://host:port/topic (exactly once
    /// through transactions; read it with isolation.level=read_committed).
    #[arg(long)]
    pub(crate) output: std::ffi::OsString,
    /// Checkpoint directory [default: <output>/_checkpoints; required with a Kafka output].
    #[arg(long)]
    pub(crate) checkpoint_dir: Option<PathBuf>,
    /// Continue from a checkpoint instead of starting fresh: `latest`, a
    /// checkpoint id (see `strata checkpoints list`), or a checkpoint's
    /// directory `<checkpoint-dir>/chk-<id>`.
    #[arg(long, value_name = "latest|ID|PATH")]
    pub(crate) restore: Option<String>,
    /// A TOML configuration file.
    #[arg(long)]
    pub(crate) config: Option<PathBuf>,
    /// Override a configuration key, e.g. -D checkpoint.interval=2s (repeatable).
    #[arg(short = 'D', value_name = "KEY=VALUE")]
    pub(crate) overrides: Vec<String>,
    /// Serve Prometheus metrics on this address, e.g. 127.0.0.1:9249.
    #[arg(long)]
    pub(crate) metrics_addr: Option<std::net::SocketAddr>,
    /// Answer queries on the running job's state over HTTP on this
    /// address: HOST:PORT, or a port alone for 127.0.0.1 (see the guide,
    /// "Querying state"). Any address but loopback needs the token in
    /// STRATA_QUERY_TOKEN.
    #[arg(long, value_name = "HOST:PORT")]
    pub(crate) query_addr: Option<String>,
}

#[derive(Debug, Subcommand)]
enum CheckpointsCommand {
    /// List completed checkpoints, oldest first.
    List {
        /// A checkpoint directory, or an object store (`s3://bucket/prefix`).
        dir: PathBuf,
    },
}

#[derive(Debug, Subcommand)]
enum StateCommand {
    /// Print one key's state as JSON, from the latest checkpoint
    /// (`strata state get <checkpoint-dir> <state> <key>…`) or from a
    /// running job (`strata state get --job http://127.0.0.1:8081 <state>
    /// <key>…`, see `--query-addr`; the token comes from
    /// STRATA_QUERY_TOKEN). The key is given as its fields: route-history's
    /// `ORIGIN DESTINATION` (e.g. `strata state get out/_checkpoints history
    /// LAS PHL`), user-history's user id (e.g. `… events alice`).
    ///
    /// From a checkpoint it prints `{"checkpoint", "state", "key",
    /// "status", "value"}`: status `live` with the value, `expired` (the
    /// key's state is all past its TTL at the checkpoint's watermark but
    /// still stored, as in L3 before the sweep reaches it), or `no such
    /// key` (also once strata has dropped expired state). A checkpoint of a job with L3 is read through L3:
    /// give the job's --config (or -D state.l3.contact-points=…).
    #[command(after_long_help = states_help())]
    Get {
        /// The query address of a running job, instead of a checkpoint directory.
        #[arg(long, value_name = "URL")]
        job: Option<String>,
        /// With --job, a list state's elements written at or after this
        /// event time (ms since the epoch, or YYYY-MM-DDTHH:MM:SS UTC).
        #[arg(long, requires = "job")]
        since: Option<String>,
        /// With --job, at most this many list elements (the oldest first).
        #[arg(long, requires = "job")]
        limit: Option<String>,
        /// With --job, one entry of a map state (its key, as JSON or text).
        #[arg(long, requires = "job")]
        entry: Option<String>,
        /// Without --job: a checkpoint directory, or an object store
        /// (`s3://bucket/prefix`), whose newest checkpoint is then
        /// downloaded to a temporary folder; then the state's name and the
        /// key's fields.
        #[arg(required = true, num_args = 2.., value_name = "[DIR] STATE KEY")]
        args: Vec<String>,
        #[command(flatten)]
        settings: ConfigArgs,
    },
}

/// Runs the CLI; the error's `Display` is the one-line reason to print.
pub fn main(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Run { job, args } => run_job(job, args),
        Command::Checkpoints {
            command: CheckpointsCommand::List { dir },
        } => {
            for line in crate::inspect::list_checkpoints(&dir)? {
                print_line(&line)?;
            }
            Ok(())
        }
        Command::Migration {
            command:
                MigrationCommand::WriteBack {
                    job,
                    checkpoint_dir,
                    settings,
                },
        } => {
            let config = settings.load()?;
            let all = crate::write_back::write_back_all(
                &checkpoint_dir,
                job.name(),
                &job.states(),
                &config,
            )?;
            for (shard, done) in all {
                let dir = match &shard {
                    Some(shard) => checkpoint_dir.join(shard),
                    None => checkpoint_dir.clone(),
                };
                eprintln!(
                    "strata: wrote {} keys of checkpoint {} to L3 ({}) in {:.1} s; {} can no longer be restored",
                    done.keys,
                    done.checkpoint,
                    done.tables,
                    done.elapsed.as_secs_f64(),
                    dir.display()
                );
            }
            Ok(())
        }
        Command::Topic { command } => crate::topic::main(command),
        Command::Jobs {
            command:
                JobsCommand::Status {
                    brokers,
                    group,
                    topic,
                    settings,
                },
        } => {
            let security = settings.reach(&brokers)?;
            for line in crate::group::status::lines(&brokers, &security, &group, topic.as_deref())?
            {
                print_line(&line)?;
            }
            Ok(())
        }
        Command::State {
            command:
                StateCommand::Get {
                    job,
                    since,
                    limit,
                    entry,
                    args,
                    settings,
                },
        } => {
            let options = [("since", since), ("limit", limit), ("entry", entry)];
            let json = match job {
                Some(url) => crate::query::client::get(&url, &args[0], &args[1..], &options)?,
                None => state_from_checkpoint(&args, &settings.load()?)?,
            };
            print_line(&json.to_string())
        }
    }
}

/// `strata state get <dir> <state> <key>…`: one key's state in the latest
/// checkpoint: live (with its value), expired, or no such key.
fn state_from_checkpoint(args: &[String], config: &JobConfig) -> Result<serde_json::Value> {
    let [dir, state, key @ ..] = args else {
        return Err(RuntimeError::Usage(
            "strata state get <checkpoint-dir> <state> <key>… (or --job <url> <state> <key>…)"
                .into(),
        ));
    };
    if key.is_empty() {
        return Err(RuntimeError::Usage(format!(
            "strata state get {dir} {state}: give the key's fields too"
        )));
    }
    let (dir, _copy) = crate::inspect::local_view(std::path::Path::new(dir))?;
    let name = crate::inspect::latest(&dir)?.job;
    let Some(job) = Job::named(&name) else {
        return Err(RuntimeError::Usage(format!(
            "{} holds checkpoints of job '{name}', whose state `strata state get` cannot print (read it through strata_runtime::inspect::read_key_state)",
            dir.display()
        )));
    };
    let states = job.states();
    let spec = job.queryable_states();
    if !spec.names().contains(&state.as_str()) {
        return Err(RuntimeError::Usage(format!(
            "{name} has no state '{state}' (it has: {})",
            spec.names().join(", ")
        )));
    }
    let stored_key = job.key_of_fields(key)?;
    let read = |store: &strata_cache::StateStore| spec.read(store, state, &stored_key);
    let (meta, found) = crate::inspect::read_key_state(&dir, &states, &stored_key, config, read)?;
    let mut answer = serde_json::json!({"checkpoint": meta.id, "state": state, "key": key});
    answer["status"] = match found {
        KeyState::Live(value) => {
            answer["value"] = value;
            "live".into()
        }
        KeyState::Expired => "expired".into(),
        KeyState::Absent => "no such key".into(),
    };
    Ok(answer)
}

/// The built-in jobs' states, as `strata state get --help` lists them.
fn states_help() -> String {
    let mut text = String::from("States of the built-in jobs:\n");
    for job in [Job::RouteHistory, Job::UserHistory] {
        let spec = job.queryable_states();
        for name in spec.names() {
            text.push_str(&format!(
                "  {:<14} {name} ({}), key: {}\n",
                job.name(),
                spec.kind_of(name).unwrap_or("?"),
                spec.key_fields().join(" ").to_uppercase()
            ));
        }
    }
    text
}

impl Job {
    /// The built-in job of this name (as checkpoints record it).
    fn named(name: &str) -> Option<Job> {
        [Job::RouteHistory, Job::UserHistory]
            .into_iter()
            .find(|j| j.name() == name)
    }

    /// The stored key of a key given field by field.
    fn key_of_fields(self, fields: &[String]) -> Result<Vec<u8>> {
        match self {
            Job::RouteHistory => route_history::key_of_fields(fields),
            Job::UserHistory => user_history::key_of_fields(fields),
        }
    }
}

/// Runs `job` as `args` say: alone, or as this process's shards of the
/// consumer group `--input` names; prints the summary line.
///
/// Errors: a wrong command line or configuration
/// ([`RuntimeError::is_usage`]), a failed or interrupted run.
pub fn run_job<J: JobSpec>(job: J, args: RunArgs) -> Result<()> {
    if let Some(group) = crate::group::command::group_of(&args.input)? {
        let report = crate::group::command::run(job, group, args)?;
        eprintln!("{}", crate::group::summary(&report));
        return Ok(());
    }
    let config = JobConfig::load(args.config.as_deref(), &args.overrides)?;
    let input = args.input.clone();
    let report = job.pipeline(config, &input, Finish(job, args))?;
    eprintln!("{}", summary(&report));
    Ok(())
}

/// The command line of a program that runs a job of its own ([`main_for`]):
/// `<program> run --input … --output … [the flags of strata run]`.
#[derive(Debug, Parser)]
#[command(version, about)]
pub struct JobCli {
    #[command(subcommand)]
    command: JobCommand,
}

#[derive(Debug, Subcommand)]
enum JobCommand {
    /// Run the job to the end of its input (the flags of `strata run`).
    Run(RunArgs),
}

/// The `main` of a program that runs `job`, a job of its own, with the
/// command line, configuration, checkpoints, metrics, queries and
/// consumer groups of `strata run`: parses the arguments, runs, prints
/// `strata: error: …` and exits 2 for a wrong invocation, 1 for a failed
/// job, as `strata` does. `strata checkpoints list` reads its checkpoints.
pub fn main_for<J: JobSpec>(job: J) -> std::process::ExitCode {
    let cli = JobCli::parse();
    let JobCommand::Run(args) = cli.command;
    exit_code(run_job(job, args))
}

/// The exit code of a command's result, its error printed: 2 for a wrong
/// invocation (as clap's own usage errors), 1 for a failed job.
pub fn exit_code(result: Result<()>) -> std::process::ExitCode {
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("strata: error: {e}");
            if e.is_usage() {
                std::process::ExitCode::from(2)
            } else {
                std::process::ExitCode::FAILURE
            }
        }
    }
}

impl JobSpec for Job {
    fn name(self) -> &'static str {
        match self {
            Job::RouteHistory => "route-history",
            Job::UserHistory => "user-history",
        }
    }

    fn states(self) -> Vec<strata_cache::StateDescriptor> {
        match self {
            Job::RouteHistory => RouteHistory::default().states(),
            Job::UserHistory => UserHistory::default().states(),
        }
    }

    fn queryable_states(self) -> crate::query::QueryableStates {
        match self {
            Job::RouteHistory => RouteHistory::default().queryable_states(),
            Job::UserHistory => UserHistory::default().queryable_states(),
        }
    }

    fn pipeline(
        self,
        config: JobConfig,
        input: &std::ffi::OsStr,
        then: impl PipelineRun,
    ) -> Result<JobReport> {
        match self {
            Job::RouteHistory => then.run(
                Pipeline::new("route-history", config, RouteHistory::default)
                    .file_source(input, route_history::schema(), route_history::parse)
                    .key_by(route_history::key)
                    .timestamps(|f| f.date),
            ),
            Job::UserHistory => then.run(
                Pipeline::new("user-history", config, UserHistory::default)
                    .file_source(input, user_history::schema(), user_history::parse)
                    .key_by(user_history::key)
                    .timestamps(|e| e.event_time),
            ),
        }
    }
}

/// A plain run of a job: the rest of the command line's settings, then run.
struct Finish<J>(J, RunArgs);

impl<J: JobSpec> PipelineRun for Finish<J> {
    fn run<F>(self, pipeline: Pipeline<F>) -> Result<JobReport>
    where
        F: KeyedProcessFunction,
        F::Out: serde::Serialize,
    {
        finish(pipeline, self.0, self.1)
    }
}

/// Adds the sink, checkpoint and metrics settings of `args` and runs.
fn finish<F>(pipeline: Pipeline<F>, job: impl JobSpec, args: RunArgs) -> Result<JobReport>
where
    F: KeyedProcessFunction,
    F::Out: serde::Serialize,
{
    let (restore, checkpoint_dir) = match &args.restore {
        None => (None, args.checkpoint_dir),
        Some(arg) => restore_arg(arg, args.checkpoint_dir)?,
    };
    let queries = match &args.query_addr {
        Some(addr) => Some(crate::query::QueryService::start(
            crate::query::client::parse_addr(addr)?,
            crate::query::client::token(),
            job.name(),
            job.queryable_states(),
        )?),
        None => None,
    };
    let mut pipeline = pipeline
        .jsonl_sink(&args.output)
        .restore(restore)
        .metrics_addr(args.metrics_addr)
        .query_service(queries);
    if let Some(dir) = checkpoint_dir {
        pipeline = pipeline.checkpoint_dir(dir);
    }
    pipeline.run()
}

/// `--restore latest|ID|PATH` → what to restore and the checkpoint
/// directory (a `chk-<id>` path names its parent, which must agree with
/// `--checkpoint-dir` if that is given too).
fn restore_arg(
    arg: &str,
    checkpoint_dir: Option<PathBuf>,
) -> Result<(Option<RestoreFrom>, Option<PathBuf>)> {
    if arg == "latest" {
        return Ok((Some(RestoreFrom::Latest), checkpoint_dir));
    }
    // `7`, or `chk-7` as `strata checkpoints list` names it: an id in the
    // checkpoint directory.
    if let Ok(id) = arg.strip_prefix("chk-").unwrap_or(arg).parse::<u64>() {
        return Ok((Some(RestoreFrom::Checkpoint(id)), checkpoint_dir));
    }
    let path = PathBuf::from(arg);
    let path = if path.file_name().is_some_and(|n| n == "_metadata") {
        path.parent().map(PathBuf::from).unwrap_or_default()
    } else {
        path
    };
    let id = path
        .file_name()
        .and_then(|n| n.to_str())
        .and_then(|n| n.strip_prefix("chk-"))
        .and_then(|n| n.parse::<u64>().ok());
    let (Some(id), Some(parent)) = (id, path.parent()) else {
        let strata_dir = ["_lock", "_checkpoints"]
            .iter()
            .any(|n| path.join(n).exists())
            || std::fs::read_dir(&path).is_ok_and(|mut entries| {
                entries
                    .any(|e| e.is_ok_and(|e| e.file_name().to_string_lossy().starts_with("chk-")))
            });
        let hint = if strata_dir {
            format!(" ({arg} looks like a checkpoint or output directory: --restore latest with --checkpoint-dir, or its chk-N)")
        } else {
            String::new()
        };
        return Err(RuntimeError::Usage(format!(
            "--restore {arg}: give `latest`, a checkpoint id (e.g. 7) or a checkpoint directory (e.g. out/_checkpoints/chk-7){hint}"
        )));
    };
    let parent = if parent.as_os_str().is_empty() {
        PathBuf::from(".")
    } else {
        parent.to_owned()
    };
    if let Some(dir) = &checkpoint_dir {
        if !same_dir(dir, &parent) {
            return Err(RuntimeError::Usage(format!(
                "--restore {arg} lies in {}, but --checkpoint-dir is {}: give one of them, or make them agree",
                parent.display(),
                dir.display()
            )));
        }
    }
    Ok((Some(RestoreFrom::Checkpoint(id)), Some(parent)))
}

fn same_dir(a: &std::path::Path, b: &std::path::Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => a == b,
    }
}

/// Prints one line to stdout. A reader that went away (`strata … | head`)
/// ends the output quietly; other write errors are errors.
fn print_line(line: &str) -> Result<()> {
    use std::io::Write;
    match writeln!(std::io::stdout().lock(), "{line}") {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => other.map_err(RuntimeError::io(std::path::Path::new("stdout"))),
    }
}

/// The end-of-run summary printed to stderr (also parsed by tests and benchmarks).
pub fn summary(r: &JobReport) -> String {
    let secs = r.elapsed.as_secs_f64().max(1e-9);
    let last = r.checkpoints.last();
    let mean_ms = if r.checkpoints.is_empty() {
        0
    } else {
        r.checkpoints.iter().map(|c| c.duration_ms).sum::<u64>() / r.checkpoints.len() as u64
    };
    let l3 = r.l3.unwrap_or_default();
    let object_store = r.object_store.map_or(String::new(), |t| {
        format!(
            " object_store_bytes_up={} object_store_files_up={} object_store_bytes_down={} object_store_files_down={}",
            t.bytes_up, t.files_up, t.bytes_down, t.files_down
        )
    });
    format!(
        "strata: done. records_in={} records_out={} dead_letters={} elapsed_s={:.2} records_per_s={:.0} \
         restored_from={} restore_ms={} checkpoints={} checkpoints_failed={} checkpoint_mean_ms={} checkpoint_last_state_bytes={} \
         l1_hits={} l1_misses={} l1_hit_ratio={:.4} l2_hits={} l2_misses={} l2_hit_ratio={:.4} l1_spills={} l2_wait_ms={} \
         l3_hits={} l3_misses={} l3_evictions={} l3_evicted_bytes={} l3_reads={} l3_writes={} l3_retries={} l3_errors={}{object_store}",
        r.records_in,
        r.records_out,
        r.dead_letters,
        secs,
        r.records_in as f64 / secs,
        r.restored_from.map_or("none".into(), |id| id.to_string()),
        r.restore_time.as_millis(),
        r.checkpoints.len(),
        r.checkpoints_failed,
        mean_ms,
        last.map_or(0, |c| c.state_bytes),
        r.tiers.l1_hits,
        r.tiers.l1_misses,
        r.tiers.l1_hit_ratio(),
        r.tiers.l2_hits,
        r.tiers.l2_misses,
        r.tiers.l2_hit_ratio(),
        r.tiers.l1_spills,
        r.tiers.lower_wait_ms,
        r.tiers.l3_hits,
        r.tiers.l3_misses,
        r.tiers.l3_evictions,
        r.tiers.l3_evicted_bytes,
        l3.reads,
        l3.writes,
        l3.retries,
        l3.errors,
    )
}
