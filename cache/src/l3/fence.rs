//! Fencing zombies: one row per job lineage in `<table>_fence` says which
//! run of the job owns L3 and the newest checkpoint it moved there; one
//! more row (lineage [`OWNER`]) says which job lineage the table belongs
//! to, so that a second job — a fresh start on a table another job uses,
//! even one started at the same moment — is refused.
//!
//! A run claims the lineage when it starts ([`Fence::claim`]): only if its
//! restore point is at least that newest checkpoint — a run restored from
//! an older checkpoint while a newer run already moved later ones to L3 is
//! a zombie and is refused. Before writing the keys of checkpoint N, a run
//! advances the row to N ([`Fence::advance`]) on condition it still owns
//! it, so a run that a newer one replaced stops instead of writing. Both
//! are lightweight transactions (Paxos), which Cassandra and ScyllaDB both
//! offer; they run once per run and once per checkpoint, not per key. The
//! versions on every write settle any race that slips between the check and
//! the write.

use super::service::CqlRequest;
use crate::error::{Result, StateError};
use scylla::client::session::Session;
use scylla::statement::prepared::PreparedStatement;
use scylla::value::{CqlValue, Row};
use std::sync::{Arc, Mutex};

/// The lineage key of the row naming the job the table belongs to.
const OWNER: i64 = i64::MIN;

/// The fence statements of one lineage, and this run's claim.
pub(crate) struct Fence {
    table: String,
    lineage: i64,
    insert: Arc<PreparedStatement>,
    claim: Arc<PreparedStatement>,
    advance: Arc<PreparedStatement>,
    select: Arc<PreparedStatement>,
    run: Mutex<Option<i64>>,
}

async fn prepare(session: &Session, cql: String) -> Result<Arc<PreparedStatement>> {
    session
        .prepare(cql.as_str())
        .await
        .map(Arc::new)
        .map_err(|e| StateError::L3(format!("cannot prepare `{cql}`: {e}")))
}

/// The DDL of the fence table of strata's table `table`.
pub(crate) fn ddl(table: &str) -> String {
    format!(
        "CREATE TABLE IF NOT EXISTS {table}_fence (lineage bigint PRIMARY KEY, run bigint, checkpoint bigint)"
    )
}

/// The `[applied]` column of a lightweight transaction's answer.
fn applied(rows: &[Row]) -> bool {
    matches!(
        rows.first().and_then(|r| r.columns.first()),
        Some(Some(CqlValue::Boolean(true)))
    )
}

impl Fence {
    pub(crate) async fn prepare(session: &Session, table: &str, lineage: i64) -> Result<Self> {
        let t = format!("{table}_fence");
        Ok(Self {
            insert: prepare(
                session,
                format!(
                    "INSERT INTO {t} (lineage, run, checkpoint) VALUES (?, ?, ?) IF NOT EXISTS"
                ),
            )
            .await?,
            claim: prepare(
                session,
                format!(
                    "UPDATE {t} SET run = ?, checkpoint = ? WHERE lineage = ? IF checkpoint <= ?"
                ),
            )
            .await?,
            advance: prepare(
                session,
                format!(
                    "UPDATE {t} SET checkpoint = ? WHERE lineage = ? IF run = ? AND checkpoint < ?"
                ),
            )
            .await?,
            select: prepare(
                session,
                format!("SELECT run, checkpoint FROM {t} WHERE lineage = ?"),
            )
            .await?,
            table: table.to_owned(),
            lineage,
            run: Mutex::new(None),
        })
    }

    /// The row's current `(run, checkpoint)`.
    fn current(
        &self,
        read: &impl Fn(CqlRequest) -> Result<Vec<Row>>,
    ) -> Result<(Option<i64>, Option<i64>)> {
        let rows = read(CqlRequest::Read(
            self.select.clone(),
            Arc::new(vec![CqlValue::BigInt(self.lineage)]),
        ))?;
        let col = |i: usize| {
            rows.first()
                .and_then(|r| r.columns.get(i).cloned().flatten())
                .and_then(|v| v.as_bigint())
        };
        Ok((col(0), col(1)))
    }

    fn zombie(&self, theirs: Option<i64>, ours: u64) -> StateError {
        StateError::Fenced(format!(
            "fenced: a newer run of this job already moved checkpoint {} to L3 ({}), \
             but this run is at checkpoint {ours}: it was restored from an older checkpoint, \
             or a newer run replaced it (a zombie); stop it, or restore the latest checkpoint",
            theirs.map_or("?".into(), |t| t.to_string()),
            self.table
        ))
    }

