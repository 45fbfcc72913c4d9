//! What reading Kafka yields: messages as read ([`Fetched`]), what a poll
//! found, where to resume a partition, how a message becomes a row, and
//! the source's figures. The reader thread makes them; the source hands
//! them on.

use crate::RowResult;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};

/// Turns a message into a row of the job's schema (or says what is wrong
/// with it). It runs on the source's reader thread, beside the task that
/// takes the rows, as a file source's rows are parsed ahead.
#[derive(Clone)]
pub struct RowDecoder(pub Arc<dyn Fn(&Fetched) -> RowResult + Send + Sync>);

impl std::fmt::Debug for RowDecoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RowDecoder")
    }
}

/// Where to resume one partition: the offset of its next message.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PartitionOffset {
    /// Topic.
    pub topic: String,
    /// Partition.
    pub partition: i32,
    /// Offset of the next message to read.
    pub offset: i64,
}

/// One message as read, owned.
#[derive(Debug, Clone)]
pub struct Fetched {
    /// Index of its partition in [`super::KafkaSource::partitions`].
    pub split: usize,
    /// Its offset.
    pub offset: i64,
    /// Its timestamp (ms since the epoch), if it has one.
    pub timestamp: Option<i64>,
    /// Its key.
    pub key: Option<Vec<u8>>,
    /// Its value (`None`: a tombstone, or decoded into `row`).
    pub payload: Option<Vec<u8>>,
    /// Its value decoded ([`super::KafkaSourceOptions::decode`]); a value that
    /// decoded is dropped, one that did not is kept (for dead letters).
    pub row: Option<RowResult>,
}

/// What one [`super::KafkaSource::poll`] found.
#[derive(Debug)]
pub enum Polled {
    /// Messages, in order per partition.
    Records(Vec<Fetched>),
    /// Nothing within the timeout.
    Idle,
    /// Bounded mode: every partition reached its end offset.
    End,
}

/// Backpressure and lag figures of a running source, for metrics.
#[derive(Debug, Default)]
pub struct SourceStats {
    /// Partitions whose reading backpressure holds back now.
    pub paused_partitions: AtomicU64,
    /// Time partitions were paused, ns (the current pause included once it ends).
    pub paused_ns: AtomicU64,
    /// Per partition (as [`super::KafkaSource::partitions`]): end offset minus the
    /// next offset read, refreshed every two seconds.
    pub lag: Mutex<Vec<i64>>,
}

pub(super) enum Batch {
    Records(Vec<Fetched>),
    End,
}
