//! Checkpoints in an object store (`--checkpoint-dir s3://bucket/prefix`):
//! a mirror of the local checkpoint directory, through the `object_store`
//! crate.
//!
//! The job keeps working on a local copy of its checkpoint directory
//! (`checkpoint.local-copy`; hard links, fsync and restores as for a plain
//! directory), and the object store holds the same layout under the prefix:
//!
//! * **Commit.** Before checkpoint N's `_metadata` is written locally,
//!   [`Remote::push`] uploads what is new or changed in the local copy
//!   since the last push: N's private files, the SST files of `shared/`
//!   that no earlier checkpoint uploaded (incremental), the Kafka sink's
//!   staged parts. Then `chk-N/_metadata` is put last: checkpoint N exists
//!   in the object store once that object does. A failed upload fails the
//!   checkpoint (after `object_store`'s own retries), never the job's
//!   state, and never leaves a listed checkpoint without its files. A
//!   request is retried for `checkpoint.storage.retry-for` first: an
//!   object store that blinks makes a checkpoint late, not failed.
//! * **Retention** ([`Remote::prune`]) mirrors the local one: the
//!   `_metadata` of a dropped checkpoint first, then its private files,
//!   then the `shared/` objects no retained checkpoint lists, and what
//!   failed checkpoints older than the newest uploaded.
//! * **Restore** ([`Remote::fetch`]): when the local copy lacks the
//!   checkpoint to restore (a new machine, a lost disk), it downloads only
//!   that checkpoint's private files, the shared files its manifests list
//!   and the sinks' staged parts, `_metadata` last; a local copy that holds
//!   it is used as it is (task-local recovery, as Flink's). Completed
//!   checkpoints of the local copy that the object store lacks never
//!   finished committing and are forgotten.
//!
//! The store is reached with the standard AWS settings from the
//! environment (`AWS_ENDPOINT`, `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`,
//! `AWS_REGION`, `AWS_ALLOW_HTTP`); `scripts/s3.sh env` prints those of the
//! test server. One job writes to a prefix at a time: it holds the lease
//! `_owner` there (see [`Lease`]).
//!
//! Blocking: every method waits on the network; call them from blocking
//! threads (`spawn_blocking`, `block_in_place`), as the rest of
//! [`super::CheckpointStorage`].

mod lease;
mod mirror;
mod names;
mod transfer;

pub use lease::{Lease, BEAT, EXPIRY};
pub use mirror::Listing;

use crate::error::{Result, RuntimeError};
use crate::executor::runtime as io;
use futures::{StreamExt, TryStreamExt};
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt};
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use transfer::Stamp;

/// Files at most this large go up in one request; larger ones in parts.
const SINGLE_PUT_MAX: u64 = 32 << 20;
/// Transfers in flight at once.
const CONCURRENCY: usize = 8;
/// `retry_for` of the commands that only read (`checkpoints list`, `state
/// get`): a person waits on them.
pub const COMMAND_RETRY_FOR: Duration = Duration::from_secs(10);

/// Whether a `--checkpoint-dir` names an object store rather than a path.
pub fn is_remote(location: &Path) -> bool {
    location.to_str().is_some_and(|s| s.starts_with("s3://"))
}

/// Bytes and files moved to and from the object store by this process.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct TransferFigures {
    /// Bytes uploaded.
    pub bytes_up: u64,
    /// Files uploaded.
    pub files_up: u64,
    /// Bytes downloaded.
    pub bytes_down: u64,
    /// Files downloaded.
    pub files_down: u64,
}

#[derive(Debug, Default)]
struct Transfers {
    bytes_up: AtomicU64,
    files_up: AtomicU64,
    bytes_down: AtomicU64,
    files_down: AtomicU64,
}

/// A checkpoint directory's mirror in an object store.
#[derive(Debug)]
pub struct Remote {
    store: Arc<dyn ObjectStore>,
    prefix: ObjectPath,
    url: String,
    uploaded: Mutex<HashMap<String, Stamp>>,
    transfers: Transfers,
}

