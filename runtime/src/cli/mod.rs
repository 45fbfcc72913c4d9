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

mod args;
mod builtin;
mod group;
mod run;
mod state;
mod topic;

pub use crate::job_spec::{JobSpec, PipelineRun};
pub use args::RunArgs;
pub use run::{main_for, run_job, summary, JobCli};

use crate::error::{Result, RuntimeError};
use args::ConfigArgs;
use builtin::Job;
use clap::{Parser, Subcommand};
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
        command: topic::TopicCommand,
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
    #[command(after_long_help = builtin::states_help())]
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
        } => print_lines(crate::inspect::list_checkpoints(&dir)?),
        Command::Migration {
            command:
                MigrationCommand::WriteBack {
                    job,
                    checkpoint_dir,
                    settings,
                },
        } => write_back(job, &checkpoint_dir, &settings),
        Command::Topic { command } => topic::main(command),
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
            print_lines(crate::group::status::lines(
                &brokers,
                &security,
                &group,
                topic.as_deref(),
            )?)
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
                None => state::state_from_checkpoint(&args, &settings.load()?)?,
            };
            print_line(&json.to_string())
        }
    }
}

/// `strata migration write-back`: every shard's state (or the job's) to
/// L3, a line per checkpoint directory written back.
fn write_back(job: Job, checkpoint_dir: &std::path::Path, settings: &ConfigArgs) -> Result<()> {
    let config = settings.load()?;
    let all =
        crate::write_back::write_back_all(checkpoint_dir, job.name(), &job.states(), &config)?;
    for (shard, done) in all {
        let dir = match &shard {
            Some(shard) => checkpoint_dir.join(shard),
            None => checkpoint_dir.to_owned(),
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

/// Prints `lines` to stdout (see [`print_line`]).
fn print_lines(lines: Vec<String>) -> Result<()> {
    lines.iter().try_for_each(|line| print_line(line))
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
