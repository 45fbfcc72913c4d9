//! Hooks that the failure tests use to make a job slow at a chosen place
//! (the cargo feature `fault-injection`, which `scripts/test.sh` turns on;
//! it turns on `strata-cache`'s crash points too). Without the feature
//! they are empty and compile to nothing: a user's binary carries none of
//! them.

/// A test hook standing in for a slow disk: with
/// `STRATA_SLOW_CHECKPOINT_MS=<n>` in the environment, the synchronous part
/// of every keyed checkpoint takes `n` ms longer (a blocking sleep, as a
/// slow fsync would block). Unset, it costs one check of a cached value.
#[cfg(feature = "fault-injection")]
pub(crate) fn slow_disk_delay() {
    static DELAY: std::sync::OnceLock<Option<u64>> = std::sync::OnceLock::new();
    let delay = DELAY.get_or_init(|| {
        std::env::var("STRATA_SLOW_CHECKPOINT_MS")
            .ok()?
            .parse()
            .ok()
    });
    if let Some(ms) = delay {
        std::thread::sleep(std::time::Duration::from_millis(*ms));
    }
}

/// Without `fault-injection`: nothing.
#[cfg(not(feature = "fault-injection"))]
#[inline(always)]
pub(crate) fn slow_disk_delay() {}