impl Remote {
    /// Connects to `url` (`s3://bucket/prefix`) with the AWS settings of
    /// the environment. Nothing is requested yet. A request that fails in
    /// a way worth retrying (no connection, a timeout, a 5xx or 429 answer)
    /// is retried with backoff (100 ms doubling to 5 s, jittered) for
    /// `retry_for` (`checkpoint.storage.retry-for`) before its step fails;
    /// `object_store`'s timeouts bound each attempt (5 s to connect, 30 s
    /// per request).
    ///
    /// Errors: a URL `object_store` cannot use ([`RuntimeError::Usage`]).
    pub fn connect(url: &str, retry_for: Duration) -> Result<Self> {
        let endpoint = std::env::var("AWS_ENDPOINT").unwrap_or_default();
        let allow_http = std::env::var("AWS_ALLOW_HTTP").unwrap_or_default();
        if endpoint.starts_with("http://") && allow_http != "true" {
            return Err(RuntimeError::Usage(format!(
                "checkpoint storage {url}: AWS_ENDPOINT is {endpoint}, plain http, but AWS_ALLOW_HTTP is not true"
            )));
        }
        let retry = object_store::RetryConfig {
            // The time, not a count, bounds the retries: a backoff is at
            // least 100 ms.
            max_retries: (retry_for.as_millis() / 100) as usize + 1,
            retry_timeout: retry_for,
            backoff: object_store::BackoffConfig {
                max_backoff: Duration::from_secs(5),
                ..Default::default()
            },
        };
        let store = object_store::aws::AmazonS3Builder::from_env()
            .with_url(url)
            .with_retry(retry)
            .build()
            .map_err(|e| {
                RuntimeError::Usage(format!(
                    "checkpoint storage {url}: {e} (the endpoint and credentials come from AWS_ENDPOINT, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_REGION; AWS_ALLOW_HTTP=true for http)"
                ))
            })?;
        let prefix = url
            .strip_prefix("s3://")
            .and_then(|r| r.split_once('/'))
            .map_or("", |(_, p)| p.trim_matches('/'));
        Ok(Self {
            store: Arc::new(store),
            prefix: ObjectPath::from(prefix),
            url: url.trim_end_matches('/').to_owned(),
            uploaded: Mutex::new(HashMap::new()),
            transfers: Transfers::default(),
        })
    }

    /// The URL, for messages.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// What this process moved so far.
    pub fn transfers(&self) -> TransferFigures {
        let t = &self.transfers;
        TransferFigures {
            bytes_up: t.bytes_up.load(Ordering::Relaxed),
            files_up: t.files_up.load(Ordering::Relaxed),
            bytes_down: t.bytes_down.load(Ordering::Relaxed),
            files_down: t.files_down.load(Ordering::Relaxed),
        }
    }

    pub(super) fn error(
        &self,
        what: impl std::fmt::Display,
        e: object_store::Error,
    ) -> RuntimeError {
        RuntimeError::Checkpoint {
            path: PathBuf::from(&self.url),
            reason: format!("{what}: {e}"),
        }
    }

    pub(super) fn path(&self, rel: &str) -> ObjectPath {
        ObjectPath::from(format!("{}/{rel}", self.prefix).trim_start_matches('/'))
    }

    /// Every object under the prefix: its name relative to the prefix and
    /// its size in bytes.
    pub(crate) fn objects(&self) -> Result<BTreeMap<String, u64>> {
        let prefix = (!self.prefix.as_ref().is_empty()).then_some(&self.prefix);
        let listed: Vec<_> = io()?
            .block_on(self.store.list(prefix).try_collect())
            .map_err(|e| {
                self.error(
                    "listing (the store is reached with AWS_ENDPOINT, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and AWS_REGION from the environment; for the test server: eval \"$(scripts/s3.sh env)\")",
                    e,
                )
            })?;
        Ok(listed
            .into_iter()
            .filter_map(|o| {
                let rel = o.location.prefix_match(&self.prefix)?;
                let rel: Vec<String> = rel.map(|p| p.as_ref().to_owned()).collect();
                Some((rel.join("/"), o.size))
            })
            .collect())
    }

    pub(super) fn read(&self, rel: &str) -> Result<Vec<u8>> {
        let got = io()?.block_on(async { self.store.get(&self.path(rel)).await?.bytes().await });
        got.map(|b| b.to_vec())
            .map_err(|e| self.error(format_args!("reading {rel}"), e))
    }

    pub(super) fn delete(&self, rels: Vec<String>) -> Result<()> {
        if rels.is_empty() {
            return Ok(());
        }
        let paths: Vec<object_store::Result<ObjectPath>> =
            rels.iter().map(|r| Ok(self.path(r))).collect();
        let paths = futures::stream::iter(paths).boxed();
        let done: Vec<_> = io()?.block_on(self.store.delete_stream(paths).collect::<Vec<_>>());
        let mut uploaded = self.uploaded.lock().unwrap_or_else(|p| p.into_inner());
        for rel in &rels {
            uploaded.remove(rel);
        }
        match done.into_iter().find_map(|r| r.err()) {
            Some(object_store::Error::NotFound { .. }) | None => Ok(()),
            Some(e) => Err(self.error("deleting", e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_s3_urls_name_an_object_store() {
        assert!(is_remote(Path::new("s3://bucket/prefix")));
        assert!(!is_remote(Path::new("out/_checkpoints")));
        assert!(!is_remote(Path::new("/data/s3://x")));
    }
}
