//! route-history over the real Kafka (`scripts/kafka.sh`): Kafka → strata →
//! Kafka equals the independent batch computation exactly, read with
//! `read_committed`, also across SIGKILLs (one of them during a
//! checkpoint); backpressure parks the data in Kafka (lag grows, strata's
//! memory stays flat, partitions are paused); a zombie instance is fenced;
//! bad messages are counted and dead-lettered, or fail the job, with a
//! one-line reason; CSV values in any cell order give the exact output;
//! a second job writing the topic with the same transactional id is
//! refused without fencing the first.

use std::path::Path;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};
use strata_tests::kafka::*;
use strata_tests::wait;
use strata_tests::*;

fn check_exact(topic: &str, want: &[Line], what: &str) {
    let got = read_route_history(topic);
    if let Some(diff) = first_difference(&got, want) {
        panic!("{what}: the committed output differs: {diff}");
    }
}

#[test]
fn route_history_over_kafka_equals_the_batch_computation() {
    require_kafka();
    let (input, output) = (unique_topic("flights"), unique_topic("rh"));
    load_flights(&flights_path(), &input, 4);
    let dir = tempfile::tempdir().unwrap();
    let o = run_command(&input, &output, &dir.path().join("chk"), &[])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let s = summary(&o.stderr);
    eprintln!("kafka → strata → kafka: {} records/s", s["records_per_s"]);
    assert_eq!(s["records_in"], "3000000");
    check_exact(
        &output,
        &reference_route_history(&flights_path()),
        "uninterrupted run",
    );
    // A bounded run commits its final checkpoint's offsets to its group
    // too (start=committed and lag monitoring read them).
    assert_eq!(committed_total("strata-route-history", &input), 3_000_000);
}

/// Whether `chk` holds a checkpoint directory without `_metadata` (a
/// checkpoint in flight).
fn checkpoint_in_flight(chk: &Path) -> bool {
    std::fs::read_dir(chk).is_ok_and(|entries| {
        entries.flatten().any(|e| {
            e.file_name().to_string_lossy().starts_with("chk-")
                && !e.path().join("_metadata").exists()
        })
    })
}

/// Where a run of the SIGKILL test is killed.
#[derive(Debug, Clone, Copy)]
enum KillPoint {
    /// Once its first checkpoint completed: mid-run, output committed.
    AfterACheckpoint,
    /// While a checkpoint of its own is in flight.
    DuringACheckpoint,
    /// Once it completed a checkpoint after the one it restored.
    AfterProgress,
}

/// Waits until `child`, a run on the checkpoint directory `chk`, reached
/// `point`.
fn wait_for_kill_point(child: &mut Child, chk: &Path, point: KillPoint) {
    let newest = |chk: &Path| wait::completed_checkpoints(chk).last().copied();
    let restored = newest(chk);
    let what = format!("kill point {point:?}");
    let limit = Duration::from_secs(60);
    match point {
        KillPoint::AfterACheckpoint | KillPoint::AfterProgress => {
            wait::until_while_running(child, &what, limit, || newest(chk) > restored)
        }
        KillPoint::DuringACheckpoint => {
            // Once the run started (which sweeps what earlier runs left in
            // flight), a checkpoint in flight is its own.
            let pid = child.id();
            let work = chk.join("_work");
            wait::until_while_running(child, &what, limit, || wait::holds_lock(&work, pid));
            wait::until_while_running(child, &what, limit, || checkpoint_in_flight(chk));
        }
    }
}

