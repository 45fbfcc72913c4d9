//! The mirror of a local checkpoint directory: listing what the store
//! holds, pushing a checkpoint (its files, then its `_metadata`),
//! retention, sweeping failed checkpoints' files, and fetching one
//! checkpoint for a restore.

use super::names::{kind, metadata_name, Kind};
use super::transfer::{local_files, same_size, sync_tree, Stamp};
use super::{io, Remote, CONCURRENCY};
use crate::checkpoint::CheckpointMetadata;
use crate::error::{Result, RuntimeError};
use futures::{StreamExt, TryStreamExt};
use object_store::{ObjectStoreExt, PutPayload};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::time::Instant;

/// What one listing of a prefix found (see [`Remote::listing`]).
pub struct Listing {
    objects: BTreeMap<String, u64>,
    /// The completed checkpoints, oldest first.
    pub completed: Vec<CheckpointMetadata>,
}

impl Remote {
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
        let sent = io()?.block_on(
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

    /// Puts checkpoint `id`'s `_metadata`: the checkpoint exists in the
    /// object store once this returns.
    pub fn put_metadata(&self, id: u64, body: &[u8]) -> Result<()> {
        let name = metadata_name(id);
        io()?
            .block_on(
                self.store
                    .put(&self.path(&name), PutPayload::from(body.to_vec())),
            )
            .map(|_| ())
            .map_err(|e| self.error(format_args!("writing {name}"), e))
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
        let live: HashSet<&str> = kept
            .iter()
            .flat_map(crate::checkpoint::files::objects)
            .collect();
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
        let live: HashSet<&str> = completed
            .iter()
            .flat_map(crate::checkpoint::files::objects)
            .collect();
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
        let wanted: HashSet<&str> = crate::checkpoint::files::objects(&meta).collect();
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
        let got = io()?
            .block_on(
                futures::stream::iter(needed.iter().map(|rel| {
                    let xxh3 = sums.get(rel.as_str()).map(|s| s.to_string());
                    self.download(rel.clone(), root.into(), xxh3)
                }))
                .buffer_unordered(CONCURRENCY)
                .try_collect::<Vec<u64>>(),
            )
            .map_err(|e| crate::checkpoint::files::blame_corrupt(id, e, &listing.completed))?;
        // Every file durable before the `_metadata` that makes the local
        // checkpoint complete.
        sync_tree(root)?;
        let meta_bytes = io()?.block_on(self.download(name, root.into(), None))?;
        crate::checkpoint::files::sync_dir(&dir)?;
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
