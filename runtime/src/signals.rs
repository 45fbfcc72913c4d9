//! SIGINT and SIGTERM, heard from the first time any part of strata asks
//! until the process ends, and remembered: a signal that arrives while a
//! job is still starting (reaching Kafka, connecting to Cassandra, opening
//! its sink) stops it as soon as it listens, instead of being lost. (Once
//! a handler is installed the OS no longer applies the default action, so
//! a signal nobody remembers would be ignored.)

use std::sync::OnceLock;
use tokio::sync::watch;

/// The first signal received, if any; listening starts on first use.
static RECEIVED: OnceLock<Option<watch::Receiver<Option<&'static str>>>> = OnceLock::new();

/// Installs the handlers and starts a task on the process's runtime that
/// waits for the first signal; `None` if that failed (then no signal is
/// handled: the default applies).
fn listen() -> Option<watch::Receiver<Option<&'static str>>> {
    use tokio::signal::unix::{signal, SignalKind};
    let handle = crate::executor::handle().ok()?;
    let _entered = handle.enter();
    let mut int = signal(SignalKind::interrupt()).ok()?;
    let mut term = signal(SignalKind::terminate()).ok()?;
    let (tx, rx) = watch::channel(None);
    handle.spawn(async move {
        let name = tokio::select! {
            _ = int.recv() => "SIGINT",
            _ = term.recv() => "SIGTERM",
        };
        let _ = tx.send(Some(name));
        // Keep the handlers (and the channel) for the process's life.
        let _kept = (int, term);
        std::future::pending::<()>().await
    });
    Some(rx)
}

/// The first SIGINT or SIGTERM received so far, if any (for a loop that
/// polls; listening starts on the first call).
pub(crate) fn received() -> Option<&'static str> {
    RECEIVED
        .get_or_init(listen)
        .as_ref()
        .and_then(|rx| *rx.borrow())
}

/// Resolves with the name of the first SIGINT or SIGTERM the process
/// received — at once if one arrived before the call.
pub(crate) fn shutdown_signal() -> impl std::future::Future<Output = &'static str> {
    let received = RECEIVED.get_or_init(listen).clone();
    async move {
        let Some(mut rx) = received else {
            return std::future::pending().await;
        };
        loop {
            if let Some(name) = *rx.borrow_and_update() {
                return name;
            }
            if rx.changed().await.is_err() {
                return std::future::pending().await;
            }
        }
    }
}
