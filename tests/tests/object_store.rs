//! Checkpoints in an object store (`--checkpoint-dir s3://…`), against the
//! real S3-compatible server of `scripts/s3.sh`: a run killed on one
//! machine continues on another that has none of its local files, with the
//! uninterrupted output; uploads are incremental; retention deletes what
//! only dropped checkpoints listed; a bucket that is not there is a clear
//! error.

use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};
use strata_tests::s3::*;
use strata_tests::*;

/// `strata run route-history` over the flights into `out`, checkpoints in
/// `url`, with `extra`.
fn route_history(out: &Path, url: &str, extra: &[&str]) -> Command {
    let mut cmd = Command::new(strata_bin());
    with_s3_env(&mut cmd).args(route_history_args(&flights_path(), out, None, extra));
    cmd.args(["--checkpoint-dir", url]);
    cmd
}

/// A checkpoint a second, the source throttled so that a run lasts ~10 s.
const THROTTLED: [&str; 4] = [
    "-D",
    "checkpoint.interval=1s",
    "-D",
    "source.max-records-per-second=300000",
];

/// SIGKILLs `child` mid-run, once the object store at `url` holds two
/// completed checkpoints.
fn kill_after_two_checkpoints(mut child: Child, url: &str) {
    let started = Instant::now();
    while checkpoints(url).len() < 2 {
        assert!(
            child.try_wait().unwrap().is_none(),
            "the run ended before its second checkpoint"
        );
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "no checkpoint in S3 after 60 s"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    child.kill().unwrap();
    child.wait().unwrap();
}

/// An uninterrupted run, a checkpoint a second, `retained` kept; its stderr.
fn run_to_end(out: &Path, url: &str, retained: u32) -> String {
    let retained = format!("checkpoint.retained={retained}");
    let extra = ["-D", "checkpoint.interval=1s", "-D", &retained];
    succeeded(route_history(out, url, &extra).output().unwrap())
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

#[test]
fn a_run_killed_on_one_machine_continues_on_another_from_the_object_store() {
    require_s3();
    let prefix = Prefix::unique("moved");
    let url = prefix.url.as_str();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let child = route_history(&out, url, &THROTTLED)
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    kill_after_two_checkpoints(child, url);
    // The other machine has the output directory but no local copy.
    std::fs::remove_dir_all(out.join("_checkpoints")).unwrap();
    let (id, state_bytes, _) = *checkpoints(url).last().unwrap();
    let stderr = succeeded(
        route_history(&out, url, &["--restore", "latest"])
            .output()
            .unwrap(),
    );
    assert_eq!(summary(stderr.as_bytes())["restored_from"], id.to_string());
    // It downloaded that checkpoint's files (its state and `_metadata`),
    // not the older checkpoints' too.
    let (files, bytes) = fetched(&stderr, id);
    assert!(files >= 2, "{files} files fetched");
    assert!(
        bytes >= state_bytes && bytes <= state_bytes + (1 << 20),
        "fetched {bytes} bytes for a checkpoint of {state_bytes} bytes"
    );
    let got = read_output(&out);
    if let Some(diff) = first_difference(&got, &reference_route_history(&flights_path())) {
        panic!("after moving machines the output differs: {diff}");
    }
}

#[test]
fn uploads_are_incremental_and_retention_deletes_what_only_dropped_checkpoints_listed() {
    require_s3();
    let (all, kept) = (Prefix::unique("all"), Prefix::unique("kept"));
    let (all, kept) = (all.url.as_str(), kept.url.as_str());
    let dir = tempfile::tempdir().unwrap();
    let stderr = run_to_end(&dir.path().join("a"), all, 100);
    let listed = checkpoints(all);
    assert!(listed.len() >= 3, "only {} checkpoints", listed.len());
    let up: u64 = summary(stderr.as_bytes())["object_store_bytes_up"]
        .parse()
        .unwrap();
    let new: u64 = listed.iter().map(|c| c.2).sum();
    let whole: u64 = listed.iter().map(|c| c.1).sum();
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

    let stderr = run_to_end(&dir.path().join("b"), kept, 2);
    let listed = checkpoints(kept);
    assert_eq!(listed.len(), 2, "retained: {listed:?}");
    let done: u64 = summary(stderr.as_bytes())["checkpoints"].parse().unwrap();
    assert!(
        done > 2,
        "only {done} checkpoints: retention was not exercised"
    );
    // What is left restores on a machine without the local copy: the kept
    // checkpoints' files are all there.
    let out = dir.path().join("b");
    std::fs::remove_dir_all(out.join("_checkpoints")).unwrap();
    let stderr = succeeded(
        route_history(&out, kept, &["--restore", "latest"])
            .output()
            .unwrap(),
    );
    let (id, state_bytes, _) = listed[1];
    let bytes = fetched(&stderr, id).1;
    assert!(
        bytes >= state_bytes,
        "fetched {bytes} of {state_bytes} bytes"
    );
}

#[test]
fn a_bucket_that_does_not_exist_is_a_clear_error() {
    require_s3();
    let dir = tempfile::tempdir().unwrap();
    let started = Instant::now();
    let o = route_history(&dir.path().join("out"), "s3://no-such-bucket/job", &[])
        .output()
        .unwrap();
    assert!(!o.status.success());
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
}

#[test]
fn kafka_to_kafka_killed_on_one_machine_continues_on_another_with_the_exact_output() {
    use strata_tests::kafka::*;
    require_s3();
    require_kafka();
    let (input, output) = (unique_topic("flights-s3"), unique_topic("rh-s3"));
    load_flights(&flights_path(), &input, 4);
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
    kill_after_two_checkpoints(child, &prefix.url);
    let stderr = succeeded(run("second", &["--restore", "latest"]).output().unwrap());
    assert_ne!(summary(stderr.as_bytes())["restored_from"], "none");
    let got = read_route_history(&output);
    if let Some(diff) = first_difference(&got, &reference_route_history(&flights_path())) {
        panic!("after moving machines the committed output differs: {diff}");
    }
}
