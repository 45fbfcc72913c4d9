//! `strata-bench`: the user-history workload against strata and baselines,
//! all modes on the same events in one invocation.
//!
//! ```text
//! strata-bench --users 1000000 --events 10000000 --modes embedded,rocksdb-raw,memory --out bench-out
//! strata-bench --users 100000 --events 1000000 --modes embedded,l3,cassandra-per-record --out bench-out
//! ```
//!
//! The `l3` and `cassandra-per-record` modes need Cassandra at `--cassandra`
//! (`scripts/cassandra.sh start`); each run uses a keyspace of its own.
//!
//! Each mode runs in a child process of its own (so that its peak RSS is its
//! own), with one worker thread per core, each worker owning a slice of the
//! users as a keyed operator instance owns its key groups. The tiered modes
//! checkpoint as the runtime does; after their run the parent kills them
//! with SIGKILL and times a restore from the last checkpoint. The report
//! goes to `<out>/report.json`, `<out>/report.md` and three PNG plots.

mod backends;
mod cassandra;
mod checkpointing;
mod flink;
mod pipeline;
mod plots;
mod recovery;
mod report;
mod runner;
mod timeline;
mod verify;
mod workload;

use clap::Parser;
use runner::Mode;
use std::path::PathBuf;

/// The allocator of the `strata` binary (jemalloc, RocksDB included), so
/// every mode measures what users run.
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;
use workload::{Form, Workload};

/// The user-history workload against strata and baselines.
#[derive(Debug, Parser)]
#[command(name = "strata-bench", version, about)]
struct Args {
    /// Distinct user ids.
    #[arg(long, default_value_t = 1_000_000)]
    users: u64,
    /// Events in all.
    #[arg(long, default_value_t = 10_000_000)]
    events: u64,
    /// Modes to run, comma-separated, in this order, on the same events
    /// (the report lists them alphabetically).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "embedded,rocksdb-raw,memory"
    )]
    modes: Vec<Mode>,
    /// Directory of the report and plots (and, while running, the state).
    /// Progress goes to stderr (a bar on a terminal); stdout stays empty.
    #[arg(long)]
    out: PathBuf,
    /// How state is updated per event.
    #[arg(long, value_enum, default_value = "list-add")]
    form: Form,
    /// Zipf exponent of the user distribution (0 = uniform).
    #[arg(long, default_value_t = 0.0)]
    zipf: f64,
    /// Payload bytes per event.
    #[arg(long, default_value_t = 100)]
    payload: usize,
    /// History kept per user, in days of event time (the TTL).
    #[arg(long, default_value_t = 60)]
    history_days: u64,
    /// Event times spread over this many days.
    #[arg(long, default_value_t = 120)]
    spread_days: u64,
    /// Events each worker applies between two checkpoints in the tiered
    /// modes (`embedded`, `l3`); a last checkpoint follows the last event.
    /// The default comes to about one checkpoint every 10 s at the
    /// embedded speed. In the `l3` mode each completed checkpoint moves
    /// cold users to Cassandra. 0: only the last checkpoint.
    #[arg(long, default_value_t = 1_000_000)]
    checkpoint_every: u64,
    /// Skip the recovery measurement (SIGKILL after the run, then a restore
    /// from the last checkpoint) of the tiered modes.
    #[arg(long)]
    no_recovery: bool,
    /// Worker threads (default: the number of cores).
    #[arg(long)]
    threads: Option<u32>,
    /// L1 capacity for all workers together, e.g. 256MB.
    #[arg(long, default_value = "256MB")]
    l1: bytesize::ByteSize,
    /// RocksDB block cache + memtables for all workers together, e.g. 512MB.
    #[arg(long, default_value = "512MB")]
    l2_memory: bytesize::ByteSize,
    /// L2 bytes on disk for all workers together in the `l3` mode (each
    /// worker gets its share, as `state.l2.capacity` is per instance);
    /// beyond it cold users move to Cassandra at each checkpoint, so L2
    /// grows past it between checkpoints, e.g. 64MB.
    #[arg(long, default_value = "64MB")]
    l2_capacity: bytesize::ByteSize,
    /// Cassandra/ScyllaDB node of the `l3` and `cassandra-per-record` modes.
    #[arg(long, default_value = "127.0.0.1:9042")]
    cassandra: String,
    /// The Flink peer's directory (its `run.sh`) for the `flink` and
    /// `flink-tuned` modes (default: `bench/peers/flink` of the checkout
    /// holding the current directory, or of `$STRATA_ROOT`).
    #[arg(long)]
    flink_peer: Option<PathBuf>,
    /// Internal: run one mode and print its report as JSON.
    #[arg(long, hide = true)]
    child: Option<Mode>,
    /// Internal: restore a killed run of a mode and print the outcome.
    #[arg(long, hide = true)]
    recover: Option<Mode>,
    /// Internal: where a child keeps its state.
    #[arg(long, hide = true)]
    state_dir: Option<PathBuf>,
    /// Internal: names this invocation's Cassandra keyspace.
    #[arg(long, hide = true, default_value_t = 0)]
    run_id: i64,
}

