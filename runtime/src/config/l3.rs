//! The `state.l3.*` keys: the Cassandra/ScyllaDB cold tier of a job.
//!
//! | key | default | allowed | meaning |
//! |---|---|---|---|
//! | `state.l3.contact-points` | absent = no L3 | `host:port[,host:port…]` | nodes to connect to; setting it turns L3 on |
//! | `state.l3.keyspace` | `strata` | CQL identifier | keyspace of strata's table (created if absent) |
//! | `state.l3.table` | `state` | CQL identifier | strata's table (created if absent) |
//! | `state.l3.replication` | `{'class': 'SimpleStrategy', 'replication_factor': 1}` | CQL map | replication of a keyspace strata creates |
//! | `state.l3.consistency` | `local-quorum` | `one`, `local-one`, `quorum`, `local-quorum`, `all` | consistency of reads and writes |
//! | `state.l3.connect-timeout` | `10s` | 100ms–10min | how long connecting may take before the job fails |
//! | `state.l3.request-timeout` | `5s` | 10ms–10min | timeout of one attempt |
//! | `state.l3.retry-for` | `120s` | 0–1d | how long a failing request is retried (the job stalls meanwhile) before the job fails |
//! | `state.l3.concurrency` | 64 | 1–4096 | L3 requests in flight at most |
//! | `state.l3.migration.state` | absent | a declared list state | migration mode: this list state lives in an existing table |
//! | `state.l3.migration.table` | — | `[keyspace.]table` | that table |
//! | `state.l3.migration.key-column` | `user_id` | CQL identifier | its partition key (text): the record key |
//! | `state.l3.migration.time-column` | `event_time` | CQL identifier | its clustering column (timestamp): the element's time |
//! | `state.l3.migration.value-column` | `payload` | CQL identifier | its payload column (blob): the element |

use super::{bad, duration, number, text};
use crate::error::Result;
use std::time::Duration;
use strata_cache::l3::{Consistency, L3Config, MigrationTable};

/// The L3 settings of a job (without its lineage, which its checkpoints
/// carry).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct L3Settings {
    /// `host:port` of the nodes to connect to.
    pub contact_points: Vec<String>,
    /// Keyspace of strata's table.
    pub keyspace: String,
    /// strata's table.
    pub table: String,
    /// Replication of a keyspace strata creates (a CQL map literal).
    pub replication: String,
    /// Consistency level, as written in the configuration.
    pub consistency: String,
    /// How long connecting may take.
    pub connect_timeout: Duration,
    /// Timeout of one attempt.
    pub request_timeout: Duration,
    /// How long a failing request is retried.
    pub retry_for: Duration,
    /// Requests in flight at most.
    pub concurrency: usize,
    /// Migration mode: (state, table, key column, time column, value column).
    pub migration: Option<[String; 5]>,
}

impl Default for L3Settings {
    fn default() -> Self {
        let d = L3Config::new(Vec::new(), 0);
        Self {
            contact_points: Vec::new(),
            keyspace: d.keyspace,
            table: d.table,
            replication: d.replication,
            consistency: "local-quorum".into(),
            connect_timeout: d.connect_timeout,
            request_timeout: d.request_timeout,
            retry_for: d.retry_for,
            concurrency: d.concurrency,
            migration: None,
        }
    }
}

/// A CQL identifier, optionally `keyspace.table` when `dotted`.
fn identifier(key: &str, v: &toml::Value, dotted: bool) -> Result<String> {
    let t = text(key, v)?.trim().to_owned();
    let part_ok = |p: &str| {
        !p.is_empty()
            && p.len() <= 48
            && p.starts_with(|c: char| c.is_ascii_alphabetic())
            && p.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
    };
    let parts: Vec<&str> = t.split('.').collect();
    let ok = parts.iter().all(|p| part_ok(p)) && (parts.len() == 1 || (dotted && parts.len() == 2));
    if !ok {
        return Err(bad(
            key,
            format!(
                "'{t}' is not a CQL identifier (a letter, then letters, digits or _; at most 48)"
            ),
        ));
    }
    Ok(t)
}

fn consistency(key: &str, v: &toml::Value) -> Result<String> {
    let t = text(key, v)?.trim().to_ascii_lowercase();
    parse_consistency(&t).map(|_| t.clone()).ok_or_else(|| {
        bad(
            key,
            format!("'{t}' is not one of: one, local-one, quorum, local-quorum, all"),
        )
    })
}

fn parse_consistency(t: &str) -> Option<Consistency> {
    Some(match t {
        "one" => Consistency::One,
        "local-one" => Consistency::LocalOne,
        "quorum" => Consistency::Quorum,
        "local-quorum" => Consistency::LocalQuorum,
        "all" => Consistency::All,
        _ => return None,
    })
}

