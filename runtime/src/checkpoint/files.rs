//! What a checkpoint's files are and how they are made durable: the
//! objects a checkpoint lists, which other checkpoints can stand in for one
//! with a corrupt file, and fsync of directories and files written by
//! rename.

use super::CheckpointMetadata;
use crate::error::{Result, RuntimeError};
use std::fs;
use std::path::Path;
use strata_cache::StateError;

/// Every object checkpoint `meta` lists (private and shared files).
pub(crate) fn objects(meta: &CheckpointMetadata) -> impl Iterator<Item = &str> {
    meta.operators
        .iter()
        .flat_map(|o| o.manifest.files.iter().map(|f| f.object.as_str()))
}

/// `e` as a [`RuntimeError::CorruptCheckpoint`] of checkpoint `id` when it
/// is a corrupt file of it, naming the checkpoints among `completed` that
/// do not list that file (they can be restored instead); other errors as
/// they are.
pub(crate) fn blame_corrupt(
    id: u64,
    e: RuntimeError,
    completed: &[CheckpointMetadata],
) -> RuntimeError {
    let RuntimeError::State(StateError::CorruptFile {
        path,
        object,
        found,
    }) = e
    else {
        return e;
    };
    RuntimeError::CorruptCheckpoint {
        id,
        file: path,
        found,
        instead: restorable_without(&object, completed),
    }
}

/// Which of `completed` do not list `object` and can be restored instead
/// of those that do, as a sentence.
pub(crate) fn restorable_without(object: &str, completed: &[CheckpointMetadata]) -> String {
    let mut free: Vec<u64> = completed
        .iter()
        .filter(|m| !objects(m).any(|o| o == object))
        .map(|m| m.id)
        .collect();
    free.sort_unstable();
    free.dedup();
    match free.last() {
        Some(newest) => {
            let ids: Vec<String> = free.iter().map(u64::to_string).collect();
            format!(
                "these checkpoints do not list it and can be restored instead: {} (e.g. --restore {newest})",
                ids.join(", ")
            )
        }
        None => "no other completed checkpoint is free of it: start without --restore (from the source's beginning, into an empty output)".into(),
    }
}

/// Makes the directory entries of `dir` durable (after a create, rename or
/// hard link in it).
pub(crate) fn sync_dir(dir: &Path) -> Result<()> {
    fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(RuntimeError::io(dir))
}

/// Writes `text` to `path` by rename, fsyncing the file and its directory.
pub(crate) fn write_durably(path: &Path, text: &str) -> Result<()> {
    use std::io::Write;
    let tmp = path.with_extension("tmp");
    let mut f = std::fs::File::create(&tmp).map_err(RuntimeError::io(&tmp))?;
    f.write_all(text.as_bytes())
        .and_then(|_| f.sync_all())
        .map_err(RuntimeError::io(&tmp))?;
    std::fs::rename(&tmp, path).map_err(RuntimeError::io(path))?;
    sync_dir(path.parent().unwrap_or(Path::new(".")))
}
