//! The first contact with a Kafka cluster, before a job or command opens
//! its real clients: bounded by `kafka.connect-timeout`, one line naming
//! what went wrong (a refused login, TLS or SASL on one side only, an
//! untrusted certificate), a line while it takes long, and SIGINT/SIGTERM
//! heard meanwhile. librdkafka alone would retry such failures silently
//! and forever.

use crate::config::KafkaSecuritySettings;
use crate::error::{Result, RuntimeError};
use std::time::Duration;
use strata_connectors::kafka::KafkaSecurity;

/// After this long without an answer, a line says what strata waits for.
const QUIET: Duration = Duration::from_secs(3);

/// Reaches every cluster in `brokers` (each once) with `settings`; returns
/// the settings every client then uses.
///
/// Errors: a cluster did not answer within `kafka.connect-timeout`
/// (naming it and librdkafka's last reason), a missing password, a signal.
pub(crate) async fn reach(
    settings: &KafkaSecuritySettings,
    brokers: &[&str],
) -> Result<KafkaSecurity> {
    let security = settings.security()?;
    let mut seen: Vec<&str> = Vec::new();
    for b in brokers {
        if seen.contains(b) {
            continue;
        }
        seen.push(b);
        reach_one(&security, b, settings.connect_timeout).await?;
    }
    Ok(security)
}

async fn reach_one(security: &KafkaSecurity, brokers: &str, timeout: Duration) -> Result<()> {
    let (s, b) = (security.clone(), brokers.to_owned());
    // A thread of its own, not `spawn_blocking`: on a signal the process
    // must not wait for the probe (a runtime waits for its blocking tasks).
    let (tx, mut probe) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name("kafka-contact".into())
        .spawn(move || {
            let _ = tx.send(s.check(&b, timeout));
        })
        .map_err(|e| RuntimeError::Function(format!("start the Kafka probe: {e}")))?;
    let signal = crate::signals::shutdown_signal();
    tokio::pin!(signal);
    let mut waited = Duration::ZERO;
    loop {
        tokio::select! {
            done = &mut probe => {
                return done
                    .map_err(|_| RuntimeError::Function("the Kafka probe ended without an answer".into()))?
                    .map_err(Into::into);
            }
            signal = &mut signal => {
                return Err(RuntimeError::Usage(format!(
                    "interrupted by {signal} while connecting to Kafka at {brokers}: nothing was read or written"
                )));
            }
            _ = tokio::time::sleep(QUIET) => {
                waited += QUIET;
                eprintln!(
                    "strata: waiting for Kafka at {brokers} ({}s of kafka.connect-timeout={}s)",
                    waited.as_secs(),
                    timeout.as_secs()
                );
            }
        }
    }
}

/// [`reach`] for commands outside a tokio runtime.
pub(crate) fn reach_blocking(
    settings: &KafkaSecuritySettings,
    brokers: &[&str],
) -> Result<KafkaSecurity> {
    crate::executor::block_on(reach(settings, brokers))?
}
