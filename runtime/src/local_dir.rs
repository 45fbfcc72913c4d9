//! The live state directory (`state.local-dir`, default
//! `<checkpoint-dir>/_work`): where the keyed instances' RocksDB
//! directories live while a job runs. strata deletes what it put there when
//! the job ends — so it must never be a directory that holds anything else.
//!
//! [`LocalDir::claim`] locks it and refuses, with the reason, a directory
//! that is or contains the output or checkpoint directory, lies inside the
//! output directory or inside the checkpoint directory (other than the
//! checkpoint directory's own `_work`, wherever that lies), or holds entries strata does not write there (`op-<i>`,
//! `op-<i>-checkpoints`, `_lock`). [`LocalDir::clear`] removes only those
//! entries, `_lock` included (and the default `_work` itself).

use crate::dir_lock::{lock_dir, DirLock};
use crate::error::{Result, RuntimeError};
use std::path::{Path, PathBuf};

/// A claimed live state directory.
pub(crate) struct LocalDir {
    path: PathBuf,
    is_default: bool,
    lock: DirLock,
}

/// Whether `name` is an entry strata writes into the live state directory.
fn is_ours(name: &str) -> bool {
    let Some(rest) = name.strip_prefix("op-") else {
        return name == "_lock";
    };
    let index = rest.strip_suffix("-checkpoints").unwrap_or(rest);
    !index.is_empty() && index.bytes().all(|b| b.is_ascii_digit())
}

fn refuse(dir: &Path, reason: String) -> RuntimeError {
    RuntimeError::Config {
        key: "state.local-dir".into(),
        reason: format!("{}: {reason}", dir.display()),
    }
}

impl LocalDir {
    /// Locks `configured` (or `<checkpoints>/_work` when `None`) after the
    /// checks of the module docs.
    pub(crate) fn claim(
        configured: Option<&Path>,
        output: &Path,
        checkpoints: &Path,
    ) -> Result<Self> {
        let default = checkpoints.join("_work");
        let path = configured.unwrap_or(&default).to_owned();
        let lock = lock_dir(&path, "local state directory")?;
        let real = |p: &Path| p.canonicalize().map_err(RuntimeError::io(p));
        let (dir, out, chk) = (real(&path)?, real(output)?, real(checkpoints)?);
        let is_default = dir == chk.join("_work");
        for (other, what) in [
            (&out, "the output directory"),
            (&chk, "the checkpoint directory"),
        ] {
            if other.starts_with(&dir) {
                return Err(refuse(
                    &path,
                    format!("it is or contains {what}, which strata would delete with it"),
                ));
            }
        }
        if dir.starts_with(&out) && !is_default {
            return Err(refuse(&path, "it lies inside the output directory".into()));
        }
        if dir.starts_with(&chk) && !is_default {
            return Err(refuse(
                &path,
                format!(
                    "inside the checkpoint directory only {} may hold live state",
                    default.display()
                ),
            ));
        }
        let foreign: Vec<String> = std::fs::read_dir(&dir)
            .map_err(RuntimeError::io(&dir))?
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|name| !is_ours(name))
            .collect();
        if let Some(name) = foreign.first() {
            return Err(refuse(&path, format!("it holds {name} (and {} more entries) that strata did not write: use an empty directory", foreign.len() - 1)));
        }
        Ok(Self {
            path,
            is_default,
            lock,
        })
    }

    /// The directory.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Removes what strata wrote here (the final checkpoint holds it all).
    pub(crate) fn clear(&self) -> Result<()> {
        if self.is_default {
            return std::fs::remove_dir_all(&self.path).map_err(RuntimeError::io(&self.path));
        }
        for entry in std::fs::read_dir(&self.path)
            .map_err(RuntimeError::io(&self.path))?
            .flatten()
        {
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.starts_with("op-") && is_ours(&name) {
                std::fs::remove_dir_all(entry.path()).map_err(RuntimeError::io(&entry.path()))?;
            }
        }
        self.lock.remove_at_release();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_strata_s_entries_count_as_its_own() {
        for ours in ["op-0", "op-12", "op-3-checkpoints", "_lock"] {
            assert!(is_ours(ours), "{ours}");
        }
        for foreign in [
            "op-",
            "op-x",
            "precious.txt",
            "chk-1",
            "op-1-checkpoints-old",
        ] {
            assert!(!is_ours(foreign), "{foreign}");
        }
    }
}
