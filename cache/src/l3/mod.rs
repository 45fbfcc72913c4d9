//! L3: the cold tier on Apache Cassandra or ScyllaDB (the `scylla` driver;
//! only CQL both accept).
//!
//! [`CassandraTier`] implements [`ColdTier`]: reads on L2 misses, versioned
//! writes of the keys cold eviction moves out of L2 (see
//! `crate::eviction`). It creates its keyspace and table if absent. Every
//! call goes through a tower stack (timeout, retry with backoff, concurrency
//! limit; see `service`).
//!
//! Zombie runs of a job (restored from an older checkpoint while a newer
//! run goes on) are fenced off: see `fence`.
//!
//! The store is synchronous, the driver is not: the
//! tier runs the driver on a tokio runtime — the embedding program's
//! ([`L3Config::runtime`]) or a small one of its own — and blocks the
//! calling thread until the answer arrives — so a slow L3 slows the keyed
//! task that needs it, and backpressure carries that to the source.
//!
//! ```no_run
//! use strata_cache::l3::{CassandraTier, L3Config};
//! use strata_cache::{StateDescriptor, StateStore};
//! use std::sync::Arc;
//! let l3 = CassandraTier::connect(L3Config::new(vec!["127.0.0.1:9042".into()], 0))?;
//! let store = StateStore::builder("/tmp/strata-l2")
//!     .l2_capacity(8 << 20)      // beyond 8 MiB, cold keys move to Cassandra
//!     .cold_tier(Arc::new(l3))
//!     .state(StateDescriptor::list("history"))
//!     .open()?;
//! # Ok::<(), strata_cache::StateError>(())
//! ```

mod fence;
mod layout;
mod schema;
mod security;
mod service;
mod sweep;

pub use layout::MigrationTable;
pub use security::{Credentials, TlsFiles};
pub use service::L3Stats;
pub use sweep::SLICES as SWEEP_SLICES;

use crate::codec;
use crate::cold::{ColdTier, ColdWrite};
use crate::descriptor::StateDescriptor;
use crate::error::{Result, StateError};
use layout::{Layout, StatementConfig};
use scylla::client::session::Session;
use scylla::client::session_builder::SessionBuilder;
pub use scylla::statement::Consistency;
use service::{CqlRequest, L3Counters, L3Service, StackConfig};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

/// Everything the L3 client needs; `state.l3.*` in a job's configuration.
#[derive(Debug, Clone)]
pub struct L3Config {
    /// `host:port` of one or more nodes.
    pub contact_points: Vec<String>,
    /// Keyspace of strata's table (created if absent).
    pub keyspace: String,
    /// strata's table (created if absent).
    pub table: String,
    /// The keyspace's replication, a CQL map literal.
    pub replication: String,
    /// Consistency of every read and write.
    pub consistency: Consistency,
    /// How long connecting may take before it is an error.
    pub connect_timeout: Duration,
    /// Timeout of one attempt of one request.
    pub request_timeout: Duration,
    /// How long a failing request is retried before it is an error.
    pub retry_for: Duration,
    /// Requests in flight at most (per process).
    pub concurrency: usize,
    /// The job's identity in L3 (the fence row; see the module docs): a job
    /// fixes it at its first start and keeps it in its checkpoints.
    pub lineage: i64,
    /// Migration mode: a list state that lives in an existing table.
    pub migration: Option<MigrationTable>,
    /// Whether the TTL sweep also deletes the expired rows of the
    /// migration table. Off when several jobs share that table (the shards
    /// of a consumer group, each with its own keys and watermark): one
    /// job's cutoff must not delete rows another still reads. Reads skip
    /// expired rows either way.
    pub sweep_migration_table: bool,
    /// The login, for clusters with `PasswordAuthenticator` (none: no login).
    pub credentials: Option<Credentials>,
    /// TLS towards the nodes (none: plaintext).
    pub tls: Option<TlsFiles>,
    /// The tokio runtime the driver runs on: the embedding program's (the
    /// strata runtime hands its own, so a process runs one). `None`: the
    /// tier starts a small runtime of its own (2 worker threads).
    pub runtime: Option<tokio::runtime::Handle>,
}

