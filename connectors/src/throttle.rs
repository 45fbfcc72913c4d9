//! A records-per-second throttle for sources and sinks (demos, load tests).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// Paces calls to at most `rate` per second in total, across all clones
/// (so the parallel instances of a sink share one rate). Each call takes the
/// next time slot; a call ahead of its slot sleeps (asynchronously) until
/// then. Sleeps are taken only when at least a millisecond ahead, so high
/// rates stay cheap; oversleeping is made up by a burst allowance of 20 ms,
/// and credit beyond that (after idle time) is dropped.
#[derive(Debug, Clone)]
pub struct Throttle {
    inner: Arc<Pacer>,
}

#[derive(Debug)]
struct Pacer {
    start: Instant,
    interval_ns: u64,
    next_ns: AtomicU64,
}

const BURST_NS: u64 = 20_000_000;
const SLICE_NS: u64 = 1_000_000;

impl Throttle {
    /// A throttle of `rate` records per second (`rate` > 0).
    pub fn new(rate: u64) -> Self {
        Self {
            inner: Arc::new(Pacer {
                start: Instant::now(),
                interval_ns: 1_000_000_000 / rate.max(1),
                next_ns: AtomicU64::new(0),
            }),
        }
    }

    /// Waits until one more record is allowed.
    pub async fn acquire(&self) {
        let p = &self.inner;
        let now = p.start.elapsed().as_nanos() as u64;
        let mut slot = p.next_ns.fetch_add(p.interval_ns, Ordering::Relaxed);
        let floor = now.saturating_sub(BURST_NS);
        if slot < floor {
            p.next_ns
                .fetch_max(floor + p.interval_ns, Ordering::Relaxed);
            slot = floor;
        }
        if slot > now + SLICE_NS {
            tokio::time::sleep_until(p.start + Duration::from_nanos(slot)).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn two_clones_share_one_rate() {
        let t = Throttle::new(20_000);
        let started = std::time::Instant::now();
        let (a, b) = (t.clone(), t.clone());
        let run = |t: Throttle| async move {
            for _ in 0..5_000 {
                t.acquire().await;
            }
        };
        tokio::join!(run(a), run(b));
        let secs = started.elapsed().as_secs_f64();
        // 10,000 records at 20,000/s take 0.5 s (minus the burst allowance).
        assert!((0.45..0.75).contains(&secs), "took {secs:.3}s");
    }
}
