//! The secured test servers: the Cassandra node `scripts/cassandra.sh
//! start --secure` runs (PasswordAuthenticator, TLS-only CQL port) and the
//! SASL_SSL listener `scripts/kafka.sh start` adds to the broker (SCRAM and
//! PLAIN users), with the test CA that `scripts/lib/tls.sh` makes in
//! `<repo>/.tls`. Also the grep that proves no secret leaked.

use crate::repo_root;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// The role the secured Cassandra has for the tests.
pub const CASSANDRA_USER: &str = "strata";
/// The SCRAM/PLAIN user of the Kafka SASL_SSL listener.
pub const KAFKA_USER: &str = "strata";

/// A file of the test CA's folder (`<repo>/.tls/<name>`).
pub fn tls_file(name: &str) -> PathBuf {
    repo_root().join(".tls").join(name)
}

/// The secured Cassandra: `127.0.0.1:<STRATA_CASSANDRA_SECURE_PORT or 9142>`.
pub fn cassandra_contact_point() -> String {
    let port = std::env::var("STRATA_CASSANDRA_SECURE_PORT").unwrap_or_else(|_| "9142".into());
    format!("127.0.0.1:{port}")
}

/// The password of [`CASSANDRA_USER`].
pub fn cassandra_password() -> String {
    std::env::var("STRATA_CASSANDRA_SECURE_PASSWORD")
        .unwrap_or_else(|_| "strata-cassandra-secret-9Vb3".into())
}

/// The SASL_SSL listener: `127.0.0.1:<STRATA_KAFKA_SASL_SSL_PORT or 9094>`.
pub fn kafka_brokers() -> String {
    let port = std::env::var("STRATA_KAFKA_SASL_SSL_PORT").unwrap_or_else(|_| "9094".into());
    format!("127.0.0.1:{port}")
}

/// The password of [`KAFKA_USER`].
pub fn kafka_password() -> String {
    std::env::var("STRATA_KAFKA_SCRAM_PASSWORD")
        .unwrap_or_else(|_| "strata-kafka-secret-6Q2x".into())
}

/// Panics (fails the test) unless `addr` accepts connections: the secured
/// tests need the real servers `scripts/test.sh` starts.
pub fn require(addr: &str, how: &str) {
    let a: std::net::SocketAddr = addr.parse().expect("an address");
    if std::net::TcpStream::connect_timeout(&a, Duration::from_secs(5)).is_err() {
        panic!("nothing answers on {addr}: start it with {how} (scripts/test.sh does)");
    }
    assert!(
        tls_file("ca.pem").exists(),
        "no test CA in .tls: scripts/kafka.sh start or scripts/cassandra.sh start --secure makes it"
    );
}

/// `key=value` settings for Kafka over SASL_SSL as user `user` with
/// `mechanism`, trusting the test CA (the password goes in
/// `STRATA_KAFKA_PASSWORD`).
pub fn kafka_settings(user: &str, mechanism: &str) -> Vec<String> {
    [
        "kafka.security.protocol=sasl_ssl".to_string(),
        format!("kafka.sasl.mechanism={mechanism}"),
        format!("kafka.sasl.username={user}"),
        format!("kafka.ssl.ca={}", tls_file("ca.pem").display()),
    ]
    .into()
}

/// `key=value` settings for L3 on the secured Cassandra in `keyspace`,
/// over TLS with the test CA, logged in as [`CASSANDRA_USER`] (the
/// password in `STRATA_L3_PASSWORD` or a password file).
pub fn l3_settings(keyspace: &str) -> Vec<String> {
    [
        format!("state.l3.contact-points={}", cassandra_contact_point()),
        format!("state.l3.keyspace={keyspace}"),
        format!("state.l3.username={CASSANDRA_USER}"),
        "state.l3.tls=true".into(),
        format!("state.l3.tls.ca={}", tls_file("ca.pem").display()),
    ]
    .into()
}

/// `settings` (`key=value`) as `-D` arguments.
pub fn defines<S: AsRef<str>>(settings: &[S]) -> Vec<String> {
    settings
        .iter()
        .flat_map(|d| ["-D".to_string(), d.as_ref().to_string()])
        .collect()
}

/// `settings` with `key` set to `value` (`None`: removed).
pub fn with_setting(settings: &[String], key: &str, value: Option<&str>) -> Vec<String> {
    let prefix = format!("{key}=");
    let mut out: Vec<String> = settings
        .iter()
        .filter(|s| !s.starts_with(&prefix))
        .cloned()
        .collect();
    if let Some(v) = value {
        out.push(format!("{key}={v}"));
    }
    out
}

/// A rustls client configuration trusting the test CA, for the tests' own
/// CQL client.
pub fn rustls_config() -> Arc<rustls::ClientConfig> {
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls::pki_types::CertificateDer::pem_file_iter(tls_file("ca.pem"))
        .expect("the test CA (.tls/ca.pem)")
    {
        roots.add(cert.expect("a PEM certificate")).unwrap();
    }
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    Arc::new(config)
}

/// Every place under `roots` (files, recursively) and in `texts` where one
/// of `secrets` appears, as `where: secret` lines (empty: no leak).
pub fn leaks(roots: &[&Path], texts: &[(&str, &str)], secrets: &[&str]) -> Vec<String> {
    let mut found = Vec::new();
    let mut check = |place: String, bytes: &[u8]| {
        for s in secrets {
            if bytes.windows(s.len()).any(|w| w == s.as_bytes()) {
                found.push(format!("{place}: {s}"));
            }
        }
    };
    for (name, text) in texts {
        check((*name).to_owned(), text.as_bytes());
    }
    let mut stack: Vec<PathBuf> = roots.iter().map(|r| r.to_path_buf()).collect();
    let mut files = 0;
    while let Some(p) = stack.pop() {
        if p.is_dir() {
            for e in std::fs::read_dir(&p).unwrap() {
                stack.push(e.unwrap().path());
            }
        } else if let Ok(bytes) = std::fs::read(&p) {
            files += 1;
            check(p.display().to_string(), &bytes);
        }
    }
    assert!(
        roots.is_empty() || files > 0,
        "no file under {roots:?} to search"
    );
    found
}