impl L3Config {
    /// Defaults (keyspace `strata`, table `state`, SimpleStrategy with one
    /// replica, LOCAL_QUORUM, 10 s to connect, 5 s per attempt, retries for
    /// 120 s, 64 requests in flight) for the given nodes and job lineage.
    pub fn new(contact_points: Vec<String>, lineage: i64) -> Self {
        Self {
            contact_points,
            keyspace: "strata".into(),
            table: "state".into(),
            replication: "{'class': 'SimpleStrategy', 'replication_factor': 1}".into(),
            consistency: Consistency::LocalQuorum,
            connect_timeout: Duration::from_secs(10),
            request_timeout: Duration::from_secs(5),
            retry_for: Duration::from_secs(120),
            concurrency: 64,
            lineage,
            migration: None,
            sweep_migration_table: true,
            credentials: None,
            tls: None,
            runtime: None,
        }
    }
}

/// The runtime the driver runs on: one of the tier's own (shut down with
/// the tier) or the embedding program's.
enum Driver {
    Own(tokio::runtime::Runtime),
    Shared(tokio::runtime::Handle),
}

impl Driver {
    fn start(shared: Option<tokio::runtime::Handle>) -> Result<Self> {
        if let Some(handle) = shared {
            return Ok(Driver::Shared(handle));
        }
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("strata-l3")
            .enable_all()
            .build()
            .map(Driver::Own)
            .map_err(|e| StateError::L3(format!("cannot start the L3 runtime: {e}")))
    }

    fn handle(&self) -> &tokio::runtime::Handle {
        match self {
            Driver::Own(runtime) => runtime.handle(),
            Driver::Shared(handle) => handle,
        }
    }
}

/// Runs `fut` on `runtime` and waits for it on this thread (which may be
/// one of the runtime's own, inside `block_in_place`).
fn block_on<T: Send + 'static>(
    runtime: &tokio::runtime::Handle,
    fut: impl Future<Output = Result<T>> + Send + 'static,
) -> Result<T> {
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    runtime.spawn(async move {
        let _ = tx.send(fut.await);
    });
    rx.recv()
        .map_err(|_| StateError::L3("the L3 runtime stopped".into()))?
}

/// The Cassandra/ScyllaDB cold tier. Cheap to share (`Arc`); one per process.
pub struct CassandraTier {
    runtime: Option<Driver>,
    service: L3Service,
    layout: Arc<Layout>,
    counters: Arc<L3Counters>,
    session: Arc<Session>,
    versions: std::sync::Mutex<std::collections::BTreeMap<u64, i64>>,
    timeouts: (Duration, Duration),
    fence: fence::Fence,
    table: String,
    sweep: Arc<sweep::SweepStatements>,
}

impl CassandraTier {
    /// Connects, creates the keyspace and table if absent, and prepares
    /// the statements.
    ///
    /// Errors: [`StateError::L3`] naming the contact points when no node
    /// answers within `connect_timeout`, or when the schema cannot be
    /// created or the migrated table does not have the configured columns.
    pub fn connect(config: L3Config) -> Result<Self> {
        let runtime = Driver::start(config.runtime.clone())?;
        let setup_config = config.clone();
        let (session, layout, fence, sweep) =
            block_on(runtime.handle(), async move { setup(&setup_config).await })?;
        let session = Arc::new(session);
        let counters = Arc::new(L3Counters::default());
        let stack = StackConfig {
            concurrency: config.concurrency.max(1),
            timeout: config.request_timeout,
            retry_for: config.retry_for,
        };
        let service = {
            let (session, counters) = (session.clone(), counters.clone());
            block_on(runtime.handle(), async move {
                Ok(service::stack(session, stack, counters))
            })?
        };
        Ok(Self {
            runtime: Some(runtime),
            service,
            layout: Arc::new(layout),
            counters,
            session,
            versions: Default::default(),
            timeouts: (config.request_timeout, config.retry_for),
            fence,
            table: format!("{}.{}", config.keyspace, config.table).to_lowercase(),
            sweep: Arc::new(sweep),
        })
    }

