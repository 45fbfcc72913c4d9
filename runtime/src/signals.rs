//! SIGINT and SIGTERM, heard from the first time any part of strata asks
//! until the process ends, and remembered: a signal that arrives while a
//! job is still starting (reaching Kafka, connecting to Cassandra, opening
//! its sink) stops it as soon as it listens, instead of being lost. (Once
//! a handler is installed the OS no longer applies the default action, so
//! a signal nobody remembers would be ignored.)

use std::sync::OnceLock;
use tokio::sync::watch;

/// The first signal received, if any; the thread that listens starts on
/// first use.
static RECEIVED: OnceLock<Option<watch::Receiver<Option<&'static str>>>> = OnceLock::new();

/// Starts the listening thread and waits until its handlers are installed;
/// `None` if that failed (then no signal is handled: the default applies).
fn listen() -> Option<watch::Receiver<Option<&'static str>>> {
    use tokio::signal::unix::{signal, SignalKind};
    let (tx, rx) = watch::channel(None);
    let (ready, armed) = std::sync::mpsc::channel();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .ok()?;
    std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            runtime.block_on(async move {
                let handlers = (
                    signal(SignalKind::interrupt()),
                    signal(SignalKind::terminate()),
                );
                let (Ok(mut int), Ok(mut term)) = handlers else {
                    let _ = ready.send(false);
                    return;
                };
                let _ = ready.send(true);
                let name = tokio::select! {
                    _ = int.recv() => "SIGINT",
                    _ = term.recv() => "SIGTERM",
                };
                let _ = tx.send(Some(name));
                // Keep the handlers (and the channel) for the process's life.
                std::future::pending::<()>().await
            })
        })
        .ok()?;
    armed.recv().ok()?.then_some(rx)
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
