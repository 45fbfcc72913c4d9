//! A checkpoint directory: completed checkpoints, their retention, and the
//! clean-up of what failed or incomplete checkpoints left behind.
//!
//! A checkpoint exists once its `chk-N/_metadata` does (written last,
//! atomically and durably). Anything else under `chk-*` is a checkpoint in
//! flight or one that never completed: it is ignored by restores, removed at
//! every start (no checkpoint is in flight then), removed when a checkpoint
//! fails, and removed by retention once older than the oldest one kept.
//!
//! With an object store ([`CheckpointStorage::with_remote`]) the directory
//! is the job's local copy and every step is mirrored there
//! ([`super::remote`]): the object store's `_metadata` is what makes a
//! checkpoint exist.

use super::files::{objects, sync_dir};
use super::remote::Remote;
use super::CheckpointMetadata;
use crate::dir_lock::{lock_dir, DirLock};
use crate::error::{Result, RuntimeError};
use std::collections::HashSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// A checkpoint directory.
#[derive(Debug, Clone)]
pub struct CheckpointStorage {
    root: PathBuf,
    /// Held (locked) by the one job that writes here.
    lock: Option<Arc<DirLock>>,
    /// The object store this directory is the local copy of.
    remote: Option<Arc<Remote>>,
    /// Asked before a checkpoint goes out (a shard of a consumer group).
    fence: Option<Fence>,
}

/// Asked before a checkpoint's files and again before its metadata go out:
/// errs ([`RuntimeError::ShardLost`]) once this process no longer owns the
/// shard the storage holds, so a zombie never writes over its successor's
/// checkpoints (see [`crate::group`]).
#[derive(Clone)]
pub(crate) struct Fence(pub(crate) Arc<FenceFn>);

/// What a [`Fence`] asks: may checkpoint `meta` go out?
pub(crate) type FenceFn = dyn Fn(&CheckpointMetadata) -> Result<()> + Send + Sync;

impl std::fmt::Debug for Fence {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Fence")
    }
}

fn read_metadata(path: &Path) -> Result<CheckpointMetadata> {
    let text = fs::read_to_string(path).map_err(RuntimeError::io(path))?;
    CheckpointMetadata::decode(&text)
        .map_err(|reason| RuntimeError::checkpoint(path, format!("unreadable metadata: {reason}")))
}

/// Refuses a checkpoint directory that holds files but was not made by
/// strata — it has neither strata's `_lock` nor a completed checkpoint (a
/// copy of one may lack the lock): a start sweeps a checkpoint directory
/// of what no checkpoint references, which must never be a user's files.
fn refuse_foreign(root: &Path) -> Result<()> {
    let Ok(entries) = fs::read_dir(root) else {
        return Ok(());
    };
    let names: Vec<String> = entries
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    let strata_made = |n: &String| {
        n == "_lock" || (n.starts_with("chk-") && root.join(n).join("_metadata").is_file())
    };
    if names.is_empty() || names.iter().any(strata_made) {
        return Ok(());
    }
    Err(RuntimeError::Usage(format!(
        "checkpoint directory {} holds files strata did not write (e.g. {}): give an empty directory or one of strata's",
        root.display(),
        names[0]
    )))
}

impl CheckpointStorage {
    /// Storage rooted at `root` (created if absent), locked for this process:
    /// a second job on the same directory is refused.
    pub fn open(root: &Path) -> Result<Self> {
        refuse_foreign(root)?;
        Ok(Self {
            root: root.to_owned(),
            lock: Some(Arc::new(lock_dir(root, "checkpoint directory")?)),
            remote: None,
            fence: None,
        })
    }

    /// Makes this directory the local copy of checkpoints kept in `remote`.
    pub fn with_remote(mut self, remote: Remote) -> Self {
        self.remote = Some(Arc::new(remote));
        self
    }

    /// Makes every commit ask `fence` first (see [`Fence`]).
    pub(crate) fn with_fence(mut self, fence: Fence) -> Self {
        self.fence = Some(fence);
        self
    }

    fn check_fence(&self, meta: &CheckpointMetadata) -> Result<()> {
        self.fence.as_ref().map_or(Ok(()), |f| (f.0)(meta))
    }

    /// The object store, if this directory is a local copy.
    pub fn remote(&self) -> Option<&Remote> {
        self.remote.as_deref()
    }

