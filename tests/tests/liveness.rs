//! Blocking work stays off the async worker threads: while both keyed
//! instances spend seconds in the synchronous part of a checkpoint (a slow
//! disk, simulated by `STRATA_SLOW_CHECKPOINT_MS`), the metrics endpoint
//! keeps answering and the throttled source keeps reading — with two
//! worker threads, work blocking on them would stall both.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use strata_tests::wait;
use strata_tests::*;

#[test]
fn metrics_and_a_throttled_source_stay_live_while_checkpoints_block_on_disk() {
    let dir = tempfile::tempdir().unwrap();
    let addr = &format!("127.0.0.1:{}", strata_tests::query::free_port());
    let mut child = Command::new(strata_bin())
        .args(route_history_args(
            &flights_head(20_000),
            &dir.path().join("out"),
            None,
            &[
                "-D",
                "parallelism=8",
                "-D",
                "checkpoint.interval=1s",
                "-D",
                "source.max-records-per-second=2000",
                // Room for the seconds the keyed instances are busy: the
                // source is not backpressured, only the threads could stop it.
                "-D",
                "channel.capacity=4096",
                "--metrics-addr",
                addr,
            ],
        ))
        .env("STRATA_SLOW_CHECKPOINT_MS", "3000")
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // From the moment the source reads (its first checkpoint comes 1 s
    // later)…
    wait::until_while_running(
        &mut child,
        "the source's first records",
        Duration::from_secs(60),
        || scrape(addr).is_ok_and(|body| records_in(&body) > 0.0),
    );
    // …eight seconds: two or three 3-second checkpoint stalls of both
    // keyed instances. Every scrape must answer at once, and the source
    // must read on in every second.
    let (mut slowest, mut records) = (Duration::ZERO, Vec::new());
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(8) {
        let asked = Instant::now();
        let body = scrape(addr).expect("the metrics endpoint answers");
        slowest = slowest.max(asked.elapsed());
        records.push(records_in(&body));
        std::thread::sleep(Duration::from_millis(1000));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(
        slowest < Duration::from_millis(1000),
        "a scrape took {slowest:?} during blocking checkpoints"
    );
    let stalled = records.windows(2).filter(|w| w[1] <= w[0]).count();
    assert_eq!(
        stalled, 0,
        "the source stalled during checkpoints: {records:?}"
    );
}

/// The records the source has read, as the scraped metrics `body` shows.
fn records_in(body: &str) -> f64 {
    metric_value(body, "strata_records_in_total", None).unwrap_or(0.0)
}