    /// Request figures since connecting.
    pub fn stats(&self) -> L3Stats {
        self.counters.snapshot()
    }

    /// The open driver session (for tools and tests that query L3 directly).
    pub fn session(&self) -> &Arc<Session> {
        &self.session
    }

    /// Fixes the version (CQL write timestamp, µs) of the writes for
    /// checkpoint `checkpoint_id`; the runtime records it in the
    /// checkpoint's metadata and pins it again after a restore, so a
    /// repeated write is identical.
    pub fn pin_version(&self, checkpoint_id: u64, version: i64) {
        let mut versions = self.versions.lock().unwrap_or_else(|p| p.into_inner());
        versions.insert(checkpoint_id, version);
        while versions.len() > 64 {
            versions.pop_first();
        }
    }

    /// The version of the writes for checkpoint `checkpoint_id` (deletions
    /// use it, insertions it plus one): the pinned one, else — pinned now —
    /// the wall clock in µs, or two above the newest pinned version if that
    /// is later. Versions therefore grow with checkpoints and beat the
    /// ordinary client timestamps of rows written before.
    pub fn version_of(&self, checkpoint_id: u64) -> i64 {
        let mut versions = self.versions.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(v) = versions.get(&checkpoint_id) {
            return *v;
        }
        let newest = versions.values().max().copied().unwrap_or(i64::MIN);
        let v = next_version(newest);
        versions.insert(checkpoint_id, v);
        v
    }

    /// Runs `fut` on the tier's runtime and waits for it on this thread.
    fn block<T: Send + 'static>(
        &self,
        fut: impl Future<Output = Result<T>> + Send + 'static,
    ) -> Result<T> {
        let runtime = self
            .runtime
            .as_ref()
            .ok_or_else(|| StateError::L3("closed".into()))?;
        block_on(runtime.handle(), fut)
    }

    /// Claims the job's lineage in L3 for run `run`, restored from
    /// checkpoint `restored` (0: a fresh start); see `fence`. Without a
    /// claim, the first write claims with its checkpoint.
    ///
    /// Errors: [`StateError::L3`] starting "fenced" when a newer run of the
    /// job already moved a later checkpoint to L3 (this run is a zombie).
    ///
    /// With `restoring_moves` (the restored checkpoint moved keys to this
    /// table), a table that holds no claim at all — truncated, or another
    /// cluster — is an error: the keys moved there would be missing.
    pub fn claim(&self, run: i64, restored: u64, restoring_moves: bool) -> Result<()> {
        self.fence
            .claim(|req| self.read(req), run, restored, restoring_moves)
    }

    /// Deletes the expired rows of slice `slice` (of [`SWEEP_SLICES`]) of
    /// the token ring — rows of the `expiring` states (each with its expiry
    /// cutoff, ms) written at or before the cutoff — after advancing the
    /// job's fence to `checkpoint_id`, whose cutoffs these are. Returns how
    /// many rows it deleted. See `sweep`.
    ///
    /// Errors: [`StateError::L3`] (after retries), or "fenced" if a newer
    /// run owns the job.
    pub fn sweep_expired(
        &self,
        expiring: &[(StateDescriptor, i64)],
        checkpoint_id: u64,
        slice: u64,
    ) -> Result<u64> {
        if expiring.is_empty() {
            return Ok(0);
        }
        self.fence.advance(|req| self.read(req), checkpoint_id)?;
        let (session, statements, layout) = (
            self.session.clone(),
            self.sweep.clone(),
            self.layout.clone(),
        );
        let expiring = expiring.to_vec();
        let range = sweep::token_range(slice);
        let deletions = self.block(async move {
            sweep::expired_rows(&session, &statements, &layout, &expiring, range).await
        })?;
        let n = deletions.len() as u64;
        let what = vec![format!("L3 expiry sweep of {}", self.table); deletions.len()];
        self.call_all(deletions, what)?;
        Ok(n)
    }

    /// Where this tier keeps state: `keyspace.table`, lower case.
    pub fn table(&self) -> &str {
        &self.table
    }

    /// Sends `requests` concurrently (the stack limits how many are in
    /// flight) and returns their rows in the order of `requests`. A failure
    /// names what its request was for (`what`, parallel to `requests`).
    fn call_all(
        &self,
        requests: Vec<CqlRequest>,
        what: Vec<String>,
    ) -> Result<Vec<Vec<scylla::value::Row>>> {
        let (service, timeouts) = (self.service.clone(), self.timeouts);
        self.block(async move {
            let mut tasks = tokio::task::JoinSet::new();
            for (i, req) in requests.into_iter().enumerate() {
                let service = service.clone();
                tasks.spawn(async move { (i, service::call(&service, req).await) });
            }
            let mut answers = Vec::new();
            while let Some(done) = tasks.join_next().await {
                let (i, rows) = done.map_err(|e| StateError::L3(format!("L3 task: {e}")))?;
                let rows = rows.map_err(|e| {
                    let cause = l3_error(e, timeouts);
                    StateError::L3(format!("{}: {cause}", what[i]))
                })?;
                answers.push((i, rows));
            }
            answers.sort_by_key(|(i, _)| *i);
            Ok(answers.into_iter().map(|(_, rows)| rows).collect())
        })
    }

    /// Says what an L3 request is for: the operation, the state, the record
    /// key (as text, as its fields, or in hex) and the table.
    fn describe(&self, op: &str, state: &StateDescriptor, stored_key: &[u8]) -> String {
        let key = codec::split_stored_key(stored_key).map_or(&[][..], |(_, key, _)| key);
        format!(
            "{op} of state '{}', key {}, in {}",
            state.name,
            crate::composite_key::describe(key),
            self.table
        )
    }

    fn read(&self, req: CqlRequest) -> Result<Vec<scylla::value::Row>> {
        let service = self.service.clone();
        let timeouts = self.timeouts;
        self.block(async move {
            service::call(&service, req)
                .await
                .map_err(|e| l3_error(e, timeouts))
        })
    }
}

