//! The flags that say how a job runs ([`RunArgs`]) and where a command
//! that does not run one finds its settings ([`ConfigArgs`]), and what
//! `--restore` names.

use crate::config::JobConfig;
use crate::error::{Result, RuntimeError};
use crate::pipeline::RestoreFrom;
use std::path::{Path, PathBuf};

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

/// How a job runs: `strata run <job>`'s flags, and those of a program
/// that runs a job of its own ([`super::main_for`]).
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

/// `--restore latest|ID|PATH` → what to restore and the checkpoint
/// directory (a `chk-<id>` path names its parent, which must agree with
/// `--checkpoint-dir` if that is given too).
pub(super) fn restore_arg(
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

fn same_dir(a: &Path, b: &Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => a == b,
    }
}
