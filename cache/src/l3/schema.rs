//! Checking, at start, that the L3 tables have the shape strata reads and
//! writes: a table that already existed with other column types or another
//! primary key is refused with one line naming the column and both shapes,
//! before any output is committed (not found out at the first cold move).

use super::MigrationTable;
use crate::error::{Result, StateError};
use scylla::client::session::Session;
use std::collections::HashMap;

/// A column as `system_schema.columns` describes it: (CQL type, kind —
/// `partition_key`, `clustering` or `regular`).
type Columns = HashMap<String, (String, String)>;

/// The columns of `keyspace.table` (empty if the table does not exist).
async fn columns_of(session: &Session, table: &str) -> Result<Columns> {
    let (ks, name) = table.split_once('.').unwrap_or(("", table));
    let cql = "SELECT column_name, type, kind FROM system_schema.columns WHERE keyspace_name = ? AND table_name = ?";
    let unreadable = |e: &dyn std::fmt::Display| {
        StateError::L3(format!("cannot read the schema of {table}: {e}"))
    };
    let rows = session
        .query_unpaged(cql, (ks.to_lowercase(), name.to_lowercase()))
        .await
        .map_err(|e| unreadable(&e))?
        .into_rows_result()
        .map_err(|e| unreadable(&e))?;
    rows.rows::<(String, String, String)>()
        .map_err(|e| unreadable(&e))?
        .map(|row| row.map(|(name, ty, kind)| (name, (ty, kind))))
        .collect::<std::result::Result<_, _>>()
        .map_err(|e| unreadable(&e))
}

/// Checks that `table` has exactly the columns `want` (name, type, kind).
fn check_columns(table: &str, found: &Columns, want: &[(&str, &str, &str)]) -> Result<()> {
    for (name, ty, kind) in want {
        match found.get(*name) {
            Some((t, k)) if t == ty && k == kind => {}
            Some((t, k)) => {
                return Err(StateError::L3(format!(
                    "L3 table {table} exists with column {name} as {t} ({k}), but strata needs {ty} ({kind}): use another state.l3.keyspace or state.l3.table, or drop the table"
                )))
            }
            None => {
                return Err(StateError::L3(format!(
                    "L3 table {table} exists without column {name} ({ty}, {kind}) that strata needs: use another state.l3.keyspace or state.l3.table, or drop the table"
                )))
            }
        }
    }
    if let Some(extra) = found.keys().find(|c| !want.iter().any(|(n, ..)| n == c)) {
        return Err(StateError::L3(format!(
            "L3 table {table} has a column {extra} that strata's table does not: it is another table; use another state.l3.keyspace or state.l3.table"
        )));
    }
    Ok(())
}

/// strata's table and its fence table have the shape strata created them with.
pub(crate) async fn check_own_tables(session: &Session, table: &str) -> Result<()> {
    check_columns(
        table,
        &columns_of(session, table).await?,
        &[
            ("state", "text", "partition_key"),
            ("key", "blob", "partition_key"),
            ("ck", "blob", "clustering"),
            ("ts", "bigint", "regular"),
            ("value", "blob", "regular"),
        ],
    )?;
    let fence = format!("{table}_fence");
    check_columns(
        &fence,
        &columns_of(session, &fence).await?,
        &[
            ("lineage", "bigint", "partition_key"),
            ("run", "bigint", "regular"),
            ("checkpoint", "bigint", "regular"),
        ],
    )
}

/// The migrated table must exist with the configured columns of the right
/// types (text key, timestamp clustering column, blob payload).
pub(crate) async fn check_migrated_table(session: &Session, m: &MigrationTable) -> Result<()> {
    let columns = columns_of(session, &m.table).await?;
    if columns.is_empty() {
        return Err(StateError::L3(format!(
            "migration table {} does not exist (state.l3.migration.table)",
            m.table
        )));
    }
    for (setting, column, want) in [
        ("key-column", &m.key_column, "text"),
        ("time-column", &m.time_column, "timestamp"),
        ("value-column", &m.value_column, "blob"),
    ] {
        match columns.get(&column.to_lowercase()) {
            Some((t, _)) if t == want => {}
            Some((t, _)) => {
                return Err(StateError::L3(format!(
                    "migration table {}: column {column} (state.l3.migration.{setting}) must be {want}, is {t}",
                    m.table
                )))
            }
            None => {
                let mut names: Vec<&String> = columns.keys().collect();
                names.sort();
                return Err(StateError::L3(format!(
                    "migration table {} has no column {column} (state.l3.migration.{setting}); it has: {}",
                    m.table,
                    names.iter().map(|n| n.as_str()).collect::<Vec<_>>().join(", ")
                )));
            }
        }
    }
    check_migrated_key(m, &columns)
}

/// The old table's primary key must be `(key column, time column)`: strata
/// writes one row per element at (record key, event time), so a further
/// key column (a sequence for equal times, say) is one it cannot fill.
fn check_migrated_key(m: &MigrationTable, columns: &Columns) -> Result<()> {
    for (setting, column, want) in [
        ("key-column", &m.key_column, "partition_key"),
        ("time-column", &m.time_column, "clustering"),
    ] {
        let kind = columns.get(&column.to_lowercase()).map(|(_, k)| k.as_str());
        if kind != Some(want) {
            return Err(StateError::L3(format!(
                "migration table {}: column {column} (state.l3.migration.{setting}) must be its {} column, is {}",
                m.table,
                want.replace('_', " "),
                kind.unwrap_or("absent")
            )));
        }
    }
    let mut extra: Vec<String> = columns
        .iter()
        .filter(|(name, (_, kind))| {
            let expected = match kind.as_str() {
                "partition_key" => &m.key_column,
                "clustering" => &m.time_column,
                _ => return false,
            };
            **name != expected.to_lowercase()
        })
        .map(|(name, (_, kind))| format!("{name} ({kind})"))
        .collect();
    extra.sort();
    if extra.is_empty() {
        return Ok(());
    }
    Err(StateError::L3(format!(
        "migration table {}: its primary key must be ({}, {}) — one row per user and event time — but it also has {}; migration mode cannot fill those columns (see docs/migration.md on events with equal times)",
        m.table,
        m.key_column,
        m.time_column,
        extra.join(", ")
    )))
}
