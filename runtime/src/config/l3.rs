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
//! | `state.l3.username` | absent = no login | text | the role to log in as (`PasswordAuthenticator`); its password comes from `STRATA_L3_PASSWORD` or the file below, never from the configuration |
//! | `state.l3.password-file` | absent | path | a file holding the password (one line; wins over `STRATA_L3_PASSWORD`) |
//! | `state.l3.tls` | `false` | `true`, `false` | TLS to the nodes (in a TOML file: `[state.l3.tls]` `enabled = true`) |
//! | `state.l3.tls.ca` | the system's trust store | path | PEM file of the CA that signed the nodes' certificates |
//! | `state.l3.tls.certificate`, `state.l3.tls.key` | absent | paths | PEM client certificate and its key, for clusters that require one (mutual TLS); both or neither |
//! | `state.l3.tls.verify-hostname` | `true` | `true`, `false` | a node's certificate must name the address strata connects to |
//! | `state.l3.migration.state` | absent | a declared list state | migration mode: this list state lives in an existing table |
//! | `state.l3.migration.table` | — | `[keyspace.]table` | that table |
//! | `state.l3.migration.key-column` | `user_id` | CQL identifier | its partition key (text): the record key |
//! | `state.l3.migration.time-column` | `event_time` | CQL identifier | its clustering column (timestamp): the element's time |
//! | `state.l3.migration.value-column` | `payload` | CQL identifier | its payload column (blob): the element |

use super::{bad, duration, flag, number, path, text};
use crate::error::Result;
use std::path::PathBuf;
use std::time::Duration;
use strata_cache::l3::{Consistency, Credentials, L3Config, MigrationTable, TlsFiles};