/// The version of a checkpoint completing now, after one of version `prev`:
/// the wall clock in µs, or `prev + 2` if that is later.
pub fn next_version(prev: i64) -> i64 {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as i64);
    now.max(prev.saturating_add(2))
}

/// An L3 failure as one line; a timeout names the settings involved.
fn l3_error(e: tower::BoxError, (timeout, retry_for): (Duration, Duration)) -> StateError {
    if e.is::<tower::timeout::error::Elapsed>() {
        return StateError::L3(format!(
            "a request timed out after {timeout:?} (state.l3.request-timeout), \
             and retries for {retry_for:?} (state.l3.retry-for) did not help: is Cassandra overloaded or down?"
        ));
    }
    if service::is_permanent(&e) {
        return StateError::L3(format!("{e} (an error no retry can fix: not retried)"));
    }
    StateError::L3(e.to_string())
}

impl Drop for CassandraTier {
    fn drop(&mut self) {
        // Dropping a runtime inside another one's worker would panic.
        if let Some(Driver::Own(rt)) = self.runtime.take() {
            rt.shutdown_background();
        }
    }
}

/// A session to the nodes, logged in and over TLS as configured, within
/// `connect_timeout`. Errors: one line naming the nodes and, where the
/// driver's error shows it, what was wrong (login, certificate, TLS).
async fn connect(config: &L3Config) -> Result<Session> {
    let nodes = config.contact_points.join(", ");
    let mut builder = SessionBuilder::new()
        .known_nodes(&config.contact_points)
        .connection_timeout(config.connect_timeout);
    if let Some(c) = &config.credentials {
        builder = builder.user(c.username.clone(), c.password());
    }
    if let Some(tls) = &config.tls {
        builder = builder.tls_context(Some(tls.client_config()?));
    }
    let tls = config.tls.is_some();
    tokio::time::timeout(config.connect_timeout, builder.build())
        .await
        .map_err(|_| {
            let hint = if tls {
                ""
            } else {
                " (if the node requires TLS, set state.l3.tls=true)"
            };
            StateError::L3(format!(
                "no Cassandra/ScyllaDB node at {nodes} answered within {:?}{hint} \
                 (is it running? scripts/cassandra.sh start)",
                config.connect_timeout
            ))
        })?
        .map_err(|e| {
            let text = e.to_string();
            match security::diagnose(&text, tls) {
                Some(why) => StateError::L3(format!(
                    "cannot connect to Cassandra/ScyllaDB at {nodes}: {why} [{text}]"
                )),
                None => StateError::L3(format!(
                    "cannot connect to Cassandra/ScyllaDB at {nodes}: {text}"
                )),
            }
        })
}

