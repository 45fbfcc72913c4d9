//! The load-test harness runs every mode on the same events and reports
//! figures that hold together: all events counted, percentiles ordered,
//! ratios against the baselines of the same run, checkpoints taken, a
//! restore after SIGKILL that holds every checkpointed event, and plots.

use strata_tests::workspace_bin;

/// Runs strata-bench with `args` (plus `--out`); returns report.json and
/// checks that report.md names every mode and that the plots are PNGs.
fn run_bench(args: &[&str], modes: &[&str]) -> serde_json::Value {
    let dir = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(workspace_bin("strata-bench"))
        .args(args)
        .args(["--modes", &modes.join(","), "--out"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("report.json")).unwrap()).unwrap();
    let md = std::fs::read_to_string(dir.path().join("report.md")).unwrap();
    for mode in modes {
        assert!(md.contains(&format!("| {mode} |")), "{md}");
    }
    for plot in ["throughput.png", "latency_cdf.png", "tier_sizes.png"] {
        let png = std::fs::read(dir.path().join(plot)).unwrap();
        assert!(png.starts_with(b"\x89PNG\r\n\x1a\n"), "{plot} is no PNG");
        assert!(png.len() > 10_000, "{plot} is nearly empty");
    }
    report
}

fn run_local(form: &str) -> serde_json::Value {
    let args = [
        "--users",
        "2000",
        "--events",
        "60000",
        "--zipf",
        "1.0",
        "--form",
        form,
        "--l1",
        "256KB",
        "--checkpoint-every",
        "10000",
    ];
    let report = run_bench(&args, &["pipeline", "embedded", "rocksdb-raw", "memory"]);
    assert_eq!(
        report["workload"]["form"], form,
        "named as the CLI names it"
    );
    report
}

/// The figures every mode reports, for a run of `events`.
fn check_mode(name: &str, m: &serde_json::Value, events: u64) {
    assert_eq!(m["events"], events, "{name}");
    assert_eq!(
        m["verified"], true,
        "{name}: every event must be counted once, every history element kept once"
    );
    let v = &m["verification"];
    assert_eq!(v["counted"], events, "{name}: {v}");
    assert!(v["users"].as_u64().unwrap() > 0, "{name}: {v}");
    if name != "cassandra-per-record" {
        // Its histories are not read back; every other mode's are.
        assert!(v["elements"].as_u64().unwrap() > 0, "{name}: {v}");
    }
    assert!(m["events_per_sec"].as_f64().unwrap() > 0.0);
    assert!(m["peak_rss_bytes"].as_u64().unwrap() > 0);
    let l = &m["latency_us"];
    if name == "pipeline" {
        // The runtime is timed per run, not per event.
        assert!(l["p50"].is_null() && l["p999"].is_null(), "{name}: {l}");
    } else {
        check_latency(name, m);
    }
    check_timeline(name, m, events);
}

/// A mode's per-event latency: percentiles and distribution in order.
fn check_latency(name: &str, m: &serde_json::Value) {
    let l = &m["latency_us"];
    let (p50, p99, p999) = (
        l["p50"].as_f64().unwrap(),
        l["p99"].as_f64().unwrap(),
        l["p999"].as_f64().unwrap(),
    );
    assert!(p50 <= p99 && p99 <= p999, "{name}: {l}");
    let cdf = m["latency_cdf"].as_array().unwrap();
    let pairs: Vec<(f64, f64)> = cdf
        .iter()
        .map(|p| (p[0].as_f64().unwrap(), p[1].as_f64().unwrap()))
        .collect();
    assert!(
        pairs
            .windows(2)
            .all(|w| w[0].0 <= w[1].0 && w[0].1 <= w[1].1),
        "{name}: {pairs:?}"
    );
    assert_eq!(pairs.last().unwrap().0, 1.0, "{name}: the CDF reaches 100%");
}

/// A mode's progress timeline: it only grows and ends at every event.
fn check_timeline(name: &str, m: &serde_json::Value, events: u64) {
    let timeline = m["timeline"].as_array().unwrap();
    let last = timeline.last().unwrap();
    assert_eq!(
        last["events"], events,
        "{name}: the last sample sees every event"
    );
    let counts: Vec<u64> = timeline
        .iter()
        .map(|s| s["events"].as_u64().unwrap())
        .collect();
    assert!(
        counts.windows(2).all(|w| w[0] <= w[1]),
        "{name}: {counts:?}"
    );
}

