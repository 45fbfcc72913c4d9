//! Runs one mode over the workload in this process and measures it:
//! events/s, per-event latency (HdrHistogram), a timeline of progress and
//! tier sizes (see [`crate::timeline`]), peak RSS, tier and checkpoint
//! figures, and a verification of the whole state (see [`crate::verify`]).

use crate::backends::{Backend, BenchError, Budget, Embedded, Memory, RocksDbRaw};
use crate::cassandra::{PerRecord, Target};
use crate::checkpointing::CheckpointFigures;
use crate::recovery::Recovery;
use crate::timeline::{memory, sample_until, Gauges, Sample};
use crate::workload::Workload;
use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use strata_cache::TierStats;

/// The modes this harness can run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum Mode {
    /// strata's runtime: a generator source, key-by, the update form as a
    /// keyed process function, a discarding sink (see [`crate::pipeline`]).
    Pipeline,
    /// strata, L1 + L2, the store driven by one thread per worker (a
    /// harness standing in for the runtime).
    Embedded,
    /// The same updates straight into RocksDB.
    RocksdbRaw,
    /// A plain hash map.
    Memory,
    /// strata, L1 + L2 + Cassandra (L3), checkpointing.
    L3,
    /// Read-modify-write of Cassandra on every event (the design strata
    /// replaces: no local state, two round trips per event).
    CassandraPerRecord,
    /// The same workload as an Apache Flink 2.3 job with its RocksDB state
    /// backend (see [`crate::flink`]); needs Java 17.
    Flink,
    /// The Flink peer with the RocksDB options of strata's L2 (and of
    /// `rocksdb-raw`) that do not depend on strata's layout: no
    /// compression on L0 and L1, LZ4 below, a 10-bit bloom filter, two
    /// background jobs (see [`crate::flink::Tuning`]).
    FlinkTuned,
}

impl Mode {
    /// Whether the mode checkpoints (and so can be restored after a crash).
    pub(crate) fn is_tiered(self) -> bool {
        matches!(self, Mode::Pipeline | Mode::Embedded | Mode::L3)
    }

    /// Whether the mode needs Cassandra.
    pub(crate) fn needs_cassandra(self) -> bool {
        matches!(self, Mode::L3 | Mode::CassandraPerRecord)
    }
}

/// Per-event latency percentiles, microseconds (NaN: not measured).
#[derive(Debug, Clone, Default, Serialize, serde::Deserialize)]
pub(crate) struct Latency {
    /// Median.
    #[serde(deserialize_with = "nan_if_null")]
    pub p50: f64,
    /// 99th percentile.
    #[serde(deserialize_with = "nan_if_null")]
    pub p99: f64,
    /// 99.9th percentile.
    #[serde(deserialize_with = "nan_if_null")]
    pub p999: f64,
}

impl Latency {
    /// Not measured (the `pipeline` mode times events per run, not each).
    pub(crate) fn unmeasured() -> Self {
        Self {
            p50: f64::NAN,
            p99: f64::NAN,
            p999: f64::NAN,
        }
    }
}

/// JSON has no NaN: serde_json writes it as `null`, read back here as NaN.
fn nan_if_null<'de, D: serde::Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    Ok(Option::<f64>::deserialize(d)?.unwrap_or(f64::NAN))
}

/// One mode's figures.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct ModeReport {
    /// Events applied.
    pub events: u64,
    /// Events per second (all workers) from the start until the last worker
    /// applied its last event and took its last checkpoint.
    pub events_per_sec: f64,
    /// Per-event latency of the state update.
    pub latency_us: Latency,
    /// Peak resident set of the process that ran the mode.
    pub peak_rss_bytes: u64,
    /// Whether the whole state matched the model (every count, every
    /// history element newer than the check cutoff; see [`crate::verify`]).
    pub verified: bool,
    /// What the verification compared.
    #[serde(default)]
    pub verification: Option<crate::verify::Verification>,
    /// For a mode run by another program (`flink`): what ran, and why
    /// this harness could not verify its state.
    #[serde(default)]
    pub external: Option<String>,
    /// L1 hit ratio (tiered modes).
    pub l1_hit_ratio: Option<f64>,
    /// L2 hit ratio among L1 misses (tiered modes).
    pub l2_hit_ratio: Option<f64>,
    /// Bytes in L1 at the end (tiered modes).
    pub l1_bytes: Option<u64>,
    /// Bytes in L2 at the end (tiered modes).
    pub l2_bytes: Option<u64>,
    /// L3 hit ratio among L2 misses (`l3` mode).
    #[serde(default)]
    pub l3_hit_ratio: Option<f64>,
    /// Keys moved from L2 to L3 (`l3` mode).
    #[serde(default)]
    pub l3_evictions: Option<u64>,
    /// Bytes moved from L2 to L3 (`l3` mode).
    #[serde(default)]
    pub l3_bytes: Option<u64>,
    /// Requests (reads and write batches) the L3 node answered per second
    /// of the run (`l3` mode).
    #[serde(default)]
    pub l3_requests_per_sec: Option<f64>,
    /// Checkpoints (tiered modes).
    #[serde(default)]
    pub checkpoints: Option<CheckpointFigures>,
    /// What RocksDB did (the modes that use it).
    #[serde(default)]
    pub l2: Option<strata_cache::L2Report>,
    /// The restore after SIGKILL (tiered modes, filled in by the parent).
    #[serde(default)]
    pub recovery: Option<Recovery>,
    /// The latency distribution: (quantile, microseconds) pairs.
    #[serde(default)]
    pub latency_cdf: Vec<(f64, f64)>,
    /// About one sample a second.
    #[serde(default)]
    pub timeline: Vec<Sample>,
}

