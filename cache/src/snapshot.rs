//! Incremental snapshots of L2 in checkpoint storage.
//!
//! A RocksDB checkpoint (hard links of the live SST files plus a copy of the
//! MANIFEST, CURRENT and OPTIONS files) is moved into checkpoint storage by
//! an [`IncrementalUploader`]: SST files are immutable, so one already stored
//! by an earlier checkpoint is referenced again rather than copied (Flink's
//! incremental RocksDB checkpoints work the same way). Stored SST objects are
//! named `shared/<prefix>-<file name>`, the prefix unique per store and run,
//! so that two stores, or a restored run reusing RocksDB file numbers, never
//! write over an object another checkpoint needs. The small metadata files are private to a checkpoint.
//!
//! A [`SnapshotManifest`] lists what one store's snapshot consists of;
//! [`restore`] lays those files out as a RocksDB directory again.
//!
//! Durability: a copied file is fsynced before it gets its name, and every
//! directory an upload adds names to is fsynced before the upload returns,
//! so a checkpoint declared complete survives a power loss.

use crate::error::{Result, StateError};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};

/// One file of a store's snapshot.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SnapshotFile {
    /// The file's name inside the RocksDB directory.
    pub name: String,
    /// Its path in checkpoint storage, relative to the storage root.
    pub object: String,
    /// Its size in bytes.
    pub bytes: u64,
    /// The xxh3-64 of its bytes as 16 hex digits, taken when it was first
    /// stored and checked by every [`restore`] (absent in checkpoints
    /// written before checksums, which are restored unchecked).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub xxh3: Option<String>,
}

impl SnapshotFile {
    /// Checks that `path`, a copy of this file, holds the bytes that were
    /// stored.
    ///
    /// Errors: [`StateError::CorruptFile`] on a mismatch in size or
    /// checksum; [`StateError::SnapshotIo`] if it cannot be read.
    pub fn verify(&self, path: &Path) -> Result<()> {
        let corrupt = |found: String| StateError::CorruptFile {
            path: path.to_owned(),
            object: self.object.clone(),
            found,
        };
        let found_bytes = match fs::metadata(path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(corrupt("the file is missing".into()))
            }
            other => other.map_err(io_err(path))?.len(),
        };
        if found_bytes != self.bytes {
            return Err(corrupt(format!(
                "{found_bytes} bytes where the checkpoint recorded {}",
                self.bytes
            )));
        }
        match &self.xxh3 {
            Some(want) => {
                let got = file_xxh3(path)?;
                if got == *want {
                    Ok(())
                } else {
                    Err(corrupt(format!(
                        "xxh3 {got} where the checkpoint recorded {want}"
                    )))
                }
            }
            None => Ok(()),
        }
    }
}

/// The xxh3-64 of the file at `path`, as 16 hex digits (read in 1 MiB
/// pieces).
pub fn file_xxh3(path: &Path) -> Result<String> {
    use std::io::Read;
    let mut file = fs::File::open(path).map_err(io_err(path))?;
    let mut hasher = xxhash_rust::xxh3::Xxh3::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        match file.read(&mut buf).map_err(io_err(path))? {
            0 => return Ok(format!("{:016x}", hasher.digest())),
            n => hasher.update(&buf[..n]),
        }
    }
}

/// The files that make up one store's snapshot.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SnapshotManifest {
    /// Every file, shared SSTs and private metadata alike.
    pub files: Vec<SnapshotFile>,
}

impl SnapshotManifest {
    /// Total bytes of the snapshot's files.
    pub fn total_bytes(&self) -> u64 {
        self.files.iter().map(|f| f.bytes).sum()
    }
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> StateError + '_ {
    move |source| StateError::SnapshotIo {
        path: path.to_owned(),
        source,
    }
}

/// Hard-links `from` to `to`, or copies it (and fsyncs the copy) when a
/// link is impossible (another file system). Never writes over an existing
/// `to`: it may be a link to a live file.
fn link_or_copy(from: &Path, to: &Path) -> Result<()> {
    match fs::hard_link(from, to) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Err(StateError::SnapshotIo {
            path: to.to_owned(),
            source: e,
        }),
        Err(_) => {
            let tmp = to.with_extension("partial");
            // A failed copy is named by the file it could not read, or the
            // one it was writing (a full disk is the destination's), and
            // leaves no partial file behind.
            if let Err(e) = fs::copy(from, &tmp) {
                let _ = fs::remove_file(&tmp);
                let blamed = if from.exists() { &tmp } else { from };
                return Err(io_err(blamed)(e));
            }
            fs::File::open(&tmp)
                .and_then(|f| f.sync_all())
                .map_err(io_err(&tmp))?;
            fs::rename(&tmp, to).map_err(io_err(to))
        }
    }
}

