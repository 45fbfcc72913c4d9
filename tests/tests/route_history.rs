//! route-history on the 3,000,000 real flights: the output equals an
//! independent batch computation with the default configuration (whose L1
//! the whole file's state outgrows), and on a slice with a 1 MB L1 (where
//! L2 must serve the misses); the CLI reads checkpoints back.

use std::path::Path;
use std::sync::OnceLock;
use strata_tests::*;

fn reference() -> &'static Vec<Line> {
    static REF: OnceLock<Vec<Line>> = OnceLock::new();
    REF.get_or_init(|| reference_route_history(&flights_path()))
}

/// Runs route-history over `input` into `dir` with `extra`, checks its
/// output against `want` and returns its end-of-run figures.
fn run(
    dir: &Path,
    input: &Path,
    want: &[Line],
    extra: &[&str],
) -> std::collections::HashMap<String, String> {
    let out = dir.join("out");
    let args = route_history_args(input, &out, Some(&dir.join("chk")), extra);
    let o = strata(&args);
    assert!(
        o.status.success(),
        "strata failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let figures = summary(&o.stderr);
    eprintln!("figures {extra:?}: {figures:?}");
    let got = read_output(&out);
    if let Some(diff) = first_difference(&got, want) {
        panic!("output differs from the batch computation: {diff}");
    }
    figures
}

#[test]
fn output_for_all_flights_equals_the_batch_computation() {
    let dir = tempfile::tempdir().unwrap();
    let figures = run(
        dir.path(),
        &flights_path(),
        reference(),
        &["-D", "checkpoint.interval=2s"],
    );
    assert_eq!(figures["records_in"], "3000000");
    assert_eq!(figures["records_out"], "3000000");
    assert!(figures["checkpoints"].parse::<u32>().unwrap() >= 1);

    let chk = dir.path().join("chk");
    let list = strata(&["checkpoints", "list", chk.to_str().unwrap()]);
    assert!(list.status.success());
    let listed = String::from_utf8_lossy(&list.stdout);
    assert!(
        listed.lines().count() >= 1 && listed.lines().count() <= 3,
        "retention keeps 3:\n{listed}"
    );
    assert!(listed.lines().last().unwrap().contains("final"), "{listed}");

    // The last flight of LAS-PHL in the data fixes what the history must hold:
    // the route's flights in the 60 days up to the newest event time.
    let state = strata(&[
        "state",
        "get",
        chk.to_str().unwrap(),
        "history",
        "LAS",
        "PHL",
    ]);
    assert!(
        state.status.success(),
        "{}",
        String::from_utf8_lossy(&state.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&state.stdout).unwrap();
    let history = v["value"].as_array().unwrap();
    let last = reference()
        .iter()
        .filter(|l| l.origin == "LAS" && l.destination == "PHL")
        .max_by(|a, b| a.date.cmp(&b.date))
        .unwrap();
    assert!(!history.is_empty());
    assert!(
        history.len() as u64 >= last.flights_60d,
        "history {} < window of the last flight {}",
        history.len(),
        last.flights_60d
    );
    assert_eq!(history.last().unwrap()["date"], last.date.as_str());
}

#[test]
fn with_a_1mb_l1_the_output_is_unchanged_and_l2_serves_the_misses() {
    // A slice: its state (13 MB checkpointed) is ten times a 1 MB L1
    // already, so nearly every record misses L1 and is read from L2, as on
    // the whole file, at a ninth of its cost (the whole file through a 1 MB
    // L1 took 138 s of CPU here, the slice 15 s).
    let input = flights_head(600_000);
    let dir = tempfile::tempdir().unwrap();
    // One sink instance fed by both keyed instances: barriers are aligned.
    let figures = run(
        dir.path(),
        &input,
        &reference_route_history(&input),
        &["-D", "state.l1.capacity=1MB", "-D", "sink.parallelism=1"],
    );
    let l2_hits: u64 = figures["l2_hits"].parse().unwrap();
    let l1_misses: u64 = figures["l1_misses"].parse().unwrap();
    assert!(l1_misses > 0 && l2_hits > 0, "{figures:?}");
    assert!(
        figures["l1_spills"].parse::<u64>().unwrap() > 0,
        "{figures:?}"
    );
}
