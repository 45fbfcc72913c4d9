//! Output and checkpoint directories belong to one job at a time, and a
//! restore refuses what does not match its checkpoint — with a one-line
//! error, leaving the running job and the stored checkpoints untouched.

use std::process::{Command, Stdio};
use std::time::Duration;
use strata_tests::wait;
use strata_tests::*;

/// The flights a job that must still run while others are refused reads:
/// who holds a directory does not depend on how much it reads, so a slice
/// does (the whole file's run is `route_history.rs`'s).
const SLICE: usize = 400_000;

/// Paced so that the slice takes 4 s or more: the refusals of the other
/// jobs (a few ms each) come while it runs.
const SLOW: [&str; 2] = ["-D", "source.max-records-per-second=100000"];

/// How long a job may take to start and lock its directories.
const LOCKED: Duration = Duration::from_secs(60);

fn slice() -> std::path::PathBuf {
    flights_head(SLICE)
}

const CSV: &str = "date,delay,distance,origin,destination\n2001-01-01 00:01,33,2176,LAS,PHL\n2001-01-01 00:02,5,215,ATL,SAV\n2001-01-01 00:03,-5,215,LAS,PHL\n";

#[test]
fn a_second_job_on_the_same_directories_is_refused_and_the_first_finishes() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let input = slice();
    let mut first = Command::new(strata_bin())
        .args(route_history_args(&input, &out, None, &[SLOW[0], SLOW[1]]))
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = first.id();
    wait::until_while_running(&mut first, "the first job's lock", LOCKED, || {
        wait::holds_lock(&out, pid)
    });
    let second = strata(&route_history_args(&input, &out, None, &[]));
    assert!(error_line(&second).contains("in use by another strata job"));
    let restore = strata(&route_history_args(
        &input,
        &out,
        None,
        &["--restore", "latest"],
    ));
    assert!(error_line(&restore).contains("in use by another strata job"));
    let first = first.wait_with_output().unwrap();
    assert!(
        first.status.success(),
        "{}",
        String::from_utf8_lossy(&first.stderr)
    );
    assert_eq!(summary(&first.stderr)["records_out"], SLICE.to_string());
    assert_eq!(read_output(&out).len(), SLICE);
}

#[test]
fn a_restore_refuses_another_input_file_and_an_inconsistent_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let (input, other, out, chk) = (
        dir.path().join("a.csv"),
        dir.path().join("b.csv"),
        dir.path().join("out"),
        dir.path().join("chk"),
    );
    std::fs::write(&input, CSV).unwrap();
    std::fs::write(&other, format!("{CSV}2001-01-01 00:04,1,1,LAS,PHL\n")).unwrap();
    let first = strata(&route_history_args(
        &input,
        &out,
        Some(&chk),
        &["-D", "parallelism=2"],
    ));
    assert!(first.status.success());

    let e = error_line(&strata(&route_history_args(
        &other,
        &out,
        Some(&chk),
        &["--restore", "latest"],
    )));
    assert!(e.contains("restore needs the same input file"), "{e}");

    let latest = std::fs::read_dir(&chk)
        .unwrap()
        .flatten()
        .map(|e| e.path().join("_metadata"))
        .find(|p| p.is_file())
        .unwrap();
    let meta = std::fs::read_to_string(&latest)
        .unwrap()
        .replace("\"parallelism\": 2", "\"parallelism\": 3");
    std::fs::write(&latest, &meta).unwrap();
    let restore = route_history_args(
        &input,
        &out,
        Some(&chk),
        &["--restore", "latest", "-D", "parallelism=2"],
    );
    // Edited, its checksum no longer matches.
    let e = error_line(&strata(&restore));
    assert!(e.contains("the file is corrupt"), "{e}");
    // Without a checksum (as before checksums), the edit is still caught
    // by the consistency check.
    let unchecked: Vec<&str> = meta
        .lines()
        .filter(|l| !l.contains("\"checksum\""))
        .collect();
    std::fs::write(&latest, unchecked.join("\n")).unwrap();
    let e = error_line(&strata(&restore));
    assert!(e.contains("is inconsistent"), "{e}");
}

