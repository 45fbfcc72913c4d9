//! Waiting on conditions, not clocks: a test that needs something to have
//! happened — a checkpoint completed, a directory locked, a line logged, a
//! metric moved — polls for exactly that, with a deadline and a message
//! naming what did not happen. A fixed sleep is too short on a loaded
//! machine and too long on an idle one.

use std::path::Path;
use std::process::Child;
use std::time::{Duration, Instant};

/// The longest pause between two checks of a condition (the first checks
/// come faster: 10 ms, then doubling).
const MAX_POLL: Duration = Duration::from_millis(250);

/// Waits until `cond` holds; panics naming `what` if it does not within
/// `limit`.
pub fn until(what: &str, limit: Duration, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    let mut pause = Duration::from_millis(10);
    while !cond() {
        assert!(
            start.elapsed() < limit,
            "{what} did not happen within {limit:?}"
        );
        std::thread::sleep(pause);
        pause = (pause * 2).min(MAX_POLL);
    }
}

/// As [`until`], for `child`'s sake: panics as well if `child` ends before
/// `cond` holds (with its stderr, if piped).
pub fn until_while_running(
    child: &mut Child,
    what: &str,
    limit: Duration,
    mut cond: impl FnMut() -> bool,
) {
    until(what, limit, || {
        if cond() {
            return true;
        }
        if let Some(status) = child.try_wait().expect("the child's status") {
            let stderr = child
                .stderr
                .take()
                .and_then(|s| std::io::read_to_string(s).ok())
                .unwrap_or_default();
            panic!("the run ended ({status}) before {what}: {stderr}");
        }
        false
    });
}

/// The ids of the completed checkpoints (those with a `_metadata`) of the
/// local checkpoint directory `chk`, oldest first.
pub fn completed_checkpoints(chk: &Path) -> Vec<u64> {
    let Ok(entries) = std::fs::read_dir(chk) else {
        return Vec::new();
    };
    let mut ids: Vec<u64> = entries
        .flatten()
        .filter(|e| e.path().join("_metadata").is_file())
        .filter_map(|e| e.file_name().to_str()?.strip_prefix("chk-")?.parse().ok())
        .collect();
    ids.sort_unstable();
    ids
}

/// Whether process `pid` holds `dir` (its `_lock` names it): a job has
/// taken a directory only once its start checks passed, and the
/// checkpoint directory's `_work` only after the leftovers of earlier runs
/// were swept.
pub fn holds_lock(dir: &Path, pid: u32) -> bool {
    std::fs::read_to_string(dir.join("_lock"))
        .is_ok_and(|holder| holder.starts_with(&format!("pid {pid} (")))
}

/// Whether a job is writing output into the directory `out`: a sink has
/// opened an in-progress part file (its first record has come through).
pub fn writing_output(out: &Path) -> bool {
    std::fs::read_dir(out).is_ok_and(|entries| {
        entries.flatten().any(|e| {
            let name = e.file_name();
            let name = name.to_string_lossy();
            name.starts_with(".part-") && name.ends_with(".inprogress")
        })
    })
}
