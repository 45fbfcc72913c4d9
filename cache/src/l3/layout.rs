//! How state maps onto CQL tables: strata's own table, or (migration mode)
//! the existing table of the job strata replaces.
//!
//! strata's table, one for every state of a keyspace:
//!
//! ```text
//! CREATE TABLE <ks>.<table> (state text, key blob, ck blob, ts bigint, value blob,
//!                            PRIMARY KEY ((state, key), ck))
//! ```
//!
//! `key` is the stored key of the record key (key group first). A value is
//! the row `ck = 0x00`; a map entry the row `ck = 0x00 ‖ map user key`; a
//! list element the row `ck = 0x00 ‖ version (i64 BE) ‖ index (u32 BE)`, so
//! appending is an insert and the rows of a partition come back in append
//! order. `ts` is the entry's write time (ms, drives TTL), `value` its
//! postcard body.
//!
//! A migrated list state maps one element to one row of the old table:
//! record key → the key column (text), element time → the clustering
//! column (timestamp), element → the value column (blob; the element type
//! must be `Vec<u8>`, the payload bytes themselves).
//!
//! Versions: the writes for checkpoint N carry its version (see
//! [`super::CassandraTier::version_of`]) as the CQL write timestamp of
//! deletions and `version + 1` of insertions, so a list replaced at N
//! shadows every row of an earlier checkpoint, and a replayed or zombie
//! write for an older checkpoint loses.

use super::service::CqlRequest;
use crate::codec;
use crate::cold::ColdWrite;
use crate::descriptor::{StateDescriptor, StateKind};
use crate::error::{Result, StateError};
use scylla::client::session::Session;
use scylla::statement::batch::{Batch, BatchType};
use scylla::statement::prepared::PreparedStatement;
use scylla::statement::Consistency;
use scylla::value::{CqlTimestamp, CqlValue, Row};
use std::sync::Arc;
use std::time::Duration;

/// Rows per write batch (well below Cassandra's batch size warnings).
const ROWS_PER_BATCH: usize = 64;

/// The old table a migrated list state lives in (migration mode).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MigrationTable {
    /// The list state that lives in this table.
    pub state: String,
    /// The table, `keyspace.table` or a table of the configured keyspace.
    pub table: String,
    /// The partition key column (CQL `text`): the record key.
    pub key_column: String,
    /// The clustering column (CQL `timestamp`): the element's event time.
    pub time_column: String,
    /// The payload column (CQL `blob`): the element's bytes.
    pub value_column: String,
}

/// The five statements of one table.
struct Statements {
    get_row: Arc<PreparedStatement>,
    get_partition: Arc<PreparedStatement>,
    insert: Arc<PreparedStatement>,
    delete_row: Arc<PreparedStatement>,
    delete_partition: Arc<PreparedStatement>,
}

/// strata's own table plus, in migration mode, the old one.
pub(crate) struct Layout {
    native: Statements,
    migrated: Option<(MigrationTable, Statements)>,
    config: StatementConfig,
}

/// Settings every prepared statement carries.
#[derive(Debug, Clone, Copy)]
pub(crate) struct StatementConfig {
    pub(crate) consistency: Consistency,
    pub(crate) timeout: Duration,
}

async fn prepare(
    session: &Session,
    cql: String,
    config: StatementConfig,
) -> Result<Arc<PreparedStatement>> {
    let mut stmt = session
        .prepare(cql.as_str())
        .await
        .map_err(|e| StateError::L3(format!("cannot prepare `{cql}`: {e}")))?;
    stmt.set_consistency(config.consistency);
    stmt.set_is_idempotent(true);
    stmt.set_request_timeout(Some(config.timeout));
    Ok(Arc::new(stmt))
}

