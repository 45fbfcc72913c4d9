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
//! `_owner` there (see [`super::lease`]).
//!
//! Blocking: every method waits on the network; call them from blocking
//! threads (`spawn_blocking`, `block_in_place`), as the rest of
//! [`super::CheckpointStorage`].

use super::CheckpointMetadata;
use crate::error::{Result, RuntimeError};
use futures::{StreamExt, TryStreamExt};
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload, WriteMultipart};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::fs;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant, SystemTime};
use strata_cache::StateError;

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

/// The runtime the object store's HTTP client runs on, shared by every
/// [`Remote`] of the process and never dropped.
fn io() -> &'static tokio::runtime::Runtime {
    static IO: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    IO.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("strata-object-store")
            .enable_all()
            .build()
            .expect("a tokio runtime for object store I/O")
    })
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

/// What was last uploaded of a local file: its length and, if this
/// process uploaded it, its modification time.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Stamp {
    len: u64,
    modified: Option<SystemTime>,
}

/// What one listing of a prefix found (see [`Remote::listing`]).
pub struct Listing {
    objects: BTreeMap<String, u64>,
    /// The completed checkpoints, oldest first.
    pub completed: Vec<CheckpointMetadata>,
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

/// The kind of a checkpoint-relative object name.
enum Kind {
    /// `chk-<N>/…`: private to checkpoint N.
    Private(u64),
    /// `shared/…`: an SST file any checkpoint may list.
    Shared,
    /// strata's other files (names starting with `_`): the sinks' staged
    /// parts, the L3 lineage, the write-back marker.
    Other,
    /// Not strata's (e.g. another job's prefix below this one): never
    /// deleted, downloaded or counted.
    Foreign,
    /// The job's lease on the prefix (`_owner`, see [`super::lease`]):
    /// only the lease reads, writes and deletes it.
    Lease,
}

/// The lease's object, relative to the prefix.
const OWNER: &str = "_owner";

fn kind(rel: &str) -> Kind {
    if rel.starts_with("shared/") {
        return Kind::Shared;
    }
    if rel == OWNER {
        return Kind::Lease;
    }
    let id = rel
        .strip_prefix("chk-")
        .and_then(|r| r.split_once('/'))
        .and_then(|(n, _)| n.parse().ok());
    match id {
        Some(id) => Kind::Private(id),
        None if rel.starts_with('_') => Kind::Other,
        None => Kind::Foreign,
    }
}

fn metadata_name(id: u64) -> String {
    format!("chk-{id}/_metadata")
}

/// Whether the local file `rel` is never mirrored: the live state
/// (`_work`), the lock, inspections, temporary files and `_metadata`
/// (put by [`Remote::put_metadata`], last).
fn is_local_only(rel: &str) -> bool {
    let top = rel.split('/').next().unwrap_or(rel);
    let name = rel.rsplit('/').next().unwrap_or(rel);
    top == "_work"
        || top == "_lock"
        || top.starts_with("_inspect-")
        || name.ends_with(".tmp")
        || name == "_metadata"
}

/// Every regular file under `root`, as `/`-separated names relative to it,
/// with its length and modification time.
fn local_files(root: &Path) -> Result<BTreeMap<String, Stamp>> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<String, Stamp>) -> Result<()> {
        let entries = match fs::read_dir(dir) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            other => other.map_err(RuntimeError::io(dir))?,
        };
        for entry in entries {
            let entry = entry.map_err(RuntimeError::io(dir))?;
            let path = entry.path();
            let rel = path
                .strip_prefix(root)
                .unwrap_or(&path)
                .to_string_lossy()
                .replace('\\', "/");
            if is_local_only(&rel) {
                continue;
            }
            // A file that vanished meanwhile (a sink renamed it) is skipped:
            // the next push mirrors its new name.
            let Ok(meta) = entry.metadata() else { continue };
            if meta.is_dir() {
                walk(root, &path, out)?;
            } else if meta.is_file() {
                let modified = meta.modified().ok();
                out.insert(
                    rel,
                    Stamp {
                        len: meta.len(),
                        modified,
                    },
                );
            }
        }
        Ok(())
    }
    let mut out = BTreeMap::new();
    walk(root, root, &mut out)?;
    Ok(out)
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

    fn error(&self, what: impl std::fmt::Display, e: object_store::Error) -> RuntimeError {
        RuntimeError::Checkpoint {
            path: PathBuf::from(&self.url),
            reason: format!("{what}: {e}"),
        }
    }

    fn path(&self, rel: &str) -> ObjectPath {
        ObjectPath::from(format!("{}/{rel}", self.prefix).trim_start_matches('/'))
    }

    /// Every object under the prefix: its name relative to the prefix and
    /// its size in bytes.
    pub(crate) fn objects(&self) -> Result<BTreeMap<String, u64>> {
        let prefix = (!self.prefix.as_ref().is_empty()).then_some(&self.prefix);
        let listed: Vec<_> = io()
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

    fn read(&self, rel: &str) -> Result<Vec<u8>> {
        let got = io().block_on(async { self.store.get(&self.path(rel)).await?.bytes().await });
        got.map(|b| b.to_vec())
            .map_err(|e| self.error(format_args!("reading {rel}"), e))
    }

    /// Every completed checkpoint in the object store, oldest first.
    ///
    /// An unreadable `_metadata` of an older checkpoint is skipped (a newer
    /// one supersedes it); an unreadable newest one is an error.
    pub fn list(&self) -> Result<Vec<CheckpointMetadata>> {
        Ok(self.listing()?.completed)
    }

    /// One listing of the prefix: its objects and its completed
    /// checkpoints (as [`Remote::list`]). A restore works from one listing.
    pub fn listing(&self) -> Result<Listing> {
        let objects = self.objects()?;
        let completed = self.completed_in(&objects)?;
        Ok(Listing { objects, completed })
    }

    fn completed_in(&self, objects: &BTreeMap<String, u64>) -> Result<Vec<CheckpointMetadata>> {
        let ids = self.completed_ids(objects);
        let newest = ids.last().copied();
        let mut out = Vec::new();
        for id in ids {
            match self.metadata(id) {
                Ok(meta) => out.push(meta),
                Err(e) if Some(id) == newest => return Err(e),
                Err(_) => {}
            }
        }
        Ok(out)
    }

    /// Refuses a prefix that holds objects strata did not write (a parent
    /// of other jobs' prefixes, a bucket's root): a start deletes what no
    /// checkpoint references, which must never be someone else's.
    pub fn refuse_foreign(&self) -> Result<()> {
        let objects = self.objects()?;
        match objects.keys().find(|rel| matches!(kind(rel), Kind::Foreign)) {
            None => Ok(()),
            Some(rel) => Err(RuntimeError::Usage(format!(
                "checkpoint storage {} holds objects strata did not write (e.g. {rel}): give an empty prefix or one of strata's",
                self.url
            ))),
        }
    }

    fn metadata(&self, id: u64) -> Result<CheckpointMetadata> {
        let name = metadata_name(id);
        let text = String::from_utf8(self.read(&name)?).unwrap_or_default();
        CheckpointMetadata::decode(&text).map_err(|reason| RuntimeError::Checkpoint {
            path: PathBuf::from(format!("{}/{name}", self.url)),
            reason: format!("unreadable metadata: {reason}"),
        })
    }

    fn completed_ids(&self, objects: &BTreeMap<String, u64>) -> Vec<u64> {
        let mut ids: Vec<u64> = objects
            .keys()
            .filter_map(|rel| match kind(rel) {
                Kind::Private(id) if *rel == metadata_name(id) => Some(id),
                _ => None,
            })
            .collect();
        ids.sort_unstable();
        ids
    }

    /// Uploads `local` as `rel`: the bytes sent, or `None` when the file
    /// vanished meanwhile (a sink removed or renamed it after a commit; the
    /// next push mirrors what replaced it).
    async fn upload(&self, rel: String, local: PathBuf, len: u64) -> Result<Option<u64>> {
        let target = self.path(&rel);
        let failed = |e| self.error(format_args!("uploading {rel}"), e);
        let vanished = |e: &std::io::Error| e.kind() == std::io::ErrorKind::NotFound;
        if len <= SINGLE_PUT_MAX {
            let body = match tokio::fs::read(&local).await {
                Err(e) if vanished(&e) => return Ok(None),
                other => other.map_err(RuntimeError::io(&local))?,
            };
            let sent = body.len() as u64;
            self.store
                .put(&target, PutPayload::from(body))
                .await
                .map_err(failed)?;
            return Ok(Some(sent));
        }
        let mut file = match fs::File::open(&local) {
            Err(e) if vanished(&e) => return Ok(None),
            other => other.map_err(RuntimeError::io(&local))?,
        };
        let upload = self.store.put_multipart(&target).await.map_err(failed)?;
        let mut writer = WriteMultipart::new(upload);
        let (mut buf, mut sent) = (vec![0u8; 8 << 20], 0u64);
        let outcome: Result<()> = async {
            loop {
                let n = file.read(&mut buf).map_err(RuntimeError::io(&local))?;
                if n == 0 {
                    return Ok(());
                }
                writer
                    .wait_for_capacity(CONCURRENCY)
                    .await
                    .map_err(failed)?;
                writer.write(&buf[..n]);
                sent += n as u64;
            }
        }
        .await;
        if let Err(e) = outcome {
            // No half-uploaded parts left behind in the bucket.
            let _ = writer.abort().await;
            return Err(e);
        }
        writer.finish().await.map_err(failed)?;
        Ok(Some(sent))
    }

    /// Downloads `rel` into the local copy at `root`: its bytes. A staged
    /// part (`_*`) that is gone is skipped (0 bytes): its sink published
    /// and deleted it since the listing, so no restore needs it. With
    /// `xxh3` (what the checkpoint recorded), the bytes are checked on the
    /// way and a mismatch is a [`StateError::CorruptFile`] that leaves
    /// nothing behind.
    async fn download(&self, rel: String, root: PathBuf, xxh3: Option<String>) -> Result<u64> {
        let local = root.join(&rel);
        let tmp = PathBuf::from(format!("{}.download.tmp", local.display()));
        if let Some(dir) = local.parent() {
            fs::create_dir_all(dir).map_err(RuntimeError::io(dir))?;
        }
        let failed = |e| self.error(format_args!("downloading {rel}"), e);
        let mut stream = match self.store.get(&self.path(&rel)).await {
            Err(object_store::Error::NotFound { .. }) if matches!(kind(&rel), Kind::Other) => {
                return Ok(0)
            }
            got => got.map_err(failed)?.into_stream(),
        };
        let mut file = fs::File::create(&tmp).map_err(RuntimeError::io(&tmp))?;
        let (mut got, mut hasher) = (0u64, xxhash_rust::xxh3::Xxh3::new());
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.map_err(failed)?;
            file.write_all(&chunk).map_err(RuntimeError::io(&tmp))?;
            hasher.update(&chunk);
            got += chunk.len() as u64;
        }
        let found = format!("{:016x}", hasher.digest());
        if let Some(want) = xxh3.filter(|want| *want != found) {
            let _ = fs::remove_file(&tmp);
            return Err(RuntimeError::State(StateError::CorruptFile {
                path: PathBuf::from(format!("{}/{rel}", self.url)),
                object: rel,
                found: format!("xxh3 {found} where the checkpoint recorded {want}"),
            }));
        }
        file.sync_all().map_err(RuntimeError::io(&tmp))?;
        fs::rename(&tmp, &local).map_err(RuntimeError::io(&local))?;
        Ok(got)
    }

    /// Uploads what the local copy at `root` holds that is new or changed
    /// since the last push (see the module docs) for checkpoint `id`, at
    /// most eight at a time.
    ///
    /// Errors: a file that cannot be read, an upload that failed.
    pub fn push(&self, root: &Path, id: u64) -> Result<()> {
        let local = local_files(root)?;
        let changed: Vec<(String, Stamp)> = {
            let uploaded = self.uploaded.lock().unwrap_or_else(|p| p.into_inner());
            local
                .into_iter()
                // Another checkpoint's private files went up at its own
                // commit (a stale local one must never overwrite them).
                .filter(|(rel, _)| match kind(rel) {
                    Kind::Private(n) => n == id,
                    Kind::Foreign | Kind::Lease => false,
                    Kind::Shared | Kind::Other => true,
                })
                .filter(|(rel, stamp)| match uploaded.get(rel) {
                    None => true,
                    // Seeded from a listing: checkpoint files are
                    // immutable, and match by size.
                    Some(s) if s.modified.is_none() => s.len != stamp.len,
                    Some(s) => s != stamp,
                })
                .collect()
        };
        let sent = io().block_on(
            futures::stream::iter(changed.into_iter().map(|(rel, stamp)| async move {
                let sent = self.upload(rel.clone(), root.join(&rel), stamp.len).await?;
                Ok::<_, RuntimeError>(sent.map(|bytes| (rel, stamp, bytes)))
            }))
            .buffer_unordered(CONCURRENCY)
            .try_collect::<Vec<_>>(),
        )?;
        let sent: Vec<(String, Stamp, u64)> = sent.into_iter().flatten().collect();
        let t = &self.transfers;
        t.bytes_up
            .fetch_add(sent.iter().map(|s| s.2).sum(), Ordering::Relaxed);
        t.files_up.fetch_add(sent.len() as u64, Ordering::Relaxed);
        let mut uploaded = self.uploaded.lock().unwrap_or_else(|p| p.into_inner());
        uploaded.extend(sent.into_iter().map(|(rel, stamp, _)| (rel, stamp)));
        Ok(())
    }

    /// The lease object's content, if there is one (see [`super::lease`]).
    pub(crate) fn read_owner(&self) -> Result<Option<Vec<u8>>> {
        let got = io().block_on(async { self.store.get(&self.path(OWNER)).await?.bytes().await });
        match got {
            Ok(body) => Ok(Some(body.to_vec())),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(self.error(format_args!("reading {OWNER}"), e)),
        }
    }

    /// Writes the lease object.
    pub(crate) fn put_owner(&self, body: &[u8]) -> Result<()> {
        io().block_on(
            self.store
                .put(&self.path(OWNER), PutPayload::from(body.to_vec())),
        )
        .map(|_| ())
        .map_err(|e| self.error(format_args!("writing {OWNER}"), e))
    }

    /// Deletes the lease object.
    pub(crate) fn delete_owner(&self) -> Result<()> {
        self.delete(vec![OWNER.to_owned()])
    }

    /// Puts checkpoint `id`'s `_metadata`: the checkpoint exists in the
    /// object store once this returns.
    pub fn put_metadata(&self, id: u64, body: &[u8]) -> Result<()> {
        let name = metadata_name(id);
        io().block_on(
            self.store
                .put(&self.path(&name), PutPayload::from(body.to_vec())),
        )
        .map(|_| ())
        .map_err(|e| self.error(format_args!("writing {name}"), e))
    }

    fn delete(&self, rels: Vec<String>) -> Result<()> {
        if rels.is_empty() {
            return Ok(());
        }
        let paths: Vec<object_store::Result<ObjectPath>> =
            rels.iter().map(|r| Ok(self.path(r))).collect();
        let paths = futures::stream::iter(paths).boxed();
        let done: Vec<_> = io().block_on(self.store.delete_stream(paths).collect::<Vec<_>>());
        let mut uploaded = self.uploaded.lock().unwrap_or_else(|p| p.into_inner());
        for rel in &rels {
            uploaded.remove(rel);
        }
        match done.into_iter().find_map(|r| r.err()) {
            Some(object_store::Error::NotFound { .. }) | None => Ok(()),
            Some(e) => Err(self.error("deleting", e)),
        }
    }

    /// Removes the `_metadata` of checkpoints `ids` (they no longer exist).
    pub fn forget(&self, ids: &[u64]) -> Result<()> {
        self.delete(ids.iter().map(|id| metadata_name(*id)).collect())
    }

    /// Keeps the newest `keep` completed checkpoints of the object store
    /// (its own and `local`, the local copy's, which a restore on another
    /// machine may lack most of). Dropped checkpoints lose their
    /// `_metadata` first, then their files; `shared/` objects no kept
    /// checkpoint lists and other objects the local copy no longer has are
    /// removed. Call only while no checkpoint is in flight.
    ///
    /// Errors: a kept checkpoint's metadata cannot be read, a request failed.
    pub fn prune(&self, root: &Path, keep: usize, local: &[CheckpointMetadata]) -> Result<()> {
        let objects = self.objects()?;
        let mut ids = self.completed_ids(&objects);
        ids.extend(local.iter().map(|m| m.id));
        ids.sort_unstable();
        ids.dedup();
        let (dropped, kept_ids) = ids.split_at(ids.len().saturating_sub(keep.max(1)));
        let kept = kept_ids
            .iter()
            .map(|id| match local.iter().find(|m| m.id == *id) {
                Some(m) => Ok(m.clone()),
                None => self.metadata(*id),
            })
            .collect::<Result<Vec<_>>>()?;
        let kept_ids: HashSet<u64> = kept_ids.iter().copied().collect();
        let newest = kept_ids.iter().copied().max().unwrap_or(0);
        self.forget(dropped)?;
        let live: HashSet<&str> = kept.iter().flat_map(super::storage::objects).collect();
        let local = local_files(root)?;
        let stale = objects.into_keys().filter(|rel| match kind(rel) {
            Kind::Private(id) => !kept_ids.contains(&id) && id <= newest,
            Kind::Shared => !live.contains(rel.as_str()),
            Kind::Other => !local.contains_key(rel),
            Kind::Foreign | Kind::Lease => false,
        });
        self.delete(stale.collect())
    }

    /// Removes what no completed checkpoint in the object store references:
    /// files of checkpoints that never completed, and `shared/` objects only
    /// they listed. Call only while no checkpoint is in flight (at start).
    pub fn sweep(&self) -> Result<()> {
        let objects = self.objects()?;
        let completed = self.completed_in(&objects)?;
        let ids: HashSet<u64> = completed.iter().map(|m| m.id).collect();
        let live: HashSet<&str> = completed.iter().flat_map(super::storage::objects).collect();
        let dead = objects.into_keys().filter(|rel| match kind(rel) {
            Kind::Private(id) => !ids.contains(&id),
            Kind::Shared => !live.contains(rel.as_str()),
            Kind::Other | Kind::Foreign | Kind::Lease => false,
        });
        self.delete(dead.collect())
    }

    /// Makes the local copy at `root` hold checkpoint `id` of the object
    /// store (see the module docs). A local `chk-<id>` whose `_metadata`
    /// differs from the store's (another machine's checkpoint of the same
    /// number) is replaced; one that matches is kept and nothing is
    /// downloaded.
    ///
    /// Errors: `id` is not in the object store, a transfer failed, the
    /// local copy cannot be written.
    pub fn fetch(&self, root: &Path, id: u64, listing: &Listing) -> Result<()> {
        let objects = &listing.objects;
        self.seed(objects);
        let name = metadata_name(id);
        let theirs = self.read(&name)?;
        let dir = root.join(format!("chk-{id}"));
        match fs::read(root.join(&name)) {
            Ok(ours) if ours == theirs => return Ok(()),
            Ok(_) => fs::remove_dir_all(&dir).map_err(RuntimeError::io(&dir))?,
            Err(_) => {}
        }
        let started = Instant::now();
        let meta = self.metadata(id)?;
        let wanted: HashSet<&str> = super::storage::objects(&meta).collect();
        let mut listed = meta.operators.iter().flat_map(|o| &o.manifest.files);
        if let Some(f) = listed.find(|f| objects.get(&f.object) != Some(&f.bytes)) {
            return Err(RuntimeError::Checkpoint {
                path: PathBuf::from(&self.url),
                reason: format!(
                    "checkpoint {id} lists {} ({} bytes), which the store does not hold whole",
                    f.object, f.bytes
                ),
            });
        }
        let here = local_files(root)?;
        for rel in here.keys().filter(|r| matches!(kind(r), Kind::Other)) {
            if !objects.contains_key(rel) {
                let path = root.join(rel);
                fs::remove_file(&path).map_err(RuntimeError::io(&path))?;
            }
        }
        let needed: Vec<String> = objects
            .iter()
            .filter(|(rel, size)| match kind(rel) {
                Kind::Private(n) => n == id && **rel != name && !same_size(&here, rel, **size),
                Kind::Shared => wanted.contains(rel.as_str()) && !same_size(&here, rel, **size),
                // Staged parts may reuse a name with other content.
                Kind::Other => true,
                Kind::Foreign | Kind::Lease => false,
            })
            .map(|(rel, _)| rel.clone())
            .collect();
        let sums: HashMap<&str, &str> = meta
            .operators
            .iter()
            .flat_map(|o| &o.manifest.files)
            .filter_map(|f| Some((f.object.as_str(), f.xxh3.as_deref()?)))
            .collect();
        let got = io()
            .block_on(
                futures::stream::iter(needed.iter().map(|rel| {
                    let xxh3 = sums.get(rel.as_str()).map(|s| s.to_string());
                    self.download(rel.clone(), root.into(), xxh3)
                }))
                .buffer_unordered(CONCURRENCY)
                .try_collect::<Vec<u64>>(),
            )
            .map_err(|e| super::storage::blame_corrupt(id, e, &listing.completed))?;
        // Every file durable before the `_metadata` that makes the local
        // checkpoint complete.
        sync_tree(root)?;
        let meta_bytes = io().block_on(self.download(name, root.into(), None))?;
        super::storage::sync_dir(&dir)?;
        let bytes = got.iter().sum::<u64>() + meta_bytes;
        let other: u64 = needed
            .iter()
            .filter(|rel| matches!(kind(rel), Kind::Other))
            .filter_map(|rel| objects.get(rel))
            .sum();
        let t = &self.transfers;
        t.bytes_down.fetch_add(bytes, Ordering::Relaxed);
        t.files_down
            .fetch_add(got.len() as u64 + 1, Ordering::Relaxed);
        eprintln!(
            "strata: fetched checkpoint {id} from {}: {} files, {bytes} bytes ({other} of them staged output and markers) in {:.1} s",
            self.url,
            got.len() + 1,
            started.elapsed().as_secs_f64()
        );
        Ok(())
    }

    /// Records the store's checkpoint files as uploaded, so that a push
    /// after a restart sends only what is new. Other objects (staged parts,
    /// whose names a restored sink may reuse) are not recorded: the next
    /// push sends them again.
    fn seed(&self, objects: &BTreeMap<String, u64>) {
        let mut uploaded = self.uploaded.lock().unwrap_or_else(|p| p.into_inner());
        for (rel, len) in objects {
            if !matches!(kind(rel), Kind::Other) {
                let stamp = Stamp {
                    len: *len,
                    modified: None,
                };
                uploaded.insert(rel.clone(), stamp);
            }
        }
    }
}

