//! Progress of a running job: counters the tasks update, a reporter that
//! shows them (an indicatif bar on a terminal, a log line every 10 s
//! otherwise) and publishes them as Prometheus metrics every second.

use crate::channel::TaskTimes;
use crate::metrics::RecordFigures;
use std::io::IsTerminal;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use strata_cache::{StateStore, TierStats};

/// Counters shared by a job's tasks.
#[derive(Debug, Default)]
pub struct Progress {
    /// Source progress: records (Parquet) or bytes (text) done.
    pub done: AtomicU64,
    /// Source progress: total records or bytes.
    pub total: AtomicU64,
    /// Records read by the source (good and bad).
    pub records_in: AtomicU64,
    /// Records processed by keyed operators.
    pub records_processed: AtomicU64,
    /// Records written by sinks.
    pub records_out: AtomicU64,
    /// Bad records routed to the dead-letter output.
    pub dead_letters: AtomicU64,
    /// A Kafka source's backpressure and lag figures.
    pub kafka: std::sync::OnceLock<Arc<strata_connectors::kafka::SourceStats>>,
    /// When the source read its first record.
    pub first_record: std::sync::OnceLock<Instant>,
}

impl Progress {
    /// The record counters now.
    pub(crate) fn figures(&self) -> RecordFigures {
        RecordFigures {
            records_in: self.records_in.load(Ordering::Relaxed),
            records_out: self.records_out.load(Ordering::Relaxed),
            dead_letters: self.dead_letters.load(Ordering::Relaxed),
            position: self.done.load(Ordering::Relaxed),
            total: self.total.load(Ordering::Relaxed),
        }
    }

    /// Publishes the counters as one consumer group shard's metrics.
    pub(crate) fn publish_as_shard(&self, partition: i32) {
        crate::metrics::publish_shard(partition, &self.figures(), self.kafka.get().map(|k| &**k));
    }

    pub(crate) fn source_at(&self, (done, total): (u64, u64)) {
        if self.records_in.fetch_add(1, Ordering::Relaxed) == 0 {
            let _ = self.first_record.set(Instant::now());
        }
        self.done.store(done, Ordering::Relaxed);
        self.total.store(total, Ordering::Relaxed);
    }
}

/// A named task's time accounting.
pub(crate) struct TaskClock {
    pub(crate) name: String,
    pub(crate) times: Arc<TaskTimes>,
    last: (u64, u64),
}

impl TaskClock {
    pub(crate) fn new(name: String, times: Arc<TaskTimes>) -> Self {
        Self {
            name,
            times,
            last: (0, 0),
        }
    }
}

/// Sums the tier figures of several stores.
pub(crate) fn tier_totals(stores: &[StateStore]) -> TierStats {
    let mut total = TierStats::default();
    for s in stores {
        total.merge(&s.stats());
    }
    total
}