fn open(
    mode: Mode,
    dir: &Path,
    w: &Workload,
    budget: Budget,
    target: &Target,
    worker: u32,
) -> Result<Box<dyn Backend>, BenchError> {
    Ok(match mode {
        Mode::Embedded => Box::new(Embedded::open(dir, w, budget, None)?),
        Mode::L3 => {
            let cold = crate::cassandra::cold_tier(target, worker)?;
            Box::new(Embedded::open(dir, w, budget, Some(cold))?)
        }
        Mode::RocksdbRaw => Box::new(RocksDbRaw::open(dir, w, budget)?),
        Mode::Memory => Box::new(Memory::new(w)),
        Mode::CassandraPerRecord => Box::new(PerRecord::open(target, w)?),
        Mode::Flink | Mode::FlinkTuned => {
            return Err("the flink modes run the Flink peer, not a backend here".into())
        }
        Mode::Pipeline => return Err("mode pipeline runs the runtime, not a backend here".into()),
    })
}

/// The parent of a child process running a mode, noted at its start.
static PARENT: std::sync::OnceLock<u32> = std::sync::OnceLock::new();

/// Notes this process's parent (in a child running a mode).
pub(crate) fn watch_parent() {
    PARENT.get_or_init(std::os::unix::process::parent_id);
}

/// An error once the parent that started this child is gone: nobody would
/// read the child's report, and its work would go on for nothing.
pub(crate) fn check_parent() -> Result<(), BenchError> {
    match PARENT.get() {
        Some(&p) if p != std::os::unix::process::parent_id() => {
            Err("the parent strata-bench process is gone: stopping".into())
        }
        _ => Ok(()),
    }
}

/// Microseconds since the Unix epoch.
pub(crate) fn now_micros() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as i64)
}

/// A worker's finished run; its backend stays open (see
/// [`crate::recovery::tail`]).
pub(crate) struct Worker {
    histogram: Histogram<u64>,
    /// From the start to the last event applied and the last checkpoint.
    elapsed: Duration,
    events: u64,
    tiers: Option<TierStats>,
    l3_requests: Option<u64>,
    checkpoints: Option<CheckpointFigures>,
    l2: Option<strata_cache::L2Report>,
    backend: Box<dyn Backend>,
}

/// Events per batch: the backend reads ahead what a batch needs (from L3),
/// as the runtime's keyed task does per batch of records. An event's
/// latency is the batch's read-ahead plus its own update.
const BATCH: usize = 256;

/// Events between two updates of the progress bar and the events gauge.
const PROGRESS_EVERY: u64 = 64;
/// Events between two updates of the tier gauges.
const TIERS_EVERY: u64 = 1024;

/// Where worker `thread` of a run under `dir` keeps its state.
pub(crate) fn worker_dir(dir: &Path, thread: u32) -> std::path::PathBuf {
    dir.join(format!("worker-{thread}"))
}

/// What opening a worker's backend takes.
pub(crate) struct Context<'a> {
    /// The mode.
    pub mode: Mode,
    /// The run's state directory.
    pub dir: &'a Path,
    /// The workload.
    pub w: &'a Workload,
    /// Memory settings per worker.
    pub budget: Budget,
    /// The Cassandra node and keyspace.
    pub target: &'a Target,
}

impl Context<'_> {
    /// Opens worker `thread`'s backend.
    pub(crate) fn open(&self, thread: u32) -> Result<Box<dyn Backend>, BenchError> {
        let dir = worker_dir(self.dir, thread);
        open(self.mode, &dir, self.w, self.budget, self.target, thread)
    }
}

