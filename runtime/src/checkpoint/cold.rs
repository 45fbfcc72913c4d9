//! A job's cold tier as its runs and checkpoints know it: the connection
//! to L3, claimed for the job's lineage (`strata_cache::l3`'s fence), and
//! the checks that a restored checkpoint's cold state is where the
//! configuration points (the same table, the same migrated table, L3 on).

use super::files::write_durably;
use super::{CheckpointMetadata, CheckpointStorage};
use crate::config::JobConfig;
use crate::error::{Result, RuntimeError};
use std::path::Path;
use std::sync::Arc;
use strata_cache::l3::CassandraTier;

/// L3 as a run uses it.
#[derive(Clone)]
pub(crate) struct Cold {
    /// The connected, claimed tier.
    pub(crate) tier: Arc<CassandraTier>,
    /// The job's lineage there.
    pub(crate) lineage: i64,
    /// The old job's table of a migrated state, `keyspace.table`.
    pub(crate) migration_table: Option<String>,
}

/// The file of a checkpoint directory that fixes the job's L3 lineage
/// before its first checkpoint completes, so that a run started over
/// (killed before any checkpoint) takes over its own earlier claim.
const LINEAGE_FILE: &str = "_l3_lineage";

/// The job's L3 lineage: the restored checkpoint's, else the one this
/// checkpoint directory fixed at its first start (written, fsynced, now if
/// absent).
fn lineage(storage: &CheckpointStorage, restored: Option<&CheckpointMetadata>) -> Result<i64> {
    if let Some(lineage) = restored.and_then(|m| m.l3_lineage) {
        return Ok(lineage);
    }
    let path = storage.root().join(LINEAGE_FILE);
    if let Ok(text) = std::fs::read_to_string(&path) {
        return text.trim().parse().map_err(|_| {
            RuntimeError::checkpoint(&path, format!("'{}' is not an L3 lineage", text.trim()))
        });
    }
    let lineage = chrono::Utc::now().timestamp_micros();
    write_durably(&path, &lineage.to_string())?;
    Ok(lineage)
}

/// Connects to L3 when `config` turns it on, claims it for this run (a
/// table another job uses, or a zombie, is refused; see
/// `strata_cache::l3`), and pins the version of the restored checkpoint
/// (whose picked keys a restored store moves again). A restored
/// checkpoint whose cold state lives in another table, or in a table that
/// no longer holds this job's claim (truncated), is refused; so is one
/// with state in L3 when L3 is off. The claim is for checkpoint `claim`
/// onwards (the restored one's id for a run; see `fence`). Blocking.
pub(crate) fn connect_cold(
    config: &JobConfig,
    storage: &CheckpointStorage,
    restored: Option<&CheckpointMetadata>,
    claim: u64,
) -> Result<Option<Cold>> {
    if !config.l3.enabled() {
        return refuse_l3_off(storage.root(), restored).map(|()| None);
    }
    let lineage = lineage(storage, restored)?;
    let mut client = config.l3.client_config(lineage)?;
    client.runtime = Some(crate::executor::handle()?);
    let table = format!("{}.{}", client.keyspace, client.table).to_lowercase();
    let moved_to = restored.and_then(|m| m.l3_table.clone());
    if let Some(recorded) = moved_to.as_ref().filter(|t| **t != table) {
        return Err(RuntimeError::checkpoint(
            storage.root(),
            format!(
                "the restored checkpoint keeps its cold state in L3 table {recorded}, but state.l3.keyspace/table name {table}: restore with the same L3 settings"
            ),
        ));
    }
    let migration_table = config.l3.migration_table();
    if let Some(m) = restored {
        same_migration_table(storage.root(), m, &migration_table)?;
    }
    let run = chrono::Utc::now().timestamp_nanos_opt().unwrap_or_default()
        ^ i64::from(std::process::id());
    let tier = CassandraTier::connect(client)?;
    tier.claim(run, claim, moved_to.is_some())?;
    if let Some((id, version)) = restored.and_then(|m| Some((m.id, m.l3_version?))) {
        tier.pin_version(id, version);
    }
    Ok(Some(Cold {
        tier: Arc::new(tier),
        lineage,
        migration_table,
    }))
}

/// Refuses a checkpoint that keeps part of its state in L3 (`restored`)
/// when L3 is off: its cold keys would be missing.
fn refuse_l3_off(root: &Path, restored: Option<&CheckpointMetadata>) -> Result<()> {
    match restored.and_then(|m| m.l3_table.as_ref().map(|t| (m.id, t))) {
        None => Ok(()),
        Some((id, table)) => Err(RuntimeError::checkpoint(
            root,
            format!(
                "checkpoint {id} keeps part of its state in L3 table {table}, but L3 is off: give the job's state.l3.* settings (its --config, or -D state.l3.contact-points=…, keyspace, table)"
            ),
        )),
    }
}

/// Refuses settings whose migrated state (`state.l3.migration.*`) is in
/// another table than the one checkpoint `m` keeps it in.
fn same_migration_table(
    root: &Path,
    m: &CheckpointMetadata,
    migration_table: &Option<String>,
) -> Result<()> {
    if m.l3_table.is_none() || m.l3_migration_table == *migration_table {
        return Ok(());
    }
    let named = |t: &Option<String>| t.clone().unwrap_or_else(|| "none".into());
    Err(RuntimeError::checkpoint(
        root,
        format!(
            "checkpoint {} keeps its migrated state in the old job's table {}, but state.l3.migration.table names {}: give the same state.l3.migration.* settings",
            m.id,
            named(&m.l3_migration_table),
            named(migration_table)
        ),
    ))
}

/// L3 for reading the cold keys of checkpoint `meta` of `root` (`strata
/// state get`), or `None` when it moved none there: contact points, login
/// and migration settings from `config`, the table the checkpoint
/// recorded. It makes no claim and never writes, so a running job is not
/// fenced by it. Blocking.
///
/// Errors: L3 off in `config`; another migration table; the L3 connection.
pub(crate) fn cold_reader(
    config: &JobConfig,
    root: &Path,
    meta: &CheckpointMetadata,
) -> Result<Option<Arc<CassandraTier>>> {
    let Some(recorded) = &meta.l3_table else {
        return Ok(None);
    };
    if !config.l3.enabled() {
        refuse_l3_off(root, Some(meta))?;
    }
    same_migration_table(root, meta, &config.l3.migration_table())?;
    let mut client = config
        .l3
        .client_config(meta.l3_lineage.unwrap_or_default())?;
    if let Some((keyspace, table)) = recorded.split_once('.') {
        (client.keyspace, client.table) = (keyspace.to_owned(), table.to_owned());
    }
    client.runtime = Some(crate::executor::handle()?);
    Ok(Some(Arc::new(CassandraTier::connect(client)?)))
}
