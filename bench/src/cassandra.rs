//! The two baselines and modes that need Cassandra:
//!
//! * `l3` — strata's store with a cold tier: [`crate::backends::Embedded`]
//!   plus a [`CassandraTier`] and an L2 capacity (each completed checkpoint
//!   moves the coldest keys beyond the capacity to Cassandra);
//! * `cassandra-per-record` — the user's current design: every event reads
//!   the user's history from Cassandra and writes back (one row per event
//!   for the list-add form, the whole list as one blob for the naive form),
//!   two network round trips per event, no local state.

use crate::backends::{Backend, BenchError};
use crate::workload::{Event, Form, Workload, DAY_MS};
use scylla::client::session::Session;
use scylla::client::session_builder::SessionBuilder;
use scylla::statement::prepared::PreparedStatement;
use scylla::value::{CqlValue, Row};
use std::sync::Arc;
use strata_cache::l3::{CassandraTier, L3Config};

/// Where Cassandra is and which keyspace a run uses.
#[derive(Debug, Clone)]
pub(crate) struct Target {
    /// `host:port`.
    pub contact_point: String,
    /// A keyspace of this run alone.
    pub keyspace: String,
    /// The invocation's id (the same in the run and in its restore).
    pub run_id: i64,
}

impl Target {
    /// The keyspace of invocation `run_id` on node `contact_point`.
    pub(crate) fn for_run(contact_point: &str, run_id: i64) -> Self {
        Self {
            contact_point: contact_point.to_owned(),
            keyspace: format!("strata_bench_{run_id}"),
            run_id,
        }
    }

    /// A session with the node, on a runtime of its own; an error naming
    /// the node if it does not answer.
    fn connect(&self) -> Result<(tokio::runtime::Runtime, Session), BenchError> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let session = rt
            .block_on(SessionBuilder::new().known_node(&self.contact_point).build())
            .map_err(|e| {
                format!(
                    "Cassandra at {} does not answer ({e}): start one with scripts/cassandra.sh start, or name it with --cassandra host:port",
                    self.contact_point
                )
            })?;
        Ok((rt, session))
    }

    /// Whether the node answers (checked before any mode runs).
    pub(crate) fn check(&self) -> Result<(), BenchError> {
        self.connect().map(|_| ())
    }

    /// Drops the run's keyspace (its tables and data), if it exists.
    pub(crate) fn drop_keyspace(&self) -> Result<(), BenchError> {
        let (rt, session) = self.connect()?;
        let cql = format!("DROP KEYSPACE IF EXISTS {}", self.keyspace);
        rt.block_on(session.query_unpaged(cql, ()))?;
        Ok(())
    }
}

/// The cold tier of one worker of the `l3` mode.
pub(crate) fn cold_tier(t: &Target, worker: u32) -> Result<Arc<CassandraTier>, BenchError> {
    // The same in the run and in its restore, which goes on with the job.
    let lineage = t.run_id ^ i64::from(worker);
    let mut c = L3Config::new(vec![t.contact_point.clone()], lineage);
    c.keyspace = t.keyspace.clone();
    // Each worker is a job of its own to L3 (its own lineage), so each
    // gets a table of its own.
    c.table = format!("state_w{worker}");
    Ok(Arc::new(CassandraTier::connect(c)?))
}

/// Read-modify-write of Cassandra on every event.
pub(crate) struct PerRecord {
    rt: tokio::runtime::Runtime,
    session: Session,
    read: PreparedStatement,
    write: PreparedStatement,
    count: PreparedStatement,
    form: Form,
    window_ms: i64,
    seq: i32,
}

const KEEP_NAIVE: usize = 100;

fn ddl(ks: &str) -> [String; 3] {
    [
        format!("CREATE KEYSPACE IF NOT EXISTS {ks} WITH replication = {{'class': 'SimpleStrategy', 'replication_factor': 1}}"),
        format!("CREATE TABLE IF NOT EXISTS {ks}.events (user bigint, ts bigint, seq int, payload blob, PRIMARY KEY (user, ts, seq))"),
        format!("CREATE TABLE IF NOT EXISTS {ks}.lists (user bigint PRIMARY KEY, events blob, n bigint)"),
    ]
}