    /// Claims the lineage for run `run`, restored from checkpoint `restored`
    /// (0: a fresh start). With `restoring_moves`, the restored checkpoint
    /// says this table holds its cold state, so the table must already
    /// belong to this lineage. Errors if a newer checkpoint is already in L3.
    pub(crate) fn claim(
        &self,
        read: impl Fn(CqlRequest) -> Result<Vec<Row>>,
        run: i64,
        restored: u64,
        restoring_moves: bool,
    ) -> Result<()> {
        use CqlValue::BigInt;
        if restoring_moves && self.owner(&read)?.is_none() {
            return Err(StateError::L3(format!(
                "the restored checkpoint keeps cold state in {}, but that table holds no claim of any job (truncated, dropped, or another cluster): the keys moved there are missing; restore against the table that holds them",
                self.table
            )));
        }
        self.own_table(&read)?;
        let (lineage, id) = (BigInt(self.lineage), BigInt(restored as i64));
        let insert = vec![lineage.clone(), BigInt(run), id.clone()];
        if !applied(&read(CqlRequest::Read(
            self.insert.clone(),
            Arc::new(insert),
        ))?) {
            let claim = vec![BigInt(run), id.clone(), lineage, id];
            if !applied(&read(CqlRequest::Read(
                self.claim.clone(),
                Arc::new(claim),
            ))?) {
                let (_, theirs) = self.current(&read)?;
                return Err(self.zombie(theirs, restored));
            }
        }
        *self.run.lock().unwrap_or_else(|p| p.into_inner()) = Some(run);
        Ok(())
    }

    /// The lineage the table belongs to, if any.
    fn owner(&self, read: &impl Fn(CqlRequest) -> Result<Vec<Row>>) -> Result<Option<i64>> {
        let rows = read(CqlRequest::Read(
            self.select.clone(),
            Arc::new(vec![CqlValue::BigInt(OWNER)]),
        ))?;
        Ok(rows
            .first()
            .and_then(|r| r.columns.first().cloned().flatten())
            .and_then(|v| v.as_bigint()))
    }

    /// Makes this job's lineage the table's owner, or checks that it is.
    fn own_table(&self, read: &impl Fn(CqlRequest) -> Result<Vec<Row>>) -> Result<()> {
        use CqlValue::BigInt;
        let owner = vec![BigInt(OWNER), BigInt(self.lineage), BigInt(0)];
        if applied(&read(CqlRequest::Read(
            self.insert.clone(),
            Arc::new(owner),
        ))?) {
            return Ok(());
        }
        let job = self.owner(read)?;
        if job == Some(self.lineage) {
            return Ok(());
        }
        Err(StateError::L3(format!(
            "the L3 table {} holds the state of another job (lineage {}): to continue that job, \
             restore its checkpoints (--restore latest with its checkpoint directory); to start \
             over, set another state.l3.keyspace, or TRUNCATE {} and {}_fence",
            self.table,
            job.map_or("?".into(), |j| j.to_string()),
            self.table,
            self.table
        )))
    }

    /// Records that this run moves checkpoint `id` to L3 now; errors if
    /// another run owns the lineage. Claims it first if this run has not.
    pub(crate) fn advance(
        &self,
        read: impl Fn(CqlRequest) -> Result<Vec<Row>>,
        id: u64,
    ) -> Result<()> {
        let claimed = *self.run.lock().unwrap_or_else(|p| p.into_inner());
        let run = match claimed {
            Some(run) => run,
            None => {
                let run = super::next_version(0) ^ i64::from(std::process::id());
                self.claim(&read, run, id, false)?;
                run
            }
        };
        use CqlValue::BigInt;
        let advance = vec![
            BigInt(id as i64),
            BigInt(self.lineage),
            BigInt(run),
            BigInt(id as i64),
        ];
        if applied(&read(CqlRequest::Read(
            self.advance.clone(),
            Arc::new(advance),
        ))?) {
            return Ok(());
        }
        // Not applied but still ours: another instance of this run is ahead.
        match self.current(&read)? {
            (Some(owner), _) if owner == run => Ok(()),
            (_, theirs) => Err(self.zombie(theirs, id)),
        }
    }
}