/// Verifies every worker's backend (one thread each) holding `events[t]`
/// of its events; the outcomes summed.
pub(crate) fn verify_all(
    backends: &mut [Box<dyn Backend>],
    w: &Workload,
    events: &[u64],
) -> Result<crate::verify::Verification, BenchError> {
    let outcomes = std::thread::scope(|s| {
        let handles: Vec<_> = backends
            .iter_mut()
            .zip(events)
            .enumerate()
            .map(|(t, (b, &n))| s.spawn(move || crate::verify::check(b.as_mut(), w, t as u32, n)))
            .collect();
        join_all(handles)
    });
    let mut total = crate::verify::Verification::default();
    for outcome in outcomes {
        total.merge(outcome?);
    }
    Ok(total)
}

fn work(
    cx: &Context<'_>,
    thread: u32,
    gauges: &Gauges,
    progress: &indicatif::ProgressBar,
) -> Result<Worker, BenchError> {
    let mut backend = cx.open(thread)?;
    let begun = Instant::now();
    let mut histogram = Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3)?;
    let mut events = cx.w.events(thread);
    let mut applied: u64 = 0;
    let mut batch = Vec::with_capacity(BATCH);
    loop {
        batch.extend(events.by_ref().take(BATCH));
        if batch.is_empty() {
            break;
        }
        check_parent()?;
        let started = Instant::now();
        let keys: Vec<u64> = batch.iter().map(|(user, _)| *user).collect();
        backend.prefetch(&keys)?;
        let read_ahead = started.elapsed();
        for (user, event) in batch.drain(..) {
            let started = Instant::now();
            backend.apply(user, event)?;
            histogram.saturating_record((read_ahead + started.elapsed()).as_nanos() as u64);
            applied += 1;
            if applied.is_multiple_of(PROGRESS_EVERY) {
                progress.inc(PROGRESS_EVERY);
                gauges
                    .events
                    .store(applied, std::sync::atomic::Ordering::Relaxed);
            }
            if applied.is_multiple_of(TIERS_EVERY) {
                gauges.publish(applied, backend.as_ref());
            }
        }
    }
    let checkpoints = backend.finish()?;
    let elapsed = begun.elapsed();
    gauges.publish(applied, backend.as_ref());
    // The tier figures of the run, before the verification reads.
    let tiers = backend.tiers();
    let l3_requests = backend.l3_requests();
    let l2 = backend.l2_report();
    Ok(Worker {
        l3_requests,
        l2,
        histogram,
        elapsed,
        events: applied,
        tiers,
        checkpoints,
        backend,
    })
}

