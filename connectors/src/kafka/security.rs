//! How every Kafka client strata opens reaches a secured cluster: TLS and
//! SASL (PLAIN, SCRAM-SHA-256/512) in librdkafka's terms, and a bounded
//! first contact that names what went wrong instead of retrying silently.
//!
//! Every client — source, sink, dead letters, consumer groups, the
//! `strata topic` and `strata jobs status` commands — takes its settings
//! from one [`KafkaSecurity`], so they cannot drift apart. The password is
//! kept out of `Debug` and of every error text.

use crate::error::{ConnectorError, Result};
use rdkafka::client::ClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::error::KafkaError;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Duration;

/// The security settings of a Kafka cluster (`kafka.*` in a job's
/// configuration). The default is plaintext without a login.
#[derive(Clone, PartialEq, Eq)]
pub struct KafkaSecurity {
    /// librdkafka's `security.protocol`: `plaintext`, `ssl`,
    /// `sasl_plaintext` or `sasl_ssl` (none: librdkafka's `plaintext`).
    pub protocol: Option<String>,
    /// `sasl.mechanism`: `PLAIN`, `SCRAM-SHA-256` or `SCRAM-SHA-512`.
    pub mechanism: Option<String>,
    /// `sasl.username`.
    pub username: Option<String>,
    password: Option<String>,
    /// PEM file of the CA that signed the brokers' certificates (none: the
    /// system's trust store).
    pub ca: Option<PathBuf>,
    /// PEM client certificate and its key (mutual TLS).
    pub client: Option<(PathBuf, PathBuf)>,
    /// Whether a broker's certificate must name the host strata connects
    /// to (librdkafka's `ssl.endpoint.identification.algorithm=https`).
    pub verify_hostname: bool,
}

impl Default for KafkaSecurity {
    /// Plaintext without a login (hostname verification on, should TLS be
    /// turned on).
    fn default() -> Self {
        Self {
            protocol: None,
            mechanism: None,
            username: None,
            password: None,
            ca: None,
            client: None,
            verify_hostname: true,
        }
    }
}

impl KafkaSecurity {
    /// Sets the SASL password (kept out of `Debug` and errors).
    pub fn set_password(&mut self, password: String) {
        self.password = Some(password);
    }

    /// Whether the settings speak TLS (`ssl`, `sasl_ssl`).
    pub fn tls(&self) -> bool {
        self.protocol
            .as_deref()
            .is_some_and(|p| p.eq_ignore_ascii_case("ssl") || p.eq_ignore_ascii_case("sasl_ssl"))
    }

    /// Writes the settings into a librdkafka configuration.
    pub(crate) fn apply(&self, c: &mut ClientConfig) {
        let mut set = |k: &str, v: Option<&str>| {
            if let Some(v) = v {
                c.set(k, v);
            }
        };
        set("security.protocol", self.protocol.as_deref());
        set("sasl.mechanism", self.mechanism.as_deref());
        set("sasl.username", self.username.as_deref());
        set("sasl.password", self.password.as_deref());
        let path = |p: &PathBuf| p.to_string_lossy().into_owned();
        set("ssl.ca.location", self.ca.as_ref().map(path).as_deref());
        if let Some((cert, key)) = &self.client {
            set("ssl.certificate.location", Some(&path(cert)));
            set("ssl.key.location", Some(&path(key)));
        }
        if !self.verify_hostname {
            set("ssl.endpoint.identification.algorithm", Some("none"));
        }
    }

    /// Reaches `brokers` once and fetches their metadata, within `timeout`.
    ///
    /// Errors: [`ConnectorError::KafkaUsage`] in one line naming the
    /// brokers and what librdkafka last reported (a refused login, an
    /// untrusted certificate, TLS or SASL on one side only, no broker),
    /// with a hint at the setting that decides it. librdkafka itself would
    /// retry such failures forever.
    pub fn check(&self, brokers: &str, timeout: Duration) -> Result<()> {
        let mut c = ClientConfig::new();
        c.set("bootstrap.servers", brokers);
        c.set("log_level", "4");
        self.apply(&mut c);
        let consumer: BaseConsumer<Recorder> =
            c.create_with_context(Recorder::default()).map_err(|e| {
                ConnectorError::KafkaUsage(format!(
                    "Kafka settings: {}",
                    crate::error::kafka_reason(&e)
                ))
            })?;
        // Short attempts, so that a refused login or certificate (which
        // librdkafka would retry until the timeout) ends the wait at once.
        let deadline = std::time::Instant::now() + timeout;
        let e = loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            let attempt = consumer.fetch_metadata(None, left.min(Duration::from_millis(500)));
            // Serves librdkafka's error events to the recorder.
            let _ = consumer.poll(Duration::ZERO);
            match attempt {
                Ok(_) => return Ok(()),
                Err(e) if left.is_zero() || consumer.context().definitive() => break e,
                Err(_) => {}
            }
        };
        let refused = consumer.context().definitive();
        let reason = consumer.context().last().unwrap_or_else(|| e.to_string());
        let what = if refused {
            format!("Kafka at {brokers} refused the connection")
        } else {
            format!("cannot reach Kafka at {brokers} within {timeout:?}")
        };
        Err(ConnectorError::KafkaUsage(format!(
            "{what}: {}{}",
            one_line(&reason),
            hint(&reason, self)
        )))
    }
}

