//! The user's code: [`KeyedProcessFunction`] (Flink's name and contract).
//!
//! One instance runs per parallel operator instance. It sees one record at a
//! time, together with the record's key; it reads and writes keyed state
//! through handles obtained in [`KeyedProcessFunction::open`]; it emits
//! output records and registers event-time timers through the [`Context`].
//! A timer for (key, t) fires once the watermark reaches t, calling
//! [`KeyedProcessFunction::on_timer`] with that key; timers are part of
//! checkpoints.

use std::collections::BTreeSet;
use strata_cache::{StateDescriptor, StateStore};

/// The error a user function may return; it fails the job with its message.
pub type FunctionError = Box<dyn std::error::Error + Send + Sync>;

/// A keyed operator.
pub trait KeyedProcessFunction: Send + 'static {
    /// Input record type.
    type In: Send + 'static;
    /// Output record type.
    type Out: Send + 'static;

    /// The states this function uses (names, kinds, TTLs).
    fn states(&self) -> Vec<StateDescriptor>;

    /// Called once per instance before the first record, with its store;
    /// take state handles here.
    fn open(&mut self, store: &StateStore) -> Result<(), FunctionError>;

    /// Processes one record of key `key`.
    fn process(
        &mut self,
        key: &[u8],
        record: Self::In,
        ctx: &mut Context<'_, Self::Out>,
    ) -> Result<(), FunctionError>;

    /// A timer registered for `key` at `timestamp` fired (the watermark
    /// reached it).
    fn on_timer(
        &mut self,
        key: &[u8],
        timestamp: i64,
        ctx: &mut Context<'_, Self::Out>,
    ) -> Result<(), FunctionError> {
        let _ = (key, timestamp, ctx);
        Ok(())
    }
}

/// Event-time timers of one operator instance, ordered by time then key.
#[derive(Debug, Default, Clone, serde::Serialize, serde::Deserialize)]
pub(crate) struct Timers {
    pending: BTreeSet<(i64, Vec<u8>)>,
}

impl Timers {
    pub(crate) fn register(&mut self, timestamp: i64, key: &[u8]) {
        self.pending.insert((timestamp, key.to_vec()));
    }

    /// Removes and returns the earliest timer at or before `watermark`.
    pub(crate) fn pop_due(&mut self, watermark: i64) -> Option<(i64, Vec<u8>)> {
        let first = self.pending.first()?;
        if first.0 > watermark {
            return None;
        }
        self.pending.pop_first()
    }
}

/// What a function can do while processing one record or timer.
pub struct Context<'a, O> {
    pub(crate) out: &'a mut Vec<O>,
    pub(crate) timers: &'a mut Timers,
    pub(crate) key: &'a [u8],
    pub(crate) timestamp: i64,
    pub(crate) watermark: i64,
}

impl<O> Context<'_, O> {
    /// Emits an output record.
    pub fn emit(&mut self, record: O) {
        self.out.push(record);
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