fn same_size(here: &BTreeMap<String, Stamp>, rel: &str, size: u64) -> bool {
    here.get(rel).is_some_and(|s| s.len == size)
}

/// fsyncs every directory under `root` and `root` itself (after
/// downloads renamed files into them).
fn sync_tree(root: &Path) -> Result<()> {
    for entry in fs::read_dir(root)
        .map_err(RuntimeError::io(root))?
        .flatten()
    {
        if entry.file_type().is_ok_and(|t| t.is_dir()) && entry.file_name() != "_work" {
            sync_tree(&entry.path())?;
        }
    }
    super::storage::sync_dir(root)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn object_names_are_sorted_into_private_shared_strata_s_own_and_foreign() {
        assert!(matches!(
            kind("chk-12/op-0/MANIFEST-000005"),
            Kind::Private(12)
        ));
        assert!(matches!(kind("chk-12/_metadata"), Kind::Private(12)));
        assert!(matches!(kind("shared/run-op0-000009.sst"), Kind::Shared));
        assert!(matches!(
            kind("_kafka/.rh-0-000003.jsonl.inprogress"),
            Kind::Other
        ));
        assert!(matches!(kind("_l3_lineage"), Kind::Other));
        // Another job's prefix below this one, or a stray object.
        assert!(matches!(kind("jobA/chk-3/_metadata"), Kind::Foreign));
        assert!(matches!(kind("chk-x/y"), Kind::Foreign));
        assert!(matches!(kind("notes.txt"), Kind::Foreign));
    }

    #[test]
    fn the_live_state_lock_and_metadata_are_never_mirrored() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        for f in [
            "_work/op-0/000001.sst",
            "_lock",
            "_inspect-7/x",
            "chk-3/_metadata",
            "chk-3/_metadata.tmp",
            "chk-3/op-0/CURRENT",
            "shared/a.sst",
            "_kafka/part",
        ] {
            fs::create_dir_all(root.join(f).parent().unwrap()).unwrap();
            fs::write(root.join(f), b"x").unwrap();
        }
        let names: Vec<String> = local_files(root).unwrap().into_keys().collect();
        assert_eq!(names, ["_kafka/part", "chk-3/op-0/CURRENT", "shared/a.sst"]);
    }

    #[test]
    fn only_s3_urls_name_an_object_store() {
        assert!(is_remote(Path::new("s3://bucket/prefix")));
        assert!(!is_remote(Path::new("out/_checkpoints")));
        assert!(!is_remote(Path::new("/data/s3://x")));
    }
}
