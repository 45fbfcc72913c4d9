//! The real Cassandra the L3 tests run against (`scripts/cassandra.sh
//! start`; `scripts/test.sh` starts it): where it is, a check that fails the
//! test when it is not there (never a quiet skip), and a small CQL client
//! to look at what strata wrote.

use scylla::client::session::Session;
use scylla::client::session_builder::SessionBuilder;
use scylla::value::{CqlValue, Row};
use std::time::Duration;

/// `127.0.0.1:<STRATA_CASSANDRA_PORT or 9042>`.
pub fn contact_point() -> String {
    let port = std::env::var("STRATA_CASSANDRA_PORT").unwrap_or_else(|_| "9042".into());
    format!("127.0.0.1:{port}")
}

/// A keyspace name no other test run uses.
pub fn unique_keyspace(tag: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("t_{tag}_{}_{}", std::process::id(), nanos % 1_000_000_000)
}

/// A blocking CQL client.
pub struct Cql {
    rt: tokio::runtime::Runtime,
    session: Session,
}

impl Cql {
    /// Connects to [`contact_point`]; panics with how to start Cassandra if
    /// it does not answer (the L3 tests need it: they fail, never skip).
    pub fn connect() -> Self {
        Self::connect_with(&contact_point(), "", SessionBuilder::new())
    }

    /// Connects to the secured node ([`crate::secure`]) over TLS, logged in
    /// as its test role; panics with how to start it if it does not answer.
    pub fn connect_secure() -> Self {
        let builder = SessionBuilder::new()
            .user(
                crate::secure::CASSANDRA_USER,
                crate::secure::cassandra_password(),
            )
            .tls_context(Some(crate::secure::rustls_config()));
        Self::connect_with(
            &crate::secure::cassandra_contact_point(),
            " --secure",
            builder,
        )
    }

    fn connect_with(addr: &str, mode: &str, builder: SessionBuilder) -> Self {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let session = rt
            .block_on(async {
                tokio::time::timeout(
                    Duration::from_secs(20),
                    builder.known_node(addr).build(),
                )
                .await
            })
            .map_err(|_| "timed out".to_string())
            .and_then(|r| r.map_err(|e| e.to_string()))
            .unwrap_or_else(|e| {
                panic!("Cassandra does not answer at {addr} ({e}): start it with scripts/cassandra.sh start{mode}")
            });
        Self { rt, session }
    }

    /// Runs one CQL statement (no bind values) and returns its rows.
    pub fn query(&self, cql: &str) -> Vec<Row> {
        self.query_with(cql, Vec::new())
    }

    /// Runs one CQL statement with bind values and returns its rows.
    pub fn query_with(&self, cql: &str, values: Vec<CqlValue>) -> Vec<Row> {
        self.rt.block_on(async {
            let result = self
                .session
                .query_unpaged(cql, values)
                .await
                .unwrap_or_else(|e| panic!("`{cql}` failed: {e}"));
            match result.into_rows_result() {
                Ok(rows) => rows
                    .rows::<Row>()
                    .unwrap()
                    .collect::<Result<_, _>>()
                    .unwrap(),
                Err(_) => Vec::new(),
            }
        })
    }

    /// Every row of strata's table in `keyspace` with its write time,
    /// sorted: a fingerprint of what L3 holds.
    pub fn fingerprint(&self, keyspace: &str) -> Vec<String> {
        let mut rows: Vec<String> = self
            .query(&format!(
                "SELECT state, key, ck, ts, value, writetime(value) FROM {keyspace}.state"
            ))
            .into_iter()
            .map(|r| format!("{:?}", r.columns))
            .collect();
        rows.sort();
        rows
    }

    /// The distinct record keys strata's table holds for `state`.
    pub fn keys_of(&self, keyspace: &str, state: &str) -> usize {
        self.query(&format!("SELECT DISTINCT state, key FROM {keyspace}.state"))
            .iter()
            .filter(|r| matches!(r.columns.first(), Some(Some(CqlValue::Text(s))) if s == state))
            .count()
    }
}

impl Cql {
    /// Deletes `n` distinct (absent) rows of `stored_key`'s partition of
    /// `state` in strata's table: `n` row tombstones.
    pub fn delete_rows(&self, keyspace: &str, state: &str, stored_key: &[u8], n: u32) {
        use scylla::statement::batch::{Batch, BatchType};
        self.rt.block_on(async {
            let stmt = self
                .session
                .prepare(format!(
                    "DELETE FROM {keyspace}.state WHERE state = ? AND key = ? AND ck = ?"
                ))
                .await
                .unwrap();
            for chunk in (0..n).collect::<Vec<_>>().chunks(1000) {
                let mut batch = Batch::new(BatchType::Unlogged);
                let mut values = Vec::new();
                for i in chunk {
                    batch.append_statement(stmt.clone());
                    values.push((state, stored_key, i.to_be_bytes().to_vec()));
                }
                self.session.batch(&batch, values).await.unwrap();
            }
        });
    }
}
