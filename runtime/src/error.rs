//! The error type of `strata-runtime`; errors of the other crates convert
//! into it at the crate boundary.

use std::path::PathBuf;

/// Why a job, or a CLI command, failed. `Display` is the one-line reason the
/// CLI prints.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// An invalid configuration value, named by its key.
    #[error("config key '{key}': {reason}")]
    Config { key: String, reason: String },
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
    Checkpoint { path: PathBuf, reason: String },
    /// A file system error outside the connectors and the store.
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    /// The process was asked to stop (SIGINT, SIGTERM).
    #[error("interrupted by {signal}: output up to checkpoint {checkpoint} is committed; continue with --restore latest")]
    Interrupted {
        signal: &'static str,
        checkpoint: u64,
    },
    /// Wrong use of the CLI or the library (names what to change).
    #[error("{0}")]
    Usage(String),
    /// A task stopped because a neighbour failed (never the root cause).
    #[error("a neighbouring task stopped")]
    Disconnected,
}

impl RuntimeError {
    pub(crate) fn io(path: &std::path::Path) -> impl FnOnce(std::io::Error) -> Self + '_ {
        move |source| RuntimeError::Io {
            path: path.to_owned(),
            source,
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
