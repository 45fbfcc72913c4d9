//! The `kafka.*` keys: how every Kafka client strata opens (source, sink,
//! dead letters, consumer groups, `strata topic`, `strata jobs status`)
//! reaches a secured cluster. They map to librdkafka's settings of the
//! same meaning; see [`strata_connectors::kafka::KafkaSecurity`].
//!
//! | key | default | allowed | meaning |
//! |---|---|---|---|
//! | `kafka.security.protocol` | `plaintext` | `plaintext`, `ssl`, `sasl_plaintext`, `sasl_ssl` | librdkafka's `security.protocol` |
//! | `kafka.sasl.mechanism` | `SCRAM-SHA-512` with a SASL protocol | `PLAIN`, `SCRAM-SHA-256`, `SCRAM-SHA-512` | `sasl.mechanism` |
//! | `kafka.sasl.username` | — (needed with SASL) | text | `sasl.username`; the password comes from `STRATA_KAFKA_PASSWORD` or the file below, never from the configuration |
//! | `kafka.sasl.password-file` | absent | path | a file holding the password (first line; wins over `STRATA_KAFKA_PASSWORD`) |
//! | `kafka.ssl.ca` | the system's trust store | path | PEM file of the CA that signed the brokers' certificates (`ssl.ca.location`) |
//! | `kafka.ssl.certificate`, `kafka.ssl.key` | absent | paths | PEM client certificate and unencrypted key (mutual TLS); both or neither |
//! | `kafka.ssl.verify-hostname` | `true` | `true`, `false` | a broker's certificate must name its host (`ssl.endpoint.identification.algorithm`) |
//! | `kafka.connect-timeout` | `30s` | 1s–10min | how long the first contact with the brokers may take before the job fails, naming why |

use super::secret::user;
use super::{bad, duration, flag, path, text};
use crate::error::Result;
use std::path::PathBuf;
use std::time::Duration;
use strata_connectors::kafka::KafkaSecurity;

/// The environment variable that holds the SASL password.
pub(crate) const KAFKA_PASSWORD_ENV: &str = "STRATA_KAFKA_PASSWORD";

/// The `kafka.*` settings of a job, without the password (read when a
/// client is opened: [`KafkaSecuritySettings::security`]).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct KafkaSecuritySettings {
    /// `kafka.security.protocol`, lower case.
    pub protocol: Option<String>,
    /// `kafka.sasl.mechanism`, upper case.
    pub mechanism: Option<String>,
    /// `kafka.sasl.username`.
    pub username: Option<String>,
    /// `kafka.sasl.password-file`.
    pub password_file: Option<PathBuf>,
    /// `kafka.ssl.ca`.
    pub ca: Option<PathBuf>,
    /// `kafka.ssl.certificate`.
    pub certificate: Option<PathBuf>,
    /// `kafka.ssl.key`.
    pub key: Option<PathBuf>,
    /// `kafka.ssl.verify-hostname`.
    pub verify_hostname: bool,
    /// `kafka.connect-timeout`.
    pub connect_timeout: Duration,
}

impl Default for KafkaSecuritySettings {
    fn default() -> Self {
        Self {
            protocol: None,
            mechanism: None,
            username: None,
            password_file: None,
            ca: None,
            certificate: None,
            key: None,
            verify_hostname: true,
            connect_timeout: Duration::from_secs(30),
        }
    }
}

const PROTOCOLS: &[&str] = &["plaintext", "ssl", "sasl_plaintext", "sasl_ssl"];
const MECHANISMS: &[&str] = &["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"];

fn choice(key: &str, v: &toml::Value, allowed: &[&str], upper: bool) -> Result<String> {
    let t = text(key, v)?.trim().to_owned();
    let t = if upper {
        t.to_ascii_uppercase()
    } else {
        t.to_ascii_lowercase()
    };
    if !allowed.contains(&t.as_str()) {
        return Err(bad(
            key,
            format!("'{t}' is not one of: {}", allowed.join(", ")),
        ));
    }
    Ok(t)
}

