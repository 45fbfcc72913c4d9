//! The timeline of a run: every worker publishes its progress and tier
//! sizes ([`Gauges`]), and a sampler sums them about once a second, with
//! the process's resident set, into [`Sample`]s.

use crate::backends::Backend;
use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Progress and tier sizes at one moment of a run (all workers).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct Sample {
    /// Seconds since the run started.
    pub secs: f64,
    /// Events applied so far.
    pub events: u64,
    /// Bytes in L1.
    pub l1_bytes: u64,
    /// Bytes in L2.
    pub l2_bytes: u64,
    /// Bytes moved to L3 so far (encoded, before Cassandra's compression).
    pub l3_bytes: u64,
    /// Resident set of the process.
    pub rss_bytes: u64,
}

/// What a worker publishes for the sampler.
#[derive(Default)]
pub(crate) struct Gauges {
    /// Events applied so far.
    pub events: AtomicU64,
    l1_bytes: AtomicU64,
    l2_bytes: AtomicU64,
    l3_bytes: AtomicU64,
}

impl Gauges {
    /// Publishes a worker's events applied and, if it has tiers, their sizes.
    pub(crate) fn publish(&self, applied: u64, backend: &dyn Backend) {
        self.events.store(applied, Ordering::Relaxed);
        if let Some(t) = backend.tiers() {
            self.l1_bytes.store(t.l1_bytes, Ordering::Relaxed);
            self.l2_bytes.store(t.l2_bytes, Ordering::Relaxed);
            self.l3_bytes.store(t.l3_evicted_bytes, Ordering::Relaxed);
        }
    }

    /// The sum over all workers, now.
    pub(crate) fn sample(all: &[Gauges], secs: f64) -> Sample {
        let sum =
            |f: fn(&Gauges) -> &AtomicU64| all.iter().map(|g| f(g).load(Ordering::Relaxed)).sum();
        Sample {
            secs,
            events: sum(|g| &g.events),
            l1_bytes: sum(|g| &g.l1_bytes),
            l2_bytes: sum(|g| &g.l2_bytes),
            l3_bytes: sum(|g| &g.l3_bytes),
            rss_bytes: memory("VmRSS:"),
        }
    }
}

/// Takes a sample about once a second until `done`, showing each to
/// `on_sample`.
pub(crate) fn sample_until(
    done: &AtomicBool,
    gauges: &[Gauges],
    started: Instant,
    mut on_sample: impl FnMut(&Sample),
) -> Vec<Sample> {
    let mut samples = vec![Gauges::sample(gauges, 0.0)];
    let mut next = Duration::from_secs(1);
    while !done.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(50));
        if started.elapsed() >= next {
            let sample = Gauges::sample(gauges, started.elapsed().as_secs_f64());
            on_sample(&sample);
            samples.push(sample);
            next += Duration::from_secs(1);
        }
    }
    samples.push(Gauges::sample(gauges, started.elapsed().as_secs_f64()));
    samples
}

/// A memory figure of this process from `/proc/self/status` (`VmHWM`:
/// peak resident set, `VmRSS`: resident set now), bytes.
pub(crate) fn memory(field: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(field))
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
        })
        .map_or(0, |kb| kb * 1024)
}

/// How fast events went during the given windows (checkpoints: start and
/// end, seconds since the run started) against the rest of the run: the
/// mean rate of the one-second samples that overlap a window divided by
/// the mean rate of the others, the first and last second left out (the
/// start and the end of the input). `None` without samples of both kinds.
pub(crate) fn rate_ratio(samples: &[Sample], windows: &[(f64, f64)]) -> Option<f64> {
    let rates: Vec<(f64, f64, f64)> = samples
        .windows(2)
        .map(|w| {
            let dt = (w[1].secs - w[0].secs).max(1e-9);
            (
                w[0].secs,
                w[1].secs,
                (w[1].events - w[0].events) as f64 / dt,
            )
        })
        .collect();
    let inner = rates.get(1..rates.len().saturating_sub(1))?;
    let (mut during, mut between) = (Vec::new(), Vec::new());
    for &(from, to, rate) in inner {
        let overlaps = windows.iter().any(|&(a, b)| a < to && b > from);
        if overlaps { &mut during } else { &mut between }.push(rate);
    }
    let mean = |v: &[f64]| (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64);
    Some(mean(&during)? / mean(&between)?)
}

#[cfg(test)]
mod ratio_tests {
    use super::*;

    fn sample(secs: f64, events: u64) -> Sample {
        Sample {
            secs,
            events,
            ..Sample::default()
        }
    }

    #[test]
    fn the_rate_during_windows_is_compared_with_the_rest() {
        // 100/s, except 50/s in the fourth second, which a window overlaps.
        let counts = [0, 100, 200, 300, 350, 450, 550, 600];
        let samples: Vec<Sample> = counts
            .iter()
            .enumerate()
            .map(|(i, &e)| sample(i as f64, e))
            .collect();
        let ratio = rate_ratio(&samples, &[(3.2, 3.8)]).unwrap();
        assert!((ratio - 0.5).abs() < 1e-9, "{ratio}");
        assert_eq!(rate_ratio(&samples, &[]), None);
    }
}