async fn setup(
    config: &L3Config,
) -> Result<(Session, Layout, fence::Fence, sweep::SweepStatements)> {
    let session = connect(config).await?;
    let ks = &config.keyspace;
    let table = format!("{ks}.{}", config.table);
    for cql in [
        format!(
            "CREATE KEYSPACE IF NOT EXISTS {ks} WITH replication = {}",
            config.replication
        ),
        format!(
            "CREATE TABLE IF NOT EXISTS {table} (state text, key blob, ck blob, ts bigint, \
             value blob, PRIMARY KEY ((state, key), ck))"
        ),
        fence::ddl(&table),
    ] {
        session
            .query_unpaged(cql.as_str(), ())
            .await
            .map_err(|e| StateError::L3(format!("`{cql}` failed: {e}")))?;
    }
    session
        .await_schema_agreement()
        .await
        .map_err(|e| StateError::L3(format!("schema agreement: {e}")))?;
    let migration = config.migration.as_ref().map(|m| MigrationTable {
        table: if m.table.contains('.') {
            m.table.clone()
        } else {
            format!("{ks}.{}", m.table)
        },
        ..m.clone()
    });
    schema::check_own_tables(&session, &table).await?;
    if let Some(m) = &migration {
        schema::check_migrated_table(&session, m).await?;
    }
    let statements = StatementConfig {
        consistency: config.consistency,
        timeout: config.request_timeout,
    };
    let layout = Layout::prepare(&session, &table, migration.as_ref(), statements).await?;
    let fence = fence::Fence::prepare(&session, &table, config.lineage).await?;
    let swept = migration.as_ref().filter(|_| config.sweep_migration_table);
    let sweep = sweep::SweepStatements::prepare(&session, &table, swept).await?;
    Ok((session, layout, fence, sweep))
}

impl ColdTier for CassandraTier {
    fn get(&self, state: &StateDescriptor, stored_key: &[u8]) -> Result<Option<Vec<u8>>> {
        Ok(self.get_many(&[(state, stored_key)])?.pop().flatten())
    }

    fn get_many(&self, keys: &[(&StateDescriptor, &[u8])]) -> Result<Vec<Option<Vec<u8>>>> {
        let requests = keys
            .iter()
            .map(|(state, key)| self.layout.read(state, key))
            .collect::<Result<Vec<_>>>()?;
        let what = keys
            .iter()
            .map(|(state, key)| self.describe("read", state, key))
            .collect();
        let answers = self.call_all(requests, what)?;
        answers
            .into_iter()
            .zip(keys)
            .map(|(rows, (state, _))| self.layout.decode(state, rows))
            .collect()
    }

    fn scan(&self, state: &StateDescriptor, stored_key: &[u8]) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        let what = vec![self.describe("scan", state, stored_key)];
        let mut rows = self.call_all(vec![self.layout.scan(state, stored_key)], what)?;
        self.layout
            .decode_scan(state, rows.pop().unwrap_or_default())
    }

    fn write(&self, writes: &[ColdWrite<'_>], checkpoint_id: u64) -> Result<()> {
        self.fence.advance(|req| self.read(req), checkpoint_id)?;
        let version = self.version_of(checkpoint_id);
        let (mut requests, mut what) = (Vec::new(), Vec::new());
        for w in writes {
            let batches = self.layout.writes(w, version)?;
            let about = self.describe("write", w.state, w.stored_key);
            what.extend(std::iter::repeat_n(about, batches.len()));
            requests.extend(batches);
        }
        self.call_all(requests, what).map(|_| ())
    }
}
