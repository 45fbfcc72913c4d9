//! criterion micro-benchmarks of the state hot paths, so that regressions
//! show: a `ValueState` get and update answered by L1, the same answered by
//! L2 (an L1 far smaller than the keys, the keys in compacted SST files,
//! not the memtable), a read-modify-write (`get` then `update`) of an L1
//! key, `ListState::add`, and a checkpoint of 100,000 dirty keys.
//!
//! ```text
//! cargo bench -p strata-bench --bench state
//! ```
//!
//! Keys are 8-byte user ids drawn at random from the set written beforehand;
//! values are `u64` counters, list elements 100-byte payloads.

use criterion::{criterion_group, criterion_main, BatchSize, Criterion};
use rand::{Rng, SeedableRng};
use std::hint::black_box;
use strata_cache::{ListState, StateDescriptor, StateStore, ValueState};

/// The allocator of the `strata` binary, so the figures are what it runs.
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// Keys written before measuring.
const KEYS: u64 = 100_000;

struct Fixture {
    _dir: tempfile::TempDir,
    store: StateStore,
    count: ValueState<u64>,
    history: ListState<Vec<u8>>,
}

impl Fixture {
    /// A store with an L1 of `l1_bytes` and [`KEYS`] counters written and
    /// flushed to L2.
    fn new(l1_bytes: u64) -> Self {
        let dir = tempfile::tempdir().expect("temporary directory");
        let store = StateStore::builder(dir.path().join("l2"))
            .l1_capacity(l1_bytes)
            .state(StateDescriptor::value("count"))
            .state(StateDescriptor::list("history"))
            .open()
            .expect("open store");
        let count = store.value_state("count").expect("count state");
        for user in 0..KEYS {
            count.update(&user.to_be_bytes(), user).expect("update");
        }
        store.flush().expect("flush");
        // Into SST files, compacted: an L2 read then reads a file.
        store.compact().expect("compact");
        Self {
            history: store.list_state("history").expect("history state"),
            count,
            store,
            _dir: dir,
        }
    }
}

/// Random keys among the [`KEYS`] written, the same sequence every run.
fn keys() -> impl FnMut() -> [u8; 8] {
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    move || rng.random_range(0..KEYS).to_be_bytes()
}

fn value_state(c: &mut Criterion, tier: &str, l1_bytes: u64) {
    let f = Fixture::new(l1_bytes);
    // Warm L1 with every key when it can hold them.
    for user in 0..KEYS {
        black_box(f.count.get(&user.to_be_bytes()).expect("get"));
    }
    c.bench_function(&format!("{tier} hit get"), |b| {
        b.iter_batched(keys(), |k| f.count.get(&k), BatchSize::SmallInput)
    });
    let f = Fixture::new(l1_bytes);
    c.bench_function(&format!("{tier} put"), |b| {
        b.iter_batched(keys(), |k| f.count.update(&k, 1), BatchSize::SmallInput)
    });
    c.bench_function(&format!("{tier} read-modify-write"), |b| {
        b.iter_batched(
            keys(),
            |k| {
                let n = f.count.get(&k)?.unwrap_or(0);
                f.count.update(&k, n + 1)
            },
            BatchSize::SmallInput,
        )
    });
    c.bench_function(&format!("{tier} modify"), |b| {
        b.iter_batched(
            keys(),
            |k| f.count.modify(&k, |n| *n += 1),
            BatchSize::SmallInput,
        )
    });
    black_box(f.store.stats());
}

fn l1(c: &mut Criterion) {
    value_state(c, "L1", 256 << 20);
}

fn l2(c: &mut Criterion) {
    value_state(c, "L2", 64 << 10);
}

fn list_add(c: &mut Criterion) {
    let f = Fixture::new(64 << 20);
    let payload = vec![7u8; 100];
    let mut key = keys();
    c.bench_function("list add", |b| {
        b.iter_batched(
            || (key(), payload.clone()),
            |(k, p)| f.history.add(&k, p),
            BatchSize::SmallInput,
        )
    });
}

/// A checkpoint (flush of the dirty set, RocksDB checkpoint) after
/// 100,000 keys were updated in L1.
fn checkpoint(c: &mut Criterion) {
    let f = Fixture::new(256 << 20);
    let dirs = tempfile::tempdir().expect("temporary directory");
    let mut id = 0u64;
    c.bench_function("checkpoint of 100,000 dirty keys", |b| {
        b.iter_batched(
            || {
                for user in 0..KEYS {
                    f.count.update(&user.to_be_bytes(), id).expect("update");
                }
                id += 1;
                (dirs.path().join(format!("chk-{id}")), id)
            },
            |(dir, id)| f.store.checkpoint(&dir, id),
            BatchSize::PerIteration,
        )
    });
}

criterion_group!(benches, l1, l2, list_add, checkpoint);
criterion_main!(benches);
