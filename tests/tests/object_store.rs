//! Checkpoints in an object store (`--checkpoint-dir s3://…`), against the
//! real S3-compatible server of `scripts/s3.sh`: a run killed on one
//! machine continues on another that has none of its local files (file and
//! Kafka output), and back on a machine whose local copy has the newest
//! checkpoint without downloading it, with the uninterrupted output;
//! uploads are incremental; retention leaves nothing a kept checkpoint does
//! not list; a bucket that is not there, an empty prefix to restore from,
//! or a prefix holding objects strata did not write, is a clear error; a
//! corrupt object is refused as it is downloaded; and a second job on a
//! prefix in use is refused, while one whose holder is gone takes it over.

use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};
use strata_tests::s3::*;
use strata_tests::*;

/// The flights the runs read: a slice of 600,000, whose checkpoints (a
/// few MB, one a second) move between machines, upload incrementally and
/// are retained as the whole file's do, at a fifth of the cost (the whole
/// file's exact run is `route_history.rs`'s).
fn flights() -> std::path::PathBuf {
    flights_head(600_000)
}

/// `strata run route-history` over [`flights`] into `out`, checkpoints in
/// `url`, with `extra`.
fn route_history(out: &Path, url: &str, extra: &[&str]) -> Command {
    route_history_over(&flights(), out, url, extra)
}

/// As [`route_history`], over `input`.
fn route_history_over(input: &Path, out: &Path, url: &str, extra: &[&str]) -> Command {
    let mut cmd = Command::new(strata_bin());
    with_s3_env(&mut cmd).args(route_history_args(input, out, None, extra));
    cmd.args(["--checkpoint-dir", url]);
    cmd
}

/// A checkpoint a second, the source throttled so that a run of
/// [`flights`] lasts ~10 s.
const THROTTLED: [&str; 4] = [
    "-D",
    "checkpoint.interval=1s",
    "-D",
    "source.max-records-per-second=60000",
];