/// Stores an immutable SST file as `to`. An object of that name and size
/// already there is this very file, stored by an attempt that failed later
/// (names are unique per store and run, and a name only ever appears
/// complete): it is taken as stored.
fn store_shared(from: &Path, to: &Path, bytes: u64) -> Result<()> {
    match link_or_copy(from, to) {
        Err(StateError::SnapshotIo { source, .. })
            if source.kind() == std::io::ErrorKind::AlreadyExists
                && fs::metadata(to).is_ok_and(|m| m.len() == bytes) =>
        {
            Ok(())
        }
        other => other,
    }
}

/// Makes the entries of directory `dir` durable.
fn sync_dir(dir: &Path) -> Result<()> {
    fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io_err(dir))
}

/// Moves RocksDB checkpoints of one store into checkpoint storage, storing
/// each SST file once.
#[derive(Debug)]
pub struct IncrementalUploader {
    root: PathBuf,
    prefix: String,
    stored: HashMap<String, SnapshotFile>,
}

/// What one upload did.
#[derive(Debug, Clone)]
pub struct Upload {
    /// The snapshot's files.
    pub manifest: SnapshotManifest,
    /// Bytes newly written to storage by this upload (the incremental size).
    pub new_bytes: u64,
}

impl IncrementalUploader {
    /// An uploader into storage `root`. `unique_prefix` must be unique per
    /// store and process run (e.g. run id plus operator index): it keeps
    /// stored SST names apart across stores and across restores.
    pub fn new(root: impl Into<PathBuf>, unique_prefix: &str) -> Self {
        Self {
            root: root.into(),
            prefix: unique_prefix.to_owned(),
            stored: HashMap::new(),
        }
    }

    /// Where stored SST file `name` (a RocksDB file name, `000017.sst`)
    /// lives in checkpoint storage, if an upload or [`Self::seed`] stored
    /// it and the newest upload still lists it.
    pub fn stored_as(&self, name: &str) -> Option<&SnapshotFile> {
        self.stored.get(name)
    }

    /// The checkpoint storage root this uploader writes into.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Registers the files of a snapshot this store was restored from, so
    /// that they are referenced rather than stored again.
    pub fn seed(&mut self, manifest: &SnapshotManifest) {
        for f in manifest.files.iter().filter(|f| is_shared(&f.name)) {
            self.stored.insert(f.name.clone(), f.clone());
        }
    }

    /// Stores the RocksDB checkpoint in directory `local`: new SST files go
    /// to `shared/`, metadata files to `private_dir` (relative to the root).
    pub fn upload(&mut self, local: &Path, private_dir: &str) -> Result<Upload> {
        let shared = self.root.join("shared");
        let private = self.root.join(private_dir);
        for dir in [&shared, &private] {
            fs::create_dir_all(dir).map_err(io_err(dir))?;
        }
        let mut manifest = SnapshotManifest::default();
        let mut new_bytes = 0;
        let mut still_live = HashMap::new();
        for entry in fs::read_dir(local).map_err(io_err(local))? {
            let path = entry.map_err(io_err(local))?.path();
            let name = path
                .file_name()
                .unwrap_or_default()
                .to_string_lossy()
                .into_owned();
            let file = match self.stored.get(&name) {
                Some(known) => known.clone(),
                None => {
                    let bytes = fs::metadata(&path).map_err(io_err(&path))?.len();
                    let object = if is_shared(&name) {
                        let object = format!("shared/{}-{name}", self.prefix);
                        store_shared(&path, &self.root.join(&object), bytes)?;
                        object
                    } else {
                        let object = format!("{private_dir}/{name}");
                        link_or_copy(&path, &self.root.join(&object))?;
                        object
                    };
                    new_bytes += bytes;
                    SnapshotFile {
                        name: name.clone(),
                        xxh3: Some(file_xxh3(&self.root.join(&object))?),
                        object,
                        bytes,
                    }
                }
            };
            if is_shared(&name) {
                still_live.insert(name, file.clone());
            }
            manifest.files.push(file);
        }
        // Links and copies are durable once their directories are; the
        // checkpoint's own directory is synced when its metadata is written.
        for dir in [
            Some(&*shared),
            Some(&*private),
            private.parent(),
            Some(&*self.root),
        ]
        .into_iter()
        .flatten()
        {
            sync_dir(dir)?;
        }
        self.stored = still_live;
        manifest.files.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(Upload {
            manifest,
            new_bytes,
        })
    }
}