    /// Takes the lease on the object store's prefix (see
    /// [`super::remote::Lease`]) and makes every commit check it first. Without an
    /// object store: `None`.
    ///
    /// Errors: another job holds the prefix; a failed request.
    pub(crate) fn lease(&mut self) -> Result<Option<Arc<super::remote::Lease>>> {
        let Some(remote) = &self.remote else {
            return Ok(None);
        };
        let lease = Arc::new(super::remote::Lease::acquire(remote.clone())?);
        let held = lease.clone();
        self.fence = Some(Fence(Arc::new(move |_| held.verify())));
        Ok(Some(lease))
    }

    /// With an object store: makes this local copy hold checkpoint `id`
    /// (`None`: the object store's newest) and forgets the local
    /// checkpoints the object store lacks (their commit never finished).
    /// Returns the object store's newest completed checkpoint. Without an
    /// object store: does nothing.
    ///
    /// Errors: `id` is not in the object store; the object store holds no
    /// checkpoint while the local copy does (a wrong prefix?); a transfer
    /// failed.
    pub(crate) fn fetch(&self, id: Option<u64>) -> Result<Option<u64>> {
        let Some(remote) = &self.remote else {
            return Ok(None);
        };
        let listing = remote.listing()?;
        let there: Vec<u64> = listing.completed.iter().map(|m| m.id).collect();
        let here: Vec<u64> = self.list()?.iter().map(|m| m.id).collect();
        let Some(target) = id.or(there.last().copied()) else {
            return match here.last() {
                Some(newest) => Err(RuntimeError::Usage(format!(
                    "{} holds no checkpoint, but its local copy {} holds checkpoint {newest}: check --checkpoint-dir (a wrong prefix or endpoint?), or remove the local copy to start over",
                    remote.url(),
                    self.root.display()
                ))),
                None => Ok(None),
            };
        };
        if !there.contains(&target) {
            let ids: Vec<String> = there.iter().map(u64::to_string).collect();
            return Err(RuntimeError::Usage(format!(
                "{} holds no completed checkpoint {target} (completed: {})",
                remote.url(),
                ids.join(", ")
            )));
        }
        let gone: Vec<u64> = here.into_iter().filter(|i| !there.contains(i)).collect();
        self.forget_local(&gone)?;
        remote.fetch(&self.root, target, &listing)?;
        Ok(there.last().copied())
    }

    /// Every completed checkpoint, here or in the object store (the
    /// object store's when both have one), by id. Unreachable object
    /// stores give the local ones only: this serves error messages.
    pub(crate) fn all_completed(&self) -> Vec<CheckpointMetadata> {
        let mut all = self
            .remote
            .as_ref()
            .and_then(|r| r.list().ok())
            .unwrap_or_default();
        for m in self.list().unwrap_or_default() {
            if !all.iter().any(|a| a.id == m.id) {
                all.push(m);
            }
        }
        all.sort_by_key(|m| m.id);
        all
    }

    /// The completed checkpoints newer than `id`, here or in the object
    /// store.
    pub(crate) fn newer_than(&self, id: u64) -> Result<Vec<u64>> {
        let mut ids: Vec<u64> = self.list()?.iter().map(|m| m.id).collect();
        if let Some(remote) = &self.remote {
            ids.extend(remote.list()?.iter().map(|m| m.id));
        }
        ids.sort_unstable();
        ids.dedup();
        ids.retain(|i| *i > id);
        Ok(ids)
    }

    /// Opens existing storage for reading; a missing directory is an error.
    pub fn existing(root: &Path) -> Result<Self> {
        if !root.is_dir() {
            return Err(RuntimeError::Usage(format!(
                "{}: no such checkpoint directory",
                root.display()
            )));
        }
        Ok(Self {
            root: root.to_owned(),
            lock: None,
            remote: None,
            fence: None,
        })
    }

    /// The run ended normally: the directory's `_lock` goes when the last
    /// handle on it is dropped (see `DirLock::remove_at_release`).
    pub(crate) fn remove_lock_at_release(&self) {
        if let Some(lock) = &self.lock {
            lock.remove_at_release();
        }
    }

