//! `crash-soak --group`: route-history run by a consumer group of two
//! processes over the real Kafka, checkpoints in a shared local directory;
//! every 1–6 s one of the two, picked at random, is SIGKILLed and started
//! again at once (it rejoins, and the group moves the shards). A round ends
//! when both processes end on their own (the input is bounded); its
//! committed output topic is compared with the batch computation.

use super::{Args, Rng};
use std::path::Path;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};
use strata_tests::kafka::*;
use strata_tests::*;

/// Kills per round at most, so that every round also gets to its end.
const KILLS_PER_ROUND: u64 = 6;

/// One process of the group.
fn member(input: &str, group: &str, output: &str, chk: &Path, log: &Path) -> Child {
    let source = format!("{input}?group={group}");
    let extra = [
        "-D",
        "checkpoint.interval=1s",
        "-D",
        "source.kafka.session.timeout.ms=6000",
        "-D",
        "source.max-records-per-second=20000",
    ];
    run_command(&source, output, chk, &extra)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(log).expect("log file"))
        .spawn()
        .expect("strata starts")
}

/// Whether `child` ended; panics if it failed (a SIGKILL is never its own).
fn ended(child: &mut Child, log: &Path) -> bool {
    match child.try_wait().expect("wait") {
        None => false,
        Some(status) if status.success() => true,
        Some(status) => panic!(
            "a group member failed ({status}):\n{}",
            std::fs::read_to_string(log).unwrap_or_default()
        ),
    }
}

/// Runs the group soak; the summary line, and whether every round was exact.
pub(super) fn soak(a: &Args) -> (String, bool) {
    require_kafka();
    let file = flights_head(a.rows.unwrap_or(200_000));
    let input = unique_topic("soak-in");
    load_flights(&file, &input, 4);
    let want = reference_route_history(&file);
    let mut rng = Rng(a.seed | 1);
    let (mut kills, mut rounds, mut bad) = (0u64, 0u64, 0u64);
    let started = Instant::now();
    while kills < a.kills {
        rounds += 1;
        let dir = tempfile::tempdir().expect("temp dir");
        let (chk, group, output) = (
            dir.path().join("chk"),
            unique_topic("soak-group"),
            unique_topic("soak-out"),
        );
        let logs = [dir.path().join("a.log"), dir.path().join("b.log")];
        let mut members: Vec<Option<Child>> = logs
            .iter()
            .map(|log| Some(member(&input, &group, &output, &chk, log)))
            .collect();
        let mut round_kills = 0;
        let mut next_kill = Instant::now() + Duration::from_millis(1000 + rng.below(5000));
        while members.iter().any(Option::is_some) {
            for (m, log) in members.iter_mut().zip(&logs) {
                if m.as_mut().is_some_and(|c| ended(c, log)) {
                    *m = None;
                }
            }
            let running: Vec<usize> = (0..2).filter(|i| members[*i].is_some()).collect();
            if Instant::now() >= next_kill && round_kills < KILLS_PER_ROUND && running.len() == 2 {
                let i = running[rng.below(2) as usize];
                let mut child = members[i].take().expect("running");
                child.kill().expect("SIGKILL");
                child.wait().expect("reaped");
                members[i] = Some(member(&input, &group, &output, &chk, &logs[i]));
                (kills, round_kills) = (kills + 1, round_kills + 1);
                next_kill = Instant::now() + Duration::from_millis(1000 + rng.below(5000));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let got = read_route_history(&output);
        let diff = first_difference(&got, &want);
        bad += u64::from(diff.is_some());
        if diff.is_some() {
            // Kept for a post-mortem: the members' logs and checkpoints.
            eprintln!("round {rounds} kept in {}", dir.keep().display());
        }
        println!(
            "round {rounds}: {round_kills} SIGKILLs, {} lines, {}",
            got.len(),
            diff.unwrap_or_else(|| "exact".into())
        );
    }
    let summary = format!(
        "crash-soak: {kills} SIGKILLs of consumer group members (2 processes, 4 partitions), {rounds} rounds of {} records, {} s: {}",
        want.len(),
        started.elapsed().as_secs(),
        if bad == 0 { "every output exact".to_string() } else { format!("{bad} rounds differ") }
    );
    (summary, bad == 0)
}