/// SIGKILLs `child` mid-run, once the object store at `url` holds a
/// completed checkpoint numbered `at_least` or more; returns the newest
/// after the kill.
fn kill_after_checkpoint(mut child: Child, url: &str, at_least: u64) -> Listed {
    let started = Instant::now();
    loop {
        if checkpoints(url).pop().is_some_and(|c| c.id >= at_least) {
            break;
        }
        assert!(
            child.try_wait().unwrap().is_none(),
            "the run ended before checkpoint {at_least}"
        );
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "no checkpoint {at_least} in S3 after 60 s"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let last = checkpoints(url).pop().unwrap();
    assert!(!last.is_final, "the run ended before the kill: {last:?}");
    last
}

/// An uninterrupted run, [`THROTTLED`], `retained` kept; its stderr.
fn run_to_end(out: &Path, url: &str, retained: u32) -> String {
    let retained = format!("checkpoint.retained={retained}");
    let mut cmd = route_history(out, url, &THROTTLED);
    succeeded(cmd.args(["-D", &retained]).output().unwrap())
}

fn succeeded(o: Output) -> String {
    let stderr = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(o.status.success(), "strata failed: {stderr}");
    stderr
}

/// `(files, bytes)` of the "fetched checkpoint N from …" line.
fn fetched(stderr: &str, id: u64) -> (u64, u64) {
    let line = stderr
        .lines()
        .find(|l| l.starts_with(&format!("strata: fetched checkpoint {id} from")))
        .unwrap_or_else(|| panic!("no fetch of checkpoint {id} reported: {stderr}"));
    let after = line.rsplit_once(": ").unwrap().1;
    let words: Vec<&str> = after.split_whitespace().collect();
    (words[0].parse().unwrap(), words[2].parse().unwrap())
}

fn check_output(out: &Path, what: &str) {
    let got = read_output(out);
    if let Some(diff) = first_difference(&got, &reference_route_history(&flights())) {
        panic!("{what}: the output differs: {diff}");
    }
}

#[test]
fn a_run_killed_on_one_machine_continues_on_another_from_the_object_store() {
    require_s3();
    let prefix = Prefix::unique("moved");
    let url = prefix.url.as_str();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let spawn = |extra: &[&str], stderr: Stdio| {
        let mut cmd = route_history(&out, url, &THROTTLED);
        cmd.args(extra).stderr(stderr).spawn().unwrap()
    };
    let first = kill_after_checkpoint(spawn(&[], Stdio::null()), url, 2);
    // The other machine has the output directory but no local copy.
    std::fs::remove_dir_all(out.join("_checkpoints")).unwrap();
    let mut second = spawn(&["--restore", "latest"], Stdio::piped());
    let stderr = second.stderr.take().unwrap();
    let reader = std::thread::spawn(move || std::io::read_to_string(stderr).unwrap());
    let newest = kill_after_checkpoint(second, url, first.id + 2);
    let stderr = reader.join().unwrap();
    // It downloaded that checkpoint's files (its state and `_metadata`),
    // not the older checkpoints' too.
    let (files, bytes) = fetched(&stderr, first.id);
    assert!(files >= 2, "{files} files fetched");
    assert!(
        bytes >= first.state && bytes <= first.state + (1 << 20),
        "fetched {bytes} bytes for a checkpoint of {} bytes",
        first.state
    );
    // Back on the second machine, whose local copy holds the newest
    // checkpoint: nothing is downloaded.
    let stderr = succeeded(
        route_history(&out, url, &["--restore", "latest"])
            .output()
            .unwrap(),
    );
    assert_eq!(
        summary(stderr.as_bytes())["restored_from"],
        newest.id.to_string()
    );
    assert!(!stderr.contains("strata: fetched"), "{stderr}");
    check_output(&out, "after moving machines and a second crash");
}

#[test]
fn uploads_are_incremental_and_retention_deletes_what_only_dropped_checkpoints_listed() {
    require_s3();
    let (all, kept) = (Prefix::unique("all"), Prefix::unique("kept"));
    let dir = tempfile::tempdir().unwrap();
    let stderr = run_to_end(&dir.path().join("a"), &all.url, 100);
    let listed = checkpoints(&all.url);
    assert!(listed.len() >= 3, "only {} checkpoints", listed.len());
    let up: u64 = summary(stderr.as_bytes())["object_store_bytes_up"]
        .parse()
        .unwrap();
    let new: u64 = listed.iter().map(|c| c.new).sum();
    let whole: u64 = listed.iter().map(|c| c.state).sum();
    // Each checkpoint sent its new SST files and its small private files,
    // never the whole state again.
    assert!(
        up >= new && up <= new + listed.len() as u64 * (1 << 20),
        "uploaded {up} bytes; the checkpoints' new files hold {new}"
    );
    assert!(
        up < whole,
        "uploaded {up} bytes, as much as every checkpoint whole ({whole})"
    );

    let stderr = run_to_end(&dir.path().join("b"), kept.url.as_str(), 2);
    let listed = checkpoints(&kept.url);
    assert_eq!(listed.len(), 2, "retained: {listed:?}");
    let done: u64 = summary(stderr.as_bytes())["checkpoints"].parse().unwrap();
    assert!(
        done > 2,
        "only {done} checkpoints: retention was not exercised"
    );
    // Nothing of a dropped checkpoint is left: every private object is a
    // kept checkpoint's, every shared one listed by a kept checkpoint.
    let mut listed_files = std::collections::HashSet::new();
    for c in &listed {
        let meta: serde_json::Value =
            serde_json::from_slice(&kept.read(&format!("chk-{}/_metadata", c.id))).unwrap();
        for op in meta["operators"].as_array().unwrap() {
            for f in op["manifest"]["files"].as_array().unwrap() {
                listed_files.insert(f["object"].as_str().unwrap().to_owned());
            }
        }
    }
    for object in kept.objects() {
        let kept_private = listed
            .iter()
            .any(|c| object.starts_with(&format!("chk-{}/", c.id)));
        assert!(
            kept_private || listed_files.contains(&object),
            "{object} outlived retention"
        );
    }
    // What is left restores on a machine without the local copy.
    let out = dir.path().join("b");
    std::fs::remove_dir_all(out.join("_checkpoints")).unwrap();
    let stderr = succeeded(
        route_history(&out, &kept.url, &["--restore", "latest"])
            .output()
            .unwrap(),
    );
    let bytes = fetched(&stderr, listed[1].id).1;
    assert!(
        bytes >= listed[1].state,
        "fetched {bytes} of {} bytes",
        listed[1].state
    );
    // A key's state read straight from the store equals the local copy's.
    let state_get = |dir: &str| {
        let o = with_s3_env(&mut Command::new(strata_bin()))
            .args(["state", "get", dir, "history", "LAS", "PHL"])
            .output()
            .unwrap();
        succeeded_stdout(o)
    };
    let local = out.join("_checkpoints");
    let from_local = state_get(local.to_str().unwrap());
    assert!(from_local.contains("\"value\":["), "{from_local}");
    assert_eq!(state_get(&kept.url), from_local);
}

fn succeeded_stdout(o: Output) -> String {
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[test]
fn a_missing_bucket_an_empty_prefix_to_restore_or_another_job_s_prefix_is_a_clear_error() {
    require_s3();
    let dir = tempfile::tempdir().unwrap();
    let started = Instant::now();
    let o = route_history(&dir.path().join("out"), "s3://no-such-bucket/job", &[])
        .output()
        .unwrap();
    let error = error_line(&o);
    assert!(
        error.contains("s3://no-such-bucket/job") && error.contains("listing"),
        "unclear error: {error}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "took {:?}",
        started.elapsed()
    );
    // A mistyped prefix on a machine without a local copy: refused, not a
    // run started over.
    let typo = Prefix::unique("typo");
    let o = route_history(
        &dir.path().join("out2"),
        &typo.url,
        &["--restore", "latest"],
    )
    .output()
    .unwrap();
    let error = error_line(&o);
    assert!(
        error.contains(&typo.url) && error.contains("holds none"),
        "unclear error: {error}"
    );
    assert!(
        typo.objects().is_empty(),
        "a refused run wrote to the store"
    );
    // A prefix above another job's (or any object strata did not write):
    // refused, and the other job's objects stay.
    let parent = Prefix::unique("parent");
    parent.put("jobA/chk-3/_metadata", b"another job's");
    let o = route_history(&dir.path().join("out3"), &parent.url, &[])
        .output()
        .unwrap();
    let error = error_line(&o);
    assert!(error.contains("did not write"), "unclear error: {error}");
    assert_eq!(parent.objects(), ["jobA/chk-3/_metadata"]);
}

#[test]
fn kafka_to_kafka_killed_on_one_machine_continues_on_another_with_the_exact_output() {
    use strata_tests::kafka::*;
    require_s3();
    require_kafka();
    let (input, output) = (unique_topic("flights-s3"), unique_topic("rh-s3"));
    load_flights(&flights(), &input, 4);
    let prefix = Prefix::unique("kafka");
    let dir = tempfile::tempdir().unwrap();
    let run = |machine: &str, extra: &[&str]| {
        let copy = format!(
            "checkpoint.local-copy={}",
            dir.path().join(machine).display()
        );
        let mut cmd = run_command(&input, &output, Path::new(&prefix.url), &["-D", &copy]);
        with_s3_env(&mut cmd).args(extra);
        cmd
    };
    let child = run("first", &THROTTLED)
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    kill_after_checkpoint(child, &prefix.url, 2);
    let stderr = succeeded(run("second", &["--restore", "latest"]).output().unwrap());
    assert_ne!(summary(stderr.as_bytes())["restored_from"], "none");
    let got = read_route_history(&output);
    if let Some(diff) = first_difference(&got, &reference_route_history(&flights())) {
        panic!("after moving machines the committed output differs: {diff}");
    }
}

#[test]
fn a_corrupt_object_is_refused_on_download_naming_it_its_checkpoint_and_those_free_of_it() {
    require_s3();
    // A slice of the flights: a few checkpoints are all it needs.
    let input = flights_head(100_000);
    let prefix = Prefix::unique("corrupt");
    let dir = tempfile::tempdir().unwrap();
    let extra = [
        "-D",
        "checkpoint.interval=200ms",
        "-D",
        "source.max-records-per-second=50000",
    ];
    succeeded(
        route_history_over(&input, &dir.path().join("out"), &prefix.url, &extra)
            .output()
            .unwrap(),
    );
    let listed = checkpoints(&prefix.url);
    let metadata = |id: u64| -> serde_json::Value {
        serde_json::from_slice(&prefix.read(&format!("chk-{id}/_metadata"))).unwrap()
    };
    let (newest, older) = listed.split_last().unwrap();
    let older_meta: Vec<serde_json::Value> = older.iter().map(|c| metadata(c.id)).collect();
    let object = file_only_in(&metadata(newest.id), &older_meta);
    prefix.put(&object, &flipped(prefix.read(&object)));

    // Another machine: no local copy, so the file is downloaded.
    let o = route_history_over(
        &input,
        &dir.path().join("elsewhere"),
        &prefix.url,
        &["--restore", "latest"],
    )
    .output()
    .unwrap();
    let line = error_line(&o);
    assert!(
        line.contains(&format!(
            "checkpoint {} cannot be restored: its file {}/{object} is corrupt (xxh3 ",
            newest.id, prefix.url
        )),
        "{line}"
    );
    let free: Vec<String> = older.iter().map(|c| c.id.to_string()).collect();
    assert!(
        line.contains(&format!("can be restored instead: {}", free.join(", "))),
        "{line}"
    );
    assert!(
        !dir.path()
            .join("elsewhere/_checkpoints")
            .join(&object)
            .exists(),
        "the corrupt file was kept in the local copy"
    );
}

/// The lease `_owner` as another machine's job writes it, beat `beat`.
fn foreign_owner(beat: u64) -> Vec<u8> {
    format!(r#"{{"host":"another-machine","pid":4242,"run":7,"beat":{beat}}}"#).into_bytes()
}

#[test]
fn a_second_job_on_a_prefix_in_use_is_refused_and_one_whose_holder_is_gone_takes_it_over() {
    require_s3();
    let input = flights_head(200_000);
    let dir = tempfile::tempdir().unwrap();
    // A job of this machine runs on the prefix: a second one is refused at
    // once, naming it, and the first finishes exactly.
    let prefix = Prefix::unique("lease");
    let extra = [
        "-D",
        "checkpoint.interval=1s",
        "-D",
        "source.max-records-per-second=40000",
    ];
    let first = route_history_over(&input, &dir.path().join("a"), &prefix.url, &extra)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let started = Instant::now();
    while !prefix.objects().iter().any(|o| o == "_owner") {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "no lease taken"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let o = route_history_over(&input, &dir.path().join("b"), &prefix.url, &[])
        .output()
        .unwrap();
    let line = error_line(&o);
    assert!(
        line.contains("is in use by another job")
            && line.contains(&format!("(pid {})", first.id()))
            && line.contains("runs on this host"),
        "{line}"
    );
    succeeded(first.wait_with_output().unwrap());
    let got = read_output(&dir.path().join("a"));
    assert!(
        first_difference(&got, &reference_route_history(&input)).is_none(),
        "the first job's output differs"
    );
    assert!(
        !prefix.objects().iter().any(|o| o == "_owner"),
        "a normal end left the lease behind"
    );

    // Another machine's job renews its lease: refused after watching it.
    let other = std::sync::Arc::new(Prefix::unique("lease-other"));
    other.put("_owner", &foreign_owner(0));
    let renewing = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let renewer = {
        let (renewing, other) = (renewing.clone(), other.clone());
        std::thread::spawn(move || {
            let mut beat = 0;
            while renewing.load(std::sync::atomic::Ordering::Relaxed) {
                beat += 1;
                other.put("_owner", &foreign_owner(beat));
                std::thread::sleep(Duration::from_secs(1));
            }
        })
    };
    let o = route_history_over(&input, &dir.path().join("c"), &other.url, &[])
        .output()
        .unwrap();
    let line = error_line(&o);
    assert!(
        line.contains("strata on host another-machine (pid 4242) renewed its lease"),
        "{line}"
    );
    // Its holder is gone (it stops renewing): taken over after the wait.
    renewing.store(false, std::sync::atomic::Ordering::Relaxed);
    renewer.join().unwrap();
    let stderr = succeeded(
        route_history_over(&input, &dir.path().join("d"), &other.url, &[])
            .output()
            .unwrap(),
    );
    assert!(
        stderr.contains("waiting 7 s to see whether that job still runs"),
        "{stderr}"
    );
}