#[test]
fn sigkills_then_restore_latest_give_the_exact_output() {
    require_kafka();
    // A slice, paced to last 12 s: three kills and restores prove exactly
    // once as well on 600,000 flights as on all (the whole file's run is
    // the test above's).
    let head = flights_head(600_000);
    let (input, output) = (unique_topic("flights-k"), unique_topic("rh-k"));
    load_flights(&head, &input, 4);
    let dir = tempfile::tempdir().unwrap();
    let chk = dir.path().join("chk");
    let extra = [
        "-D",
        "checkpoint.interval=1s",
        "-D",
        "source.max-records-per-second=50000",
    ];
    let plans = [
        KillPoint::AfterACheckpoint,
        KillPoint::DuringACheckpoint,
        KillPoint::AfterProgress,
    ];
    for (i, plan) in plans.into_iter().enumerate() {
        let mut cmd = run_command(&input, &output, &chk, &extra);
        if i > 0 {
            cmd.args(["--restore", "latest"]);
        }
        let mut child = cmd.stderr(Stdio::piped()).spawn().unwrap();
        wait_for_kill_point(&mut child, &chk, plan);
        if child.try_wait().unwrap().is_some() {
            panic!(
                "the run ended before kill point {plan:?}: {:?}",
                child.wait_with_output().unwrap()
            );
        }
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        eprintln!("killed run {} at {plan:?}", i + 1);
    }
    let o = run_command(&input, &output, &chk, &["--restore", "latest"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_ne!(summary(&o.stderr)["restored_from"], "none");
    check_exact(&output, &reference_route_history(&head), "after 3 SIGKILLs");
}

/// Sends `flights` to `topic` keyed by route, about `rate` per second.
fn produce_flights(topic: &str, flights: &[Flight], rate: usize) {
    let p = RawProducer::new();
    for chunk in flights.chunks(rate / 10) {
        let t = Instant::now();
        for (date, delay, origin, destination) in chunk {
            let date = chrono::DateTime::from_timestamp_millis(*date)
                .unwrap()
                .naive_utc()
                .format("%Y-%m-%dT%H:%M:%S");
            let value = format!(
                r#"{{"date":"{date}","delay":{delay},"distance":0,"origin":"{origin}","destination":"{destination}"}}"#
            );
            let key =
                strata_connectors::kafka::encode_key(&[origin.as_bytes(), destination.as_bytes()]);
            p.send_keyed(topic, &key, value.as_bytes());
        }
        std::thread::sleep(Duration::from_millis(100).saturating_sub(t.elapsed()));
    }
    p.flush();
}

#[test]
fn backpressure_parks_the_input_in_kafka_and_memory_stays_flat() {
    require_kafka();
    let head = flights_head(200_000);
    let flights = parquet_flights(&head);
    let (input, output) = (unique_topic("flights-bp"), unique_topic("rh-bp"));
    // The first 10,000 through `topic load` (which creates 4 partitions);
    // the rest arrive while the job runs, faster than its sink writes.
    load_flights(&flights_head(10_000), &input, 4);
    let dir = tempfile::tempdir().unwrap();
    let metrics = "127.0.0.1:19461";
    // The run's offsets go to the job's group (per topic, so other tests'
    // runs of the job do not mix in).
    let group = "strata-route-history".to_owned();
    let source = uri(&input);
    let mut child = std::process::Command::new(strata_bin())
        .args([
            "run",
            "route-history",
            "--input",
            &source,
            "--output",
            &uri(&output),
        ])
        .arg("--checkpoint-dir")
        .arg(dir.path().join("chk"))
        .args([
            "-D",
            "sink.max-records-per-second=20000",
            "-D",
            "checkpoint.interval=1s",
        ])
        .args([
            "-D",
            "state.l1.capacity=1MB",
            "-D",
            "state.l2.memory=8MB",
            "--metrics-addr",
            metrics,
        ])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let rest = flights[10_000..].to_vec();
    let topic = input.clone();
    let producer = std::thread::spawn(move || produce_flights(&topic, &rest, 40_000));
    let (mut samples, mut paused_seen) = (Vec::new(), 0.0f64);
    let start = Instant::now();
    loop {
        std::thread::sleep(Duration::from_secs(1));
        assert!(child.try_wait().unwrap().is_none(), "the job ended");
        let (Some(rss), Ok(lag)) = (
            rss_bytes(pid),
            strata_connectors::kafka::group_lag(&brokers(), &Default::default(), &group, &input),
        ) else {
            continue;
        };
        let lag: i64 = lag.iter().map(|(_, l)| l).sum();
        if let Ok(body) = scrape(metrics) {
            let now =
                metric_value(&body, "strata_source_kafka_paused_partitions", None).unwrap_or(0.0);
            let total_ms =
                metric_value(&body, "strata_source_kafka_paused_ms_total", None).unwrap_or(0.0);
            paused_seen = paused_seen.max(now).max(total_ms.min(1.0));
        }
        eprintln!(
            "t={:>3}s rss={:.1} MB group lag={lag}",
            start.elapsed().as_secs(),
            rss as f64 / 1e6
        );
        samples.push((rss, lag));
        if (lag == 0 && producer.is_finished()) || start.elapsed() > Duration::from_secs(90) {
            break;
        }
    }
    producer.join().unwrap();
    // Offsets reach the group when a checkpoint completes, as the output
    // does: stop the job once its sink committed every flight.
    wait::until_while_running(
        &mut child,
        "the commit of the whole output",
        Duration::from_secs(60),
        || read_records(&output, true).len() >= flights.len(),
    );
    let pid_text = pid.to_string();
    std::process::Command::new("kill")
        .args(["-TERM", &pid_text])
        .status()
        .unwrap();
    let o = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("SIGTERM"), "{err}");
    // An unbounded input's progress shows its lag, not a share of no end.
    let progress: Vec<&str> = err.lines().filter(|l| l.contains("records read")).collect();
    assert!(
        !progress.is_empty()
            && progress.iter().all(|l| l.contains("lag ")
                && l.contains("per partition")
                && !l.contains("input done")),
        "{err}"
    );
    assert!(
        samples.len() >= 6,
        "the run was too short to watch: {samples:?}"
    );
    // The level before: the most it held while warming up (its first 5 s:
    // pipeline, caches, first checkpoints), when the lag is already high.
    let before = samples.iter().take(5).map(|s| s.0).max().unwrap();
    let peak = samples.iter().map(|s| s.0).max().unwrap();
    let grew = samples.windows(2).any(|w| w[1].1 > w[0].1 + 5_000);
    let max_lag = samples.iter().map(|s| s.1).max().unwrap();
    eprintln!("rss in the first 5 s {:.1} MB, peak {:.1} MB; max lag {max_lag}; paused partitions seen {paused_seen}", before as f64 / 1e6, peak as f64 / 1e6);
    assert!(grew && max_lag > 20_000, "the lag never grew: {samples:?}");
    assert!(
        peak < before + 24_000_000,
        "memory grew under backpressure: {samples:?}"
    );
    assert!(
        paused_seen >= 1.0,
        "the paused-partitions metric never showed a pause"
    );
    assert_eq!(
        samples.last().unwrap().1,
        0,
        "the group's lag at the end: {samples:?}"
    );
    check_exact(
        &output,
        &reference_route_history(&head),
        "under backpressure",
    );
}

#[test]
fn a_zombie_instance_is_fenced_and_cannot_commit() {
    require_kafka();
    let head = flights_head(200_000);
    let (input, output) = (unique_topic("flights-z"), unique_topic("rh-z"));
    load_flights(&head, &input, 2);
    let dir = tempfile::tempdir().unwrap();
    let (chk, copy) = (dir.path().join("chk"), dir.path().join("chk-copy"));
    let mut zombie = run_command(
        &input,
        &output,
        &chk,
        &[
            "-D",
            "checkpoint.interval=500ms",
            "-D",
            "source.max-records-per-second=20000",
        ],
    )
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    // It stops once it has committed output (its second checkpoint
    // completed), so the other machine restores a checkpoint of it.
    wait::until_while_running(
        &mut zombie,
        "the zombie's second checkpoint",
        Duration::from_secs(60),
        || wait::completed_checkpoints(&chk).len() >= 2,
    );
    let pid = zombie.id().to_string();
    assert!(std::process::Command::new("kill")
        .args(["-STOP", &pid])
        .status()
        .unwrap()
        .success());
    // Another machine takes over from the shared checkpoints.
    assert!(std::process::Command::new("cp")
        .arg("-r")
        .arg(&chk)
        .arg(&copy)
        .status()
        .unwrap()
        .success());
    let o = run_command(&input, &output, &copy, &["--restore", "latest"])
        .output()
        .unwrap();
    assert!(std::process::Command::new("kill")
        .args(["-CONT", &pid])
        .status()
        .unwrap()
        .success());
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let start = Instant::now();
    while zombie.try_wait().unwrap().is_none() && start.elapsed() < Duration::from_secs(60) {
        std::thread::sleep(Duration::from_millis(100));
    }
    if zombie.try_wait().unwrap().is_none() {
        zombie.kill().unwrap();
    }
    let z = zombie.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&z.stderr);
    assert!(
        !z.status.success(),
        "the zombie finished as if nothing happened: {err}"
    );
    assert!(
        err.to_lowercase().contains("fenced"),
        "the zombie's error does not say it was fenced: {err}"
    );
    check_exact(
        &output,
        &reference_route_history(&head),
        "after a zombie woke up",
    );
}

