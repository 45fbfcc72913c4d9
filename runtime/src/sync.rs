//! Locking a mutex whose holder may have panicked: the data is used as
//! it was left (every user keeps it consistent between statements).

/// Locks `m`, recovering it if a holder panicked.
pub(crate) fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}
