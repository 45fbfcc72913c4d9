//! The S3 server of `scripts/s3.sh` stopped in the middle of a
//! route-history run whose checkpoints live in it, with the default
//! `checkpoint.storage.retry-for` (60 s) and `checkpoint.tolerable-failures`
//! (0):
//!
//! * stopped for 20 s, the checkpoint in flight is late, not failed: the
//!   job says so, goes on processing and finishes with the exact output;
//! * stopped for 90 s, the upload's retries run out: the job fails with
//!   one error line naming the object store, and `--restore latest` once
//!   the server is back finishes with the exact output.
//!
//! Its own test binary: it stops the shared S3 server, which no other test
//! may see. The runs read the first 300,000 flights, throttled so that
//! they are mid-run when the server stops.

use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};
use strata_tests::s3::*;
use strata_tests::*;

const FLIGHTS: usize = 300_000;

/// Starts the S3 server again however the test ends.
struct Restart;
impl Drop for Restart {
    fn drop(&mut self) {
        server_script("s3.sh", &["start"]);
    }
}

/// `strata run route-history` over the head of the flights into `out`, a
/// checkpoint a second into `url`, reading `rate` records a second.
fn throttled_run(input: &Path, out: &Path, url: &str, rate: u32) -> Child {
    let rate = format!("source.max-records-per-second={rate}");
    let extra = ["-D", "checkpoint.interval=1s", "-D", &rate];
    let mut cmd = Command::new(strata_bin());
    with_s3_env(&mut cmd)
        .args(route_history_args(input, out, None, &extra))
        .args(["--checkpoint-dir", url])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Waits until the object store at `url` holds a completed checkpoint.
fn wait_for_a_checkpoint(job: &mut Child, url: &str) {
    let started = Instant::now();
    while checkpoints(url).is_empty() {
        assert!(
            job.try_wait().unwrap().is_none(),
            "the run ended before its first checkpoint"
        );
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "no checkpoint in {url} after 60 s"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Stops the S3 server for `outage`; the job's end if it ended meanwhile.
fn stop_s3_for(job: &mut Child, outage: Duration) -> Option<Instant> {
    let restart = Restart;
    server_script("s3.sh", &["stop"]);
    let (stopped, mut ended) = (Instant::now(), None);
    while stopped.elapsed() < outage {
        if ended.is_none() && job.try_wait().unwrap().is_some() {
            ended = Some(Instant::now());
            eprintln!(
                "the job ended {:.0} s into the outage",
                stopped.elapsed().as_secs_f64()
            );
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    drop(restart);
    ended
}

fn check_output(out: &Path, input: &Path, what: &str) {
    let got = read_output(out);
    if let Some(diff) = first_difference(&got, &reference_route_history(input)) {
        panic!("{what}: the output differs: {diff}");
    }
}

fn stderr_of(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn an_object_store_away_for_20s_makes_a_checkpoint_late_and_for_90s_fails_the_job_exactly() {
    require_s3();
    let input = flights_head(FLIGHTS);

    // 20 s: 300,000 flights at 10,000/s last 30 s.
    let (prefix, dir) = (Prefix::unique("outage-20s"), tempfile::tempdir().unwrap());
    let out = dir.path().join("out");
    let mut job = throttled_run(&input, &out, &prefix.url, 10_000);
    wait_for_a_checkpoint(&mut job, &prefix.url);
    let ended = stop_s3_for(&mut job, Duration::from_secs(20));
    assert!(ended.is_none(), "the job ended while S3 was away for 20 s");
    let o = job.wait_with_output().unwrap();
    let stderr = stderr_of(&o);
    assert!(
        o.status.success(),
        "after a 20 s outage the job failed: {stderr}"
    );
    assert!(
        stderr.contains(" is late: its upload to s3://"),
        "no line said the checkpoint was late: {stderr}"
    );
    assert!(
        !stderr.contains("could not remove failed checkpoint"),
        "{stderr}"
    );
    check_output(&out, &input, "after a 20 s outage");

    // 90 s: 300,000 flights at 2,000/s would last 150 s; the retries of
    // the upload in flight end after 60 s.
    let (prefix, dir) = (Prefix::unique("outage-90s"), tempfile::tempdir().unwrap());
    let out = dir.path().join("out");
    let mut job = throttled_run(&input, &out, &prefix.url, 2_000);
    wait_for_a_checkpoint(&mut job, &prefix.url);
    let ended = stop_s3_for(&mut job, Duration::from_secs(90));
    assert!(ended.is_some(), "the job outlived a 90 s outage");
    let o = job.wait_with_output().unwrap();
    let line = error_line(&o);
    let stderr = stderr_of(&o);
    assert_eq!(
        stderr.matches("strata: error: ").count(),
        1,
        "not one error line: {stderr}"
    );
    assert!(
        line.contains(&prefix.url),
        "the error does not name the object store: {line}"
    );
    let mut restored = Command::new(strata_bin());
    let o = with_s3_env(&mut restored)
        .args(route_history_args(
            &input,
            &out,
            None,
            &["--restore", "latest"],
        ))
        .args(["--checkpoint-dir", &prefix.url])
        .output()
        .unwrap();
    assert!(o.status.success(), "the restore failed: {}", stderr_of(&o));
    check_output(&out, &input, "restored after a 90 s outage");
}
