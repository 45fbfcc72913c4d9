//! The error type of `strata-runtime`; errors of the other crates convert
//! into it at the crate boundary.

use std::path::PathBuf;

/// Why a job, or a CLI command, failed. `Display` is the one-line reason the
/// CLI prints.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// An invalid configuration value, named by its key.
    #[error("config key '{key}': {reason}")]
    Config {
        /// The configuration key, e.g. `checkpoint.interval`.
        key: String,
        /// What is wrong with its value, and the allowed range.
        reason: String,
    },
    /// A source or sink failed as a whole.
    #[error("{0}")]
    Connector(#[from] strata_connectors::ConnectorError),
    /// A bad record, under the `fail` bad-input policy.
    #[error("bad input: {0}")]
    BadRecord(#[from] strata_connectors::RecordError),
    /// The state store failed.
    #[error("state: {0}")]
    State(#[from] strata_cache::StateError),
    /// A user function failed.
    #[error("function failed: {0}")]
    Function(String),
    /// Checkpoint storage is missing, unreadable or inconsistent.
    #[error("checkpoint storage {path}: {reason}")]
    Checkpoint {
        /// The checkpoint directory, file or object store URL.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// A file of checkpoint `id` does not hold what the checkpoint recorded
    /// (its size or xxh3 checksum): the checkpoint cannot be restored.
    #[error("checkpoint {id} cannot be restored: its file {file} is corrupt ({found}); {instead}")]
    CorruptCheckpoint {
        /// The checkpoint.
        id: u64,
        /// The corrupt file.
        file: PathBuf,
        /// What was found instead, and what was recorded.
        found: String,
        /// Which checkpoints can be restored instead, if any.
        instead: String,
    },
    /// RocksDB found a corrupt block while running, in a file that
    /// checkpoints list (see `task::corruption`).
    #[error("{cause}; that file is the checkpoint file {file}, listed by checkpoint(s) {listed_by}, which cannot be restored; {instead}")]
    CorruptWhileRunning {
        /// RocksDB's error.
        cause: String,
        /// The checkpoint file the corrupt block came from.
        file: PathBuf,
        /// The checkpoints that list that file.
        listed_by: String,
        /// Which checkpoints can be restored instead, if any.
        instead: String,
    },
    /// A file system error outside the connectors and the store.
    #[error("{path}: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The operating system's error.
        source: std::io::Error,
    },
    /// The process was asked to stop (SIGINT, SIGTERM).
    #[error("interrupted by {signal}: {}; continue with --restore latest", committed(*checkpoint))]
    Interrupted {
        /// `SIGINT` or `SIGTERM`.
        signal: &'static str,
        /// The last completed checkpoint (0: none), which the committed output reaches.
        checkpoint: u64,
    },
    /// Wrong use of the CLI or the library (names what to change).
    #[error("{0}")]
    Usage(String),
    /// A step of checkpoint `id` failed in task `task` (`source`,
    /// `keyed-<i>`, `sink-<j>`, `coordinator`); `reason` names the file and
    /// the OS error where there is one.
    #[error("checkpoint {id} failed in {task}: {reason}")]
    CheckpointFailed {
        /// The checkpoint.
        id: u64,
        /// The task whose step failed.
        task: String,
        /// Why, naming the file and the OS error where there is one.
        reason: String,
    },
    /// More consecutive checkpoints failed than `checkpoint.tolerable-failures`.
    #[error("{failures} checkpoint(s) failed in a row (checkpoint.tolerable-failures = {tolerable}); the last: {last}")]
    TooManyCheckpointFailures {
        /// Checkpoints that failed in a row.
        failures: u32,
        /// `checkpoint.tolerable-failures`.
        tolerable: u32,
        /// The last failure's cause.
        last: Box<RuntimeError>,
    },
    /// A task stopped because a neighbour's channel closed. Never the root
    /// cause: the runtime reports the error of the task that failed instead;
    /// shown alone only if no task reported one (a bug in strata).
    #[error("a task's input or output closed without an error from any task (a bug in strata: please report it)")]
    Disconnected,
    /// A shard of a consumer group (its input partition) belongs to
    /// another process now: this one stops it without committing (a
    /// zombie is fenced).
    #[error("shard {partition} was given to another process: {reason}")]
    ShardLost {
        /// The shard's input partition.
        partition: i32,
        /// How this process learnt it.
        reason: String,
    },
    /// A process of a consumer group was asked to stop (SIGINT, SIGTERM).
    #[error("interrupted by {signal}: left the consumer group; its shards continue from their last checkpoints in the processes the group gives them to")]
    Left {
        /// `SIGINT` or `SIGTERM`.
        signal: &'static str,
    },
}

/// What an interrupted run has committed.
fn committed(checkpoint: u64) -> String {
    if checkpoint == 0 {
        "no checkpoint completed, so no output is committed (a restore starts over)".into()
    } else {
        format!("output up to checkpoint {checkpoint} is committed")
    }
}

impl RuntimeError {
    /// Whether the error is a wrong invocation rather than a failed job: a
    /// bad configuration value or argument, a directory that cannot be
    /// used, an input file that is missing, of an unknown format or
    /// without the job's columns (the CLI exits 2 for these).
    pub fn is_usage(&self) -> bool {
        use strata_connectors::ConnectorError as C;
        matches!(
            self,
            RuntimeError::Config { .. }
                | RuntimeError::Usage(_)
                | RuntimeError::Connector(
                    C::NotFound(_)
                        | C::UnknownFormat(_)
                        | C::MissingColumn { .. }
                        | C::WrongType { .. }
                        | C::KafkaUsage(_)
                )
        )
    }

    pub(crate) fn io(path: &std::path::Path) -> impl FnOnce(std::io::Error) -> Self + '_ {
        move |source| RuntimeError::Io {
            path: path.to_owned(),
            source,
        }
    }

    /// Puts an error that happened in a step of checkpoint `id` in task
    /// `task` in context (a closed channel stays what it is).
    pub(crate) fn in_checkpoint(self, id: u64, task: &str) -> Self {
        match self {
            // A fenced sink (a newer instance took over) stays what it is:
            // a consumer group counts it as a lost shard, not a failure.
            RuntimeError::Disconnected
            | RuntimeError::CheckpointFailed { .. }
            | RuntimeError::ShardLost { .. }
            | RuntimeError::Connector(strata_connectors::ConnectorError::KafkaFenced { .. }) => {
                self
            }
            e => RuntimeError::CheckpointFailed {
                id,
                task: task.to_owned(),
                reason: e.to_string(),
            },
        }
    }

    pub(crate) fn checkpoint(path: &std::path::Path, reason: impl ToString) -> Self {
        RuntimeError::Checkpoint {
            path: path.to_owned(),
            reason: reason.to_string(),
        }
    }
}

/// Shorthand for results of this crate.
pub type Result<T, E = RuntimeError> = std::result::Result<T, E>;