impl Args {
    fn workload(&self) -> Workload {
        Workload {
            users: self.users.max(1),
            events: self.events,
            zipf: self.zipf,
            payload: self.payload,
            history_days: self.history_days,
            spread_days: self.spread_days,
            form: self.form,
            threads: self
                .threads
                .unwrap_or_else(|| {
                    std::thread::available_parallelism().map_or(2, |n| n.get() as u32)
                })
                .max(1),
            checkpoint_every: self.checkpoint_every,
        }
    }

    fn budget(&self, threads: u32) -> backends::Budget {
        backends::Budget {
            l1_bytes: self.l1.as_u64() / u64::from(threads),
            l2_bytes: (self.l2_memory.as_u64() / u64::from(threads)) as usize,
            l2_capacity: self.l2_capacity.as_u64() / u64::from(threads),
        }
    }
}

/// Largest payload per event accepted, bytes.
const MAX_PAYLOAD: usize = 1 << 20;
/// Largest history or event-time spread accepted, days (a century).
const MAX_DAYS: u64 = 36_500;

impl Args {
    /// Rejects settings the workload cannot honour, naming the flag.
    fn validate(&self) -> Result<(), backends::BenchError> {
        let threads = self.workload().threads;
        if self.threads == Some(0) {
            return Err("--threads must be at least 1".into());
        }
        if self.users < u64::from(threads) {
            return Err(format!("--users {} is fewer than the {threads} workers (each worker owns a slice of the users)", self.users).into());
        }
        if !self.zipf.is_finite() || self.zipf < 0.0 {
            return Err(format!(
                "--zipf {} must be a finite exponent ≥ 0 (0 = uniform)",
                self.zipf
            )
            .into());
        }
        if self.payload > MAX_PAYLOAD {
            return Err(format!("--payload {} is over {MAX_PAYLOAD} bytes", self.payload).into());
        }
        if self.history_days > MAX_DAYS || self.spread_days > MAX_DAYS {
            return Err(
                format!("--history-days and --spread-days must be at most {MAX_DAYS}").into(),
            );
        }
        for (i, m) in self.modes.iter().enumerate() {
            if self.modes[..i].contains(m) {
                return Err(format!("--modes names {} twice", report::mode_name(*m)).into());
            }
        }
        Ok(())
    }
}

fn main() -> std::process::ExitCode {
    let args = Args::parse();
    let result = args.validate().and_then(|()| run(&args));
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("strata-bench: error: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn run(args: &Args) -> Result<(), backends::BenchError> {
    match (args.child, args.recover) {
        (Some(mode), _) => child(args, mode),
        (None, Some(mode)) => recover(args, mode),
        (None, None) => report::run_all(
            &report::Plan {
                modes: &args.modes,
                out: &args.out,
                workload: &args.workload(),
                memory: args.budget(1),
                recovery: !args.no_recovery,
                cassandra: &args.cassandra,
                flink_peer: args.flink_peer.as_deref(),
            },
            std::env::args().skip(1).collect(),
        ),
    }
}

impl Args {
    fn state_dir(&self) -> Result<&std::path::Path, backends::BenchError> {
        self.state_dir
            .as_deref()
            .ok_or_else(|| "--state-dir is missing".into())
    }

    fn target(&self) -> cassandra::Target {
        cassandra::Target::for_run(&self.cassandra, self.run_id)
    }
}

/// Writes one line to the parent (stdout), flushed; an error, not a
/// panic, if the parent is gone.
fn print_line(line: &str) -> Result<(), backends::BenchError> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    writeln!(out, "{line}")?;
    out.flush()?;
    Ok(())
}

/// Runs `mode`, prints its report as one JSON line; a tiered mode then goes
/// on working (without checkpoints) until the parent kills it.
fn child(args: &Args, mode: Mode) -> Result<(), backends::BenchError> {
    runner::watch_parent();
    let w = args.workload();
    let budget = args.budget(w.threads);
    let (report, backends) = runner::run(mode, args.state_dir()?, &w, budget, &args.target())?;
    print_line(&serde_json::to_string(&report)?)?;
    if mode == Mode::Pipeline && !args.no_recovery {
        // The run ended with its final checkpoint: wait for the SIGKILL.
        drop(backends);
        recovery::idle()?;
    } else if mode.is_tiered() && !args.no_recovery {
        recovery::tail(backends, &w)?;
    }
    Ok(())
}

/// Restores a killed run of `mode`: prints `ready` once the state is open
/// again, then the verification as one JSON line.
fn recover(args: &Args, mode: Mode) -> Result<(), backends::BenchError> {
    runner::watch_parent();
    let w = args.workload();
    let budget = args.budget(w.threads);
    let ready = || {
        // A parent gone is noticed by the verification that follows.
        let _ = print_line("ready");
    };
    let recovery = recovery::recover(mode, args.state_dir()?, &w, budget, &args.target(), ready)?;
    print_line(&serde_json::to_string(&recovery)?)
}
