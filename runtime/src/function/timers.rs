//! Event-time timers of one operator instance, and the keyed state that
//! holds them across checkpoints.

use std::collections::{BTreeSet, HashMap, HashSet};

/// The value state (one per key: its timer times) that holds the timers
/// in checkpoints; every keyed store declares it beside the job's states.
pub(crate) const TIMERS_STATE: &str = "__timers";

/// Event-time timers of one operator instance, ordered by time then key.
///
/// They are stored in keyed state like any other entry — each key's timer
/// times under that key, so in the key's own key group (the `__timers`
/// value state) — and only the keys whose timers changed since the last
/// checkpoint are written at the next one ([`Timers::take_changed`]).
#[derive(Debug, Default)]
pub(crate) struct Timers {
    pending: BTreeSet<(i64, Vec<u8>)>,
    by_key: HashMap<Vec<u8>, BTreeSet<i64>>,
    changed: HashSet<Vec<u8>>,
}

impl Timers {
    pub(crate) fn register(&mut self, timestamp: i64, key: &[u8]) {
        if self.pending.insert((timestamp, key.to_vec())) {
            self.by_key
                .entry(key.to_vec())
                .or_default()
                .insert(timestamp);
            self.changed.insert(key.to_vec());
        }
    }

    /// Removes and returns the earliest timer at or before `watermark`.
    pub(crate) fn pop_due(&mut self, watermark: i64) -> Option<(i64, Vec<u8>)> {
        let first = self.pending.first()?;
        if first.0 > watermark {
            return None;
        }
        let (ts, key) = self.pending.pop_first()?;
        if let Some(times) = self.by_key.get_mut(&key) {
            times.remove(&ts);
            if times.is_empty() {
                self.by_key.remove(&key);
            }
        }
        self.changed.insert(key.clone());
        Some((ts, key))
    }

    /// The keys whose timers changed since the last call, each with its
    /// timer times now (empty: it has none left).
    pub(crate) fn take_changed(&mut self) -> Vec<(Vec<u8>, Vec<i64>)> {
        std::mem::take(&mut self.changed)
            .into_iter()
            .map(|key| {
                let times = self
                    .by_key
                    .get(&key)
                    .map(|t| t.iter().copied().collect())
                    .unwrap_or_default();
                (key, times)
            })
            .collect()
    }

    /// Timers restored from state: `key`'s timer `times`.
    pub(crate) fn restore(&mut self, key: Vec<u8>, times: Vec<i64>) {
        for ts in times {
            self.pending.insert((ts, key.clone()));
            self.by_key.entry(key.clone()).or_default().insert(ts);
        }
    }
}
