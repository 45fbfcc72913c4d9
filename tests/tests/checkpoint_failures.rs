//! A checkpoint that fails fails visibly — never a job that reads
//! everything and then waits forever: a full disk, a checkpoint directory
//! that cannot be written, metadata that cannot be written, a checkpoint
//! that does not complete in time. The job fails with the root cause on one
//! line (which checkpoint, which task, which file, which OS error), after
//! `checkpoint.tolerable-failures` failures in a row; leftovers of a run
//! killed during its first checkpoint are never waited on; a restore
//! after the cause is gone continues exactly; a corrupt checkpoint file is
//! refused at restore, naming it, its checkpoint and those free of it; and
//! one that rots while the job runs is named when RocksDB finds it.
//!
//! The full-disk cases mount a small tmpfs (the tests run as root, as CI does).

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};
use strata_tests::wait;
use strata_tests::*;

/// Runs strata with `args`, killing it (and failing the test) if it has not
/// ended within `limit`: a hang is the fault these tests exist to catch.
fn run_within(args: &[String], limit: Duration) -> Output {
    let mut child = Command::new(strata_bin())
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let started = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if started.elapsed() > limit {
            child.kill().unwrap();
            let o = child.wait_with_output().unwrap();
            panic!(
                "strata hung for {limit:?}: {}",
                String::from_utf8_lossy(&o.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    child.wait_with_output().unwrap()
}

/// A tmpfs of `size` mounted at `dir`, unmounted when dropped.
struct Tmpfs(std::path::PathBuf);

impl Tmpfs {
    fn mount(dir: &Path, size: &str) -> Self {
        std::fs::create_dir_all(dir).unwrap();
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir)
            .status()
            .unwrap()
            .success();
        assert!(ok, "mounting a tmpfs needs root (CI runs as root)");
        Tmpfs(dir.to_owned())
    }

    fn resize(&self, size: &str) {
        let ok = Command::new("mount")
            .args(["-o", &format!("remount,size={size}")])
            .arg(&self.0)
            .status()
            .unwrap()
            .success();
        assert!(ok, "remount failed");
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

fn args(input: &Path, out: &Path, chk: &Path, extra: &[&str]) -> Vec<String> {
    route_history_args(input, out, Some(chk), extra)
}

fn assert_exact(out: &Path, input: &Path) {
    let got = read_output(out);
    let want = reference_route_history(input);
    if let Some(diff) = first_difference(&got, &want) {
        panic!("the output differs from the batch computation: {diff}");
    }
}

#[test]
fn a_full_disk_fails_the_job_naming_checkpoint_task_file_and_os_error_and_a_restore_continues_exactly(
) {
    let input = flights_head(200_000);
    let dir = tempfile::tempdir().unwrap();
    let (out, chk, local) = (
        dir.path().join("out"),
        dir.path().join("chk"),
        dir.path().join("local"),
    );
    let disk = Tmpfs::mount(&chk, "3m");
    let local_dir = format!("state.local-dir={}", local.display());
    let extra = [
        "-D",
        "checkpoint.interval=1s",
        "-D",
        "source.max-records-per-second=40000",
        "-D",
        local_dir.as_str(),
        "-D",
        "checkpoint.tolerable-failures=2",
    ];
    let o = run_within(&args(&input, &out, &chk, &extra), Duration::from_secs(120));
    let e = error_line(&o);
    assert!(
        e.contains("3 checkpoint(s) failed in a row")
            && e.contains("checkpoint.tolerable-failures = 2")
            && e.contains("failed in keyed-")
            && e.contains(&chk.display().to_string())
            && e.contains("No space left on device (os error 28)"),
        "{e}"
    );
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(
        stderr
            .matches("in a row; checkpoint.tolerable-failures = 2")
            .count(),
        2,
        "each tolerated failure is reported: {stderr}"
    );
    // Space is freed: the restore continues from the last completed
    // checkpoint and the output is exact.
    disk.resize("400m");
    let mut restore = args(&input, &out, &chk, &extra[..6]);
    restore.extend(["--restore".into(), "latest".into()]);
    let o = run_within(&restore, Duration::from_secs(180));
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_ne!(summary(&o.stderr)["restored_from"], "none");
    assert_exact(&out, &input);
}

#[test]
fn a_full_disk_under_the_live_state_too_ends_the_job_visibly() {
    // The reported setup: checkpoints and (by default) the live RocksDB
    // directories on one small file system.
    let input = flights_head(200_000);
    let dir = tempfile::tempdir().unwrap();
    let (out, chk) = (dir.path().join("out"), dir.path().join("chk"));
    let _disk = Tmpfs::mount(&chk, "3m");
    let extra = [
        "-D",
        "checkpoint.interval=1s",
        "-D",
        "source.max-records-per-second=40000",
    ];
    let o = run_within(&args(&input, &out, &chk, &extra), Duration::from_secs(120));
    let e = error_line(&o);
    assert!(e.contains("No space left on device"), "{e}");
    assert!(!e.contains("closed without an error"), "{e}");
}

#[test]
fn a_checkpoint_directory_that_cannot_be_written_fails_the_first_checkpoint_visibly() {
    let input = case("ten-flights.csv");
    let dir = tempfile::tempdir().unwrap();
    let (out, chk) = (dir.path().join("out"), dir.path().join("chk"));
    std::fs::create_dir_all(&chk).unwrap();
    // A checkpoint directory strata made before (its lock file) where SST
    // files go is a file, not a directory.
    std::fs::write(chk.join("_lock"), "").unwrap();
    std::fs::write(chk.join("shared"), "not a directory").unwrap();
    let o = run_within(&args(&input, &out, &chk, &[]), Duration::from_secs(60));
    let e = error_line(&o);
    assert!(
        e.contains("checkpoint 1 failed in keyed-") && e.contains("shared"),
        "{e}"
    );
    assert!(read_output(&out).is_empty(), "nothing may be committed");
}

#[test]
fn metadata_that_cannot_be_written_names_the_file_and_the_os_error() {
    let input = flights_head(200_000);
    let dir = tempfile::tempdir().unwrap();
    let (out, chk) = (dir.path().join("out"), dir.path().join("chk"));
    let mut child = Command::new(strata_bin())
        .args(args(
            &input,
            &out,
            &chk,
            &[
                "-D",
                "checkpoint.interval=3s",
                "-D",
                "source.max-records-per-second=20000",
            ],
        ))
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // After the start (which clears leftovers: done once the run holds
    // its live state directory), before the first checkpoint (3 s later):
    // the metadata's temporary file cannot be created.
    let pid = child.id();
    wait::until_while_running(
        &mut child,
        "the run's start",
        Duration::from_secs(60),
        || wait::holds_lock(&chk.join("_work"), pid),
    );
    std::fs::create_dir_all(chk.join("chk-1/_metadata.tmp")).unwrap();
    let started = Instant::now();
    while child.try_wait().unwrap().is_none() && started.elapsed() < Duration::from_secs(60) {
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = child.kill();
    let o = child.wait_with_output().unwrap();
    let e = error_line(&o);
    assert!(
        e.contains("checkpoint 1 failed in coordinator")
            && e.contains("_metadata.tmp")
            && e.contains("Is a directory (os error 21)"),
        "{e}"
    );
}

#[test]
fn a_checkpoint_that_does_not_complete_in_time_fails_naming_who_did_not_acknowledge() {
    let input = case("ten-flights.csv");
    let dir = tempfile::tempdir().unwrap();
    let (out, chk) = (dir.path().join("out"), dir.path().join("chk"));
    // One record per second through the sink: the barriers queue behind
    // the records, so the final checkpoint cannot complete in 1 s.
    let o = run_within(
        &args(
            &input,
            &out,
            &chk,
            &[
                "-D",
                "sink.max-records-per-second=1",
                "-D",
                "checkpoint.timeout=1s",
                "-D",
                "channel.batch-size=1",
            ],
        ),
        Duration::from_secs(60),
    );
    let e = error_line(&o);
    assert!(
        e.contains("checkpoint.timeout") && e.contains("not acknowledged by: sink-"),
        "{e}"
    );
}

#[test]
fn leftovers_of_a_run_killed_in_its_first_checkpoint_are_cleared_not_waited_on() {
    let input = case("ten-flights.csv");
    let want = reference_from_flights(&csv_flights(&input));
    for restore in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let (out, chk) = (dir.path().join("out"), dir.path().join("chk"));
        // What a SIGKILL during checkpoint 1 leaves: the directory's lock
        // file, checkpoint 1's private files and a shared SST, no metadata.
        std::fs::create_dir_all(chk.join("chk-1/op-0")).unwrap();
        std::fs::write(chk.join("_lock"), "pid 1 (checkpoint directory)").unwrap();
        std::fs::write(chk.join("chk-1/op-0/MANIFEST-000005"), "partial").unwrap();
        std::fs::write(chk.join("chk-1/op-0/CURRENT"), "MANIFEST-000005\n").unwrap();
        std::fs::create_dir_all(chk.join("shared")).unwrap();
        std::fs::write(chk.join("shared/1a2b-op0-000009.sst"), "partial").unwrap();
        let mut a = args(&input, &out, &chk, &["-D", "parallelism=1"]);
        if restore {
            a.extend(["--restore".into(), "latest".into()]);
        }
        let o = run_within(&a, Duration::from_secs(60));
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let got = read_output(&out);
        assert!(first_difference(&got, &want).is_none(), "restore={restore}");
        assert!(!chk.join("shared/1a2b-op0-000009.sst").exists());
    }
}

/// The completed checkpoints of the local checkpoint directory `chk`, as
/// JSON, oldest first.
fn completed(chk: &Path) -> Vec<serde_json::Value> {
    let Ok(entries) = std::fs::read_dir(chk) else {
        return Vec::new();
    };
    let mut all: Vec<serde_json::Value> = entries
        .flatten()
        .filter_map(|e| std::fs::read(e.path().join("_metadata")).ok())
        .map(|text| serde_json::from_slice(&text).unwrap())
        .collect();
    all.sort_by_key(|m| m["id"].as_u64());
    all
}

#[test]
fn a_corrupt_checkpoint_file_is_refused_at_restore_naming_it_its_checkpoint_and_those_free_of_it() {
    let input = flights_head(100_000);
    let dir = tempfile::tempdir().unwrap();
    let (out, chk) = (dir.path().join("out"), dir.path().join("chk"));
    let extra = [
        "-D",
        "checkpoint.interval=200ms",
        "-D",
        "source.max-records-per-second=50000",
    ];
    let o = run_within(&args(&input, &out, &chk, &extra), Duration::from_secs(120));
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let all = completed(&chk);
    let (newest, older) = all.split_last().unwrap();
    assert!(!older.is_empty(), "one checkpoint only: {all:?}");
    let object = file_only_in(newest, older);
    let path = chk.join(&object);
    std::fs::write(&path, flipped(std::fs::read(&path).unwrap())).unwrap();

    let mut restore = args(&input, &out, &chk, &[]);
    restore.extend(["--restore".into(), "latest".into()]);
    let o = run_within(&restore, Duration::from_secs(60));
    let line = error_line(&o);
    let id = newest["id"].as_u64().unwrap();
    assert!(
        line.contains(&format!(
            "checkpoint {id} cannot be restored: its file {} is corrupt (xxh3 ",
            path.display()
        )),
        "{line}"
    );
    let free: Vec<String> = older.iter().map(|m| m["id"].to_string()).collect();
    assert!(
        line.contains(&format!("can be restored instead: {}", free.join(", "))),
        "{line}"
    );
}

#[test]
fn corruption_found_while_running_names_the_checkpoint_file_it_came_from() {
    let input = flights_head(1_000_000);
    let dir = tempfile::tempdir().unwrap();
    let (out, chk) = (dir.path().join("out"), dir.path().join("chk"));
    // One instance, a small L1 and block cache: the restored run reads its
    // state from the SST files.
    let small = [
        "-D",
        "parallelism=1",
        "-D",
        "state.l1.capacity=64KB",
        "-D",
        "state.l2.memory=8MB",
        "-D",
        "checkpoint.interval=1s",
        "-D",
        "source.max-records-per-second=150000",
    ];
    let mut first = Command::new(strata_bin())
        .args(args(&input, &out, &chk, &small))
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let started = Instant::now();
    while completed(&chk).len() < 2 {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "no checkpoint 2"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    first.kill().unwrap();
    first.wait().unwrap();
    let newest = completed(&chk).pop().unwrap();
    // The killed run's live directory: the restore lays out a new one.
    std::fs::remove_dir_all(chk.join("_work")).unwrap();

    let mut restore = args(&input, &out, &chk, &small);
    restore.extend(["--restore".into(), "latest".into()]);
    let run = Command::new(strata_bin())
        .args(&restore)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Once the restore has checked and laid out the files: a byte in every
    // 4 KiB of every SST file the checkpoint lists rots (the live copies
    // are hard links to them).
    while !chk.join("_work/op-0/CURRENT").exists() {
        assert!(started.elapsed() < Duration::from_secs(120), "no restore");
        std::thread::sleep(Duration::from_millis(5));
    }
    let ssts: Vec<String> = newest["operators"][0]["manifest"]["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["object"].as_str().unwrap().to_owned())
        .filter(|o| o.ends_with(".sst"))
        .collect();
    for object in &ssts {
        let path = chk.join(object);
        let mut bytes = std::fs::read(&path).unwrap();
        for i in (2048..bytes.len().saturating_sub(4096)).step_by(4096) {
            bytes[i] ^= 0xff;
        }
        let mut f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        std::io::Write::write_all(&mut f, &bytes).unwrap();
    }
    let o = run.wait_with_output().unwrap();
    let line = error_line(&o);
    assert!(line.contains("Corruption"), "{line}");
    let named = ssts.iter().any(|object| {
        line.contains(&format!(
            "that file is the checkpoint file {}",
            chk.join(object).display()
        ))
    });
    assert!(named, "the error does not name the checkpoint file: {line}");
    assert!(
        line.contains(&format!("listed by checkpoint(s) {}", newest["id"])),
        "{line}"
    );
}
