//! The user's code: [`KeyedProcessFunction`] (Flink's name and contract).
//!
//! One instance runs per parallel operator instance. It sees one record at a
//! time, together with the record's key; it reads and writes keyed state
//! through handles obtained in [`KeyedProcessFunction::open`]; it emits
//! output records and registers event-time timers through the [`Context`].
//! A timer for (key, t) fires once the watermark reaches t, calling
//! [`KeyedProcessFunction::on_timer`] with that key; timers are part of
//! checkpoints.

mod context;
mod timers;

pub use context::Context;
pub(crate) use context::{GenerateFn, KeyFn, Keyed, ParseFn, SourcePos, TimestampFn};
use strata_cache::{StateDescriptor, StateStore};
pub(crate) use timers::{Timers, TIMERS_STATE};

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