/// A progress bar (position, percent, ETA, message) when stderr is a
/// terminal; `None` otherwise (then progress is logged as lines).
pub(crate) fn terminal_bar() -> Option<indicatif::ProgressBar> {
    std::io::stderr().is_terminal().then(|| {
        let bar = indicatif::ProgressBar::new(0);
        bar.set_style(
            indicatif::ProgressStyle::with_template(
                "{elapsed_precise} [{bar:30}] {percent}% ETA {eta} {msg}",
            )
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        bar
    })
}

/// Runs until aborted: every second publishes metrics and redraws progress.
pub(crate) async fn report(
    progress: Arc<Progress>,
    stores: Vec<StateStore>,
    mut clocks: Vec<TaskClock>,
    shown: bool,
) {
    if !shown {
        // A shard of a group: the group shows and publishes its figures.
        return std::future::pending().await;
    }
    let bar = terminal_bar();
    let started = Instant::now();
    // (when, records read in this run, input done) at the last log line.
    let mut last_log: Option<(Instant, u64, u64)> = None;
    let mut last_in = 0;
    let mut ticker = tokio::time::interval(Duration::from_secs(1));
    loop {
        ticker.tick().await;
        let records = progress.records_in.load(Ordering::Relaxed);
        let per_second = records - last_in;
        last_in = records;
        let tiers = tier_totals(&stores);
        publish(&progress, &stores, &tiers, &mut clocks);
        let (done, total) = (
            progress.done.load(Ordering::Relaxed),
            progress.total.load(Ordering::Relaxed),
        );
        let written = progress.records_out.load(Ordering::Relaxed);
        let hit = tiers.l1_hit_ratio() * 100.0;
        match (&bar, last_log) {
            (Some(bar), _) if total > 0 => {
                let first = bar.length() != Some(total);
                bar.set_length(total);
                bar.set_position(done);
                if first {
                    // A restored run starts part-way: the ETA counts from here.
                    bar.reset_eta();
                }
                bar.set_message(format!(
                    "{records} records read in this run, {per_second}/s, {written} written, L1 hit {hit:.1}%"
                ));
            }
            (Some(bar), _) => bar.set_message(format!(
                "{records} records read in this run, {per_second}/s, {}, {written} written, L1 hit {hit:.1}%",
                where_unbounded(&progress)
            )),
            // From the first routed record on (a restored run starts part-way).
            (None, None) if records > 0 => last_log = Some((Instant::now(), records, done)),
            (None, None) => {}
            (None, Some((at, read_then, done_then))) if at.elapsed() >= Duration::from_secs(10) => {
                let secs = at.elapsed().as_secs_f64();
                let rate = (records - read_then) as f64 / secs;
                // The ETA extrapolates the input's progress over the last
                // interval: right after a restore, and when the rate changes.
                let pace = (done.saturating_sub(done_then)) as f64 / secs;
                let (position, eta) = if total == 0 {
                    (where_unbounded(&progress), String::new())
                } else {
                    let pct = 100.0 * done as f64 / total as f64;
                    let eta = if pace > 0.0 && total > done {
                        format!("{:.0}s", (total - done) as f64 / pace)
                    } else {
                        "-".into()
                    };
                    (format!("{pct:.1}% of the input done"), format!(", ETA {eta}"))
                };
                eprintln!(
                    "[{:>5}s] {records} records read in this run ({position}), {rate:.0} records/s{eta}, {written} written, L1 hit {hit:.1}%",
                    started.elapsed().as_secs()
                );
                last_log = Some((Instant::now(), records, done));
            }
            (None, Some(_)) => {}
        }
    }
}

/// Where an input of no known end stands: a Kafka source's lag per
/// partition (records between its position and the end of the
/// partition, refreshed every 2 s).
fn where_unbounded(progress: &Progress) -> String {
    let Some(stats) = progress.kafka.get() else {
        return "an input of unknown size".into();
    };
    let lag = stats.lag.lock().unwrap_or_else(|p| p.into_inner()).clone();
    let shown: Vec<String> = lag.iter().take(8).map(i64::to_string).collect();
    let more = if lag.len() > 8 { ", …" } else { "" };
    format!(
        "lag {} records, per partition {}{more}",
        lag.iter().sum::<i64>(),
        shown.join(" ")
    )
}

/// Publishes one second's metrics: progress, tiers, and per-task times.
fn publish(
    progress: &Progress,
    stores: &[StateStore],
    tiers: &TierStats,
    clocks: &mut [TaskClock],
) {
    crate::metrics::publish(
        &progress.figures(),
        progress.kafka.get().map(|k| &**k),
        tiers,
    );
    for (i, store) in stores.iter().enumerate() {
        crate::metrics::publish_state_wait(&format!("keyed-{i}"), &store.stats());
    }
    for c in clocks {
        let (idle, bp) = c.times.totals();
        let (idle_ms, bp_ms) = ((idle - c.last.0) / 1_000_000, (bp - c.last.1) / 1_000_000);
        c.last = (idle, bp);
        crate::metrics::publish_task(&c.name, idle_ms.min(1000), bp_ms.min(1000));
    }
}