#[test]
fn a_restore_refuses_an_input_of_the_same_size_with_other_content() {
    let dir = tempfile::tempdir().unwrap();
    let (input, out, chk) = (
        dir.path().join("a.csv"),
        dir.path().join("out"),
        dir.path().join("chk"),
    );
    std::fs::write(&input, CSV).unwrap();
    let first = strata(&route_history_args(&input, &out, Some(&chk), &[]));
    assert!(first.status.success());
    // Same bytes count, one delay changed: 33 -> 34.
    let other = CSV.replacen(",33,", ",34,", 1);
    assert_eq!(other.len(), CSV.len());
    std::fs::write(&input, other).unwrap();
    let e = error_line(&strata(&route_history_args(
        &input,
        &out,
        Some(&chk),
        &["--restore", "latest"],
    )));
    assert!(
        e.contains("same size but other content")
            && e.contains("restore needs the same input file"),
        "{e}"
    );
}

#[test]
fn a_second_job_on_the_same_local_state_directory_is_refused_naming_the_holder() {
    let dir = tempfile::tempdir().unwrap();
    let local = format!("state.local-dir={}", dir.path().join("local").display());
    let mut first = Command::new(strata_bin())
        .args(route_history_args(
            &slice(),
            &dir.path().join("out-a"),
            Some(&dir.path().join("chk-a")),
            &[SLOW[0], SLOW[1], "-D", &local],
        ))
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = first.id();
    wait::until_while_running(&mut first, "the first job's lock", LOCKED, || {
        wait::holds_lock(&dir.path().join("local"), pid)
    });
    let second = strata(&route_history_args(
        &slice(),
        &dir.path().join("out-b"),
        Some(&dir.path().join("chk-b")),
        &["-D", &local],
    ));
    let e = error_line(&second);
    assert!(
        e.contains("local state directory")
            && e.contains("in use by another strata job")
            && e.contains(&format!("pid {}", first.id())),
        "{e}"
    );
    let first = first.wait_with_output().unwrap();
    assert!(
        first.status.success(),
        "{}",
        String::from_utf8_lossy(&first.stderr)
    );
    assert_eq!(read_output(&dir.path().join("out-a")).len(), SLICE);
    // A run that ended normally leaves nothing behind, `_lock` included.
    let left: Vec<_> = std::fs::read_dir(dir.path().join("local"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert!(left.is_empty(), "left in state.local-dir: {left:?}");
    for dir in [dir.path().join("out-a"), dir.path().join("chk-a")] {
        assert!(
            !dir.join("_lock").exists(),
            "{} keeps its _lock after a normal end",
            dir.display()
        );
    }
}

#[test]
fn the_same_directory_for_output_and_checkpoints_is_refused_as_such() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("a.csv");
    std::fs::write(&input, CSV).unwrap();
    let same = dir.path().join("x");
    let e = error_line(&strata(&route_history_args(
        &input,
        &same,
        Some(&same),
        &[],
    )));
    assert!(e.contains("already its checkpoint directory"), "{e}");
}

#[test]
fn a_local_state_directory_that_is_not_strata_s_alone_is_refused_and_nothing_is_deleted() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("a.csv");
    std::fs::write(&input, CSV).unwrap();
    let precious = dir.path().join("precious");
    std::fs::create_dir_all(precious.join("sub")).unwrap();
    std::fs::write(precious.join("precious.txt"), "keep").unwrap();
    let (out, chk) = (dir.path().join("job/out"), dir.path().join("job/chk"));
    let cases = [
        (precious.clone(), "precious.txt"),
        (dir.path().join("job"), "contains the output directory"),
        (chk.join("shared"), "only"),
        (out.join("state"), "inside the output directory"),
    ];
    for (local, says) in cases {
        let setting = format!("state.local-dir={}", local.display());
        let e = error_line(&strata(&route_history_args(
            &input,
            &out,
            Some(&chk),
            &["-D", &setting],
        )));
        assert!(
            e.contains("state.local-dir") && e.contains(says),
            "{}: {e}",
            local.display()
        );
    }
    assert_eq!(
        std::fs::read_to_string(precious.join("precious.txt")).unwrap(),
        "keep"
    );
    // A directory of its own works, and only what strata wrote is removed.
    let own = dir.path().join("own");
    std::fs::create_dir_all(&own).unwrap();
    let setting = format!("state.local-dir={}", own.display());
    let o = strata(&route_history_args(
        &input,
        &out,
        Some(&chk),
        &["-D", &setting],
    ));
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(own.is_dir());
    assert_eq!(read_output(&out).len(), 3);
}
