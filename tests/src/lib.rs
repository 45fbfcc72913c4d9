//! Helpers for strata's end-to-end tests: locating the `strata` binary and
//! the flights data, running jobs, reading their output, and an independent
//! batch computation of route-history to compare against.
//!
//! Only [`cassandra`], [`secure`] and [`wait`] are there without the
//! `e2e` feature (on by default): what `strata-cache`'s L3 test needs.

pub mod cassandra;
#[cfg(feature = "e2e")]
mod jobs;
#[cfg(feature = "e2e")]
pub mod kafka;
#[cfg(feature = "e2e")]
pub mod query;
#[cfg(feature = "e2e")]
pub mod s3;
pub mod secure;
pub mod wait;

#[cfg(feature = "e2e")]
pub use jobs::*;
use std::path::{Path, PathBuf};

/// The workspace root: `STRATA_ROOT` when set (`scripts/env.sh` sets it
/// for the scripts and the tests they run), else where this crate was
/// compiled — which a target directory shared by several clones can make
/// another clone's.
pub fn repo_root() -> PathBuf {
    if let Some(root) = std::env::var_os("STRATA_ROOT") {
        return PathBuf::from(root);
    }
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ has a parent")
        .to_owned()
}
