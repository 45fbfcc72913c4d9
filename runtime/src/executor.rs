//! The process's one tokio runtime.
//!
//! Every asynchronous part of a strata process runs on it: a pipeline's
//! tasks (each shard's, in a consumer group), the checkpoint coordinator,
//! the object store client, the L3 driver (handed to `strata_cache::l3`),
//! the query and metrics endpoints, signal handling. It starts on first
//! use with one worker thread per core (at least 2, at most 64) and lives
//! as long as the process.
//!
//! Blocking work on it (RocksDB, fsync, waiting for L3) runs in
//! `tokio::task::block_in_place` or `spawn_blocking`, so the workers keep
//! serving the other tasks. [`block_on`] waits for a future from a thread
//! that is not one of the runtime's (a command's main thread, a shard's
//! thread, a `spawn_blocking` or `block_in_place` section).

use crate::error::{Result, RuntimeError};
use std::future::Future;
use std::sync::OnceLock;
use tokio::runtime::{Handle, Runtime};

static RUNTIME: OnceLock<Runtime> = OnceLock::new();

/// The process's runtime, started now if it was not yet.
///
/// Errors: [`RuntimeError::Io`] when its threads cannot be started.
pub(crate) fn runtime() -> Result<&'static Runtime> {
    if let Some(runtime) = RUNTIME.get() {
        return Ok(runtime);
    }
    let workers = std::thread::available_parallelism().map_or(2, |n| n.get().clamp(2, 64));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .thread_name("strata")
        .enable_all()
        .build()
        .map_err(RuntimeError::io(std::path::Path::new("tokio runtime")))?;
    // Two first uses at once: one runtime is kept, the other dropped here,
    // outside any runtime.
    Ok(RUNTIME.get_or_init(|| runtime))
}

/// A handle to the process's runtime (see [`runtime`]).
pub(crate) fn handle() -> Result<Handle> {
    Ok(runtime()?.handle().clone())
}

/// Runs `future` on the process's runtime and waits for it on this thread,
/// which must not be one of the runtime's workers (see the module docs).
pub(crate) fn block_on<F: Future>(future: F) -> Result<F::Output> {
    Ok(runtime()?.block_on(future))
}