    /// The root directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    pub(crate) fn dir_of(&self, id: u64) -> PathBuf {
        self.root.join(format!("chk-{id}"))
    }

    /// Every `chk-<N>` directory, completed or not: `(N, path)`, by id.
    fn checkpoint_dirs(&self) -> Result<Vec<(u64, PathBuf)>> {
        let mut found = Vec::new();
        for entry in fs::read_dir(&self.root).map_err(RuntimeError::io(&self.root))? {
            let dir = entry.map_err(RuntimeError::io(&self.root))?.path();
            let id = dir
                .file_name()
                .and_then(|n| n.to_str())
                .and_then(|n| n.strip_prefix("chk-"))
                .and_then(|n| n.parse().ok());
            if let (Some(id), true) = (id, dir.is_dir()) {
                found.push((id, dir));
            }
        }
        found.sort();
        Ok(found)
    }

    /// Every completed checkpoint, oldest first. An unreadable `_metadata`
    /// of an older checkpoint is skipped (a newer one supersedes it); an
    /// unreadable newest one is an error, never silently passed over.
    pub fn list(&self) -> Result<Vec<CheckpointMetadata>> {
        let completed: Vec<(u64, PathBuf)> = self
            .checkpoint_dirs()?
            .into_iter()
            .map(|(id, dir)| (id, dir.join("_metadata")))
            .filter(|(_, meta)| meta.is_file())
            .collect();
        let newest = completed.last().map(|(id, _)| *id);
        let mut out = Vec::new();
        for (id, path) in completed {
            match read_metadata(&path).and_then(|meta| {
                if meta.id == id {
                    Ok(meta)
                } else {
                    Err(RuntimeError::checkpoint(
                        &path,
                        format!(
                            "its id {} is not the {id} of its directory chk-{id}",
                            meta.id
                        ),
                    ))
                }
            }) {
                Ok(meta) => out.push(meta),
                Err(e) if Some(id) == newest => return Err(e),
                Err(_) => {}
            }
        }
        Ok(out)
    }

    /// The newest completed checkpoint, if any.
    pub fn latest(&self) -> Result<Option<CheckpointMetadata>> {
        Ok(self.list()?.pop())
    }

    /// Writes `meta` atomically and durably: after this returns, the
    /// checkpoint exists, also after a power loss.
    pub(crate) fn commit(&self, meta: &CheckpointMetadata) -> Result<()> {
        let dir = self.dir_of(meta.id);
        fs::create_dir_all(&dir).map_err(RuntimeError::io(&dir))?;
        self.check_fence(meta)?;
        if let Some(remote) = &self.remote {
            remote.push(&self.root, meta.id)?;
        }
        let tmp = dir.join("_metadata.tmp");
        let body = meta
            .encode()
            .map_err(|e| RuntimeError::checkpoint(&tmp, e))?;
        {
            use std::io::Write;
            let mut f = fs::File::create(&tmp).map_err(RuntimeError::io(&tmp))?;
            f.write_all(&body).map_err(RuntimeError::io(&tmp))?;
            f.sync_all().map_err(RuntimeError::io(&tmp))?;
        }
        fs::rename(&tmp, dir.join("_metadata")).map_err(RuntimeError::io(&tmp))?;
        sync_dir(&dir)?;
        sync_dir(&self.root)?;
        if let Some(remote) = &self.remote {
            // Not in the object store: the checkpoint does not exist (the
            // next retention removes what it uploaded).
            let put = self
                .check_fence(meta)
                .and_then(|()| remote.put_metadata(meta.id, &body));
            if let Err(e) = put {
                let _ = fs::remove_file(dir.join("_metadata"));
                return Err(e);
            }
        }
        Ok(())
    }

    /// Removes what a failed checkpoint `id` wrote into its own local
    /// directory. Shared files it stored are removed by the next start's
    /// sweep; what it uploaded, by the object store's retention after the
    /// next checkpoint that completes (the store is often why it failed).
    pub(crate) fn discard(&self, id: u64) -> Result<()> {
        let dir = self.dir_of(id);
        match fs::remove_dir_all(&dir) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(RuntimeError::io(&dir)(e)),
            _ => Ok(()),
        }
    }

    /// Removes completed checkpoints `ids` (and the shared files only they
    /// use): their `_metadata` first, fsynced, so that a crash half-way
    /// leaves incomplete checkpoints, which the sweep removes.
    pub(crate) fn forget(&self, ids: &[u64]) -> Result<()> {
        if let Some(remote) = &self.remote {
            remote.forget(ids)?;
        }
        self.forget_local(ids)
    }

    fn forget_local(&self, ids: &[u64]) -> Result<()> {
        for id in ids {
            let meta = self.dir_of(*id).join("_metadata");
            match fs::remove_file(&meta) {
                // Not here (only in the object store): nothing to forget.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(RuntimeError::io(&meta)(e)),
                Ok(()) => sync_dir(&self.dir_of(*id))?,
            }
        }
        self.sweep_local()
    }

    /// Keeps the newest `keep` completed checkpoints; deletes the others and
    /// the shared files only they used, every other `chk-*` directory older
    /// than the oldest one kept (completed ones whose metadata cannot be
    /// read), and those of failed checkpoints older than the newest (a late
    /// upload may have written into one after it was discarded).
    pub(crate) fn retain(&self, keep: usize) -> Result<()> {
        let all = self.list()?;
        let oldest_kept = all.len().checked_sub(keep.max(1)).map_or(0, |i| all[i].id);
        let (dropped, kept) = all.split_at(all.len().saturating_sub(keep.max(1)));
        let live: HashSet<&str> = kept.iter().flat_map(objects).collect();
        // Metadata first: a crash below leaves incomplete checkpoints (swept
        // at the next start), never a listed one whose files are gone.
        for meta in dropped {
            let path = self.dir_of(meta.id).join("_metadata");
            fs::remove_file(&path).map_err(RuntimeError::io(&path))?;
        }
        if !dropped.is_empty() {
            sync_dir(&self.root)?;
        }
        for meta in dropped {
            for object in objects(meta).filter(|o| o.starts_with("shared/") && !live.contains(o)) {
                let _ = fs::remove_file(self.root.join(object));
            }
        }
        let newest = all.last().map_or(0, |m| m.id);
        for (id, dir) in self.checkpoint_dirs()? {
            // Older than the oldest kept, or a failed one (no metadata)
            // older than the newest: none is in flight (that is newer).
            if id < oldest_kept || (id < newest && !dir.join("_metadata").is_file()) {
                fs::remove_dir_all(&dir).map_err(RuntimeError::io(&dir))?;
            }
        }
        // A shard's retention deletes in the store: only while it owns it.
        match &self.remote {
            Some(r) if !kept.is_empty() => {
                self.check_fence(&kept[kept.len() - 1])?;
                r.prune(&self.root, keep, kept)
            }
            _ => Ok(()),
        }
    }

    /// Deletes what no completed checkpoint references: directories of
    /// checkpoints that never completed and shared files they alone stored.
    /// Call only while no checkpoint is in flight (at job start).
    pub(crate) fn sweep_incomplete(&self) -> Result<()> {
        self.sweep_local()?;
        self.remote.as_ref().map_or(Ok(()), |r| r.sweep())
    }

    /// The local part of [`Self::sweep_incomplete`]: never touches the
    /// object store (a read-only command's fetch calls it).
    fn sweep_local(&self) -> Result<()> {
        let all = self.list()?;
        let live: HashSet<String> = all.iter().flat_map(objects).map(str::to_owned).collect();
        for (_, dir) in self.checkpoint_dirs()? {
            if !dir.join("_metadata").is_file() {
                fs::remove_dir_all(&dir).map_err(RuntimeError::io(&dir))?;
            }
        }
        self.sweep_dead_inspections();
        let shared = self.root.join("shared");
        if let Ok(files) = fs::read_dir(&shared) {
            for f in files.flatten() {
                let object = format!("shared/{}", f.file_name().to_string_lossy());
                if !live.contains(&object) {
                    let _ = fs::remove_file(f.path());
                }
            }
        }
        Ok(())
    }
}

