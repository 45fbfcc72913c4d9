//! What a function sees of the dataflow: its [`Context`] while it handles
//! one record or timer, the [`Keyed`] records that travel between tasks,
//! and the job's closures (parse, key, timestamp, generate).

use super::timers::Timers;
use std::sync::Arc;
use strata_connectors::{RecordError, Row, Schema};

/// Turns a source row into a record (the job's parse function).
pub(crate) type ParseFn<I> =
    Arc<dyn Fn(Row, &Schema) -> std::result::Result<I, RecordError> + Send + Sync>;
/// The key of a record, as bytes (the job's key-by).
pub(crate) type KeyFn<I> = Arc<dyn Fn(&I) -> Vec<u8> + Send + Sync>;
/// The event timestamp of a record, ms since the epoch.
pub(crate) type TimestampFn<I> = Arc<dyn Fn(&I) -> i64 + Send + Sync>;
/// Record `i` of a generator source.
pub(crate) type GenerateFn<I> = Arc<dyn Fn(u64) -> I + Send + Sync>;

/// A record with its key and event timestamp (ms), as it travels from the
/// source to keyed operators.
#[derive(Debug)]
pub(crate) struct Keyed<T> {
    pub(crate) key: Vec<u8>,
    /// `strata_cache::hash::hash_key(&key)`, computed once by the source
    /// (it routes by it) and reused by the state store.
    pub(crate) hash: u64,
    pub(crate) ts: i64,
    /// Where the source read it (default for records a keyed function emits).
    pub(crate) pos: SourcePos,
    pub(crate) value: T,
}

/// A record's source split and the position after it there (a file's
/// record count, a Kafka partition's next offset): what a query's answer
/// reports (see [`crate::query`]).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct SourcePos {
    pub(crate) split: u32,
    pub(crate) next: u64,
}

/// What a function can do while processing one record or timer.
pub struct Context<'a, O> {
    pub(crate) out: &'a mut Vec<Keyed<O>>,
    pub(crate) timers: &'a mut Timers,
    pub(crate) key: &'a [u8],
    pub(crate) key_hash: u64,
    pub(crate) timestamp: i64,
    pub(crate) watermark: i64,
}

impl<O> Context<'_, O> {
    /// Emits an output record (a Kafka sink keys it by the current key).
    pub fn emit(&mut self, record: O) {
        self.out.push(Keyed {
            key: self.key.to_vec(),
            hash: self.key_hash,
            ts: self.timestamp,
            pos: SourcePos::default(),
            value: record,
        });
    }

    /// The current record's timestamp (ms since the epoch), or the timer's.
    pub fn timestamp(&self) -> i64 {
        self.timestamp
    }

    /// The operator's current watermark (ms since the epoch; `i64::MIN`
    /// before the first).
    pub fn current_watermark(&self) -> i64 {
        self.watermark
    }

    /// Registers an event-time timer for the current key at `timestamp`
    /// (ms). Registering the same (key, time) twice fires once.
    pub fn register_event_time_timer(&mut self, timestamp: i64) {
        self.timers.register(timestamp, self.key);
    }
}
