//! `route-history`: for every flight, the count and mean delay of the flights
//! of the same route in the 60 days up to it.
//!
//! Input: rows `date` (timestamp), `delay`, `distance` (integers), `origin`,
//! `destination` (strings) — the `flights-3m.parquet` file of the npm
//! package `vega-datasets@3.2.1`. Key: the route (origin, destination),
//! encoded as a [`composite_key`].
//! Output per flight, one JSON line:
//! `{"origin":"LAS","destination":"PHL","date":"2001-01-01T00:01:00","delay":33,"flights_60d":1,"avg_delay_60d":33.0}`.
//!
//! The window of a flight F holds the flights of F's route that came at or
//! before F in the input and whose date is later than F's date minus exactly
//! 60 × 24 h, F included. The route's history is a `ListState` with a
//! 60-day event-time TTL — the "two months of events per user" case in
//! miniature: expired flights are skipped on read, trimmed from L1 and
//! dropped by RocksDB's compaction filter. Exact for input no more out of
//! order than `watermark.out-of-orderness` (the flights file is sorted).

use crate::function::{Context, FunctionError, KeyedProcessFunction};
use crate::query::{QueryJson, QueryableStates};
use serde::{Deserialize, Serialize};
use std::time::Duration;
use strata_cache::{composite_key, ListState, StateDescriptor, StateStore, Ttl};
use strata_connectors::{format_timestamp, FieldType, RecordError, Row, Schema};

/// The window length: exactly 60 days, in milliseconds.
pub const WINDOW_MS: i64 = 60 * 24 * 3600 * 1000;
/// The name of the per-route history state.
pub const HISTORY: &str = "history";

/// One input flight.
#[derive(Debug, Clone, PartialEq)]
pub struct Flight {
    /// Departure, ms since the epoch.
    pub date: i64,
    /// Delay in minutes (negative: early).
    pub delay: i64,
    /// Distance in miles.
    pub distance: i64,
    /// Origin airport code.
    pub origin: String,
    /// Destination airport code.
    pub destination: String,
}

/// A flight as kept in a route's history.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FlightEvent {
    /// Departure, ms since the epoch.
    pub date: i64,
    /// Delay in minutes.
    pub delay: i64,
    /// Distance in miles.
    pub distance: i64,
}

/// A flight in a query answer or `strata state get`: its date as text.
impl QueryJson for FlightEvent {
    fn query_json(&self) -> serde_json::Value {
        serde_json::json!({"date": format_timestamp(self.date), "delay": self.delay, "distance": self.distance})
    }
}

/// One output line.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RouteStats {
    /// Origin airport code.
    pub origin: String,
    /// Destination airport code.
    pub destination: String,
    /// The flight's date, `YYYY-MM-DDTHH:MM:SS`.
    pub date: String,
    /// The flight's delay.
    pub delay: i64,
    /// Flights of the route in the window.
    pub flights_60d: u64,
    /// Their mean delay.
    pub avg_delay_60d: f64,
}

/// The input columns.
pub fn schema() -> Schema {
    Schema::new(&[
        ("date", FieldType::Timestamp),
        ("delay", FieldType::Int64),
        ("distance", FieldType::Int64),
        ("origin", FieldType::String),
        ("destination", FieldType::String),
    ])
}

/// Turns a row of [`schema`] into a [`Flight`]; a null in any column is a
/// bad record naming the column.
pub fn parse(mut row: Row, schema: &Schema) -> Result<Flight, RecordError> {
    Ok(Flight {
        date: row.timestamp(schema, 0)?,
        delay: row.int64(schema, 1)?,
        distance: row.int64(schema, 2)?,
        origin: row.take_string(schema, 3)?,
        destination: row.take_string(schema, 4)?,
    })
}

/// The route key of a flight: the pair (origin, destination) as a
/// [`composite_key`], so that no two routes share a key whatever their
/// codes contain.
pub fn key(f: &Flight) -> Vec<u8> {
    composite_key::encode(&[f.origin.as_bytes(), f.destination.as_bytes()])
}

/// The key of a route given as its fields `[origin, destination]` (for
/// `strata state get`).
///
/// Errors: [`crate::RuntimeError::Usage`] unless there are exactly two fields.
pub fn key_of_fields(fields: &[String]) -> crate::Result<Vec<u8>> {
    match fields {
        [origin, destination] => Ok(composite_key::encode(&[
            origin.as_bytes(),
            destination.as_bytes(),
        ])),
        _ => Err(crate::RuntimeError::Usage(format!(
            "a route-history key has two fields, ORIGIN DESTINATION (e.g. LAS PHL); got {}: {}",
            fields.len(),
            fields.join(" ")
        ))),
    }
}

/// The state the job declares.
pub fn states() -> Vec<StateDescriptor> {
    vec![StateDescriptor::list(HISTORY)
        .with_ttl(Ttl::event_time(Duration::from_millis(WINDOW_MS as u64)))]
}

/// The keyed process function of the job.
#[derive(Default)]
pub struct RouteHistory {
    history: Option<ListState<FlightEvent>>,
}

impl KeyedProcessFunction for RouteHistory {
    type In = Flight;
    type Out = RouteStats;

    fn states(&self) -> Vec<StateDescriptor> {
        states()
    }

    fn queryable_states(&self) -> QueryableStates {
        QueryableStates::new(&["origin", "destination"], key_of_fields).list::<FlightEvent>(HISTORY)
    }

    fn open(&mut self, store: &StateStore) -> Result<(), FunctionError> {
        self.history = Some(store.list_state(HISTORY)?);
        Ok(())
    }

    fn process(
        &mut self,
        key: &[u8],
        f: Flight,
        ctx: &mut Context<'_, RouteStats>,
    ) -> Result<(), FunctionError> {
        let history = self
            .history
            .as_ref()
            .ok_or("route-history used before open")?;
        history.add(
            key,
            FlightEvent {
                date: f.date,
                delay: f.delay,
                distance: f.distance,
            },
        )?;
        let window_start = f.date.saturating_sub(WINDOW_MS);
        let (mut count, mut sum) = (0u64, 0i64);
        for e in history.get(key)?.iter().filter(|e| e.date > window_start) {
            count += 1;
            sum += e.delay;
        }
        ctx.emit(RouteStats {
            origin: f.origin,
            destination: f.destination,
            date: format_timestamp(f.date),
            delay: f.delay,
            flights_60d: count,
            avg_delay_60d: sum as f64 / count as f64,
        });
        Ok(())
    }
}
