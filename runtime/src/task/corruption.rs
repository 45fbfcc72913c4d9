//! Names the checkpoint file behind a corruption RocksDB finds while the
//! job runs.
//!
//! A restore checks every file of its checkpoint (see
//! `strata_cache::snapshot::restore`), but a file can rot on the disk
//! later. RocksDB's block checksums find it when it reads the block, and
//! its message names the working copy (`_work/op-0/000017.sst`), which is
//! a hard link to (or a copy of) a file of checkpoint storage. This says
//! which one, which checkpoints list it, and which can be restored instead.

use crate::checkpoint::files::restorable_without;
use crate::checkpoint::CheckpointStorage;
use crate::error::RuntimeError;
use strata_cache::snapshot::IncrementalUploader;

/// The RocksDB file a corruption message names (`000017.sst`), if `text`
/// reports one.
fn corrupt_file(text: &str) -> Option<&str> {
    if !text.contains("Corruption") {
        return None;
    }
    text.split(|c: char| c.is_whitespace() || matches!(c, '/' | ':' | ',' | '(' | ')'))
        .find(|w| w.ends_with(".sst") || w.ends_with(".blob"))
}

/// `e` with the checkpoint file it came from when it reports a corrupt
/// file that `uploader` stored; other errors as they are.
pub(crate) fn name_checkpoint_file(
    e: RuntimeError,
    uploader: &IncrementalUploader,
) -> RuntimeError {
    let cause = e.to_string();
    let Some(stored) = corrupt_file(&cause).and_then(|name| uploader.stored_as(name)) else {
        return e;
    };
    let completed = CheckpointStorage::existing(uploader.root())
        .and_then(|s| s.list())
        .unwrap_or_default();
    let listed_by: Vec<String> = completed
        .iter()
        .filter(|m| {
            m.operators
                .iter()
                .any(|o| o.manifest.files.iter().any(|f| f.object == stored.object))
        })
        .map(|m| m.id.to_string())
        .collect();
    RuntimeError::CorruptWhileRunning {
        cause,
        file: uploader.root().join(&stored.object),
        listed_by: listed_by.join(", "),
        instead: restorable_without(&stored.object, &completed),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_file_of_a_rocksdb_corruption_message_is_found() {
        let text = "function failed: state: L2 (RocksDB) error: Corruption: block checksum mismatch: stored = 1, computed = 2, type = 1  in /tmp/x/_work/op-0/000017.sst offset 0 size 4013";
        assert_eq!(corrupt_file(text), Some("000017.sst"));
        assert_eq!(corrupt_file("IO error: /tmp/x/000017.sst: no space"), None);
        assert_eq!(corrupt_file("Corruption: bad WAL record"), None);
    }
}