fn is_shared(name: &str) -> bool {
    name.ends_with(".sst") || name.ends_with(".blob")
}

/// Lays out the RocksDB checkpoint directory `from` (as
/// [`crate::StateStore::checkpoint`] writes it) as a working copy at `to`,
/// which must be absent or empty; `from` is only read, so it can be opened
/// again. SST and blob files are hard links where possible, the others
/// copies.
///
/// Errors: [`StateError::Config`] if `from` is not a store checkpoint or
/// `to` holds files; [`StateError::SnapshotIo`] naming the file that could
/// not be read or written.
pub fn copy_checkpoint(from: &Path, to: &Path) -> Result<()> {
    if !from.is_dir() {
        return Err(StateError::Config(format!(
            "checkpoint {} does not exist or is not a directory",
            from.display()
        )));
    }
    if !from.join("CURRENT").is_file() {
        return Err(StateError::Config(format!(
            "{} is not a store checkpoint (it has no CURRENT file): give a directory StateStore::checkpoint wrote",
            from.display()
        )));
    }
    if fs::read_dir(to).is_ok_and(|mut entries| entries.next().is_some()) {
        return Err(StateError::Config(format!(
            "{} is not empty: a store opened from a checkpoint needs a directory of its own",
            to.display()
        )));
    }
    let absolute = |p: &Path| std::path::absolute(p).map_err(io_err(p));
    let (abs_from, abs_to) = (absolute(from)?, absolute(to)?);
    if abs_to.starts_with(&abs_from) || abs_from.starts_with(&abs_to) {
        return Err(StateError::Config(format!(
            "{} and the checkpoint {} lie one inside the other: the checkpoint must stay as it is; give a directory outside it",
            to.display(),
            from.display()
        )));
    }
    let made = !to.exists();
    fs::create_dir_all(to).map_err(io_err(to))?;
    copy_files(from, to).inspect_err(|_| {
        if made {
            let _ = fs::remove_dir_all(to);
        }
    })
}

fn copy_files(from: &Path, to: &Path) -> Result<()> {
    for entry in fs::read_dir(from).map_err(io_err(from))? {
        let entry = entry.map_err(io_err(from))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let (src, dst) = (entry.path(), to.join(&name));
        if is_shared(&name) {
            link_or_copy(&src, &dst)?;
        } else {
            fs::copy(&src, &dst).map_err(io_err(&src))?;
        }
    }
    Ok(())
}

/// Lays out the snapshot `manifest` (stored under `root`) as a RocksDB
/// directory at `target`, replacing whatever was there. Every file is first
/// checked against the size and checksum the manifest recorded, so a
/// corrupt file is refused here, before RocksDB reads it, and never carried
/// into a later checkpoint. SST files are hard links where possible;
/// metadata files are copies (RocksDB rewrites them).
///
/// Errors: [`StateError::CorruptFile`] naming the first file that does not
/// match; [`StateError::SnapshotIo`].
pub fn restore(root: &Path, manifest: &SnapshotManifest, target: &Path) -> Result<()> {
    for f in &manifest.files {
        f.verify(&root.join(&f.object))?;
    }
    if target.exists() {
        fs::remove_dir_all(target).map_err(io_err(target))?;
    }
    fs::create_dir_all(target).map_err(io_err(target))?;
    for f in &manifest.files {
        let from = root.join(&f.object);
        let to = target.join(&f.name);
        if is_shared(&f.name) {
            link_or_copy(&from, &to)?;
        } else {
            fs::copy(&from, &to).map_err(io_err(&from))?;
        }
    }
    Ok(())
}
