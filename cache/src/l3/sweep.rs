//! Expiring cold state in L3: a sweep over the token ring deletes the rows
//! of states with a TTL whose element (or value) time is at or before the
//! state's expiry cutoff — keys never touched again would otherwise keep
//! their expired elements in L3 forever.
//!
//! The ring is cut into [`SLICES`] slices; the runtime sweeps one slice per
//! completed checkpoint, with the cutoffs of that checkpoint (event time:
//! its watermark minus the TTL), so a full pass takes [`SLICES`]
//! checkpoints and reads each L3 row once. A row is deleted with its own
//! write timestamp (`USING TIMESTAMP` = `WRITETIME`): the tombstone removes
//! exactly that write, never a later one. Before deleting, the sweep
//! advances the job's fence to the checkpoint (see `fence`), so a run
//! restored from an older checkpoint — which could still need those
//! elements — is refused, as it is after cold moves.
//!
//! In migration mode the old table is swept the same way (its time column
//! is the element time).

use super::layout::Layout;
use super::service::CqlRequest;
use crate::descriptor::StateDescriptor;
use crate::error::{Result, StateError};
use futures::StreamExt;
use scylla::client::session::Session;
use scylla::statement::prepared::PreparedStatement;
use scylla::value::CqlTimestamp;

/// The token ring is swept in this many slices, one per checkpoint.
pub const SLICES: u64 = 64;

/// The range reads of the tables a sweep covers.
pub(crate) struct SweepStatements {
    native: PreparedStatement,
    migrated: Option<(String, PreparedStatement)>,
}

async fn prepare(session: &Session, cql: String) -> Result<PreparedStatement> {
    session
        .prepare(cql.as_str())
        .await
        .map_err(|e| StateError::L3(format!("cannot prepare `{cql}`: {e}")))
}

impl SweepStatements {
    /// Prepares the range reads of strata's `table` and, in migration mode,
    /// of the old table (`(table, key column, time column, value column)`
    /// for `state`).
    pub(crate) async fn prepare(
        session: &Session,
        table: &str,
        migration: Option<&super::MigrationTable>,
    ) -> Result<Self> {
        let native = prepare(
            session,
            format!(
                "SELECT state, key, ck, ts, WRITETIME(ts) FROM {table} \
                 WHERE token(state, key) >= ? AND token(state, key) <= ?"
            ),
        )
        .await?;
        let migrated = match migration {
            None => None,
            Some(m) => {
                let (t, k, c, v) = (&m.table, &m.key_column, &m.time_column, &m.value_column);
                let stmt = prepare(
                    session,
                    format!(
                        "SELECT {k}, {c}, WRITETIME({v}) FROM {t} WHERE token({k}) >= ? AND token({k}) <= ?"
                    ),
                )
                .await?;
                Some((m.state.clone(), stmt))
            }
        };
        Ok(Self { native, migrated })
    }
}

/// The inclusive token range of slice `slice` of [`SLICES`].
pub(crate) fn token_range(slice: u64) -> (i64, i64) {
    let width = (u64::MAX / SLICES) as i128 + 1;
    let lo = i64::MIN as i128 + width * i128::from(slice % SLICES);
    let hi = (lo + width - 1).min(i64::MAX as i128);
    (lo as i64, hi as i64)
}

/// The deletions of expired rows in one token range: reads the range,
/// keeps rows of `expiring` states at or before their cutoff.
pub(crate) async fn expired_rows(
    session: &Session,
    statements: &SweepStatements,
    layout: &Layout,
    expiring: &[(StateDescriptor, i64)],
    (lo, hi): (i64, i64),
) -> Result<Vec<CqlRequest>> {
    let failed = |e: &dyn std::fmt::Display| StateError::L3(format!("L3 expiry sweep: {e}"));
    let cutoff = |name: &str| expiring.iter().find(|(s, _)| s.name == name);
    let mut deletions = Vec::new();
    let mut rows = session
        .execute_iter(statements.native.clone(), (lo, hi))
        .await
        .map_err(|e| failed(&e))?
        .rows_stream::<(String, Vec<u8>, Vec<u8>, i64, i64)>()
        .map_err(|e| failed(&e))?;
    while let Some(row) = rows.next().await {
        let (state, key, ck, ts, written) = row.map_err(|e| failed(&e))?;
        if let Some((desc, _)) = cutoff(&state).filter(|(_, c)| ts <= *c) {
            deletions.push(layout.delete_native_row(desc, key, ck, written));
        }
    }
    if let Some((state, stmt)) = &statements.migrated {
        let Some((desc, cut)) = cutoff(state) else {
            return Ok(deletions);
        };
        let mut rows = session
            .execute_iter(stmt.clone(), (lo, hi))
            .await
            .map_err(|e| failed(&e))?
            .rows_stream::<(String, CqlTimestamp, Option<i64>)>()
            .map_err(|e| failed(&e))?;
        while let Some(row) = rows.next().await {
            let (key, CqlTimestamp(ts), written) = row.map_err(|e| failed(&e))?;
            // A row without a payload has no write time to delete it at:
            // its element is skipped on read, like every expired one.
            let Some(written) = written else { continue };
            if ts <= *cut {
                deletions.push(layout.delete_migrated_row(desc, key, ts, written)?);
            }
        }
    }
    Ok(deletions)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_slices_cover_the_token_ring_without_gaps_or_overlap() {
        let mut next = i64::MIN as i128;
        for slice in 0..SLICES {
            let (lo, hi) = token_range(slice);
            assert_eq!(lo as i128, next, "slice {slice}");
            assert!(hi >= lo);
            next = hi as i128 + 1;
        }
        assert_eq!(next, i64::MAX as i128 + 1);
    }
}
