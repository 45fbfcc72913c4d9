//! The load-test harness runs every mode on the same events and reports
//! figures that hold together: all events counted, percentiles ordered,
//! ratios against the rocksdb-raw baseline of the same run.

use strata_tests::workspace_bin;

fn run_bench(form: &str) -> serde_json::Value {
    let dir = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(workspace_bin("strata-bench"))
        .args([
            "--users",
            "2000",
            "--events",
            "60000",
            "--zipf",
            "1.0",
            "--form",
            form,
            "--modes",
            "embedded,rocksdb-raw,memory",
            "--l1",
            "256KB",
            "--out",
        ])
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
    for mode in ["embedded", "rocksdb-raw", "memory"] {
        assert!(md.contains(&format!("| {mode} |")), "{md}");
    }
    report
}

fn check(report: &serde_json::Value) {
    let modes = report["modes"].as_object().unwrap();
    assert_eq!(modes.len(), 3);
    for (name, m) in modes {
        assert_eq!(m["events"], 60000, "{name}");
        assert_eq!(
            m["verified"], true,
            "{name}: every event must be counted once"
        );
        assert!(m["events_per_sec"].as_f64().unwrap() > 0.0);
        let l = &m["latency_us"];
        let (p50, p99, p999) = (
            l["p50"].as_f64().unwrap(),
            l["p99"].as_f64().unwrap(),
            l["p999"].as_f64().unwrap(),
        );
        assert!(p50 <= p99 && p99 <= p999, "{name}: {l}");
        assert!(m["peak_rss_bytes"].as_u64().unwrap() > 0);
    }
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
    check(&run_bench("list-add"));
}

#[test]
fn every_mode_counts_every_event_in_the_naive_form() {
    check(&run_bench("naive"));
}
