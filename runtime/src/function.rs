//! The user's code: [`KeyedProcessFunction`] (Flink's name and contract).
//!
//! One instance runs per parallel operator instance. It sees one record at a
//! time, together with the record's key; it reads and writes keyed state
//! through handles obtained in [`KeyedProcessFunction::open`]; it emits
//! output records and registers event-time timers through the [`Context`].
//! A timer for (key, t) fires once the watermark reaches t, calling
//! [`KeyedProcessFunction::on_timer`] with that key; timers are part of
//! checkpoints.

use std::collections::{BTreeSet, HashMap, HashSet};
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

    /// The states a running job lets queries read, how its keys are given
    /// and how its values print (see [`crate::query`]); none by default.
    fn queryable_states(&self) -> crate::query::QueryableStates {
        crate::query::QueryableStates::none()
    }

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
///
/// They are stored in keyed state like any other entry — each key's timer
/// times under that key, so in the key's own key group (the `__timers`
/// value state) — and only the keys whose timers changed since the last
/// checkpoint are written at the next one ([`Timers::take_changed`]).
#[derive(Debug, Default)]
pub(crate) struct Timers {
    pending: BTreeSet<(i64, Vec<u8>)>,
    by_key: HashMap<Vec<u8>, BTreeSet<i64>>,
    changed: HashSet<Vec<u8>>,
}

impl Timers {
    pub(crate) fn register(&mut self, timestamp: i64, key: &[u8]) {
        if self.pending.insert((timestamp, key.to_vec())) {
            self.by_key
                .entry(key.to_vec())
                .or_default()
                .insert(timestamp);
            self.changed.insert(key.to_vec());
        }
    }

    /// Removes and returns the earliest timer at or before `watermark`.
    pub(crate) fn pop_due(&mut self, watermark: i64) -> Option<(i64, Vec<u8>)> {
        let first = self.pending.first()?;
        if first.0 > watermark {
            return None;
        }
        let (ts, key) = self.pending.pop_first()?;
        if let Some(times) = self.by_key.get_mut(&key) {
            times.remove(&ts);
            if times.is_empty() {
                self.by_key.remove(&key);
            }
        }
        self.changed.insert(key.clone());
        Some((ts, key))
    }

    /// The keys whose timers changed since the last call, each with its
    /// timer times now (empty: it has none left).
    pub(crate) fn take_changed(&mut self) -> Vec<(Vec<u8>, Vec<i64>)> {
        std::mem::take(&mut self.changed)
            .into_iter()
            .map(|key| {
                let times = self
                    .by_key
                    .get(&key)
                    .map(|t| t.iter().copied().collect())
                    .unwrap_or_default();
                (key, times)
            })
            .collect()
    }

    /// Timers restored from state: `key`'s timer `times`.
    pub(crate) fn restore(&mut self, key: Vec<u8>, times: Vec<i64>) {
        for ts in times {
            self.pending.insert((ts, key.clone()));
            self.by_key.entry(key.clone()).or_default().insert(ts);
        }
    }
}

/// What a function can do while processing one record or timer.
pub struct Context<'a, O> {
    pub(crate) out: &'a mut Vec<crate::task::Keyed<O>>,
    pub(crate) timers: &'a mut Timers,
    pub(crate) key: &'a [u8],
    pub(crate) key_hash: u64,
    pub(crate) timestamp: i64,
    pub(crate) watermark: i64,
}

impl<O> Context<'_, O> {
    /// Emits an output record (a Kafka sink keys it by the current key).
    pub fn emit(&mut self, record: O) {
        self.out.push(crate::task::Keyed {
            key: self.key.to_vec(),
            hash: self.key_hash,
            ts: self.timestamp,
            pos: crate::task::SourcePos::default(),
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
