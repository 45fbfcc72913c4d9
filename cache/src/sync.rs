//! The one lock helper of the crate.
//!
//! A poisoned mutex (a panic while it was held) is taken over rather than
//! propagated: every value behind a lock here is kept consistent at each
//! step (a half-done operation is at worst a lost optimisation, never a
//! broken invariant), and the store's own failure flag is what refuses
//! further use after a failed write.

use std::sync::{Mutex, MutexGuard};

/// Locks `m`, taking over a poisoned lock.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}
