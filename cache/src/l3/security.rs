//! Authentication and TLS towards Cassandra/ScyllaDB: what
//! `state.l3.username`, `STRATA_L3_PASSWORD` and `state.l3.tls.*` turn into.
//!
//! * The login is the driver's own `PasswordAuthenticator` support
//!   (`SessionBuilder::user`, SASL PLAIN), as in Cassandra's
//!   `PasswordAuthenticator` and ScyllaDB's `PasswordAuthenticator`.
//! * TLS is the driver's rustls integration with a [`rustls::ClientConfig`]
//!   built here from PEM files: the CA that signed the nodes' certificates,
//!   optionally a client certificate and key (mutual TLS, Cassandra's
//!   `require_client_auth`). The driver names each node by its IP address,
//!   so with hostname verification on (the default) a node's certificate
//!   must list that address (a `subjectAltName` of type IP).
//!
//! Secrets stay out of every `Debug` and error text: [`Credentials`] prints
//! its password as `***`, and errors name files, never their contents.

use crate::error::{Result, StateError};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{
    CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme,
};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// A username and its password for Cassandra's `PasswordAuthenticator`.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    /// The role to log in as.
    pub username: String,
    password: String,
}

impl Credentials {
    /// A login of `username` with `password`.
    pub fn new(username: impl Into<String>, password: impl Into<String>) -> Self {
        Self {
            username: username.into(),
            password: password.into(),
        }
    }

    pub(super) fn password(&self) -> &str {
        &self.password
    }
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("username", &self.username)
            .field("password", &"***")
            .finish()
    }
}

/// TLS towards the nodes: `state.l3.tls.*`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    /// PEM file of the CA (or CAs) that signed the nodes' certificates;
    /// none: the system's trust store.
    pub ca: Option<PathBuf>,
    /// PEM files of a client certificate (chain) and its private key, for
    /// clusters that ask for one (mutual TLS).
    pub client: Option<(PathBuf, PathBuf)>,
    /// Whether a node's certificate must name the address strata connects
    /// to (on by default; off accepts any certificate the CA signed).
    pub verify_hostname: bool,
}

impl TlsFiles {
    /// The rustls client configuration these files describe.
    ///
    /// Errors: a file that cannot be read or holds no PEM certificate
    /// (or key), naming the file and the setting.
    pub(super) fn client_config(&self) -> Result<Arc<ClientConfig>> {
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let roots = Arc::new(match &self.ca {
            Some(ca) => read_roots(ca)?,
            None => system_roots()?,
        });
        let builder = ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(tls_error)?;
        let builder = if self.verify_hostname {
            builder.with_root_certificates(roots)
        } else {
            let inner = WebPkiServerVerifier::builder_with_provider(roots, provider)
                .build()
                .map_err(|e| tls_error(format!("state.l3.tls.ca: {e}")))?;
            builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(AnyName(inner)))
        };
        let config = match &self.client {
            None => builder.with_no_client_auth(),
            Some((cert, key)) => {
                let chain = read_certificates(cert, "state.l3.tls.certificate")?;
                let key = PrivateKeyDer::from_pem_file(key).map_err(|e| {
                    tls_error(format!(
                        "state.l3.tls.key {}: no PEM private key ({e})",
                        key.display()
                    ))
                })?;
                builder
                    .with_client_auth_cert(chain, key)
                    .map_err(|e| tls_error(format!("state.l3.tls.certificate/key: {e}")))?
            }
        };
        Ok(Arc::new(config))
    }
}

fn tls_error(e: impl std::fmt::Display) -> StateError {
    StateError::L3(format!("TLS setup: {e}"))
}

fn read_certificates(path: &Path, setting: &str) -> Result<Vec<CertificateDer<'static>>> {
    let bad = |why: String| tls_error(format!("{setting} {}: {why}", path.display()));
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| bad(e.to_string()))?
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|e| bad(e.to_string()))?;
    if certs.is_empty() {
        return Err(bad("holds no PEM certificate".into()));
    }
    Ok(certs)
}

fn read_roots(ca: &Path) -> Result<RootCertStore> {
    let mut roots = RootCertStore::empty();
    for cert in read_certificates(ca, "state.l3.tls.ca")? {
        roots
            .add(cert)
            .map_err(|e| tls_error(format!("state.l3.tls.ca {}: {e}", ca.display())))?;
    }
    Ok(roots)
}

fn system_roots() -> Result<RootCertStore> {
    let found = rustls_native_certs::load_native_certs();
    let mut roots = RootCertStore::empty();
    let (added, _) = roots.add_parsable_certificates(found.certs);
    if added == 0 {
        return Err(tls_error(
            "the system trust store holds no CA certificate: set state.l3.tls.ca to the CA's PEM file",
        ));
    }
    Ok(roots)
}

/// The standard verifier without the name check
/// (`state.l3.tls.verify-hostname=false`): the chain must still lead to
/// the configured CA, be valid now and allow server authentication.
#[derive(Debug)]
struct AnyName(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for AnyName {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> std::result::Result<ServerCertVerified, rustls::Error> {
        match self
            .0
            .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
        {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

/// Causes a driver error can show: the words that give it away, whether
/// it applies only with TLS on (`Some(true)`) or off (`Some(false)`), and
/// the phrase for the job's error line. The first that matches wins.
const CAUSES: &[(&[&str], Option<bool>, &str)] = &[
    (
        &["authentication is required", "requires authentication"],
        None,
        "the node requires a login: set state.l3.username (its password in STRATA_L3_PASSWORD or state.l3.password-file)",
    ),
    (
        &["authentication", "bad credentials", "username and/or password"],
        None,
        "the login was refused: wrong username or password (state.l3.username, STRATA_L3_PASSWORD or state.l3.password-file)",
    ),
    (
        &["unknownissuer", "unknown issuer", "badsignature"],
        None,
        "the node's certificate is not signed by a CA strata trusts: state.l3.tls.ca, else the system's trust store (untrusted certificate)",
    ),
    (
        &["notvalidforname", "not valid for name"],
        None,
        "the node's certificate does not name the address strata connects to (set state.l3.tls.verify-hostname=false to skip the name check)",
    ),
    (
        &["expired", "notvalidyet"],
        None,
        "the node's certificate is expired or not yet valid",
    ),
    (
        &["connection refused"],
        None,
        "nothing listens there: is the node running, and is this its native (CQL) port?",
    ),
    (
        &["corrupt message", "invalidcontenttype", "invalid content type", "wrong version"],
        Some(true),
        "the node does not speak TLS on this port: is state.l3.tls=true right for it?",
    ),
    (
        &["broken", "reset", "closed", "eof", "timed out", "timeout"],
        Some(false),
        "the node closed the connection during the handshake: does it require TLS (state.l3.tls=true)?",
    ),
];

/// What a failed connection most likely means, as one phrase for the job's
/// error line: a login missing or refused, an untrusted or misnamed
/// certificate, no node, or TLS on one side only. `None` when the driver's
/// text says none of these.
pub(super) fn diagnose(driver_error: &str, tls: bool) -> Option<&'static str> {
    let e = driver_error.to_ascii_lowercase();
    CAUSES
        .iter()
        .find(|(words, only, _)| {
            only.is_none_or(|on| on == tls) && words.iter().any(|w| e.contains(w))
        })
        .map(|(_, _, phrase)| *phrase)
}