impl std::fmt::Debug for KafkaSecurity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KafkaSecurity")
            .field("protocol", &self.protocol)
            .field("mechanism", &self.mechanism)
            .field("username", &self.username)
            .field("password", &self.password.as_ref().map(|_| "***"))
            .field("ca", &self.ca)
            .field("client", &self.client)
            .field("verify_hostname", &self.verify_hostname)
            .finish()
    }
}

fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The setting a librdkafka failure points at.
fn hint(reason: &str, s: &KafkaSecurity) -> &'static str {
    let r = reason.to_ascii_lowercase();
    let has = |needles: &[&str]| needles.iter().any(|n| r.contains(n));
    if has(&["certificate verify failed", "unable to get local issuer"]) {
        " (the broker's certificate is not signed by a CA strata trusts: kafka.ssl.ca, else the system's trust store; or it does not name the broker's host)"
    } else if has(&[
        "ssl handshake",
        "wrong version",
        "packet length",
        "plaintext broker",
    ]) {
        if s.tls() {
            " (is the listener TLS? kafka.security.protocol asks for it)"
        } else {
            " (does kafka.security.protocol match the listener?)"
        }
    } else if has(&["mechanism handshake", "supported mechanisms", "sasl state"]) {
        " (the listener takes no SASL, or not this mechanism: check kafka.security.protocol and kafka.sasl.mechanism)"
    } else if has(&["authentication", "invalid credentials"]) {
        " (the login was refused: check kafka.sasl.username, kafka.sasl.mechanism and STRATA_KAFKA_PASSWORD or kafka.sasl.password-file)"
    } else if has(&["connection refused"]) {
        " (nothing listens there: is the broker up, and is this its port?)"
    } else if has(&[
        "security.protocol",
        "disconnected",
        "timed out",
        "transport failure",
    ]) {
        " (is the broker up, and does kafka.security.protocol match its listener? TLS or SASL on one side only looks like this)"
    } else {
        ""
    }
}

/// A client context that keeps librdkafka's last error instead of logging
/// it, for [`KafkaSecurity::check`]'s message: its text, and whether it
/// is one no retry fixes (a refused login, a failed TLS handshake).
/// Warnings logged meanwhile stand in when no error was reported (a
/// broker that drops the connection is only logged).
#[derive(Default)]
struct Recorder {
    error: Mutex<Option<(String, bool)>>,
    warning: Mutex<Option<String>>,
}

impl Recorder {
    fn last(&self) -> Option<String> {
        let error = lock(&self.error).as_ref().map(|(text, _)| text.clone());
        error.or_else(|| lock(&self.warning).clone())
    }

    /// Whether a failure no retry fixes was reported: by its error code,
    /// or by librdkafka's words where it logs one without a code.
    fn definitive(&self) -> bool {
        let coded = lock(&self.error).as_ref().is_some_and(|(_, d)| *d);
        coded || self.last().is_some_and(|text| refusal(&text))
    }
}

/// librdkafka's words for a refusal: a login, a certificate, or TLS or
/// SASL that the listener does not speak.
fn refusal(text: &str) -> bool {
    let t = text.to_ascii_lowercase();
    [
        "authentication failed",
        "certificate verify failed",
        "plaintext broker listener",
        "mechanism handshake failed",
        "ssl handshake failed",
    ]
    .iter()
    .any(|n| t.contains(n))
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl ClientContext for Recorder {
    fn error(&self, error: KafkaError, reason: &str) {
        use rdkafka::types::RDKafkaErrorCode as Code;
        let definitive = matches!(
            error.rdkafka_error_code(),
            Some(Code::Authentication | Code::SaslAuthenticationFailed | Code::SSL)
        );
        let text = if reason.is_empty() {
            error.to_string()
        } else {
            reason.to_owned()
        };
        *lock(&self.error) = Some((text, definitive));
    }

    fn log(&self, level: rdkafka::config::RDKafkaLogLevel, _: &str, message: &str) {
        if (level as i32) <= rdkafka::config::RDKafkaLogLevel::Warning as i32 {
            *lock(&self.warning) = Some(message.to_owned());
        }
    }
}

impl ConsumerContext for Recorder {}
