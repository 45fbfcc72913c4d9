//! Moving one file: an upload (in one request, or in parts for a large
//! file) and a download checked against its xxh3 sum, renamed into place;
//! and the local side of a mirror (the files a local copy holds, fsync of
//! a downloaded tree).

use super::names::{is_local_only, kind, Kind};
use super::{Remote, CONCURRENCY, SINGLE_PUT_MAX};
use crate::error::{Result, RuntimeError};
use futures::StreamExt;
use object_store::{ObjectStoreExt, PutPayload, WriteMultipart};
use std::collections::BTreeMap;
use std::fs;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::SystemTime;
use strata_cache::StateError;

/// What was last uploaded of a local file: its length and, if this
/// process uploaded it, its modification time.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Stamp {
    pub(super) len: u64,
    pub(super) modified: Option<SystemTime>,
}

/// Every regular file under `root`, as `/`-separated names relative to it,
/// with its length and modification time.
pub(super) fn local_files(root: &Path) -> Result<BTreeMap<String, Stamp>> {
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
    /// Uploads `local` as `rel`: the bytes sent, or `None` when the file
    /// vanished meanwhile (a sink removed or renamed it after a commit; the
    /// next push mirrors what replaced it).
    pub(super) async fn upload(
        &self,
        rel: String,
        local: PathBuf,
        len: u64,
    ) -> Result<Option<u64>> {
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
    pub(super) async fn download(
        &self,
        rel: String,
        root: PathBuf,
        xxh3: Option<String>,
    ) -> Result<u64> {
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
}

pub(super) fn same_size(here: &BTreeMap<String, Stamp>, rel: &str, size: u64) -> bool {
    here.get(rel).is_some_and(|s| s.len == size)
}

/// fsyncs every directory under `root` and `root` itself (after
/// downloads renamed files into them).
pub(super) fn sync_tree(root: &Path) -> Result<()> {
    for entry in fs::read_dir(root)
        .map_err(RuntimeError::io(root))?
        .flatten()
    {
        if entry.file_type().is_ok_and(|t| t.is_dir()) && entry.file_name() != "_work" {
            sync_tree(&entry.path())?;
        }
    }
    crate::checkpoint::files::sync_dir(root)
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
