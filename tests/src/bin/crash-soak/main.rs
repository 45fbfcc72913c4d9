//! Crash soak: route-history on the real flights, killed again and again
//! and restored each time with `--restore latest`, until at least `--kills`
//! kills; every completed round's output is compared with the independent
//! batch computation, line by line.
//!
//! ```text
//! crash-soak [--kills 100] [--seed N] [--l3 127.0.0.1:9042 | --s3 | --group] [--rows N]
//! ```
//!
//! With `--group` the job runs as a consumer group of two processes over
//! Kafka, either of which is killed (see [`group`]).
//!
//! With `--s3` the checkpoints live in the S3 server of `scripts/s3.sh`
//! (`--checkpoint-dir s3://strata/<prefix>`), every other restore runs as
//! on another machine (an empty local copy, so the checkpoint is
//! downloaded), and the server itself is stopped for 1–4 s every 5–15 s.
//!
//! Kills are SIGKILLs at random moments (0.2–2.5 s after a start, 1–8 s
//! with L3, whose checkpoints take seconds, and with S3); every
//! third one waits until a checkpoint is in flight (a `chk-N` directory
//! without `_metadata`) and kills it then. With `--l3`, L3 is on (1 MB of
//! L1 and L2 per instance, so keys move to Cassandra at every checkpoint)
//! and every fourth run also aborts at a random cold move, between its L3
//! writes and its L2 deletes, or before its writes (`STRATA_CRASH_AT`).
//! One line per round and a closing summary go to stdout; the exit code is
//! 1 if any round's output differs.

mod group;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use strata_tests::s3;
use strata_tests::*;

struct Args {
    kills: u64,
    seed: u64,
    l3: Option<String>,
    s3: bool,
    group: bool,
    rows: Option<usize>,
}

fn args() -> Args {
    let mut a = Args {
        kills: 100,
        seed: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64),
        l3: None,
        s3: false,
        group: false,
        rows: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        match flag.as_str() {
            "--s3" => a.s3 = true,
            "--group" => a.group = true,
            _ => {
                let value = it.next().unwrap_or_else(|| panic!("{flag} needs a value"));
                set(&mut a, &flag, value);
            }
        }
    }
    a
}

/// Sets the option `flag` that takes a value.
fn set(a: &mut Args, flag: &str, value: String) {
    match flag {
        "--kills" => a.kills = value.parse().expect("--kills N"),
        "--seed" => a.seed = value.parse().expect("--seed N"),
        "--l3" => a.l3 = Some(value),
        "--rows" => a.rows = Some(value.parse().expect("--rows N")),
        other => panic!("unknown flag {other}"),
    }
}

/// xorshift: small, seeded, replayable.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n.max(1)
    }
}

/// Whether a checkpoint is in flight in `chk` (its directory exists, its
/// metadata does not yet).
fn checkpoint_in_flight(chk: &Path) -> bool {
    std::fs::read_dir(chk).is_ok_and(|entries| {
        entries.flatten().any(|e| {
            e.file_name().to_string_lossy().starts_with("chk-")
                && !e.path().join("_metadata").exists()
        })
    })
}

/// How one run of the job ended.
enum End {
    Finished,
    /// Killed; whether a checkpoint was in flight at that moment.
    Killed(bool),
    Aborted,
}

struct Round<'a> {
    input: &'a Path,
    out: PathBuf,
    /// The local checkpoint directory, or with `--s3` the local copy.
    chk: PathBuf,
    /// With `--s3`: the prefix the checkpoints live in.
    s3: Option<s3::Prefix>,
    extra: Vec<String>,
}

