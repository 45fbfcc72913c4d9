//! # strata-connectors: sources and sinks
//!
//! * [`FileSource`]: Parquet, CSV and JSON-lines input as typed [`Row`]s,
//!   replayable from a [`Position`].
//! * [`FileSink`]: JSON-lines part files committed on checkpoint
//!   completion (two-phase commit), so output is exactly-once across crashes.
//! * [`kafka`]: a Kafka source (paused partitions as backpressure, offsets
//!   in checkpoints) and an exactly-once Kafka sink (transactions), plus
//!   the `strata topic` load and read helpers.
//! * [`Throttle`]: records-per-second pacing for sources and sinks.
//!
//! ```no_run
//! use strata_connectors::{FileSource, Format, Position, Schema, FieldType};
//! let schema = Schema::new(&[("origin", FieldType::String), ("delay", FieldType::Int64)]);
//! let mut src = FileSource::open("flights.csv".as_ref(), Format::Csv, &schema, Position::default())?;
//! while let Some(row) = src.next_row()? {
//!     match row {
//!         Ok(row) => println!("{:?}", row.values),
//!         Err(bad) => eprintln!("{bad}"),
//!     }
//! }
//! # Ok::<(), strata_connectors::ConnectorError>(())
//! ```

mod error;
mod file_sink;
mod file_source;
pub mod identity;
mod json_object;
pub mod kafka;
mod row;
mod throttle;

pub use error::{ConnectorError, RecordError, Result};
pub use file_sink::{already_holds, committed_parts, FileSink, PendingFile, SinkState};
pub use file_source::{
    csv_value_row, json_row, FileSource, Format, Position, RowResult, SourceOptions,
    DEFAULT_MAX_RECORD_BYTES,
};
pub use identity::InputIdentity;
pub use row::{
    bytes_json, check_timestamp, format_timestamp, format_timestamp_millis, parse_text, FieldType,
    Row, Schema, Value, MAX_TIMESTAMP_MS, MIN_TIMESTAMP_MS,
};
pub use throttle::Throttle;