impl KafkaSecuritySettings {
    /// Sets `key` (one of this module's keys); `false` if it is not one.
    pub(crate) fn set(&mut self, key: &str, v: &toml::Value) -> Result<bool> {
        match key {
            "kafka.security.protocol" => self.protocol = Some(choice(key, v, PROTOCOLS, false)?),
            "kafka.sasl.mechanism" => self.mechanism = Some(choice(key, v, MECHANISMS, true)?),
            "kafka.sasl.username" => self.username = Some(user(key, v)?),
            "kafka.sasl.password-file" => self.password_file = Some(path(key, v)?),
            "kafka.ssl.ca" => self.ca = Some(path(key, v)?),
            "kafka.ssl.certificate" => self.certificate = Some(path(key, v)?),
            "kafka.ssl.key" => self.key = Some(path(key, v)?),
            "kafka.ssl.verify-hostname" => self.verify_hostname = flag(key, v)?,
            "kafka.connect-timeout" => {
                self.connect_timeout =
                    duration(key, v, Duration::from_secs(1), Duration::from_secs(600))?
            }
            "kafka.sasl.password" => {
                return Err(bad(
                    key,
                    format!("a password is never read from the configuration or -D (files and process lists show them): set {KAFKA_PASSWORD_ENV} or kafka.sasl.password-file"),
                ))
            }
            _ => return Ok(false),
        }
        Ok(true)
    }

    fn sasl(&self) -> bool {
        self.protocol
            .as_deref()
            .is_some_and(|p| p.starts_with("sasl_"))
    }

    fn tls(&self) -> bool {
        matches!(self.protocol.as_deref(), Some("ssl" | "sasl_ssl"))
    }

    /// Checks the keys that only make sense together.
    pub(crate) fn validate(&self) -> Result<()> {
        if self.certificate.is_some() != self.key.is_some() {
            return Err(bad(
                "kafka.ssl.certificate",
                "a client certificate needs its key: set both kafka.ssl.certificate and kafka.ssl.key, or neither",
            ));
        }
        if (self.ca.is_some() || self.certificate.is_some()) && !self.tls() {
            return Err(bad(
                "kafka.security.protocol",
                "kafka.ssl.* files are set but the protocol has no TLS: set kafka.security.protocol=ssl or sasl_ssl",
            ));
        }
        let login =
            self.username.is_some() || self.mechanism.is_some() || self.password_file.is_some();
        if login && !self.sasl() {
            return Err(bad(
                "kafka.security.protocol",
                "kafka.sasl.* keys are set but the protocol has no SASL: set kafka.security.protocol=sasl_ssl or sasl_plaintext",
            ));
        }
        if self.sasl() && self.username.is_none() {
            return Err(bad(
                "kafka.sasl.username",
                "a SASL protocol needs a user: set kafka.sasl.username (its password in STRATA_KAFKA_PASSWORD or kafka.sasl.password-file)",
            ));
        }
        Ok(())
    }

    /// The settings every Kafka client of the job uses, the password read
    /// now (`kafka.sasl.password-file`, else `STRATA_KAFKA_PASSWORD`).
    ///
    /// Errors: a SASL user without a password, an unreadable password,
    /// CA, certificate or key file (naming its key).
    pub fn security(&self) -> Result<KafkaSecurity> {
        for (key, file) in [
            ("kafka.ssl.ca", &self.ca),
            ("kafka.ssl.certificate", &self.certificate),
            ("kafka.ssl.key", &self.key),
        ] {
            if let Some(f) = file {
                std::fs::File::open(f)
                    .map_err(|e| bad(key, format!("cannot read {}: {e}", f.display())))?;
            }
        }
        let mut s = KafkaSecurity::default();
        s.protocol = self.protocol.clone();
        s.mechanism = self.mechanism.clone();
        s.username = self.username.clone();
        s.ca = self.ca.clone();
        s.client = self.certificate.clone().zip(self.key.clone());
        s.verify_hostname = self.verify_hostname;
        if self.sasl() {
            s.mechanism.get_or_insert_with(|| "SCRAM-SHA-512".into());
            s.set_password(super::secret::password(
                "kafka.sasl",
                self.username.as_deref().unwrap_or_default(),
                self.password_file.as_deref(),
                KAFKA_PASSWORD_ENV,
            )?);
        }
        Ok(s)
    }
}