/// A tiered mode's checkpoints and its restore after SIGKILL: the restored
/// state holds every event of the last checkpoint, taken after the last
/// event.
fn check_checkpoints(name: &str, m: &serde_json::Value, events: u64, every: u64) {
    let c = &m["checkpoints"];
    // One every `every` events per worker, and one after the last event
    // unless the last one already holds it.
    let per_worker = events / 2;
    let per_worker_checkpoints = per_worker.div_ceil(every);
    assert_eq!(c["count"], 2 * per_worker_checkpoints, "{name}: {c}");
    assert!(c["mean_ms"].as_f64().unwrap() > 0.0, "{name}: {c}");
    assert!(c["max_ms"].as_f64().unwrap() >= c["mean_ms"].as_f64().unwrap());
    assert!(c["last_bytes"].as_u64().unwrap() > 0, "{name}: {c}");
    // Each checkpoint's span (the plots shade it): within the run, in order.
    let windows = c["windows"].as_array().unwrap();
    assert_eq!(
        windows.len() as u64,
        2 * per_worker_checkpoints,
        "{name}: {c}"
    );
    let run_secs = m["timeline"].as_array().unwrap().last().unwrap()["secs"]
        .as_f64()
        .unwrap();
    for w in windows {
        let (from, to) = (w[0].as_f64().unwrap(), w[1].as_f64().unwrap());
        assert!(
            0.0 <= from && from <= to && to <= run_secs + 1.0,
            "{name}: {w} of {run_secs} s"
        );
    }
    let r = &m["recovery"];
    assert_eq!(r["verified"], true, "{name}: {r}");
    assert_eq!(r["events"], events, "{name}: {r}");
    assert!(r["restore_ms"].as_f64().unwrap() > 0.0, "{name}: {r}");
}

fn check(report: &serde_json::Value) {
    let modes = report["modes"].as_object().unwrap();
    assert_eq!(modes.len(), 4);
    for (name, m) in modes {
        check_mode(name, m, 60000);
    }
    check_checkpoints("embedded", &modes["embedded"], 60000, 10000);
    // The runtime checkpoints every 10 s of wall time and at the end.
    let pipeline = &modes["pipeline"];
    assert!(pipeline["checkpoints"]["count"].as_u64().unwrap() >= 1);
    // Its final checkpoint read again in a new process after SIGKILL.
    let r = &pipeline["recovery"];
    assert_eq!(r["verified"], true, "{r}");
    assert_eq!(r["verification"]["counted"], 60000, "{r}");
    assert!(modes["memory"]["recovery"].is_null());
    assert_eq!(modes["rocksdb-raw"]["ratio_to_rocksdb_raw"], 1.0);
    let embedded = &modes["embedded"];
    assert!(
        embedded["l1_hit_ratio"].as_f64().unwrap() > 0.0,
        "{embedded}"
    );
    assert!(
        embedded["l2_bytes"].as_u64().unwrap() > 0,
        "a 256 KB L1 must spill to L2: {embedded}"
    );
}

#[test]
fn every_mode_counts_every_event_in_the_list_add_form() {
    check(&run_local("list-add"));
}

#[test]
fn every_mode_counts_every_event_in_the_naive_form() {
    check(&run_local("naive"));
}

/// Workers with one event fewer than others end a step of event time
/// earlier, while the runtime's instances share one watermark: the
/// verification must judge expiry against the workload's last event.
#[test]
fn the_pipeline_mode_verifies_events_uneven_over_its_workers() {
    let args = ["--users", "300", "--events", "1001", "--threads", "3"];
    let report = run_bench(&args, &["pipeline", "memory"]);
    for (name, m) in report["modes"].as_object().unwrap() {
        assert_eq!(m["verified"], true, "{name}: {m}");
        assert!(m["verification"]["elements"].as_u64().unwrap() > 0);
    }
}

/// The modes that need Cassandra (a real node; under CI it must be up):
/// `l3` moves users to Cassandra at checkpoint completions and restores
/// after SIGKILL with every event counted, reading moved users back from
/// Cassandra; `cassandra-per-record` is the baseline the ratios use.
#[test]
fn l3_and_cassandra_per_record_modes_count_every_event() {
    let cassandra = strata_tests::cassandra::contact_point();
    let args = [
        "--users",
        "1000",
        "--events",
        "16000",
        "--l1",
        "64KB",
        "--l2-capacity",
        "64KB",
        "--checkpoint-every",
        "2000",
        "--cassandra",
        &cassandra,
    ];
    let report = run_bench(&args, &["l3", "cassandra-per-record"]);
    let modes = report["modes"].as_object().unwrap();
    for (name, m) in modes {
        check_mode(name, m, 16000);
    }
    let l3 = &modes["l3"];
    check_checkpoints("l3", l3, 16000, 2000);
    assert!(l3["l3_evictions"].as_u64().unwrap() > 0, "{l3}");
    assert!(l3["l3_bytes"].as_u64().unwrap() > 0, "{l3}");
    assert!(l3["l3_requests_per_sec"].as_f64().unwrap() > 0.0, "{l3}");
    assert_eq!(
        modes["cassandra-per-record"]["ratio_to_cassandra_per_record"],
        1.0
    );
}

/// Settings the workload cannot honour are refused before anything runs,
/// naming the flag.
#[test]
fn bad_flags_are_refused_with_the_flag_named() {
    let dir = tempfile::tempdir().unwrap();
    let cases: [(&[&str], &str); 4] = [
        (&["--users", "1", "--threads", "2"], "--users 1"),
        (&["--zipf=inf"], "--zipf inf"),
        (&["--threads", "0"], "--threads"),
        (&["--modes", "memory,memory"], "memory twice"),
    ];
    for (args, named) in cases {
        let out = std::process::Command::new(workspace_bin("strata-bench"))
            .args(["--events", "100", "--out"])
            .arg(dir.path())
            .args(args)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} was accepted");
        assert!(stderr.contains(named), "{args:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    }
    assert!(!dir.path().join("report.json").exists());
}
