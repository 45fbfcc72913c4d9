//! A start that fails leaves nothing behind: the directories a run creates
//! (output, checkpoint and local state directories, and any missing
//! parents) are removed again if the run stops before its tasks start —
//! a refused restore, a directory another job holds, an unreachable L3.
//!
//! Only directories that did not exist when the run began are removed, and
//! only while they hold nothing but lock files and empty directories;
//! anything else keeps them — an `_l3_lineage` file too, as L3 may already
//! hold the job's claim under that lineage.

use std::path::{Path, PathBuf};

/// The file a failed start may leave in a directory it created.
const LOCK: &str = "_lock";

/// The directories a starting run is about to create; removed on drop
/// unless [`FreshDirs::keep`] was called.
pub(crate) struct FreshDirs {
    created: Vec<PathBuf>,
}

impl FreshDirs {
    /// Notes, for each of `dirs`, its outermost ancestor that does not
    /// exist yet (the first directory a `create_dir_all` would make).
    pub(crate) fn note<'a>(dirs: impl IntoIterator<Item = &'a Path>) -> Self {
        let mut created: Vec<PathBuf> = Vec::new();
        for dir in dirs {
            let Some(first) = dir
                .ancestors()
                .filter(|a| !a.as_os_str().is_empty() && a.symlink_metadata().is_err())
                .last()
            else {
                continue;
            };
            if !created.iter().any(|c| first.starts_with(c)) {
                created.retain(|c| !c.starts_with(first));
                created.push(first.to_owned());
            }
        }
        Self { created }
    }

    /// The run has started: what it created stays.
    pub(crate) fn keep(mut self) {
        self.created.clear();
    }
}

impl Drop for FreshDirs {
    fn drop(&mut self) {
        for dir in &self.created {
            if only_bookkeeping(dir) {
                let _ = std::fs::remove_dir_all(dir);
            }
        }
    }
}

/// Whether `dir` holds nothing but lock files and directories that hold
/// nothing else.
fn only_bookkeeping(dir: &Path) -> bool {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return false;
    };
    entries.flatten().all(|e| {
        let path = e.path();
        match e.file_type() {
            Ok(t) if t.is_dir() => only_bookkeeping(&path),
            Ok(t) if t.is_file() => e.file_name() == LOCK,
            _ => false,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_directories_a_failed_start_made_and_filled_with_bookkeeping_go() {
        let root = tempfile::tempdir().unwrap();
        let (made, kept, had) = (
            root.path().join("new/out"),
            root.path().join("other"),
            root.path().join("existing"),
        );
        std::fs::create_dir(&had).unwrap();
        let fresh = FreshDirs::note([made.as_path(), kept.as_path(), had.as_path()]);
        for d in [&made, &kept, &had] {
            std::fs::create_dir_all(d.join("_checkpoints")).unwrap();
            std::fs::write(d.join("_checkpoints/_lock"), "pid 1").unwrap();
        }
        std::fs::write(kept.join("results.txt"), "a user's file").unwrap();
        drop(fresh);
        assert!(
            !root.path().join("new").exists(),
            "made by the run: removed"
        );
        assert!(kept.join("results.txt").exists(), "a foreign file keeps it");
        assert!(had.join("_checkpoints/_lock").exists(), "existed before");
    }
}
