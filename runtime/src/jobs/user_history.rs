//! `user-history`: the per-user event history of the job strata replaces —
//! for every event, how many events and payload bytes the user had in the
//! 60 days up to it — and the job of the migration guide
//! (`docs/migration.md`).
//!
//! Input: rows `user_id` (string), `event_time` (timestamp), `payload`
//! (bytes: a Parquet binary or string column; in CSV and JSON text, whose
//! UTF-8 bytes are the payload, or in JSON `{"base64": "…"}` for a binary
//! one). Key: `user_id`.
//! Output per event, one JSON line:
//! `{"user_id":"u42","event_time":"2026-01-05T10:00:00.250Z","events_60d":3,"payload_bytes_60d":310}`
//! (times in UTC, to the millisecond, as the old job's table keeps them).
//!
//! The history is a `ListState<Vec<u8>>` named `events` (element = payload
//! bytes, element time = event time) with a 60-day event-time TTL. That is
//! exactly the shape of the table a Cassandra-backed job keeps,
//! `user_events (user_id text, event_time timestamp, payload blob,
//! PRIMARY KEY (user_id, event_time))`, so in migration mode
//! (`state.l3.migration.state=events`) L3 reads and writes that table. The
//! window of an event E holds the events of E's user that came at or before
//! E in the input and whose time is later than E's time minus exactly 60
//! days, E included; events of one user with equal times are one row in
//! that table, so the input should not have them.

use crate::function::{Context, FunctionError, KeyedProcessFunction};
use crate::query::QueryableStates;
use serde::Serialize;
use std::time::Duration;
use strata_cache::{ListState, StateDescriptor, StateStore, Ttl};
use strata_connectors::{bytes_json, format_timestamp_millis, FieldType, RecordError, Row, Schema};

/// The window length: exactly 60 days, in milliseconds.
pub const WINDOW_MS: i64 = 60 * 24 * 3600 * 1000;
/// The name of the per-user history state.
pub const EVENTS: &str = "events";

/// One input event.
#[derive(Debug, Clone, PartialEq)]
pub struct UserEvent {
    /// The user.
    pub user_id: String,
    /// When it happened, ms since the epoch.
    pub event_time: i64,
    /// Its payload.
    pub payload: Vec<u8>,
}

/// One output line.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct UserStats {
    /// The user.
    pub user_id: String,
    /// The event's time, `YYYY-MM-DDTHH:MM:SS.sssZ` (UTC).
    pub event_time: String,
    /// The user's events in the window.
    pub events_60d: u64,
    /// Their payload bytes.
    pub payload_bytes_60d: u64,
}

/// The input columns.
pub fn schema() -> Schema {
    Schema::new(&[
        ("user_id", FieldType::String),
        ("event_time", FieldType::Timestamp),
        ("payload", FieldType::Bytes),
    ])
}

/// Turns a row of [`schema`] into a [`UserEvent`]; a null in any column is
/// a bad record naming the column.
pub fn parse(mut row: Row, schema: &Schema) -> Result<UserEvent, RecordError> {
    Ok(UserEvent {
        user_id: row.take_string(schema, 0)?,
        event_time: row.timestamp(schema, 1)?,
        payload: row.take_bytes(schema, 2)?,
    })
}

/// The key of an event: its user id.
pub fn key(e: &UserEvent) -> Vec<u8> {
    e.user_id.as_bytes().to_vec()
}

/// The key of a user given as its one field, the user id (for `strata
/// state get`).
///
/// Errors: [`crate::RuntimeError::Usage`] unless there is exactly one field.
pub fn key_of_fields(fields: &[String]) -> crate::Result<Vec<u8>> {
    match fields {
        [user] => Ok(user.as_bytes().to_vec()),
        _ => Err(crate::RuntimeError::Usage(format!(
            "a user-history key is one field, the user id; got {}: {}",
            fields.len(),
            fields.join(" ")
        ))),
    }
}

/// The state the job declares.
pub fn states() -> Vec<StateDescriptor> {
    vec![StateDescriptor::list(EVENTS)
        .with_ttl(Ttl::event_time(Duration::from_millis(WINDOW_MS as u64)))]
}

/// The keyed process function of the job.
#[derive(Default)]
pub struct UserHistory {
    events: Option<ListState<Vec<u8>>>,
}

impl KeyedProcessFunction for UserHistory {
    type In = UserEvent;
    type Out = UserStats;

    fn states(&self) -> Vec<StateDescriptor> {
        states()
    }

    /// A user's events print as their times and payloads (as text where
    /// they are UTF-8, else `{"base64": "…"}`).
    fn queryable_states(&self) -> QueryableStates {
        QueryableStates::new(&["user_id"], key_of_fields).list_with::<Vec<u8>>(EVENTS, |ts, payload| {
            serde_json::json!({"event_time": format_timestamp_millis(ts), "payload": bytes_json(payload)})
        })
    }

    fn open(&mut self, store: &StateStore) -> Result<(), FunctionError> {
        self.events = Some(store.list_state(EVENTS)?);
        Ok(())
    }

    fn process(
        &mut self,
        key: &[u8],
        e: UserEvent,
        ctx: &mut Context<'_, UserStats>,
    ) -> Result<(), FunctionError> {
        let events = self
            .events
            .as_ref()
            .ok_or("user-history used before open")?;
        events.add(key, e.payload)?;
        let window_start = e.event_time.saturating_sub(WINDOW_MS);
        let (mut count, mut bytes) = (0u64, 0u64);
        for (ts, payload) in events.get(key)?.iter_with_timestamps() {
            if ts > window_start {
                count += 1;
                bytes += payload.len() as u64;
            }
        }
        ctx.emit(UserStats {
            user_id: e.user_id,
            event_time: format_timestamp_millis(e.event_time),
            events_60d: count,
            payload_bytes_60d: bytes,
        });
        Ok(())
    }
}
