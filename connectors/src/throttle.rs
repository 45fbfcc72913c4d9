//! A records-per-second throttle for sources and sinks (demos, load tests).

use std::time::Duration;
use tokio::time::Instant;

/// Paces calls to at most `rate` per second, sleeping (asynchronously) when
/// ahead of schedule. Sleeps are taken in slices of at least a millisecond so
/// high rates stay cheap.
#[derive(Debug)]
pub struct Throttle {
    interval: Duration,
    next: Instant,
}

impl Throttle {
    /// A throttle of `rate` records per second (`rate` > 0).
    pub fn new(rate: u64) -> Self {
        Self {
            interval: Duration::from_secs_f64(1.0 / rate.max(1) as f64),
            next: Instant::now(),
        }
    }

    /// Waits until one more record is allowed.
    pub async fn acquire(&mut self) {
        let now = Instant::now();
        // Do not bank credit for idle time beyond one slice.
        if self.next + Duration::from_millis(1) < now {
            self.next = now;
        }
        self.next += self.interval;
        if self.next > now + Duration::from_millis(1) {
            tokio::time::sleep_until(self.next).await;
        }
    }
}
