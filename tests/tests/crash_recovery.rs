//! SIGKILL at random moments, then `--restore latest`, until the input is
//! done: the committed output equals the batch computation (which an
//! uninterrupted run also equals), with no line lost and none duplicated.
//! The source is throttled to 250,000 records/s so that a run lasts ~12 s
//! and the kills land mid-run: before the first checkpoint, between
//! checkpoints, and between a checkpoint's completion and its commit.

use std::process::Command;
use std::time::{Duration, Instant};
use strata_tests::*;

fn seed() -> u64 {
    std::env::var("STRATA_CRASH_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
        })
}

/// A small deterministic generator (xorshift), seeded per run and printed so
/// a failure can be replayed with STRATA_CRASH_SEED.
struct Rng(u64);
impl Rng {
    fn next_in(&mut self, lo: u64, hi: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        lo + self.0 % (hi - lo)
    }
}

#[test]
fn sigkill_at_random_moments_then_restore_gives_the_uninterrupted_output() {
    let seed = seed();
    eprintln!("crash seed {seed} (replay with STRATA_CRASH_SEED={seed})");
    let mut rng = Rng(seed | 1);
    // One sink fed by both keyed instances exercises barrier alignment;
    // two sinks, the forward wiring. The seed picks.
    let sinks = format!("sink.parallelism={}", 1 + (seed >> 20) % 2);
    eprintln!("{sinks}");
    let input = flights_path();
    let dir = tempfile::tempdir().unwrap();
    let (out, chk) = (dir.path().join("out"), dir.path().join("chk"));
    let mut kills = 0;
    let mut restores = 0;
    loop {
        let mut cmd = Command::new(strata_bin());
        cmd.args(route_history_args(
            &input,
            &out,
            Some(&chk),
            &[
                "-D",
                "checkpoint.interval=1s",
                "-D",
                "source.max-records-per-second=250000",
                "-D",
                &sinks,
            ],
        ));
        // After the first kill, always restore: a run killed before its
        // first checkpoint must start over by itself.
        if kills > 0 {
            cmd.args(["--restore", "latest"]);
            restores += 1;
        }
        let mut child = cmd.stderr(std::process::Stdio::piped()).spawn().unwrap();
        if kills < 4 {
            let at = Duration::from_millis(rng.next_in(800, 3_500));
            let start = Instant::now();
            while start.elapsed() < at && child.try_wait().unwrap().is_none() {
                std::thread::sleep(Duration::from_millis(20));
            }
            if child.try_wait().unwrap().is_none() {
                child.kill().unwrap(); // SIGKILL
                child.wait().unwrap();
                kills += 1;
                eprintln!("killed run {kills} after {at:?}");
                continue;
            }
        }
        let o = child.wait_with_output().unwrap();
        assert!(
            o.status.success(),
            "restored run failed: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        break;
    }
    assert!(
        kills >= 2,
        "the test must actually crash the job (kills: {kills})"
    );
    assert!(restores >= 1);
    let got = read_output(&out);
    let want = reference_route_history(&flights_path());
    if let Some(diff) = first_difference(&got, &want) {
        panic!("after {kills} crashes the output differs: {diff}");
    }
}
