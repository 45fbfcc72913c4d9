//! What a user sees from `strata run` when an invocation is wrong or a run
//! is continued: the exit code (2 for a wrong invocation, 1 for a failed
//! job), a message that names what the user gave, nothing created on disk
//! by a start that failed, and restores of any completed checkpoint.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;
use strata_tests::wait;
use strata_tests::*;

const CSV: &str = "date,delay,distance,origin,destination\n2001-01-01 00:01,33,2176,LAS,PHL\n2001-01-01 00:02,5,215,ATL,SAV\n";

/// Asserts a wrong invocation: exit code 2 and an error line holding every
/// one of `says`.
fn refused(o: &std::process::Output, says: &[&str]) -> String {
    let e = error_line(o);
    assert_eq!(o.status.code(), Some(2), "{e}");
    for s in says {
        assert!(e.contains(s), "'{s}' missing from: {e}");
    }
    e
}

fn entries(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[test]
fn a_start_that_fails_its_checks_creates_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("a.csv");
    std::fs::write(&good, CSV).unwrap();
    let no_column = dir.path().join("b.csv");
    std::fs::write(&no_column, "date,delay,origin\n2001-01-01 00:01,1,LAS\n").unwrap();
    let no_format = dir.path().join("flights.txt");
    std::fs::write(&no_format, CSV).unwrap();
    let out = dir.path().join("out");
    let before = entries(dir.path());
    let cases: [(PathBuf, &str); 3] = [
        (dir.path().join("missing.csv"), "does not exist"),
        (no_format, "cannot tell the format"),
        (no_column, "distance"),
    ];
    // A missing file, an unknown format, a missing column: wrong
    // invocations, exit 2, as the guide's "Bad input" table says.
    for (input, says) in cases {
        let o = strata(&route_history_args(&input, &out, None, &[]));
        refused(&o, &[says]);
    }
    let config = strata(&route_history_args(
        &good,
        &out,
        None,
        &["--config", "no-such.toml"],
    ));
    refused(&config, &["config file no-such.toml", "No such file"]);
    let value = strata(&route_history_args(
        &good,
        &out,
        None,
        &["-D", "parallelism=0"],
    ));
    refused(&value, &["parallelism"]);
    let same = dir.path().join("same");
    let both = strata(&route_history_args(&good, &same, Some(&same), &[]));
    refused(&both, &["already its checkpoint directory"]);
    assert_eq!(entries(dir.path()), before, "a failed start left files");
    // An output that holds a finished run's part files: refused before a
    // new checkpoint directory is made.
    let done = strata(&route_history_args(&good, &out, None, &[]));
    assert!(done.status.success(), "{}", error_line(&done));
    let fresh_chk = dir.path().join("chk-new");
    let again = strata(&route_history_args(&good, &out, Some(&fresh_chk), &[]));
    refused(&again, &["already holds part-0-"]);
    assert!(
        !fresh_chk.exists(),
        "the refusal created {}",
        fresh_chk.display()
    );
}

#[test]
fn a_directory_argument_that_is_a_file_is_named_as_given() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("a.csv");
    std::fs::write(&input, CSV).unwrap();
    let file = dir.path().join("f");
    std::fs::write(&file, "not a directory").unwrap();
    let as_output = strata(&route_history_args(&input, &file, None, &[]));
    let e = refused(
        &as_output,
        &["output directory", "it is a file, not a directory"],
    );
    assert!(!e.contains("_checkpoints"), "{e}");
    let under = file.join("chk");
    let as_parent = strata(&route_history_args(
        &input,
        &dir.path().join("out"),
        Some(&under),
        &[],
    ));
    refused(
        &as_parent,
        &[
            "checkpoint directory",
            &format!("{} is a file", file.display()),
        ],
    );
}

#[test]
fn a_restore_from_a_checkpoint_directory_that_does_not_exist_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("a.csv");
    std::fs::write(&input, CSV).unwrap();
    let (out, typo) = (dir.path().join("out"), dir.path().join("chk-typo"));
    let o = strata(&route_history_args(
        &input,
        &out,
        Some(&typo),
        &["--restore", "latest"],
    ));
    refused(&o, &["does not exist", "chk-typo"]);
    assert!(!typo.exists() && !out.exists(), "the refusal created files");
}