impl Round<'_> {
    fn start(&self, restore: bool, crash_at: Option<String>) -> std::process::Child {
        let extra: Vec<&str> = self.extra.iter().map(String::as_str).collect();
        let mut cmd = Command::new(strata_bin());
        let local = self.s3.is_none().then_some(self.chk.as_path());
        cmd.args(route_history_args(self.input, &self.out, local, &extra));
        if let Some(prefix) = &self.s3 {
            s3::with_s3_env(&mut cmd)
                .args(["--checkpoint-dir", &prefix.url, "-D"])
                .arg(format!("checkpoint.local-copy={}", self.chk.display()));
        }
        if restore {
            cmd.args(["--restore", "latest"]);
        }
        if let Some(at) = crash_at {
            cmd.env("STRATA_CRASH_AT", at);
        }
        cmd.stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("strata starts")
    }

    /// Runs once: killed after `after` (or once a checkpoint is in flight
    /// after it, with `at_checkpoint`), or to its end.
    fn run_once(
        &self,
        restore: bool,
        after: Duration,
        at_checkpoint: bool,
        crash_at: Option<String>,
    ) -> End {
        let mut child = self.start(restore, crash_at);
        let started = Instant::now();
        loop {
            if let Some(status) = child.try_wait().expect("wait") {
                let stderr = child
                    .wait_with_output()
                    .map(|o| String::from_utf8_lossy(&o.stderr).into_owned())
                    .unwrap_or_default();
                if status.success() {
                    return End::Finished;
                }
                assert!(
                    stderr.contains("reached: aborting"),
                    "strata failed: {stderr}"
                );
                return End::Aborted;
            }
            let due =
                started.elapsed() >= after && (!at_checkpoint || checkpoint_in_flight(&self.chk));
            if due || started.elapsed() > after + Duration::from_secs(20) {
                let in_flight = checkpoint_in_flight(&self.chk);
                child.kill().expect("SIGKILL");
                child.wait().expect("reaped");
                return End::Killed(in_flight);
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

/// With `--s3`: stops the S3 server for 1–4 s every 5–15 s until `done`;
/// the number of stops.
fn blink_s3(seed: u64, done: &std::sync::atomic::AtomicBool) -> u64 {
    use std::sync::atomic::Ordering;
    let mut rng = Rng(seed.rotate_left(17) | 1);
    let mut stops = 0;
    let wait = |d: Duration| {
        let until = Instant::now() + d;
        while Instant::now() < until && !done.load(Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    loop {
        wait(Duration::from_millis(5_000 + rng.below(10_000)));
        if done.load(Ordering::Relaxed) {
            return stops;
        }
        server_script("s3.sh", &["stop"]);
        stops += 1;
        std::thread::sleep(Duration::from_millis(1_000 + rng.below(3_000)));
        server_script("s3.sh", &["start"]);
    }
}

fn main() {
    let a = args();
    if a.group {
        eprintln!(
            "crash-soak: seed {} (replay with --seed {})",
            a.seed, a.seed
        );
        let (summary, exact) = group::soak(&a);
        println!("{summary}");
        std::process::exit(i32::from(!exact));
    }
    if a.s3 {
        s3::require_s3();
    }
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let blinker = a.s3.then(|| {
        let (done, seed) = (done.clone(), a.seed);
        std::thread::spawn(move || blink_s3(seed, &done))
    });
    let input = match a.rows {
        Some(rows) => flights_head(rows),
        None => flights_path(),
    };
    eprintln!(
        "crash-soak: seed {} (replay with --seed {})",
        a.seed, a.seed
    );
    let want = reference_route_history(&input);
    let mut rng = Rng(a.seed | 1);
    let (mut kills, mut during_checkpoints, mut aborts, mut restores, mut rounds, mut bad) =
        (0u64, 0u64, 0u64, 0u64, 0u64, 0u64);
    let started = Instant::now();
    let mut extra: Vec<String> = [
        "checkpoint.interval=1s",
        "source.max-records-per-second=100000",
    ]
    .iter()
    .flat_map(|d| ["-D".to_string(), d.to_string()])
    .collect();
    if let Some(node) = &a.l3 {
        let ks = strata_tests::cassandra::unique_keyspace("soak");
        for d in [
            "state.l1.capacity=1MB".to_string(),
            "state.l2.capacity=1MB".into(),
            format!("state.l3.contact-points={node}"),
            format!("state.l3.keyspace={ks}"),
        ] {
            extra.extend(["-D".to_string(), d]);
        }
    }
    while kills < a.kills {
        rounds += 1;
        let dir = tempfile::tempdir().expect("temp dir");
        if a.l3.is_some() {
            // Each round is a job of its own: its own keyspace.
            let ks = strata_tests::cassandra::unique_keyspace("soak");
            let i = extra
                .iter()
                .position(|e| e.starts_with("state.l3.keyspace="))
                .expect("keyspace");
            extra[i] = format!("state.l3.keyspace={ks}");
        }
        let mut round = Round {
            input: &input,
            out: dir.path().join("out"),
            chk: dir.path().join("chk"),
            s3: a.s3.then(|| s3::Prefix::unique("soak")),
            extra: extra.clone(),
        };
        let mut restore = false;
        loop {
            // Every other restore from S3 is on "another machine": an
            // empty local copy, so the checkpoint is downloaded (once one
            // completed: a run that never finished its first is restored
            // on its own machine, which knows that it started).
            let completed = |p: &s3::Prefix| p.objects().iter().any(|o| o.ends_with("/_metadata"));
            if restore && round.s3.as_ref().is_some_and(completed) && rng.below(2) == 0 {
                round.chk = dir.path().join(format!("chk-{restores}"));
            }
            // With L3 a checkpoint takes seconds (cold reads hold the
            // barrier back): kills must leave room for some to complete.
            // So do restores from S3 on another machine (a download).
            let after = match (&a.l3, a.s3) {
                (None, false) => Duration::from_millis(200 + rng.below(2300)),
                _ => Duration::from_millis(1000 + rng.below(7000)),
            };
            let at_checkpoint = rng.below(3) == 0;
            let crash_at = (a.l3.is_some() && rng.below(4) == 0).then(|| {
                let point = ["before-l2-delete", "before-l3-write"][rng.below(2) as usize];
                format!("{point}:{}", 1 + rng.below(6))
            });
            match round.run_once(restore, after, at_checkpoint, crash_at) {
                End::Finished => break,
                End::Killed(in_flight) => {
                    kills += 1;
                    during_checkpoints += u64::from(in_flight);
                }
                End::Aborted => aborts += 1,
            }
            restore = true;
            restores += 1;
        }
        let got = read_output(&round.out);
        let diff = first_difference(&got, &want);
        bad += u64::from(diff.is_some());
        println!(
            "round {rounds}: {} lines, {}",
            got.len(),
            diff.unwrap_or_else(|| "exact".into())
        );
    }
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    let blinks = blinker.map_or(String::new(), |b| {
        format!(", S3 stopped {} times", b.join().expect("blinker"))
    });
    println!(
        "crash-soak: {kills} SIGKILLs ({during_checkpoints} during checkpoints), {aborts} aborts during cold moves, {restores} restores, {rounds} rounds of {} records{}{blinks}, {} s: {}",
        want.len(),
        match (&a.l3, a.s3) {
            (Some(_), _) => " with L3",
            (None, true) => " with checkpoints in S3",
            (None, false) => "",
        },
        started.elapsed().as_secs(),
        if bad == 0 { "every output exact".to_string() } else { format!("{bad} rounds differ") }
    );
    std::process::exit(i32::from(bad > 0));
}
