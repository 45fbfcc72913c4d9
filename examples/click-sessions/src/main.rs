//! `click-sessions`: a job of its own, run with strata's command line.
//!
//! Input: click events, `{"user_id": "u1", "time": "2026-01-05T10:00:00Z",
//! "page": "/cart"}` (JSON lines, CSV, Parquet, or a Kafka topic keyed by
//! `user_id`). For every user it closes a session once 30 minutes pass
//! without a click (in event time: the watermark passes the last click
//! plus the gap) and writes
//! `{"user_id","start","end","clicks","pages"}`: the session's first and
//! last click times and its pages in click order.
//!
//! It shows the three parts of a job: a [`KeyedProcessFunction`] with
//! its state handles (a `ValueState` and a `ListState`) and event-time
//! timers; a [`JobSpec`] that builds its pipeline; and
//! [`strata_runtime::cli::main_for`], which gives the binary `strata
//! run`'s flags, configuration, checkpoints, metrics, queries and
//! consumer groups:
//!
//! ```text
//! click-sessions run --input 'kafka://127.0.0.1:9092/clicks?group=sessions' \
//!   --output kafka://127.0.0.1:9092/sessions --checkpoint-dir /shared/chk
//! ```
//!
//! See `examples/click-sessions/README.md` and docs/guide.md ("Writing a
//! job").

use serde::Serialize;
use strata_cache::{ListState, StateDescriptor, StateStore, ValueState};
use strata_connectors::{format_timestamp_millis, FieldType, RecordError, Row, Schema};
use strata_runtime::query::QueryableStates;
use strata_runtime::{
    Context, FunctionError, JobConfig, JobReport, JobSpec, KeyedProcessFunction, Pipeline,
    PipelineRun,
};

/// A session ends after this much event time without a click: 30 minutes.
const GAP_MS: i64 = 30 * 60 * 1000;

/// One click.
struct Click {
    user_id: String,
    time: i64,
    page: String,
}

/// One closed session.
#[derive(Debug, Serialize)]
struct Session {
    user_id: String,
    /// The first click, `YYYY-MM-DDTHH:MM:SS.sssZ`.
    start: String,
    /// The last click.
    end: String,
    clicks: usize,
    /// The pages, in click order.
    pages: Vec<String>,
}

/// The keyed process function: per user, the open session's pages (a
/// list, each element stamped with its click's time) and its last click.
#[derive(Default)]
struct Sessionize {
    pages: Option<ListState<String>>,
    last_click: Option<ValueState<i64>>,
}

impl KeyedProcessFunction for Sessionize {
    type In = Click;
    type Out = Session;

    fn states(&self) -> Vec<StateDescriptor> {
        vec![
            StateDescriptor::list("pages"),
            StateDescriptor::value("last_click"),
        ]
    }

    /// `click-sessions` serves the open session over `--query-addr`.
    fn queryable_states(&self) -> QueryableStates {
        QueryableStates::new(&["user_id"], user_key)
            .list::<String>("pages")
            .value::<i64>("last_click")
    }

    fn open(&mut self, store: &StateStore) -> Result<(), FunctionError> {
        self.pages = Some(store.list_state("pages")?);
        self.last_click = Some(store.value_state("last_click")?);
        Ok(())
    }

    /// Adds the click to the user's open session and (re)arms the timer
    /// that closes it: one timer per click, at its time plus the gap. A
    /// click more than the gap after the open session's last one closes
    /// that session first (its timer may not have fired yet: the
    /// watermark lags the clicks by `watermark.max-out-of-orderness`).
    fn process(
        &mut self,
        key: &[u8],
        click: Click,
        ctx: &mut Context<'_, Session>,
    ) -> Result<(), FunctionError> {
        let (pages, last_click) = self.handles()?;
        let mut last = last_click.get(key)?;
        if let Some(open) = last.filter(|l| click.time > l + GAP_MS) {
            self.close(key, open, ctx)?;
            last = None;
        }
        pages.add(key, click.page)?;
        last_click.update(key, last.unwrap_or(i64::MIN).max(click.time))?;
        ctx.register_event_time_timer(click.time + GAP_MS);
        Ok(())
    }