fn contact_points(key: &str, v: &toml::Value) -> Result<Vec<String>> {
    let t = text(key, v)?;
    let points: Vec<String> = t.split(',').map(|p| p.trim().to_owned()).collect();
    for p in &points {
        let port_ok = p
            .rsplit_once(':')
            .is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok());
        if !port_ok {
            return Err(bad(
                key,
                format!("'{p}' is not host:port (e.g. 127.0.0.1:9042)"),
            ));
        }
    }
    Ok(points)
}

impl L3Settings {
    /// Sets one `state.l3.*` key.
    pub(crate) fn set(&mut self, key: &str, v: &toml::Value) -> Result<()> {
        let secs = Duration::from_secs;
        match key {
            "state.l3.contact-points" => self.contact_points = contact_points(key, v)?,
            "state.l3.keyspace" => self.keyspace = identifier(key, v, false)?,
            "state.l3.table" => self.table = identifier(key, v, false)?,
            "state.l3.replication" => {
                let t = text(key, v)?.trim().to_owned();
                if !(t.starts_with('{') && t.ends_with('}') && t.contains("'class'")) {
                    return Err(bad(key, format!("'{t}' is not a CQL replication map (e.g. {{'class': 'SimpleStrategy', 'replication_factor': 3}})")));
                }
                self.replication = t;
            }
            "state.l3.consistency" => self.consistency = consistency(key, v)?,
            "state.l3.connect-timeout" => {
                self.connect_timeout = duration(key, v, Duration::from_millis(100), secs(600))?
            }
            "state.l3.request-timeout" => {
                self.request_timeout = duration(key, v, Duration::from_millis(10), secs(600))?
            }
            "state.l3.retry-for" => {
                self.retry_for = duration(key, v, Duration::ZERO, secs(86_400))?
            }
            "state.l3.concurrency" => self.concurrency = number(key, v, 1..=4096)? as usize,
            _ => return self.set_migration(key, v),
        }
        Ok(())
    }

    fn set_migration(&mut self, key: &str, v: &toml::Value) -> Result<()> {
        let slot = match key {
            "state.l3.migration.state" => 0,
            "state.l3.migration.table" => 1,
            "state.l3.migration.key-column" => 2,
            "state.l3.migration.time-column" => 3,
            "state.l3.migration.value-column" => 4,
            _ => {
                return Err(bad(
                    key,
                    "unknown key (see the configuration table in the README)",
                ))
            }
        };
        let value = if slot == 0 {
            text(key, v)?.trim().to_owned()
        } else {
            identifier(key, v, slot == 1)?
        };
        let m = self
            .migration
            .get_or_insert_with(|| ["", "", "user_id", "event_time", "payload"].map(String::from));
        m[slot] = value;
        Ok(())
    }

    /// Checks the keys that only make sense together.
    pub(crate) fn validate(&self) -> Result<()> {
        if let Some(m) = &self.migration {
            if m[0].is_empty() || m[1].is_empty() {
                return Err(bad(
                    "state.l3.migration",
                    "migration mode needs both state.l3.migration.state and state.l3.migration.table",
                ));
            }
        }
        if self.contact_points.is_empty() && *self != Self::default() {
            return Err(bad(
                "state.l3.contact-points",
                "state.l3.* keys are set but no contact points: set state.l3.contact-points to turn L3 on",
            ));
        }
        Ok(())
    }

    /// Whether L3 is on.
    pub fn enabled(&self) -> bool {
        !self.contact_points.is_empty()
    }

    /// The client configuration, with the job's lineage.
    /// The old job's table of migration mode as `keyspace.table`, lower
    /// case (a table named without a keyspace is in `state.l3.keyspace`).
    pub fn migration_table(&self) -> Option<String> {
        let [_, table, ..] = self.migration.as_ref()?;
        let qualified = if table.contains('.') {
            table.clone()
        } else {
            format!("{}.{table}", self.keyspace)
        };
        Some(qualified.to_lowercase())
    }

    pub fn client_config(&self, lineage: i64) -> L3Config {
        let mut c = L3Config::new(self.contact_points.clone(), lineage);
        c.keyspace = self.keyspace.clone();
        c.table = self.table.clone();
        c.replication = self.replication.clone();
        c.consistency = parse_consistency(&self.consistency).unwrap_or(Consistency::LocalQuorum);
        c.connect_timeout = self.connect_timeout;
        c.request_timeout = self.request_timeout;
        c.retry_for = self.retry_for;
        c.concurrency = self.concurrency;
        c.migration =
            self.migration
                .clone()
                .map(
                    |[state, table, key_column, time_column, value_column]| MigrationTable {
                        state,
                        table,
                        key_column,
                        time_column,
                        value_column,
                    },
                );
        c
    }
}