/// The completed checkpoints of `chk` and their sinks' next part-file
/// numbers, from their `_metadata`.
fn checkpoints(chk: &Path) -> Vec<(u64, Vec<u64>)> {
    let mut out: Vec<(u64, Vec<u64>)> = entries(chk)
        .iter()
        .filter_map(|n| n.strip_prefix("chk-")?.parse().ok())
        .filter_map(|id: u64| {
            let text = std::fs::read_to_string(chk.join(format!("chk-{id}/_metadata"))).ok()?;
            let meta: serde_json::Value = serde_json::from_str(&text).unwrap();
            let next = meta["sinks"]
                .as_array()
                .unwrap()
                .iter()
                .map(|s| s["next_seq"].as_u64().unwrap())
                .collect();
            Some((id, next))
        })
        .collect();
    out.sort();
    out
}

/// `part-<sink>-<seq>.jsonl` → (sink, seq).
fn part_number(name: &str) -> Option<(usize, u64)> {
    let rest = name.strip_prefix("part-")?.strip_suffix(".jsonl")?;
    let (sink, seq) = rest.split_once('-')?;
    Some((sink.parse().ok()?, seq.parse().ok()?))
}

#[test]
fn any_completed_checkpoint_can_be_restored_by_id_or_path_and_newer_output_must_go_first() {
    let input = flights_head(200_000);
    let dir = tempfile::tempdir().unwrap();
    let (out, chk) = (dir.path().join("out"), dir.path().join("chk"));
    let args = |extra: &[&str]| {
        let mut a = vec![
            "-D",
            "checkpoint.interval=200ms",
            "-D",
            "checkpoint.retained=100",
            "-D",
            "parallelism=2",
        ];
        a.extend_from_slice(extra);
        route_history_args(&input, &out, Some(&chk), &a)
    };
    let first = strata(&args(&["-D", "source.max-records-per-second=150000"]));
    assert!(first.status.success(), "{}", error_line(&first));
    let all = checkpoints(&chk);
    assert!(all.len() >= 4, "too few checkpoints: {all:?}");
    let (older, next_seq) = all[all.len() / 2].clone();
    let newest = all.last().unwrap().0;

    let unknown = strata(&args(&["--restore", "99999"]));
    let e = error_line(&unknown);
    assert!(
        e.contains("no completed checkpoint 99999") && e.contains(&newest.to_string()),
        "{e}"
    );
    let wrong = strata(&args(&["--restore", "yesterday"]));
    refused(&wrong, &["--restore yesterday", "latest"]);
    let key_groups = strata(&args(&["--restore", "latest", "-D", "max-parallelism=64"]));
    refused(
        &key_groups,
        &["max-parallelism 128", "-D max-parallelism=128"],
    );

    // The newer checkpoints' output is there: restoring the older one would
    // write its records again, so it is refused — before any sink opens —
    // listing the part files of every sink.
    let newer: Vec<String> = entries(&out)
        .into_iter()
        .filter(|n| part_number(n).is_some_and(|(sink, seq)| seq >= next_seq[sink]))
        .collect();
    let sinks: std::collections::BTreeSet<usize> = newer
        .iter()
        .filter_map(|n| Some(part_number(n)?.0))
        .collect();
    assert_eq!(sinks.len(), 2, "both sinks wrote after {older}: {newer:?}");
    let before = entries(&out);
    let path = chk.join(format!("chk-{older}"));
    let path = path.to_str().unwrap();
    let refused_restore = strata(&args(&["--restore", path]));
    let e = refused(
        &refused_restore,
        &["written after checkpoint", "part-0-", "part-1-"],
    );
    assert!(e.contains(&format!("{} part file(s)", newer.len())), "{e}");
    assert_eq!(
        entries(&out),
        before,
        "a refused restore changed the output"
    );
    // Withdraw them, then restore the older checkpoint by its path, at
    // another parallelism (which the checkpoint fixes, and says so), and
    // kill that run once it has removed the newer checkpoints and
    // completed a checkpoint of its own (numbered after them).
    let withdrawn = dir.path().join("withdrawn");
    std::fs::create_dir(&withdrawn).unwrap();
    for name in &newer {
        std::fs::rename(out.join(name), withdrawn.join(name)).unwrap();
    }
    let log = dir.path().join("killed.log");
    let mut killed = Command::new(strata_bin())
        .args(args(&[
            "--restore",
            path,
            "-D",
            "parallelism=1",
            "-D",
            "source.max-records-per-second=20000",
        ]))
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    wait::until_while_running(
        &mut killed,
        "a checkpoint of the restored run",
        Duration::from_secs(60),
        || wait::completed_checkpoints(&chk).last() > Some(&newest),
    );
    killed.kill().unwrap();
    killed.wait().unwrap();
    let stderr = std::fs::read_to_string(&log).unwrap();
    assert!(stderr.contains("taken at parallelism 2"), "{stderr}");
    assert!(
        stderr.contains(&format!("newer checkpoints {}", older + 1)),
        "{stderr}"
    );
    // The abandoned checkpoints are gone, so `latest` continues the
    // restored one, not a checkpoint whose output was withdrawn.
    let ids: Vec<u64> = checkpoints(&chk).iter().map(|(id, _)| *id).collect();
    assert!(ids.iter().all(|id| *id <= older || *id > newest), "{ids:?}");
    let again = strata(&args(&["--restore", "latest"]));
    let stderr = String::from_utf8_lossy(&again.stderr);
    assert!(again.status.success(), "{stderr}");
    let ids: Vec<u64> = checkpoints(&chk).iter().map(|(id, _)| *id).collect();
    assert!(
        ids.iter().any(|id| *id > newest),
        "new ids follow the old: {ids:?}"
    );
    let want = reference_from_flights(&parquet_flights(&input));
    let got = read_output(&out);
    assert_eq!(first_difference(&got, &want), None);
}