#[test]
fn a_second_job_writing_the_topic_with_the_same_transactional_id_is_refused_and_fences_no_one() {
    require_kafka();
    let head = flights_head(200_000);
    let (input, output) = (unique_topic("flights-2j"), unique_topic("rh-2j"));
    load_flights(&head, &input, 2);
    let dir = tempfile::tempdir().unwrap();
    let chk = dir.path().join("chk");
    let first = run_command(
        &input,
        &output,
        &chk,
        &[
            "-D",
            "checkpoint.interval=500ms",
            "-D",
            "source.max-records-per-second=20000",
        ],
    )
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    // Once the first job has committed output (its second checkpoint
    // completed, and the first one's epoch was published meanwhile).
    let started = Instant::now();
    while !chk.join("chk-2/_metadata").exists() {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "no checkpoint 2"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    while read_records(&output, true).is_empty() {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "no committed output"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    // Another job (its own checkpoints) on the same topics, so the same
    // default transactional-id prefix.
    let o = run_command(&input, &output, &dir.path().join("other"), &[])
        .output()
        .unwrap();
    let line = error_line(&o);
    assert!(
        line.contains("already holds output of this sink") && line.contains("another job"),
        "{line}"
    );
    let o = first.wait_with_output().unwrap();
    assert!(
        o.status.success(),
        "the first job did not finish: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    check_exact(&output, &reference_route_history(&head), "the first job");
}

/// (what its reason says, key, value).
type BadMessage<'a> = (&'a str, Option<&'a [u8]>, Option<&'a [u8]>);

#[test]
fn bad_messages_are_dead_lettered_with_a_reason_or_fail_the_job() {
    require_kafka();
    let (input, dlq) = (unique_topic("bad-in"), unique_topic("bad-dlq"));
    let good = br#"{"date":"2001-01-01T00:01:00","delay":5,"distance":100,"origin":"LAS","destination":"PHL"}"#;
    let key = strata_connectors::kafka::encode_key(&[b"LAS", b"PHL"]);
    let big = format!(
        r#"{{"date":"2001-01-01T00:02:00","delay":5,"distance":100,"origin":"LAS","destination":"PHL","pad":"{}"}}"#,
        "x".repeat(4000)
    );
    let p = RawProducer::new();
    let bad: [BadMessage; 6] = [
        ("not a JSON object", Some(&key), Some(b"{oops")),
        (
            "missing",
            Some(&key),
            Some(br#"{"date":"2001-01-01T00:01:00","origin":"LAS","destination":"PHL"}"#),
        ),
        ("no value", Some(&key), None),
        ("no key", None, Some(good)),
        ("is not the record's key", Some(b"JFK"), Some(good)),
        ("max-message-bytes", Some(&key), Some(big.as_bytes())),
    ];
    p.send(&input, Some(&key), Some(good));
    for (_, k, v) in &bad {
        p.send(&input, *k, *v);
    }
    p.send(&input, Some(&key), Some(good));
    p.flush();
    let dir = tempfile::tempdir().unwrap();
    let o = run_command(
        &input,
        &unique_topic("bad-out"),
        &dir.path().join("chk"),
        &[
            "-D",
            "bad-input.policy=dead-letter",
            "-D",
            &format!("bad-input.dead-letter-topic={dlq}"),
            "-D",
            "source.kafka.max-message-bytes=2KB",
        ],
    )
    .output()
    .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let s = summary(&o.stderr);
    assert_eq!(
        (s["records_out"].as_str(), s["dead_letters"].as_str()),
        ("2", "6")
    );
    let letters = read_records(&dlq, true);
    assert_eq!(letters.len(), 6);
    for ((what, k, _), letter) in bad.iter().zip(&letters) {
        let reason = letter["headers"]["strata.reason"]
            .as_str()
            .unwrap_or_default();
        assert!(
            reason.contains(what) && !reason.contains('\n'),
            "dead letter for '{what}': {reason}"
        );
        assert!(reason.contains(&format!("{input}/0 offset")), "{reason}");
        if let Some(k) = k {
            assert_eq!(
                letter["key"],
                strata_connectors::kafka::key_to_json(k),
                "the dead letter keeps the key"
            );
        }
    }
    // The same input under policy=fail: a one-line reason naming the message.
    let o = run_command(
        &input,
        &unique_topic("bad-out2"),
        &dir.path().join("chk2"),
        &[],
    )
    .output()
    .unwrap();
    assert!(!o.status.success());
    let line = error_line(&o);
    assert!(
        line.contains("not a JSON object") && line.contains(&format!("{input}/0 offset 1")),
        "{line}"
    );
    assert!(!String::from_utf8_lossy(&o.stderr).contains("panicked"));
}

#[test]
fn csv_values_in_any_cell_order_give_the_exact_output() {
    require_kafka();
    let (input, output) = (unique_topic("flights-csv"), unique_topic("rh-csv"));
    // A slice proves the decoding; the whole file's run is the JSON test's.
    let flights = parquet_flights(&flights_head(20_000));
    let p = RawProducer::new();
    for (date, delay, origin, destination) in &flights {
        let date = chrono::DateTime::from_timestamp_millis(*date)
            .unwrap()
            .naive_utc()
            .format("%Y-%m-%dT%H:%M:%S");
        // Cells in another order than the job's columns, one of them quoted.
        let value = format!("{destination},\"{origin}\",{delay},{date},0");
        let key =
            strata_connectors::kafka::encode_key(&[origin.as_bytes(), destination.as_bytes()]);
        p.send_keyed(&input, &key, value.as_bytes());
    }
    p.flush();
    let dir = tempfile::tempdir().unwrap();
    let columns = "source.kafka.csv-columns=destination,origin,delay,date,distance";
    let csv = ["-D", "source.kafka.format=csv", "-D", columns];
    let o = run_command(&input, &output, &dir.path().join("chk"), &csv)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(summary(&o.stderr)["records_in"], "20000");
    check_exact(&output, &reference_from_flights(&flights), "CSV values");
    // A column list that misses one of the job's columns is a usage error.
    let partial = [
        "-D",
        "source.kafka.format=csv",
        "-D",
        "source.kafka.csv-columns=origin",
    ];
    let o = run_command(
        &input,
        &unique_topic("rh-csv-bad"),
        &dir.path().join("chk2"),
        &partial,
    )
    .output()
    .unwrap();
    let e = error_line(&o);
    assert_eq!(o.status.code(), Some(2), "{e}");
    assert!(e.contains("does not name the job's column 'date'"), "{e}");
}
