//! The user-history workload: events of many users, each user keeping the
//! history of its last N days of events and a per-user count.
//!
//! Every worker thread generates its own share of the events (a fixed slice
//! of the users, as a keyed operator instance owns a range of key groups),
//! deterministically from a seed. User ids are drawn uniformly or with a
//! Zipf skew; event times advance evenly over `spread_days`.

use rand::{rngs::StdRng, Rng, SeedableRng};
use rand_distr::{Distribution, Zipf};
use serde::{Deserialize, Serialize};

/// How state is updated per event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum Form {
    /// `ListState::add(event)` plus a `ValueState<u64>` count (recommended).
    ListAdd,
    /// Read-modify-write of the whole list (`list = get(user); list.push(e);
    /// put(user, list)`, last 100 kept) plus the count: the form a
    /// per-record design suggests. strata's modes do each read-modify-write
    /// (this list and the count of both forms) with `ValueState::modify`,
    /// one state access; the baselines with a get and a put.
    Naive,
}

impl std::fmt::Display for Form {
    /// The name the command line takes (`list-add`, `naive`).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let value = clap::ValueEnum::to_possible_value(self);
        f.write_str(value.as_ref().map_or("?", |v| v.get_name()))
    }
}

/// One event as stored in a user's history.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Event {
    /// Event time, ms since the epoch.
    pub ts: i64,
    /// Opaque payload.
    pub payload: Vec<u8>,
}

/// The workload's shape.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Workload {
    /// Distinct user ids.
    pub users: u64,
    /// Events in all.
    pub events: u64,
    /// Zipf exponent of the user distribution; 0 = uniform.
    pub zipf: f64,
    /// Payload bytes per event.
    pub payload: usize,
    /// History kept per user, days (event-time TTL).
    pub history_days: u64,
    /// Event times spread over this many days.
    pub spread_days: u64,
    /// The update form.
    pub form: Form,
    /// Worker threads (the parallelism).
    pub threads: u32,
    /// Events a worker applies between two checkpoints in the tiered modes
    /// (0: only the last one, after the last event).
    pub checkpoint_every: u64,
}

/// Milliseconds in a day.
pub(crate) const DAY_MS: i64 = 86_400_000;
const EPOCH_2026: i64 = 1_767_225_600_000;

/// The events of worker `thread`: (user id, event) pairs.
pub(crate) struct Events {
    rng: StdRng,
    zipf: Option<Zipf<f64>>,
    thread: u64,
    threads: u64,
    users_here: u64,
    next: u64,
    count: u64,
    step_ms: f64,
    payload: usize,
}

impl Workload {
    /// The events worker `thread` processes.
    pub(crate) fn events(&self, thread: u32) -> Events {
        let threads = u64::from(self.threads);
        let users_here =
            (self.users / threads + u64::from(u64::from(thread) < self.users % threads)).max(1);
        let count = self.events_of(thread);
        Events {
            rng: StdRng::seed_from_u64(0x5eed ^ u64::from(thread)),
            zipf: (self.zipf > 0.0)
                .then(|| Zipf::new(users_here as f64, self.zipf))
                .and_then(Result::ok),
            thread: u64::from(thread),
            threads,
            users_here,
            next: 0,
            count,
            step_ms: (self.spread_days as i64 * DAY_MS) as f64 / self.events.max(1) as f64
                * threads as f64,
            payload: self.payload,
        }
    }

    /// How many events worker `thread` processes.
    pub(crate) fn events_of(&self, thread: u32) -> u64 {
        let threads = u64::from(self.threads);
        self.events / threads + u64::from(u64::from(thread) < self.events % threads)
    }

    /// The newest event time of all workers (`None` without events):
    /// worker 0's last, as it has the most events.
    pub(crate) fn last_event_time(&self) -> Option<i64> {
        let first = self.events(0);
        first.count.checked_sub(1).map(|n| first.time_of(n))
    }
}

impl Events {
    /// The event time of this worker's event number `n`.
    fn time_of(&self, n: u64) -> i64 {
        EPOCH_2026 + (n as f64 * self.step_ms) as i64
    }

    /// The users this worker owns (for verification).
    pub(crate) fn users(&self) -> impl Iterator<Item = u64> + '_ {
        (0..self.users_here).map(|i| i * self.threads + self.thread)
    }
}

impl Iterator for Events {
    type Item = (u64, Event);

    fn next(&mut self) -> Option<Self::Item> {
        if self.next >= self.count {
            return None;
        }
        let local = match &self.zipf {
            Some(z) => z.sample(&mut self.rng) as u64 - 1,
            None => self.rng.random_range(0..self.users_here),
        };
        let ts = self.time_of(self.next);
        // Random bytes: compression must not make the state look smaller
        // than a real event history would be.
        let mut payload = vec![0; self.payload];
        self.rng.fill(payload.as_mut_slice());
        self.next += 1;
        Some((local * self.threads + self.thread, Event { ts, payload }))
    }
}