impl Layout {
    /// Prepares the statements of strata's table `table` and, if given, of
    /// the migrated table (whose absence or other shape is an error here).
    pub(crate) async fn prepare(
        session: &Session,
        table: &str,
        migration: Option<&MigrationTable>,
        config: StatementConfig,
    ) -> Result<Self> {
        let p = |cql: String| prepare(session, cql, config);
        let native = Statements {
            get_row: p(format!(
                "SELECT ts, value FROM {table} WHERE state = ? AND key = ? AND ck = ?"
            ))
            .await?,
            get_partition: p(format!(
                "SELECT ts, value, ck FROM {table} WHERE state = ? AND key = ?"
            ))
            .await?,
            insert: p(format!(
                "INSERT INTO {table} (state, key, ck, ts, value) VALUES (?, ?, ?, ?, ?) USING TIMESTAMP ?"
            ))
            .await?,
            delete_row: p(format!(
                "DELETE FROM {table} USING TIMESTAMP ? WHERE state = ? AND key = ? AND ck = ?"
            ))
            .await?,
            delete_partition: p(format!(
                "DELETE FROM {table} USING TIMESTAMP ? WHERE state = ? AND key = ?"
            ))
            .await?,
        };
        let migrated = match migration {
            None => None,
            Some(m) => {
                let (t, k, c, v) = (&m.table, &m.key_column, &m.time_column, &m.value_column);
                let stmts = Statements {
                    get_row: p(format!("SELECT {c}, {v} FROM {t} WHERE {k} = ? LIMIT 1")).await?,
                    get_partition: p(format!("SELECT {c}, {v} FROM {t} WHERE {k} = ?")).await?,
                    insert: p(format!(
                        "INSERT INTO {t} ({k}, {c}, {v}) VALUES (?, ?, ?) USING TIMESTAMP ?"
                    ))
                    .await?,
                    delete_row: p(format!(
                        "DELETE FROM {t} USING TIMESTAMP ? WHERE {k} = ? AND {c} = ?"
                    ))
                    .await?,
                    delete_partition: p(format!("DELETE FROM {t} USING TIMESTAMP ? WHERE {k} = ?"))
                        .await?,
                };
                Some((m.clone(), stmts))
            }
        };
        Ok(Self {
            native,
            migrated,
            config,
        })
    }

    fn migrated(&self, state: &StateDescriptor) -> Option<&Statements> {
        self.migrated
            .as_ref()
            .filter(|(m, _)| m.state == state.name)
            .map(|(_, s)| s)
    }

    /// The read of what L3 holds of `stored_key` (see [`crate::ColdTier::get`]).
    pub(crate) fn read(&self, state: &StateDescriptor, stored_key: &[u8]) -> Result<CqlRequest> {
        let (partition, suffix) = split(state, stored_key)?;
        if let Some(m) = self.migrated(state) {
            let key = text_key(state, partition)?;
            return Ok(CqlRequest::Read(
                m.get_partition.clone(),
                Arc::new(vec![key]),
            ));
        }
        let pk = native_pk(state, partition);
        Ok(match state.kind {
            StateKind::List => CqlRequest::Read(self.native.get_partition.clone(), Arc::new(pk)),
            _ => CqlRequest::Read(
                self.native.get_row.clone(),
                Arc::new([pk, vec![entry_ck(suffix)]].concat()),
            ),
        })
    }

    /// The read of every entry of one map (see [`crate::ColdTier::scan`]).
    pub(crate) fn scan(&self, state: &StateDescriptor, stored_key: &[u8]) -> CqlRequest {
        CqlRequest::Read(
            self.native.get_partition.clone(),
            Arc::new(native_pk(state, stored_key)),
        )
    }

    /// The batches that write one evicted entry with `version`.
    pub(crate) fn writes(&self, w: &ColdWrite<'_>, version: i64) -> Result<Vec<CqlRequest>> {
        let (partition, suffix) = split(w.state, w.stored_key)?;
        if let Some(m) = self.migrated(w.state) {
            let key = text_key(w.state, partition)?;
            return self.migrated_list_writes(m, w, key, version);
        }
        let pk = native_pk(w.state, partition);
        let s = &self.native;
        if w.state.kind == StateKind::List {
            let complete = codec::is_complete_list(w.bytes);
            let mut rows = Vec::new();
            for (i, element) in codec::list_elements(&w.state.name, w.bytes).enumerate() {
                let (ts, body) = element?;
                let mut ck = vec![0];
                ck.extend_from_slice(&version.to_be_bytes());
                ck.extend_from_slice(&(i as u32).to_be_bytes());
                rows.push(native_row(&pk, CqlValue::Blob(ck), ts, body, version + 1));
            }
            let delete = [vec![CqlValue::BigInt(version)], pk].concat();
            return Ok(self.batches(
                complete.then(|| (s.delete_partition.clone(), delete)),
                &s.insert,
                rows,
            ));
        }
        let ck = entry_ck(suffix);
        if codec::is_tombstone(w.bytes) {
            let delete = [vec![CqlValue::BigInt(version)], pk, vec![ck]].concat();
            return Ok(self.batches(Some((s.delete_row.clone(), delete)), &s.insert, vec![]));
        }
        let (ts, body) = codec::split_entry(&w.state.name, w.bytes)?;
        Ok(self.batches(
            None,
            &s.insert,
            vec![native_row(&pk, ck, ts, body, version + 1)],
        ))
    }