impl CheckpointStorage {
    /// Removes `_inspect-<pid>` directories (a restored copy `strata state
    /// get` reads) whose process is gone: killed before it could.
    fn sweep_dead_inspections(&self) {
        let Ok(entries) = fs::read_dir(&self.root) else {
            return;
        };
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let pid = name
                .strip_prefix("_inspect-")
                .and_then(|p| p.parse::<u32>().ok());
            if pid.is_some_and(|pid| !Path::new(&format!("/proc/{pid}")).exists()) {
                let _ = fs::remove_dir_all(e.path());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retention_removes_older_checkpoints_with_unreadable_metadata_and_failed_ones() {
        let dir = tempfile::tempdir().unwrap();
        let storage = CheckpointStorage::open(dir.path()).unwrap();
        let meta = |id| CheckpointMetadata::for_tests("job", id);
        for id in 1..=4 {
            storage.commit(&meta(id)).unwrap();
        }
        std::fs::write(storage.dir_of(2).join("_metadata"), "{not json").unwrap();
        std::fs::create_dir_all(storage.dir_of(3).join("op-0")).unwrap();
        std::fs::remove_file(storage.dir_of(3).join("_metadata")).unwrap();
        storage.commit(&meta(5)).unwrap();
        storage.retain(2).unwrap();
        let left: Vec<u64> = storage
            .checkpoint_dirs()
            .unwrap()
            .into_iter()
            .map(|(id, _)| id)
            .collect();
        assert_eq!(left, vec![4, 5]);
    }
}