impl PerRecord {
    /// Connects and creates the baseline's tables.
    pub(crate) fn open(t: &Target, w: &Workload) -> Result<Self, BenchError> {
        let (rt, session) = t.connect()?;
        let ks = &t.keyspace;
        let stmts = rt.block_on(async {
            for cql in ddl(ks) {
                session.query_unpaged(cql, ()).await?;
            }
            session.await_schema_agreement().await?;
            let (read, write, count) = match w.form {
                Form::ListAdd => (
                    format!("SELECT ts, payload FROM {ks}.events WHERE user = ? AND ts > ?"),
                    format!("INSERT INTO {ks}.events (user, ts, seq, payload) VALUES (?, ?, ?, ?)"),
                    format!("SELECT count(*) FROM {ks}.events WHERE user = ?"),
                ),
                Form::Naive => (
                    format!("SELECT events, n FROM {ks}.lists WHERE user = ?"),
                    format!("INSERT INTO {ks}.lists (user, events, n) VALUES (?, ?, ?)"),
                    format!("SELECT n FROM {ks}.lists WHERE user = ?"),
                ),
            };
            let mut stmts = Vec::new();
            for cql in [read, write, count] {
                stmts.push(session.prepare(cql).await?);
            }
            Ok::<_, BenchError>(stmts)
        })?;
        let [read, write, count]: [PreparedStatement; 3] =
            stmts.try_into().map_err(|_| "three statements")?;
        Ok(Self {
            rt,
            session,
            read,
            write,
            count,
            form: w.form,
            window_ms: w.history_days as i64 * DAY_MS,
            seq: 0,
        })
    }

    fn run(&self, stmt: &PreparedStatement, values: Vec<CqlValue>) -> Result<Vec<Row>, BenchError> {
        self.rt.block_on(async {
            let result = self.session.execute_unpaged(stmt, values).await?;
            Ok(match result.into_rows_result() {
                Ok(rows) => rows.rows::<Row>()?.collect::<Result<_, _>>()?,
                Err(_) => Vec::new(),
            })
        })
    }
}

fn bigint(row: Option<&Row>, i: usize) -> i64 {
    match row.and_then(|r| r.columns.get(i)) {
        Some(Some(CqlValue::BigInt(n))) => *n,
        _ => 0,
    }
}

impl Backend for PerRecord {
    fn apply(&mut self, user: u64, event: Event) -> Result<(), BenchError> {
        let u = CqlValue::BigInt(user as i64);
        match self.form {
            Form::ListAdd => {
                let window = CqlValue::BigInt(event.ts - self.window_ms);
                let history = self.run(&self.read, vec![u.clone(), window])?;
                std::hint::black_box(history.len());
                self.seq = self.seq.wrapping_add(1);
                let row = vec![
                    u,
                    CqlValue::BigInt(event.ts),
                    CqlValue::Int(self.seq),
                    CqlValue::Blob(event.payload),
                ];
                self.run(&self.write, row)?;
            }
            Form::Naive => {
                let rows = self.run(&self.read, vec![u.clone()])?;
                let mut list: Vec<Event> = match rows.first().and_then(|r| r.columns.first()) {
                    Some(Some(CqlValue::Blob(b))) => postcard::from_bytes(b)?,
                    _ => Vec::new(),
                };
                let n = bigint(rows.first(), 1) + 1;
                list.push(event);
                if list.len() > KEEP_NAIVE {
                    list.remove(0);
                }
                let blob = CqlValue::Blob(postcard::to_stdvec(&list)?);
                self.run(&self.write, vec![u, blob, CqlValue::BigInt(n)])?;
            }
        }
        Ok(())
    }

    fn count(&mut self, user: u64) -> Result<u64, BenchError> {
        let rows = self.run(&self.count, vec![CqlValue::BigInt(user as i64)])?;
        Ok(bigint(rows.first(), 0) as u64)
    }
}
