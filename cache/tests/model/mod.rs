//! A model of the store's three state kinds (plain maps and vectors) and
//! random operations on them, shared by the model-based tests.

use proptest::prelude::*;
use std::collections::HashMap;
use strata_cache::{ListState, MapState, StateStore, ValueState};

/// One random operation; `Flush` and `Checkpoint` are the caller's to run.
#[derive(Debug, Clone)]
pub(crate) enum Op {
    Update(u8, u64),
    /// `ValueState::modify`: adds to the value (wrapping), 0 when absent.
    Modify(u8, u64),
    ClearValue(u8),
    Add(u8, u32),
    ClearList(u8),
    Put(u8, u8, u32),
    Remove(u8, u8),
    Flush,
    /// `StateStore::compact`: folds every list's chunks into its value.
    Compact,
    /// A checkpoint, then the store reopened from a copy of it (Flink's
    /// restore after a failover).
    Restore,
}

/// Keys 0..12; flushes now and then.
pub(crate) fn op() -> impl Strategy<Value = Op> {
    let key = 0u8..12;
    prop_oneof![
        4 => (key.clone(), any::<u64>()).prop_map(|(k, v)| Op::Update(k, v)),
        3 => (key.clone(), any::<u64>()).prop_map(|(k, v)| Op::Modify(k, v)),
        1 => key.clone().prop_map(Op::ClearValue),
        4 => (key.clone(), any::<u32>()).prop_map(|(k, v)| Op::Add(k, v)),
        1 => key.clone().prop_map(Op::ClearList),
        3 => (key.clone(), 0u8..4, any::<u32>()).prop_map(|(k, u, v)| Op::Put(k, u, v)),
        1 => (key, 0u8..4).prop_map(|(k, u)| Op::Remove(k, u)),
        1 => Just(Op::Flush),
        1 => Just(Op::Compact),
        1 => Just(Op::Restore),
    ]
}

/// What the store should hold.
#[derive(Default, Clone)]
pub(crate) struct Model {
    values: HashMap<u8, u64>,
    lists: HashMap<u8, Vec<u32>>,
    maps: HashMap<u8, HashMap<u8, u32>>,
}

/// The store's `count`, `events` and `attrs` states.
pub(crate) struct Handles {
    count: ValueState<u64>,
    events: ListState<u32>,
    attrs: MapState<u8, u32>,
}

impl Handles {
    pub(crate) fn of(s: &StateStore) -> Self {
        Self {
            count: s.value_state("count").unwrap(),
            events: s.list_state("events").unwrap(),
            attrs: s.map_state("attrs").unwrap(),
        }
    }

    /// Applies a state operation to the store and the model.
    pub(crate) fn apply(&self, op: &Op, m: &mut Model) {
        match *op {
            Op::Update(k, v) => {
                self.count.update(&[k], v).unwrap();
                m.values.insert(k, v);
            }
            Op::Modify(k, v) => {
                let got = self
                    .count
                    .modify(&[k], |n| {
                        *n = n.wrapping_add(v);
                        *n
                    })
                    .unwrap();
                let want = m.values.entry(k).or_default();
                *want = want.wrapping_add(v);
                assert_eq!(got, *want, "modify of key {k}");
            }
            Op::ClearValue(k) => {
                self.count.clear(&[k]).unwrap();
                m.values.remove(&k);
            }
            Op::Add(k, v) => {
                self.events.add(&[k], v).unwrap();
                m.lists.entry(k).or_default().push(v);
            }
            Op::ClearList(k) => {
                self.events.clear(&[k]).unwrap();
                m.lists.remove(&k);
            }
            Op::Put(k, u, v) => {
                self.attrs.put(&[k], &u, v).unwrap();
                m.maps.entry(k).or_default().insert(u, v);
            }
            Op::Remove(k, u) => {
                self.attrs.remove(&[k], &u).unwrap();
                m.maps.entry(k).or_default().remove(&u);
            }
            Op::Flush | Op::Compact | Op::Restore => {}
        }
    }

    /// Every key of every state reads as the model says.
    pub(crate) fn check(&self, m: &Model) -> Result<(), TestCaseError> {
        // A query's reads first (they must not change what the reads
        // after them see), then the job's.
        for k in 0u8..12 {
            prop_assert_eq!(
                self.count.peek(&[k]).unwrap(),
                m.values.get(&k).copied(),
                "peeked value of key {}",
                k
            );
            let peeked: Vec<u32> = self
                .events
                .peek(&[k])
                .unwrap()
                .map(|l| l.into_iter().map(|(_, v)| v).collect())
                .unwrap_or_default();
            prop_assert_eq!(
                peeked,
                m.lists.get(&k).cloned().unwrap_or_default(),
                "peeked list of key {}",
                k
            );
            for (a, b) in m.maps.get(&k).into_iter().flatten() {
                prop_assert_eq!(
                    self.attrs.peek(&[k], a).unwrap(),
                    Some(*b),
                    "peeked map entry {} of key {}",
                    a,
                    k
                );
            }
        }
        for k in 0u8..12 {
            prop_assert_eq!(
                self.count.get(&[k]).unwrap(),
                m.values.get(&k).copied(),
                "value of key {}",
                k
            );
            let got: Vec<u32> = self.events.get(&[k]).unwrap().iter().copied().collect();
            let want = m.lists.get(&k).cloned().unwrap_or_default();
            prop_assert_eq!(got, want, "list of key {}", k);
            let mut entries = self.attrs.entries(&[k]).unwrap();
            entries.sort();
            let mut want: Vec<(u8, u32)> = m
                .maps
                .get(&k)
                .map(|e| e.iter().map(|(a, b)| (*a, *b)).collect())
                .unwrap_or_default();
            want.sort();
            prop_assert_eq!(entries, want, "map of key {}", k);
        }
        Ok(())
    }
}

/// A store builder in `dir` with the model's three states (a value, a list
/// and a map) and an L1 of `l1_bytes`.
pub(crate) fn builder(dir: &std::path::Path, l1_bytes: u64) -> strata_cache::StoreBuilder {
    strata_cache::StateStore::builder(dir)
        .l1_capacity(l1_bytes)
        .l2_memory(16 << 20)
        .state(strata_cache::StateDescriptor::value("count"))
        .state(strata_cache::StateDescriptor::list("events"))
        .state(strata_cache::StateDescriptor::map("attrs"))
}

/// Copies the files of the checkpoint `from` into a new directory `to`.
pub(crate) fn copy_dir(from: &std::path::Path, to: &std::path::Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), to.join(entry.file_name())).unwrap();
    }
}
