//! Hooks that the crash tests use to stop a process at a chosen moment
//! (the cargo feature `fault-injection`, which `scripts/test.sh` turns on).
//! Without the feature they are empty and compile to nothing: a user's
//! binary carries none of them.

/// A crash-test hook: with `STRATA_CRASH_AT=<point>:<n>` in the
/// environment, the process aborts (as a SIGKILL would stop it) the n-th
/// time it reaches `<point>` — `before-l3-write` (a checkpoint completed,
/// its picked keys are not in L3 yet) or `before-l2-delete` (they are in L3
/// and still in L2). Unset, it costs one check of a cached value.
#[cfg(feature = "fault-injection")]
pub(crate) fn crash_point(point: &str) {
    use std::sync::atomic::{AtomicU64, Ordering};
    static AT: std::sync::OnceLock<Option<(String, u64)>> = std::sync::OnceLock::new();
    static HITS: AtomicU64 = AtomicU64::new(0);
    let at = AT.get_or_init(|| {
        let v = std::env::var("STRATA_CRASH_AT").ok()?;
        let (p, n) = v.rsplit_once(':')?;
        Some((p.to_owned(), n.parse().ok()?))
    });
    if let Some((p, n)) = at {
        if p == point && HITS.fetch_add(1, Ordering::Relaxed) + 1 == *n {
            eprintln!("strata: STRATA_CRASH_AT={point}:{n} reached: aborting");
            std::process::abort();
        }
    }
}

/// Without `fault-injection`: nothing.
#[cfg(not(feature = "fault-injection"))]
#[inline(always)]
pub(crate) fn crash_point(_point: &str) {}
