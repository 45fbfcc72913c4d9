//! One user per directory: every directory a job writes (its output, its
//! checkpoints, its live local state) is locked for the life of the process.
//!
//! [`lock_dir`] takes an exclusive advisory lock (`flock`) on `<dir>/_lock`
//! and writes who holds it (process id, role, start time) into that file;
//! a second job asking for the directory is refused with the holder named.
//! The lock ends with the process, even on SIGKILL, so a crash never leaves
//! a directory locked. A holder may remove `_lock` before it lets go (the
//! live state directory does, at a normal end): a locker checks that the
//! file it locked is still the one at the path, else it tries again.

use crate::error::{Result, RuntimeError};
use std::fs;
use std::io::{Read, Seek, Write};
use std::path::Path;

/// A held directory lock; the directory is free again when it is dropped.
#[derive(Debug)]
pub(crate) struct DirLock {
    _file: fs::File,
    path: std::path::PathBuf,
    remove: std::sync::atomic::AtomicBool,
}

impl DirLock {
    /// The run ended normally: `_lock` is removed when the lock is dropped,
    /// while still held (a locker checks that the file it locked is still
    /// the one at the path, so this is safe). A crash leaves the file; it
    /// locks nothing once its process is gone.
    pub(crate) fn remove_at_release(&self) {
        self.remove
            .store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

impl Drop for DirLock {
    fn drop(&mut self) {
        if self.remove.load(std::sync::atomic::Ordering::Relaxed) {
            let _ = fs::remove_file(&self.path);
        }
        // `_file` closes after this, ending the lock.
    }
}

/// Creates `dir` if needed and locks it as the `role` of this process (for
/// example "checkpoint directory"), for as long as the returned lock lives.
///
/// Errors: [`RuntimeError::Usage`] naming the holder when another job (or
/// this one, in another role) holds the directory; I/O errors naming the path.
pub(crate) fn lock_dir(dir: &Path, role: &str) -> Result<DirLock> {
    let path = dir.join("_lock");
    let mut file = loop {
        fs::create_dir_all(dir).map_err(RuntimeError::io(dir))?;
        let mut file = fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .open(&path)
            .map_err(RuntimeError::io(&path))?;
        if file.try_lock().is_err() {
            let mut holder = String::new();
            let _ = file.read_to_string(&mut holder);
            return Err(refusal(dir, role, holder.trim()));
        }
        // A holder that finished removes the file while it still holds it:
        // a lock on a file no longer at the path locks nothing, so open
        // the path again.
        if still_at(&file, &path) {
            break file;
        }
    };
    let me = format!(
        "pid {} ({}) since {}",
        std::process::id(),
        role,
        chrono::Utc::now().format("%Y-%m-%dT%H:%M:%SZ")
    );
    file.set_len(0)
        .and_then(|_| file.rewind())
        .and_then(|_| file.write_all(me.as_bytes()))
        .map_err(RuntimeError::io(&path))?;
    check_ancestors(dir, role)?;
    Ok(DirLock {
        _file: file,
        path,
        remove: Default::default(),
    })
}

/// Whether `file` is still the file at `path` (same device and inode).
fn still_at(file: &fs::File, path: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (file.metadata(), fs::metadata(path)) {
        (Ok(held), Ok(now)) => held.dev() == now.dev() && held.ino() == now.ino(),
        _ => false,
    }
}

/// Refuses a directory inside one another strata process holds (its own
/// directories nest — `_work` in the checkpoint directory — and pass).
fn check_ancestors(dir: &Path, role: &str) -> Result<()> {
    let dir = dir.canonicalize().map_err(RuntimeError::io(dir))?;
    for ancestor in dir.ancestors().skip(1) {
        let Ok(mut file) = fs::File::open(ancestor.join("_lock")) else {
            continue;
        };
        if file.try_lock().is_ok() {
            continue;
        }
        let mut holder = String::new();
        let _ = file.read_to_string(&mut holder);
        if !holder.starts_with(&format!("pid {} (", std::process::id())) {
            return Err(RuntimeError::Usage(format!(
                "{role} {} lies inside {}, which is in use by another strata job: strata {}",
                dir.display(),
                ancestor.display(),
                holder.trim()
            )));
        }
    }
    Ok(())
}

fn refusal(dir: &Path, role: &str, holder: &str) -> RuntimeError {
    let mine = format!("pid {} (", std::process::id());
    if let Some(rest) = holder.strip_prefix(&mine) {
        let other_role = rest.split(')').next().unwrap_or("another role");
        return RuntimeError::Usage(format!(
            "{} cannot be this job's {role}: it is already its {other_role}; give each its own directory",
            dir.display()
        ));
    }
    let holder = if holder.is_empty() {
        "another strata process".to_owned()
    } else {
        format!("strata {holder}")
    };
    RuntimeError::Usage(format!(
        "{role} {} is in use by another strata job: {holder}",
        dir.display()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_directory_locked_twice_in_one_process_names_both_roles() {
        let dir = tempfile::tempdir().unwrap();
        let _held = lock_dir(dir.path(), "output directory").unwrap();
        let e = lock_dir(dir.path(), "checkpoint directory")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("cannot be this job's checkpoint directory")
                && e.contains("already its output directory"),
            "{e}"
        );
    }
}