/// The environment variable that holds the L3 password.
pub(crate) const L3_PASSWORD_ENV: &str = "STRATA_L3_PASSWORD";

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
    /// The role to log in as; the password is read when connecting.
    pub username: Option<String>,
    /// `state.l3.password-file`.
    pub password_file: Option<PathBuf>,
    /// `state.l3.tls`.
    pub tls: bool,
    /// `state.l3.tls.ca`.
    pub tls_ca: Option<PathBuf>,
    /// `state.l3.tls.certificate`.
    pub tls_certificate: Option<PathBuf>,
    /// `state.l3.tls.key`.
    pub tls_key: Option<PathBuf>,
    /// `state.l3.tls.verify-hostname`.
    pub tls_verify_hostname: bool,
    /// Whether other jobs share the migration table (not a key: a
    /// consumer group sets it for its shards), so that the TTL sweep
    /// leaves it alone (see `L3Config::sweep_migration_table`).
    pub shared_migration_table: bool,
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
            username: None,
            password_file: None,
            tls: false,
            tls_ca: None,
            tls_certificate: None,
            tls_key: None,
            tls_verify_hostname: true,
            shared_migration_table: false,
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
            _ if key.starts_with("state.l3.migration.") => return self.set_migration(key, v),
            _ => return self.set_security(key, v),
        }
        Ok(())
    }

    /// The login and TLS keys. A password is never a configuration value.
    fn set_security(&mut self, key: &str, v: &toml::Value) -> Result<()> {
        match key {
            "state.l3.username" => self.username = Some(super::secret::user(key, v)?),
            "state.l3.password-file" => self.password_file = Some(path(key, v)?),
            "state.l3.tls" | "state.l3.tls.enabled" => self.tls = flag(key, v)?,
            "state.l3.tls.ca" => self.tls_ca = Some(path(key, v)?),
            "state.l3.tls.certificate" => self.tls_certificate = Some(path(key, v)?),
            "state.l3.tls.key" => self.tls_key = Some(path(key, v)?),
            "state.l3.tls.verify-hostname" => self.tls_verify_hostname = flag(key, v)?,
            "state.l3.password" => {
                return Err(bad(
                    key,
                    format!("a password is never read from the configuration or -D (files and process lists show them): set {L3_PASSWORD_ENV} or state.l3.password-file"),
                ))
            }
            _ => {
                return Err(bad(
                    key,
                    "unknown key (see the configuration table in the README)",
                ))
            }
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
        if self.tls_certificate.is_some() != self.tls_key.is_some() {
            return Err(bad(
                "state.l3.tls.certificate",
                "a client certificate needs its key: set both state.l3.tls.certificate and state.l3.tls.key, or neither",
            ));
        }
        let tls_files = self.tls_ca.is_some() || self.tls_certificate.is_some();
        if tls_files && !self.tls {
            return Err(bad(
                "state.l3.tls",
                "state.l3.tls.* files are set but TLS is off: set state.l3.tls=true",
            ));
        }
        if self.password_file.is_some() && self.username.is_none() {
            return Err(bad(
                "state.l3.password-file",
                "a password without a user: set state.l3.username too",
            ));
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

    /// The settings of a consumer group's shard of `partition`: a table of
    /// its own, `<table>_p<partition>` (a table belongs to one lineage, its
    /// fence, and a shard is one), and the old job's table of migration
    /// mode shared with the other shards (each reads and writes only its
    /// own keys, as a key is in one partition), so not swept.
    pub(crate) fn for_shard(&mut self, partition: i32) {
        self.table = format!("{}_p{partition}", self.table);
        self.shared_migration_table = true;
    }

    /// The client configuration, with the job's lineage and the password
    /// read now (from `state.l3.password-file`, else `STRATA_L3_PASSWORD`).
    ///
    /// Errors: a user without a password, an unreadable password file.
    pub fn client_config(&self, lineage: i64) -> Result<L3Config> {
        let mut c = L3Config::new(self.contact_points.clone(), lineage);
        c.credentials = self.credentials()?;
        c.tls = self.tls.then(|| TlsFiles {
            ca: self.tls_ca.clone(),
            client: self.tls_certificate.clone().zip(self.tls_key.clone()),
            verify_hostname: self.tls_verify_hostname,
        });
        c.keyspace = self.keyspace.clone();
        c.table = self.table.clone();
        c.replication = self.replication.clone();
        c.consistency = parse_consistency(&self.consistency).unwrap_or(Consistency::LocalQuorum);
        c.connect_timeout = self.connect_timeout;
        c.request_timeout = self.request_timeout;
        c.retry_for = self.retry_for;
        c.concurrency = self.concurrency;
        c.sweep_migration_table = !self.shared_migration_table;
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
        Ok(c)
    }

    fn credentials(&self) -> Result<Option<Credentials>> {
        let Some(user) = &self.username else {
            return Ok(None);
        };
        let password = super::secret::password(
            "state.l3",
            user,
            self.password_file.as_deref(),
            L3_PASSWORD_ENV,
        )?;
        Ok(Some(Credentials::new(user.clone(), password)))
    }
}

#[cfg(test)]
mod tests {
    use crate::config::load_overrides as load;

    #[test]
    fn l3_login_and_tls_keys_check_each_other_and_hide_the_password() {
        let point = "state.l3.contact-points=127.0.0.1:9142";
        for (args, says) in [
            (&[point, "state.l3.password=x"][..], "STRATA_L3_PASSWORD"),
            (
                &[point, "state.l3.tls.ca=/ca.pem"][..],
                "set state.l3.tls=true",
            ),
            (
                &[point, "state.l3.tls=true", "state.l3.tls.key=/k"][..],
                "needs its key",
            ),
            (
                &[point, "state.l3.password-file=/p"][..],
                "set state.l3.username",
            ),
            (&[point, "state.l3.tls=yes"][..], "state.l3.tls"),
        ] {
            let e = load(args).unwrap_err().to_string();
            assert!(e.contains(says), "{args:?}: {e}");
        }
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("pw");
        std::fs::write(&file, "l3-s3cr3t\r\nignored").unwrap();
        let c = load(&[
            point,
            "state.l3.username=strata",
            &format!("state.l3.password-file={}", file.display()),
            "state.l3.tls.enabled=true",
            "state.l3.tls.ca=/ca.pem",
            "state.l3.tls.verify-hostname=false",
        ])
        .unwrap();
        let client = c.l3.client_config(1).unwrap();
        let tls = client.tls.as_ref().unwrap();
        assert!(!tls.verify_hostname);
        assert_eq!(client.credentials.as_ref().unwrap().username, "strata");
        let shown = format!("{client:?} {:?}", c.l3);
        assert!(
            shown.contains("***") && !shown.contains("s3cr3t"),
            "{shown}"
        );
    }
}