pub(crate) fn progress_bar(mode: Mode, len: u64) -> indicatif::ProgressBar {
    let progress = indicatif::ProgressBar::new(len);
    progress.set_style(
        indicatif::ProgressStyle::with_template(
            "{prefix:>20} [{bar:30}] {human_pos}/{human_len} events, ETA {eta}",
        )
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    progress.set_prefix(crate::report::mode_name(mode));
    progress
}

/// Progress as plain lines on stderr every [`ProgressLog::EVERY`] when
/// stderr is not a terminal (a CI log, a file), where the progress bar
/// draws nothing: events, share, rate over the last period, RSS.
pub(crate) struct ProgressLog {
    mode: Mode,
    total: u64,
    /// (seconds, events) of the last line.
    last: (f64, u64),
}

impl ProgressLog {
    const EVERY: f64 = 10.0;

    /// The sampler's callback: silent when stderr is a terminal.
    pub(crate) fn callback(mode: Mode, total: u64) -> impl FnMut(&crate::timeline::Sample) {
        use std::io::IsTerminal;
        let mut log = (!std::io::stderr().is_terminal()).then_some(ProgressLog {
            mode,
            total,
            last: (0.0, 0),
        });
        move |sample| {
            if let Some(log) = log.as_mut() {
                log.show(sample);
            }
        }
    }

    fn show(&mut self, s: &crate::timeline::Sample) {
        let (secs, events) = self.last;
        if s.secs - secs < Self::EVERY {
            return;
        }
        eprintln!(
            "strata-bench: {}: {} of {} events ({:.0} %), {:.0} events/s, RSS {} MB, {:.0} s",
            crate::report::mode_name(self.mode),
            s.events,
            self.total,
            100.0 * s.events as f64 / self.total.max(1) as f64,
            (s.events - events) as f64 / (s.secs - secs),
            s.rss_bytes >> 20,
            s.secs
        );
        self.last = (s.secs, s.events);
    }
}

/// Runs `mode` with one thread per worker, state under `dir`; returns the
/// report and the workers' open backends.
pub(crate) fn run(
    mode: Mode,
    dir: &Path,
    w: &Workload,
    budget: Budget,
    target: &Target,
) -> Result<(ModeReport, Vec<Box<dyn Backend>>), BenchError> {
    if mode == Mode::Pipeline {
        return crate::pipeline::run(dir, w, budget);
    }
    let cx = Context {
        mode,
        dir,
        w,
        budget,
        target,
    };
    let progress = progress_bar(mode, w.events);
    let gauges: Vec<Gauges> = (0..w.threads).map(|_| Gauges::default()).collect();
    let done = AtomicBool::new(false);
    let started = Instant::now();
    let (workers, timeline): (Vec<Result<Worker, BenchError>>, _) = std::thread::scope(|s| {
        let log = ProgressLog::callback(mode, w.events);
        let sampler = s.spawn(|| sample_until(&done, &gauges, started, log));
        let handles: Vec<_> = (0..w.threads)
            .map(|t| {
                let (cx, g, p) = (&cx, &gauges[t as usize], &progress);
                s.spawn(move || work(cx, t, g, p))
            })
            .collect();
        let workers = join_all(handles);
        done.store(true, Ordering::Relaxed);
        (workers, sampler.join().unwrap_or_default())
    });
    progress.finish_and_clear();
    let mut secs: f64 = 0.0;
    let mut histogram = Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3)?;
    let (mut events, mut tiers, mut checkpoints) =
        (0, None::<TierStats>, None::<CheckpointFigures>);
    let mut backends = Vec::new();
    let mut applied = Vec::new();
    let mut l3_requests = None::<u64>;
    let mut l2 = None::<strata_cache::L2Report>;
    for worker in workers {
        let worker = worker?;
        secs = secs.max(worker.elapsed.as_secs_f64());
        histogram.add(&worker.histogram)?;
        events += worker.events;
        applied.push(worker.events);
        if let Some(n) = worker.l3_requests {
            *l3_requests.get_or_insert(0) += n;
        }
        if let Some(t) = worker.tiers {
            tiers.get_or_insert_with(TierStats::default).merge(&t);
        }
        if let Some(c) = worker.checkpoints {
            checkpoints
                .get_or_insert_with(CheckpointFigures::default)
                .merge(&c);
        }
        if let Some(r) = worker.l2 {
            l2.get_or_insert_with(strata_cache::L2Report::default)
                .merge(&r);
        }
        backends.push(worker.backend);
    }
    // Peak RSS before the verification builds its model.
    let peak_rss_bytes = memory("VmHWM:");
    let verification = verify_all(&mut backends, w, &applied)?;
    let us = |q: f64| histogram.value_at_quantile(q) as f64 / 1000.0;
    let l3 = tiers.filter(|_| mode == Mode::L3);
    let report = ModeReport {
        events,
        events_per_sec: events as f64 / secs,
        latency_us: Latency {
            p50: us(0.5),
            p99: us(0.99),
            p999: us(0.999),
        },
        peak_rss_bytes,
        verified: verification.passed() && events == w.events,
        verification: Some(verification),
        external: None,
        l1_hit_ratio: tiers.map(|t| t.l1_hit_ratio()),
        l2_hit_ratio: tiers.map(|t| t.l2_hit_ratio()),
        l1_bytes: tiers.map(|t| t.l1_bytes),
        l2_bytes: tiers.map(|t| t.l2_bytes),
        l3_hit_ratio: l3.map(|t| t.l3_hit_ratio()),
        l3_evictions: l3.map(|t| t.l3_evictions),
        l3_bytes: l3.map(|t| t.l3_evicted_bytes),
        l3_requests_per_sec: l3_requests.map(|n| n as f64 / secs),
        checkpoints,
        l2,
        recovery: None,
        latency_cdf: latency_cdf(&histogram),
        timeline,
    };
    Ok((report, backends))
}

/// The distribution as (quantile, microseconds) pairs, finest in the tail;
/// of equal latencies only the highest quantile is kept.
fn latency_cdf(h: &Histogram<u64>) -> Vec<(f64, f64)> {
    let mut points: Vec<(f64, f64)> = Vec::new();
    for v in h.iter_quantiles(2) {
        let point = (
            v.quantile_iterated_to(),
            v.value_iterated_to() as f64 / 1000.0,
        );
        match points.last_mut() {
            Some(last) if last.1 == point.1 => *last = point,
            _ => points.push(point),
        }
    }
    points
}

/// Every worker's outcome, a panic as an error.
pub(crate) fn join_all<T>(
    handles: Vec<std::thread::ScopedJoinHandle<'_, Result<T, BenchError>>>,
) -> Vec<Result<T, BenchError>> {
    handles
        .into_iter()
        .map(|h| h.join().unwrap_or_else(|_| Err("a worker panicked".into())))
        .collect()
}