#[test]
fn a_checkpoint_directory_strata_did_not_write_is_refused_and_left_alone() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("a.csv");
    std::fs::write(&input, CSV).unwrap();
    let foreign = dir.path().join("notes");
    std::fs::create_dir_all(foreign.join("shared")).unwrap();
    std::fs::create_dir_all(foreign.join("chk-7")).unwrap();
    std::fs::write(foreign.join("shared/notes.txt"), "keep").unwrap();
    let o = strata(&route_history_args(
        &input,
        &dir.path().join("out"),
        Some(&foreign),
        &["--restore", "chk-3"],
    ));
    refused(&o, &["holds files strata did not write"]);
    assert_eq!(entries(&foreign), ["chk-7", "shared"]);
    assert!(foreign.join("shared/notes.txt").exists());
    assert!(
        !dir.path().join("out").exists(),
        "the refusal created the output"
    );
}

#[test]
fn an_interrupt_before_the_first_checkpoint_says_nothing_is_committed() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let mut child = Command::new(strata_bin())
        .args(route_history_args(
            &flights_path(),
            &out,
            None,
            &[
                "-D",
                "checkpoint.interval=1h",
                "-D",
                "source.max-records-per-second=1000",
            ],
        ))
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Once records reach the sink, the run listens for signals (it does
    // from the moment its tasks are spawned).
    wait::until_while_running(
        &mut child,
        "the first records at the sink",
        Duration::from_secs(60),
        || wait::writing_output(&out),
    );
    let kill = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(kill.success());
    let o = child.wait_with_output().unwrap();
    let e = error_line(&o);
    assert!(
        e.contains("interrupted by SIGINT") && e.contains("no output is committed"),
        "{e}"
    );
}

#[test]
fn state_get_prints_a_user_history_key_as_well_as_a_route_and_tells_live_from_unknown() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("events.jsonl");
    // An expired user is told apart in tests/tests/l3.rs: here the job
    // drops expired state as it writes, so none is left to find.
    let events = [
        ("alice", 1_000_000_000_000_i64, "hello"),
        ("bob", 1_000_000_001_000, "x"),
        ("alice", 1_000_000_002_250, "world"),
    ];
    let lines: Vec<String> = events
        .iter()
        .map(|(u, t, p)| {
            serde_json::json!({"user_id": u, "event_time": t, "payload": p}).to_string()
        })
        .collect();
    std::fs::write(&input, lines.join("\n")).unwrap();
    let out = dir.path().join("out");
    let run = user_history(&input, &out);
    assert!(run.status.success(), "{}", error_line(&run));
    let chk = out.join("_checkpoints");
    let chk = chk.to_str().unwrap();
    let got = strata(&["state", "get", chk, "events", "alice"]);
    assert!(got.status.success(), "{}", error_line(&got));
    let v: serde_json::Value = serde_json::from_slice(&got.stdout).unwrap();
    let payloads: Vec<&str> = v["value"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["payload"].as_str().unwrap())
        .collect();
    assert_eq!(payloads, ["hello", "world"]);
    assert_eq!(v["value"][1]["event_time"], "2001-09-09T01:46:42.250Z");
    assert_eq!(v["status"], "live", "{v}");
    let status = |user: &str| {
        let o = strata(&["state", "get", chk, "events", user]);
        assert!(o.status.success(), "{}", error_line(&o));
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        assert!(v.get("value").is_none(), "{v}");
        v["status"].as_str().unwrap_or_default().to_owned()
    };
    assert_eq!(status("dave"), "no such key");
    let help = strata(&["state", "get", "--help"]);
    let help = String::from_utf8_lossy(&help.stdout);
    for listed in [
        "route-history",
        "history (list), key: ORIGIN DESTINATION",
        "user-history",
        "events (list), key: USER_ID",
    ] {
        assert!(help.contains(listed), "'{listed}' missing from: {help}");
    }
    let two = strata(&["state", "get", chk, "events", "alice", "bob"]);
    refused(&two, &["one field, the user id"]);
    let other = strata(&["state", "get", chk, "history", "alice"]);
    refused(&other, &["no state 'history'", "events"]);
}

