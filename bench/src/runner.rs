//! Runs one mode over the workload in this process and measures it:
//! events/s, per-event latency (HdrHistogram), peak RSS, tier figures, and a
//! verification that every event was counted.

use crate::backends::{Backend, BenchError, Budget, Embedded, Memory, RocksDbRaw};
use crate::cassandra::{PerRecord, Target};
use crate::workload::Workload;
use hdrhistogram::Histogram;
use serde::Serialize;
use std::path::Path;
use std::time::Instant;
use strata_cache::TierStats;

/// The modes this harness can run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// strata, L1 + L2.
    Embedded,
    /// The same updates straight into RocksDB.
    RocksdbRaw,
    /// A plain hash map.
    Memory,
    /// strata, L1 + L2 + Cassandra (L3), checkpointing.
    L3,
    /// Read-modify-write of Cassandra on every event (the user's design).
    CassandraPerRecord,
}

/// Per-event latency percentiles, microseconds.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct Latency {
    /// Median.
    pub p50: f64,
    /// 99th percentile.
    pub p99: f64,
    /// 99.9th percentile.
    pub p999: f64,
}

/// One mode's figures.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct ModeReport {
    /// Events applied.
    pub events: u64,
    /// Events per second over the whole run (all workers).
    pub events_per_sec: f64,
    /// Per-event latency of the state update.
    pub latency_us: Latency,
    /// Peak resident set of the process that ran the mode.
    pub peak_rss_bytes: u64,
    /// Whether the per-user counts add up to the events applied.
    pub verified: bool,
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
    })
}

/// Microseconds since the Unix epoch.
pub fn now_micros() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as i64)
}

struct Worker {
    histogram: Histogram<u64>,
    events: u64,
    counted: u64,
    tiers: Option<TierStats>,
}

fn work(
    mode: Mode,
    dir: &Path,
    w: &Workload,
    thread: u32,
    budget: Budget,
    target: &Target,
    progress: &indicatif::ProgressBar,
) -> Result<Worker, BenchError> {
    let mut backend = open(
        mode,
        &dir.join(format!("worker-{thread}")),
        w,
        budget,
        target,
        thread,
    )?;
    let mut histogram = Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3)?;
    let events = w.events(thread);
    let users: Vec<u64> = events.users().collect();
    let mut applied: u64 = 0;
    for (user, event) in events {
        let started = Instant::now();
        backend.apply(user, event)?;
        histogram.saturating_record(started.elapsed().as_nanos() as u64);
        applied += 1;
        if applied.is_multiple_of(4096) {
            progress.inc(4096);
        }
    }
    let mut counted = 0;
    for user in users {
        counted += backend.count(user)?;
    }
    Ok(Worker {
        histogram,
        events: applied,
        counted,
        tiers: backend.tiers(),
    })
}

fn peak_rss() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
        })
        .map_or(0, |kb| kb * 1024)
}

/// Runs `mode` with one thread per worker, state under `dir`.
pub fn run(
    mode: Mode,
    dir: &Path,
    w: &Workload,
    budget: Budget,
    target: &Target,
) -> Result<ModeReport, BenchError> {
    let progress = indicatif::ProgressBar::new(w.events);
    progress.set_style(
        indicatif::ProgressStyle::with_template(
            "{prefix:>12} [{bar:30}] {pos}/{len} {per_sec} ETA {eta}",
        )
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    progress.set_prefix(format!("{mode:?}"));
    let started = Instant::now();
    let workers: Vec<Result<Worker, BenchError>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..w.threads)
            .map(|t| {
                s.spawn({
                    let p = &progress;
                    move || work(mode, dir, w, t, budget, target, p)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Err("a worker panicked".into())))
            .collect()
    });
    let secs = started.elapsed().as_secs_f64();
    progress.finish_and_clear();
    let mut histogram = Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3)?;
    let (mut events, mut counted, mut tiers) = (0, 0, None::<TierStats>);
    for worker in workers {
        let worker = worker?;
        histogram.add(&worker.histogram)?;
        events += worker.events;
        counted += worker.counted;
        if let Some(t) = worker.tiers {
            tiers.get_or_insert_with(TierStats::default).merge(&t);
        }
    }
    let us = |q: f64| histogram.value_at_quantile(q) as f64 / 1000.0;
    Ok(ModeReport {
        events,
        events_per_sec: events as f64 / secs,
        latency_us: Latency {
            p50: us(0.5),
            p99: us(0.99),
            p999: us(0.999),
        },
        peak_rss_bytes: peak_rss(),
        verified: counted == events && events == w.events,
        l1_hit_ratio: tiers.map(|t| t.l1_hit_ratio()),
        l2_hit_ratio: tiers.map(|t| t.l2_hit_ratio()),
        l1_bytes: tiers.map(|t| t.l1_bytes),
        l2_bytes: tiers.map(|t| t.l2_bytes),
        l3_hit_ratio: tiers.filter(|_| mode == Mode::L3).map(|t| t.l3_hit_ratio()),
        l3_evictions: tiers.filter(|_| mode == Mode::L3).map(|t| t.l3_evictions),
    })
}