    /// The deletion of one row of strata's table, at its own write
    /// timestamp `written` (so exactly that write goes; see `sweep`).
    pub(crate) fn delete_native_row(
        &self,
        state: &StateDescriptor,
        key: Vec<u8>,
        ck: Vec<u8>,
        written: i64,
    ) -> CqlRequest {
        let values = vec![
            CqlValue::BigInt(written),
            CqlValue::Text(state.name.clone()),
            CqlValue::Blob(key),
            CqlValue::Blob(ck),
        ];
        self.deletion(self.native.delete_row.clone(), values)
    }

    /// The deletion of one row of the migrated table of `state`, at its
    /// own write timestamp `written`.
    pub(crate) fn delete_migrated_row(
        &self,
        state: &StateDescriptor,
        key: String,
        time: i64,
        written: i64,
    ) -> Result<CqlRequest> {
        let m = self
            .migrated(state)
            .ok_or_else(|| StateError::L3(format!("state '{}' is not migrated", state.name)))?;
        let values = vec![
            CqlValue::BigInt(written),
            CqlValue::Text(key),
            CqlValue::Timestamp(CqlTimestamp(time)),
        ];
        Ok(self.deletion(m.delete_row.clone(), values))
    }

    fn deletion(&self, stmt: Arc<PreparedStatement>, values: Vec<CqlValue>) -> CqlRequest {
        let mut batch = Batch::new(BatchType::Unlogged);
        batch.append_statement((*stmt).clone());
        self.finish(batch, vec![values])
    }

    /// Turns the rows of a read into what [`crate::ColdTier::get`] returns.
    pub(crate) fn decode(
        &self,
        state: &StateDescriptor,
        rows: Vec<Row>,
    ) -> Result<Option<Vec<u8>>> {
        if rows.is_empty() {
            return Ok(None);
        }
        let migrated = self.migrated(state).is_some();
        if state.kind != StateKind::List {
            let (ts, body) = cells(state, &rows[0], migrated)?;
            return Ok(Some(codec::encode_entry(ts, &body)));
        }
        let mut out = Vec::new();
        for row in &rows {
            let (ts, body) = cells(state, row, migrated)?;
            codec::put_list_element(&mut out, ts, &body);
        }
        Ok(Some(out))
    }

    /// Turns the rows of a map scan into `(map user key, encoded entry)` pairs.
    pub(crate) fn decode_scan(
        &self,
        state: &StateDescriptor,
        rows: Vec<Row>,
    ) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        rows.iter()
            .map(|row| {
                let (ts, body) = cells(state, row, false)?;
                let user_key = match row.columns.get(2) {
                    Some(Some(CqlValue::Blob(ck))) if !ck.is_empty() => ck[1..].to_vec(),
                    _ => return Err(bad_row(state, "clustering column missing")),
                };
                Ok((user_key, codec::encode_entry(ts, &body)))
            })
            .collect()
    }
}

fn bad_row(state: &StateDescriptor, what: &str) -> StateError {
    StateError::L3(format!("state '{}': unexpected L3 row: {what}", state.name))
}

/// (ts ms, element or value body) of one row.
fn cells(state: &StateDescriptor, row: &Row, migrated: bool) -> Result<(i64, Vec<u8>)> {
    let mut cols = row.columns.iter();
    let ts = match (cols.next(), migrated) {
        (Some(Some(CqlValue::BigInt(ts))), false) => *ts,
        (Some(Some(CqlValue::Timestamp(CqlTimestamp(ts)))), true) => *ts,
        _ => return Err(bad_row(state, "time column missing or of another type")),
    };
    let body = match cols.next() {
        Some(Some(CqlValue::Blob(b))) => b.clone(),
        Some(None) => Vec::new(),
        _ => return Err(bad_row(state, "value column missing or not a blob")),
    };
    if !migrated {
        return Ok((ts, body));
    }
    // The old table holds the payload itself; the element is Vec<u8>.
    let body = codec::encode(&state.name, &body)?;
    Ok((ts, body))
}

