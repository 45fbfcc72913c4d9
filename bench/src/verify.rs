//! Verifies a worker's whole state against a model: the worker's events
//! are generated again (they are a function of the seed), and every user's
//! count and history are compared with what they should be.
//!
//! A history is compared element by element (event time and a 64-bit hash
//! of the payload, in order) over the events newer than the check cutoff:
//! the workload's last event time (of all workers: the runtime's operator
//! instances share one watermark) minus the history length. Older events
//! may or may not have expired yet in a given backend (strata expires them
//! against its watermark, the hash map on the user's next event); every
//! newer one must be there exactly once. In the `naive` form a history
//! holds a user's last 100 events only. A lost, doubled, reordered or
//! changed append fails the check, and so does a count off by one.

use crate::backends::{Backend, BenchError};
use crate::workload::{Event, Form, Workload, DAY_MS};
use serde::{Deserialize, Serialize};
use std::collections::{HashMap, VecDeque};

/// The outcome of checking one or more workers.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct Verification {
    /// Events applied (the sum the counts should make).
    pub events: u64,
    /// The sum of the users' counts read back.
    pub counted: u64,
    /// Users whose count and history were compared with the model.
    pub users: u64,
    /// History elements compared (0 when the backend does not read
    /// histories back: then only the counts were checked).
    pub elements: u64,
    /// The first difference found, naming the user.
    pub mismatch: Option<String>,
}

impl Verification {
    /// Whether nothing differed and the counts add up to the events.
    pub(crate) fn passed(&self) -> bool {
        self.mismatch.is_none() && self.counted == self.events
    }

    /// Adds another worker's outcome.
    pub(crate) fn merge(&mut self, o: Verification) {
        self.events += o.events;
        self.counted += o.counted;
        self.users += o.users;
        self.elements += o.elements;
        self.mismatch = self.mismatch.take().or(o.mismatch);
    }
}

/// One expected history element: event time and payload hash.
type Element = (i64, u64);

/// What one user should hold.
#[derive(Default)]
struct Expected {
    count: u64,
    history: VecDeque<Element>,
}

fn element(e: &Event) -> Element {
    (e.ts, xxhash_rust::xxh3::xxh3_64(&e.payload))
}

/// The model of worker `thread`: every user's count and expected history.
fn model(w: &Workload, thread: u32) -> (HashMap<u64, Expected>, i64) {
    let last_ts = w.last_event_time().unwrap_or(i64::MIN);
    let cutoff = last_ts.saturating_sub(w.history_days as i64 * DAY_MS);
    let keep = match w.form {
        Form::ListAdd => usize::MAX,
        Form::Naive => crate::backends::KEEP_NAIVE,
    };
    let mut users: HashMap<u64, Expected> = HashMap::new();
    for (user, event) in w.events(thread) {
        let expected = users.entry(user).or_default();
        expected.count += 1;
        expected.history.push_back(element(&event));
        if expected.history.len() > keep {
            expected.history.pop_front();
        }
    }
    for expected in users.values_mut() {
        expected.history.retain(|(ts, _)| *ts > cutoff);
    }
    (users, cutoff)
}

/// Users read back per batch (each batch read ahead from a cold tier).
const BATCH: usize = 256;

/// `users` in the order strata's L2 stores them (key group, then key), so
/// that the reads walk RocksDB's blocks in order instead of at random.
fn in_key_order(users: impl Iterator<Item = u64>) -> Vec<u64> {
    use strata_cache::key_group::{key_group_of, DEFAULT_MAX_PARALLELISM};
    let mut keyed: Vec<(u16, u64)> = users
        .map(|u| (key_group_of(&u.to_be_bytes(), DEFAULT_MAX_PARALLELISM), u))
        .collect();
    keyed.sort_unstable();
    keyed.into_iter().map(|(_, u)| u).collect()
}

/// Checks worker `thread`'s `backend` holding `events` of its events.
pub(crate) fn check(
    backend: &mut dyn Backend,
    w: &Workload,
    thread: u32,
    events: u64,
) -> Result<Verification, BenchError> {
    let (expected, cutoff) = model(w, thread);
    let users = in_key_order(w.events(thread).users());
    let mut v = Verification {
        events,
        ..Verification::default()
    };
    let none = Expected::default();
    for batch in users.chunks(BATCH) {
        crate::runner::check_parent()?;
        backend.prefetch(batch)?;
        for &user in batch {
            let want = expected.get(&user).unwrap_or(&none);
            let count = backend.count(user)?;
            v.counted += count;
            v.users += 1;
            if count != want.count && v.mismatch.is_none() {
                v.mismatch = Some(format!(
                    "user {user}: count {count}, expected {}",
                    want.count
                ));
            }
            let Some(history) = backend.history(user)? else {
                continue;
            };
            let got: Vec<Element> = history
                .iter()
                .map(element)
                .filter(|(ts, _)| *ts > cutoff)
                .collect();
            v.elements += got.len() as u64;
            if !got.iter().eq(want.history.iter()) && v.mismatch.is_none() {
                v.mismatch = Some(describe(user, &got, &want.history));
            }
        }
    }
    Ok(v)
}

/// Names the first differing element of a history.
fn describe(user: u64, got: &[Element], want: &VecDeque<Element>) -> String {
    let at = got
        .iter()
        .zip(want.iter())
        .position(|(g, w)| g != w)
        .unwrap_or(got.len().min(want.len()));
    format!(
        "user {user}: history holds {} events newer than the check cutoff, expected {}; first difference at element {at} (got {:?}, expected {:?})",
        got.len(),
        want.len(),
        got.get(at),
        want.get(at)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backends::Memory;

    fn workload(form: Form) -> Workload {
        Workload {
            users: 50,
            events: 4_000,
            zipf: 0.0,
            payload: 16,
            history_days: 60,
            spread_days: 120,
            form,
            threads: 1,
            checkpoint_every: 0,
        }
    }

    fn applied(w: &Workload) -> Memory {
        let mut m = Memory::new(w);
        for (user, event) in w.events(0) {
            m.apply(user, event).unwrap();
        }
        m
    }

    #[test]
    fn a_faithful_backend_passes_in_both_forms() {
        for form in [Form::ListAdd, Form::Naive] {
            let w = workload(form);
            let v = check(&mut applied(&w), &w, 0, w.events).unwrap();
            assert!(v.passed(), "{form}: {v:?}");
            assert_eq!((v.counted, v.users), (4_000, 50));
            // About half the events are newer than the cutoff (60 of 120 days).
            assert!(v.elements > 1_000, "{v:?}");
        }
    }

    #[test]
    fn a_lost_doubled_or_changed_append_fails() {
        let w = workload(Form::ListAdd);
        let (user, last) = w.events(0).last().unwrap();
        type Tamper<'a> = Box<dyn Fn(&mut Memory) + 'a>;
        let cases: [(&str, Tamper); 3] = [
            ("lost", Box::new(|m| m.tamper(user, |h| drop(h.pop_back())))),
            (
                "doubled",
                Box::new(|m| m.tamper(user, |h| h.push_back(last.clone()))),
            ),
            (
                "changed",
                Box::new(|m| m.tamper(user, |h| h.back_mut().unwrap().payload[0] ^= 1)),
            ),
        ];
        for (what, tamper) in cases {
            let mut m = applied(&w);
            tamper(&mut m);
            let v = check(&mut m, &w, 0, w.events).unwrap();
            let mismatch = v
                .mismatch
                .unwrap_or_else(|| panic!("{what} append not found"));
            assert!(
                mismatch.starts_with(&format!("user {user}: history")),
                "{mismatch}"
            );
        }
    }
}
