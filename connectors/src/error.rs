//! Errors of `strata-connectors`.

use std::path::PathBuf;

/// A problem with a whole source or sink (the job cannot go on).
#[derive(Debug, thiserror::Error)]
pub enum ConnectorError {
    /// The input file does not exist.
    #[error("input file {0} does not exist")]
    NotFound(PathBuf),
    /// The input file has no bytes.
    #[error("input file {0} is empty")]
    Empty(PathBuf),
    /// The file's format could not be told from its name.
    #[error(
        "cannot tell the format of {0}: use a .parquet, .csv, .jsonl, .ndjson or .json file name"
    )]
    UnknownFormat(PathBuf),
    /// A column the job needs is absent.
    #[error("{path}: missing column '{column}' (the file has: {found})")]
    MissingColumn {
        /// The input file.
        path: PathBuf,
        /// The column the job reads.
        column: String,
        /// The columns the file has.
        found: String,
    },
    /// A column has a type the job cannot read.
    #[error("{path}: column '{column}' has type {found}, expected {expected}")]
    WrongType {
        /// The input file.
        path: PathBuf,
        /// The column.
        column: String,
        /// The type the job reads it as.
        expected: &'static str,
        /// The type the file has.
        found: String,
    },
    /// The file is not readable as its format (truncated, corrupt).
    #[error("{path}: not a readable {format} file: {reason}")]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// The format it was read as (Parquet, CSV, JSON lines).
        format: &'static str,
        /// What the reader found.
        reason: String,
    },
    /// The reader stopped before the end of the file: what it read differs
    /// from what the file holds (records would be lost without a word).
    #[error("{path}: reading ended after record {last_record} having read {read} of the {holds} {unit} the file holds")]
    Incomplete {
        /// The input file.
        path: PathBuf,
        /// What the reader read, in `unit`.
        read: u64,
        /// What the file holds, in `unit`.
        holds: u64,
        /// Rows (a Parquet footer counts them) or bytes.
        unit: &'static str,
        /// The number of the last record read.
        last_record: u64,
    },
    /// A Kafka client call failed (`what` says which, on which topic).
    #[error("kafka: {what}: {reason}")]
    Kafka {
        /// The call and its topic.
        what: String,
        /// The client's error.
        reason: String,
    },
    /// A transactional producer was fenced: a newer instance of its
    /// `transactional.id` (another process that took over) started.
    #[error("kafka: {what}: {reason}")]
    KafkaFenced {
        /// The call and its topic.
        what: String,
        /// The client's error, and what fenced the producer.
        reason: String,
    },
    /// A `kafka://` address or a Kafka setting is not usable.
    #[error("{0}")]
    KafkaUsage(String),
    /// A file system error.
    #[error("{path}: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The operating system's error.
        source: std::io::Error,
    },
}

impl ConnectorError {
    /// A failed Kafka call: `what` names the call and its topic.
    pub(crate) fn kafka(
        what: impl Into<String>,
    ) -> impl FnOnce(rdkafka::error::KafkaError) -> Self {
        let what = what.into();
        move |e| ConnectorError::Kafka {
            what,
            reason: kafka_reason(&e),
        }
    }

    pub(crate) fn io(path: &std::path::Path) -> impl FnOnce(std::io::Error) -> Self + '_ {
        move |source| ConnectorError::Io {
            path: path.to_owned(),
            source,
        }
    }
}

/// A problem with one record: the job's bad-input policy decides whether it
/// fails the job or goes to the dead-letter output.
///
/// As JSON (a dead letter of a file output) it holds the record itself
/// too, so that it can be fixed and replayed: `text` and, for a text file,
/// `byte_offset` (see [`crate::FileSource::record_text`]).
#[derive(Debug, Clone, Default, PartialEq, thiserror::Error, serde::Serialize)]
#[error("record {record}{}: {reason}", field.as_ref().map(|f| format!(", field '{f}'")).unwrap_or_default())]
pub struct RecordError {
    /// The record's 1-based position in the input.
    pub record: u64,
    /// The field at fault, if one is.
    pub field: Option<String>,
    /// What is wrong.
    pub reason: String,
    /// Where the record starts in a text file (CSV, JSON lines), in bytes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub byte_offset: Option<u64>,
    /// The record as it was read: a CSV record or a JSON line (without its
    /// line end; bytes that are not UTF-8 become U+FFFD), a Parquet row as
    /// a JSON object, a Kafka message's value. Filled in for dead letters
    /// only; never part of the one-line message.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
}

/// Shorthand for results of this crate.
pub type Result<T, E = ConnectorError> = std::result::Result<T, E>;

/// librdkafka's reason, without the value of a refused configuration
/// property (which may be a secret given under the wrong name).
pub(crate) fn kafka_reason(e: &rdkafka::error::KafkaError) -> String {
    match e {
        rdkafka::error::KafkaError::ClientConfig(_, description, key, _) => {
            format!("client configuration: {key}: {description}")
        }
        other => other.to_string(),
    }
}