/// (partition stored key, map user key) of a stored key.
fn split<'a>(state: &StateDescriptor, stored_key: &'a [u8]) -> Result<(&'a [u8], &'a [u8])> {
    let (_, key, suffix) =
        codec::split_stored_key(stored_key).ok_or_else(|| StateError::Corrupt {
            state: state.name.clone(),
            reason: "stored key shorter than its header".into(),
        })?;
    let partition_len = stored_key.len() - suffix.len();
    debug_assert!(partition_len >= key.len());
    Ok((&stored_key[..partition_len], suffix))
}

fn native_pk(state: &StateDescriptor, partition: &[u8]) -> Vec<CqlValue> {
    vec![
        CqlValue::Text(state.name.clone()),
        CqlValue::Blob(partition.to_vec()),
    ]
}

fn entry_ck(suffix: &[u8]) -> CqlValue {
    let mut ck = vec![0];
    ck.extend_from_slice(suffix);
    CqlValue::Blob(ck)
}

fn native_row(pk: &[CqlValue], ck: CqlValue, ts: i64, body: &[u8], at: i64) -> Vec<CqlValue> {
    let mut row = pk.to_vec();
    row.extend([
        ck,
        CqlValue::BigInt(ts),
        CqlValue::Blob(body.to_vec()),
        CqlValue::BigInt(at),
    ]);
    row
}

/// The record key of a migrated state as the old table's text key.
fn text_key(state: &StateDescriptor, partition: &[u8]) -> Result<CqlValue> {
    let (_, key, _) = codec::split_stored_key(partition).unwrap_or((0, partition, &[]));
    String::from_utf8(key.to_vec())
        .map(CqlValue::Text)
        .map_err(|_| StateError::L3(format!(
            "state '{}' is migrated to a table with a text key, but a record key is not UTF-8: {:?}",
            state.name,
            String::from_utf8_lossy(key)
        )))
}

impl Layout {
    fn migrated_list_writes(
        &self,
        m: &Statements,
        w: &ColdWrite<'_>,
        key: CqlValue,
        version: i64,
    ) -> Result<Vec<CqlRequest>> {
        let mut rows = Vec::new();
        for element in codec::list_elements(&w.state.name, w.bytes) {
            let (ts, body) = element?;
            let payload: Vec<u8> = codec::decode(&w.state.name, body).map_err(|_| {
                StateError::L3(format!(
                    "state '{}' is migrated to a blob column, so its elements must be Vec<u8>",
                    w.state.name
                ))
            })?;
            rows.push(vec![
                key.clone(),
                CqlValue::Timestamp(CqlTimestamp(ts)),
                CqlValue::Blob(payload),
                CqlValue::BigInt(version + 1),
            ]);
        }
        let delete = vec![CqlValue::BigInt(version), key];
        Ok(self.batches(
            codec::is_complete_list(w.bytes).then(|| (m.delete_partition.clone(), delete)),
            &m.insert,
            rows,
        ))
    }

    /// Unlogged single-partition batches: the deletion (if any) first, then the
    /// rows, at most [`ROWS_PER_BATCH`] statements each. A partition's batch is
    /// atomic and isolated in Cassandra; later batches only add rows.
    fn batches(
        &self,
        delete: Option<(Arc<PreparedStatement>, Vec<CqlValue>)>,
        insert: &Arc<PreparedStatement>,
        rows: Vec<Vec<CqlValue>>,
    ) -> Vec<CqlRequest> {
        let mut out = Vec::new();
        let mut batch = Batch::new(BatchType::Unlogged);
        let mut values = Vec::new();
        if let Some((stmt, v)) = delete {
            batch.append_statement((*stmt).clone());
            values.push(v);
        }
        for row in rows {
            if values.len() == ROWS_PER_BATCH {
                out.push(self.finish(
                    std::mem::replace(&mut batch, Batch::new(BatchType::Unlogged)),
                    std::mem::take(&mut values),
                ));
            }
            batch.append_statement((**insert).clone());
            values.push(row);
        }
        if !values.is_empty() {
            out.push(self.finish(batch, values));
        }
        out
    }

    fn finish(&self, mut batch: Batch, values: Vec<Vec<CqlValue>>) -> CqlRequest {
        batch.set_is_idempotent(true);
        batch.set_consistency(self.config.consistency);
        batch.set_request_timeout(Some(self.config.timeout));
        CqlRequest::Write(Arc::new(batch), Arc::new(values))
    }
}
