//! Cassandra stopped for 20 s in the middle of a route-history run with L3:
//! the job stalls — its source stops reading, the metrics show the source
//! backpressured and L3 requests retried — and when Cassandra is back it
//! continues, losing and duplicating nothing. (Its own test binary: it
//! stops the shared Cassandra, which no other test may see.) The run reads
//! the first 200,000 flights at 4,000 records/s, so it is mid-run when
//! Cassandra stops, once it reads cold routes back from there.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use strata_tests::cassandra::{contact_point, unique_keyspace, Cql};
use strata_tests::wait;
use strata_tests::*;

/// Starts Cassandra again however the test ends.
struct Restart;
impl Drop for Restart {
    fn drop(&mut self) {
        server_script("cassandra.sh", &["start"]);
    }
}

/// Kills the job however the test ends.
struct Job(std::process::Child);
impl Drop for Job {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// One metric's value from the Prometheus endpoint (summed over labels).
fn metric(addr: &str, name: &str, label: Option<&str>) -> f64 {
    let body = (0..5)
        .find_map(|_| {
            let got = scrape(addr).ok();
            if got.is_none() {
                std::thread::sleep(Duration::from_millis(500));
            }
            got
        })
        .unwrap_or_else(|| panic!("the metrics endpoint {addr} does not answer"));
    metric_value(&body, name, label).unwrap_or(0.0)
}

#[test]
fn cassandra_down_for_20s_stalls_the_job_which_then_finishes_exactly() {
    Cql::connect();
    let ks = unique_keyspace("outage");
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let addr = "127.0.0.1:19187";
    let defines = [
        "checkpoint.interval=2s".to_string(),
        "state.l1.capacity=1MB".into(),
        "state.l2.capacity=1MB".into(),
        format!("state.l3.contact-points={}", contact_point()),
        format!("state.l3.keyspace={ks}"),
        "state.l3.request-timeout=1s".into(),
        "state.l3.retry-for=5min".into(),
        "source.max-records-per-second=4000".into(),
    ];
    let mut extra: Vec<&str> = defines.iter().flat_map(|d| ["-D", d.as_str()]).collect();
    extra.extend(["--metrics-addr", addr]);
    let log = dir.path().join("stderr.log");
    let mut job = Job(Command::new(strata_bin())
        .args(route_history_args(
            &flights_head(200_000),
            &out,
            None,
            &extra,
        ))
        .stderr(Stdio::from(std::fs::File::create(&log).unwrap()))
        .spawn()
        .unwrap());
    let log_text = || std::fs::read_to_string(&log).unwrap_or_default();
    // Once the job reads cold routes back from Cassandra: it cannot go on
    // without it.
    wait::until_while_running(
        &mut job.0,
        "a read from L3",
        Duration::from_secs(120),
        || {
            scrape(addr).is_ok_and(|body| {
                metric_value(&body, "strata_state_l3_hits_total", None) > Some(0.0)
            })
        },
    );
    assert!(
        job.0.try_wait().unwrap().is_none(),
        "the job ended before the outage: {}",
        log_text()
    );
    let _restart = Restart;
    server_script("cassandra.sh", &["stop"]);
    let down = Instant::now();
    std::thread::sleep(Duration::from_secs(6));
    let read_at_6s = metric(addr, "strata_records_in_total", None);
    let mut backpressured = 0f64;
    while down.elapsed() < Duration::from_secs(20) {
        std::thread::sleep(Duration::from_secs(1));
        backpressured = backpressured.max(metric(
            addr,
            "strata_task_backpressured_ms_per_second",
            Some("source"),
        ));
    }
    let read_at_20s = metric(addr, "strata_records_in_total", None);
    let retries = metric(addr, "strata_l3_retries_total", None);
    server_script("cassandra.sh", &["start"]);
    assert!(
        read_at_20s - read_at_6s < 1_000.0,
        "the source kept reading while Cassandra was down: {read_at_6s} → {read_at_20s}"
    );
    assert!(
        backpressured >= 500.0,
        "the source was not shown backpressured: {backpressured} ms/s"
    );
    assert!(retries > 0.0, "no L3 retries were counted");
    let status = job.0.wait().unwrap();
    assert!(
        status.success(),
        "the job failed after the outage: {}",
        log_text()
    );
    let got = read_output(&out);
    let want = reference_route_history(&flights_head(200_000));
    if let Some(diff) = first_difference(&got, &want) {
        panic!("after the outage the output differs: {diff}");
    }
}