/// user-history's payloads may be binary: a Parquet binary column, or in
/// JSON `{"base64": "…"}`. Their bytes are counted and kept as they are,
/// and `state get` prints bytes that are not text as base64; a value that
/// is not base64 is a bad record naming the field.
#[test]
fn binary_payloads_from_parquet_and_base64_json_are_kept_as_bytes() {
    use arrow::array::{ArrayRef, BinaryArray, StringArray, TimestampMillisecondArray};
    use std::sync::Arc;
    let dir = tempfile::tempdir().unwrap();
    let (t0, binary) = (1_000_000_000_000_i64, [0xff_u8, 0x00, 0x01, 0xfe]);
    let parquet = dir.path().join("events.parquet");
    let columns: Vec<(&str, ArrayRef)> = vec![
        ("user_id", Arc::new(StringArray::from(vec!["ann", "ann"]))),
        (
            "event_time",
            Arc::new(TimestampMillisecondArray::from(vec![t0, t0 + 1])),
        ),
        (
            "payload",
            Arc::new(BinaryArray::from(vec![&binary[..], b"text"])),
        ),
    ];
    let batch = arrow::record_batch::RecordBatch::try_from_iter(columns).unwrap();
    let file = std::fs::File::create(&parquet).unwrap();
    let mut w = parquet::arrow::ArrowWriter::try_new(file, batch.schema(), None).unwrap();
    w.write(&batch).unwrap();
    w.close().unwrap();
    let json = dir.path().join("events.jsonl");
    std::fs::write(
        &json,
        format!(
            "{{\"user_id\":\"ann\",\"event_time\":{t0},\"payload\":{{\"base64\":\"/wAB/g==\"}}}}\n{{\"user_id\":\"ann\",\"event_time\":{},\"payload\":\"text\"}}\n",
            t0 + 1
        ),
    )
    .unwrap();
    for input in [&parquet, &json] {
        let out = dir.path().join(format!(
            "out-{}",
            input.extension().unwrap().to_string_lossy()
        ));
        let run = user_history(input, &out);
        assert!(run.status.success(), "{}", error_line(&run));
        let bytes: Vec<u64> = read_lines(&out)
            .iter()
            .map(|l| l["payload_bytes_60d"].as_u64().unwrap())
            .collect();
        assert_eq!(bytes, [4, 8], "{}", input.display());
        let chk = out.join("_checkpoints");
        let got = strata(&["state", "get", chk.to_str().unwrap(), "events", "ann"]);
        let v: serde_json::Value = serde_json::from_slice(&got.stdout).unwrap();
        let payloads: Vec<&serde_json::Value> = v["value"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| &e["payload"])
            .collect();
        assert_eq!(
            payloads,
            [
                &serde_json::json!({"base64": "/wAB/g=="}),
                &serde_json::json!("text")
            ],
            "{}",
            input.display()
        );
    }
    std::fs::write(
        &json,
        format!("{{\"user_id\":\"ann\",\"event_time\":{t0},\"payload\":{{\"base64\":\"*\"}}}}\n"),
    )
    .unwrap();
    let bad = dir.path().join("out-bad");
    let run = user_history(&json, &bad);
    let e = error_line(&run);
    assert_eq!(run.status.code(), Some(1), "{e}");
    assert!(e.contains("payload") && e.contains("not base64"), "{e}");
}

/// `strata run user-history` from `input` into `out`.
fn user_history(input: &Path, out: &Path) -> std::process::Output {
    let mut args: Vec<&std::ffi::OsStr> =
        vec!["run".as_ref(), "user-history".as_ref(), "--input".as_ref()];
    args.extend([input.as_os_str(), "--output".as_ref(), out.as_os_str()]);
    strata(&args)
}

/// The JSON lines of the part files in `out`, in file-name order.
fn read_lines(out: &Path) -> Vec<serde_json::Value> {
    json_lines_of(out, "part-")
}
