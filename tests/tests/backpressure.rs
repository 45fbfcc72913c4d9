//! With the sink throttled to 20,000 records/s and the source unthrottled,
//! the source advances at the sink's pace and resident memory stays flat.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use strata_tests::*;

fn rss_bytes(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|kb| kb.parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

fn metric(addr: &str, name: &str) -> Option<f64> {
    metric_value(&scrape(addr).ok()?, name, None)
}

#[test]
fn a_slow_sink_slows_the_source_and_memory_stays_flat() {
    let input = flights_path();
    let dir = tempfile::tempdir().unwrap();
    let port = 20000 + (std::process::id() % 20000) as u16;
    let addr = format!("127.0.0.1:{port}");
    let mut child = Command::new(strata_bin())
        .args([
            "run",
            "route-history",
            "--input",
            input.to_str().unwrap(),
            "--output",
            dir.path().join("out").to_str().unwrap(),
            "--metrics-addr",
            &addr,
            "-D",
            "sink.max-records-per-second=20000",
            "-D",
            "checkpoint.interval=2s",
        ])
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let pid = child.id();
    let start = Instant::now();
    let mut samples = Vec::new();
    while start.elapsed() < Duration::from_secs(14) {
        std::thread::sleep(Duration::from_millis(500));
        assert!(
            child.try_wait().unwrap().is_none(),
            "the throttled job ended early"
        );
        let (Some(read), Some(written)) = (
            metric(&addr, "strata_records_in_total"),
            metric(&addr, "strata_records_out_total"),
        ) else {
            continue;
        };
        samples.push((start.elapsed().as_secs_f64(), read, written, rss_bytes(pid)));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let warm: Vec<_> = samples.iter().filter(|s| s.0 >= 4.0).collect();
    assert!(warm.len() >= 10, "too few metric samples: {samples:?}");
    let (first, last) = (warm[0], warm[warm.len() - 1]);
    let source_rate = (last.1 - first.1) / (last.0 - first.0);
    let peak_rss = samples.iter().map(|s| s.3).max().unwrap();
    let in_flight = warm.iter().map(|s| s.1 - s.2).fold(0.0, f64::max);
    let rss_growth = last.3 as f64 - first.3 as f64;
    eprintln!("backpressure: source {source_rate:.0} records/s, peak RSS {} MB, RSS growth {:.1} MB over {:.0}s, max in flight {in_flight:.0} records", peak_rss >> 20, rss_growth / 1e6, last.0 - first.0);
    assert!(
        (16_000.0..=24_000.0).contains(&source_rate),
        "the source must follow the sink's 20,000/s, read at {source_rate:.0}/s"
    );
    assert!(
        in_flight < 100_000.0,
        "records between source and sink must stay bounded, saw {in_flight}"
    );
    assert!(
        rss_growth < 48e6,
        "resident memory must stay flat, grew {:.1} MB",
        rss_growth / 1e6
    );
}