#[cfg(test)]
mod tests {
    use crate::config::load_overrides as load;

    #[test]
    fn sasl_settings_read_the_password_from_its_file_and_never_print_it() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("pw");
        std::fs::write(&file, "s3cr3t-in-a-file\n").unwrap();
        let c = load(&[
            "kafka.security.protocol=SASL_SSL",
            "kafka.sasl.username=alice",
            &format!("kafka.sasl.password-file={}", file.display()),
            &format!("kafka.ssl.ca={}", file.display()),
        ])
        .unwrap();
        let s = c.kafka.security.security().unwrap();
        assert_eq!(s.protocol.as_deref(), Some("sasl_ssl"));
        assert_eq!(s.mechanism.as_deref(), Some("SCRAM-SHA-512"), "the default");
        let shown = format!("{s:?} {:?}", c.kafka);
        assert!(shown.contains("***"), "{shown}");
        assert!(!shown.contains("s3cr3t"), "{shown}");
        // Not a file to read whole: an endless device is refused at once.
        let mut endless = c.kafka.security.clone();
        endless.password_file = Some("/dev/zero".into());
        let e = endless.security().unwrap_err().to_string();
        assert!(e.contains("not a regular file"), "{e}");
        std::fs::write(&file, "\n").unwrap();
        let e = c.kafka.security.security().unwrap_err().to_string();
        assert!(
            e.contains("kafka.sasl.password-file") && e.contains("no password"),
            "{e}"
        );
    }

    #[test]
    fn passwords_and_per_client_security_properties_are_refused_naming_the_way() {
        for (args, says) in [
            (&["kafka.sasl.password=x"][..], "STRATA_KAFKA_PASSWORD"),
            (
                &["source.kafka.sasl.password=x"][..],
                "STRATA_KAFKA_PASSWORD",
            ),
            (
                &["source.kafka.SASL.Password=x"][..],
                "STRATA_KAFKA_PASSWORD",
            ),
            (&["kafka.sasl.username= "][..], "an empty username"),
            (
                &["sink.kafka.security.protocol=ssl"][..],
                "kafka.security.protocol",
            ),
            (&["source.kafka.ssl.ca.location=/x"][..], "kafka.ssl.ca"),
            (&["kafka.security.protocol=tls"][..], "sasl_ssl"),
            (
                &[
                    "kafka.security.protocol=sasl_ssl",
                    "kafka.sasl.mechanism=GSSAPI",
                    "kafka.sasl.username=u",
                ][..],
                "SCRAM-SHA-256",
            ),
            (
                &["kafka.ssl.ca=/x"][..],
                "set kafka.security.protocol=ssl or sasl_ssl",
            ),
            (&["kafka.security.protocol=sasl_ssl"][..], "needs a user"),
            (&["kafka.sasl.username=u"][..], "has no SASL"),
            (
                &["kafka.security.protocol=ssl", "kafka.ssl.certificate=/c"][..],
                "needs its key",
            ),
            (&["kafka.connect-timeout=0s"][..], "kafka.connect-timeout"),
        ] {
            let e = load(args).unwrap_err().to_string();
            assert!(e.contains(says), "{args:?}: {e}");
            assert!(!e.contains("=x"), "{args:?} echoes the value: {e}");
        }
    }
}