    /// A timer fired: if it is the one of the session's last click, the
    /// session is over; an earlier click's timer finds a later click and
    /// does nothing.
    fn on_timer(
        &mut self,
        key: &[u8],
        timestamp: i64,
        ctx: &mut Context<'_, Session>,
    ) -> Result<(), FunctionError> {
        let (_, last_click) = self.handles()?;
        match last_click.get(key)? {
            Some(last) if last + GAP_MS == timestamp => self.close(key, last, ctx),
            _ => Ok(()),
        }
    }
}

impl Sessionize {
    fn handles(&self) -> Result<(&ListState<String>, &ValueState<i64>), FunctionError> {
        match (&self.pages, &self.last_click) {
            (Some(p), Some(l)) => Ok((p, l)),
            _ => Err("click-sessions used before open".into()),
        }
    }

    /// Emits the open session of `key`, whose last click was at `last`,
    /// and clears it. A `ListView` reads the whole list once; its
    /// elements carry their write times (the clicks' times).
    fn close(
        &self,
        key: &[u8],
        last: i64,
        ctx: &mut Context<'_, Session>,
    ) -> Result<(), FunctionError> {
        let (pages, last_click) = self.handles()?;
        let view = pages.get(key)?;
        let start = view
            .iter_with_timestamps()
            .map(|(t, _)| t)
            .min()
            .unwrap_or(last);
        let session = Session {
            user_id: String::from_utf8_lossy(key).into_owned(),
            start: format_timestamp_millis(start),
            end: format_timestamp_millis(last),
            clicks: view.len(),
            pages: view.iter().cloned().collect(),
        };
        pages.clear(key)?;
        last_click.clear(key)?;
        ctx.emit(session);
        Ok(())
    }
}

/// The input columns.
fn schema() -> Schema {
    Schema::new(&[
        ("user_id", FieldType::String),
        ("time", FieldType::Timestamp),
        ("page", FieldType::String),
    ])
}

/// A row of [`schema`] as a click; a null names its column.
fn parse(mut row: Row, schema: &Schema) -> Result<Click, RecordError> {
    Ok(Click {
        time: row.timestamp(schema, 1)?,
        user_id: row.take_string(schema, 0)?,
        page: row.take_string(schema, 2)?,
    })
}

/// A user's key, given as its one field (queries, `state get`).
fn user_key(fields: &[String]) -> strata_runtime::Result<Vec<u8>> {
    match fields {
        [user] => Ok(user.as_bytes().to_vec()),
        _ => Err(strata_runtime::RuntimeError::Usage(format!(
            "a click-sessions key is one field, the user id; got {}",
            fields.len()
        ))),
    }
}

/// The job, for the command line.
#[derive(Debug, Clone, Copy)]
struct ClickSessions;

impl JobSpec for ClickSessions {
    fn name(self) -> &'static str {
        "click-sessions"
    }

    fn states(self) -> Vec<StateDescriptor> {
        Sessionize::default().states()
    }

    fn queryable_states(self) -> QueryableStates {
        Sessionize::default().queryable_states()
    }

    fn pipeline(
        self,
        config: JobConfig,
        input: &std::ffi::OsStr,
        then: impl PipelineRun,
    ) -> strata_runtime::Result<JobReport> {
        then.run(
            Pipeline::new(self.name(), config, Sessionize::default)
                .file_source(input, schema(), parse)
                .key_by(|c: &Click| c.user_id.as_bytes().to_vec())
                .timestamps(|c: &Click| c.time),
        )
    }
}

fn main() -> std::process::ExitCode {
    strata_runtime::cli::main_for(ClickSessions)
}
