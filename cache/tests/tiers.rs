//! Specifications of the tiered store: model-based tests across L1/L2
//! eviction, read-your-writes under concurrent eviction, TTL in every tier,
//! and snapshots that restore exactly what a checkpoint held.

mod model;

use model::{op, Handles, Model, Op};
use proptest::prelude::*;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use strata_cache::snapshot::{restore, IncrementalUploader};
use strata_cache::{StateDescriptor, StateStore, Ttl};

fn store(dir: &std::path::Path, l1_bytes: u64) -> StateStore {
    model::builder(dir, l1_bytes).open().unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// Whatever the interleaving of writes, evictions, flushes, folds of
    /// the chunk log and restores from checkpoints, every read returns what
    /// a plain in-memory model holds: with an L1 of ~1 KB (a handful of
    /// entries, no front index) and of 16 KiB (about 30 entries of the 72
    /// the ops touch, and a front index of 16, whose hits meet moka's
    /// evictions).
    #[test]
    fn every_read_matches_a_model_while_entries_cross_tiers(ops in proptest::collection::vec(op(), 1..300)) {
        for l1 in [1024, 16 << 10] {
            let dir = tempfile::tempdir().unwrap();
            let mut s = store(&dir.path().join("live"), l1);
            let mut h = Handles::of(&s);
            let mut m = Model::default();
            for (i, op) in ops.iter().enumerate() {
                match op {
                    Op::Flush => s.flush().unwrap(),
                    Op::Compact => s.compact().unwrap(),
                    Op::Restore => {
                        let chk = dir.path().join(format!("chk-{i}"));
                        s.checkpoint(&chk, i as u64 + 1).unwrap();
                        drop((h, s));
                        let live = dir.path().join(format!("live-{i}"));
                        model::copy_dir(&chk, &live);
                        s = store(&live, l1);
                        h = Handles::of(&s);
                    }
                    _ => {}
                }
                h.apply(op, &mut m);
                h.check(&m)?;
            }
        }
    }
}

/// With an L1 of 4 KiB (no front index) and of 16 KiB (a front index of
/// 16 entries, whose hits meet the other threads' evictions).
#[test]
fn read_your_writes_holds_while_other_threads_evict() {
    for l1 in [4096, 16 << 10] {
        read_your_writes_under_eviction(l1);
    }
}

fn read_your_writes_under_eviction(l1: u64) {
    let dir = tempfile::tempdir().unwrap();
    let s = store(dir.path(), l1);
    let threads: Vec<_> = (0..4u8)
        .map(|t| {
            let count = s.value_state::<u64>("count").unwrap();
            let events = s.list_state::<u32>("events").unwrap();
            std::thread::spawn(move || {
                for i in 0..3000u64 {
                    let key = [t, (i % 16) as u8];
                    count.update(&key, i).unwrap();
                    assert_eq!(
                        count.get(&key).unwrap(),
                        Some(i),
                        "thread {t} lost its write to {key:?}"
                    );
                    events.add(&key, i as u32).unwrap();
                    let list = events.get(&key).unwrap();
                    assert_eq!(
                        list.iter().last().copied(),
                        Some(i as u32),
                        "thread {t} lost an append to {key:?}"
                    );
                    assert_eq!(list.len() as u64, i / 16 + 1);
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let stats = s.stats();
    assert!(
        stats.l1_spills > 0,
        "the test must make L1 spill dirty entries: {stats:?}"
    );
    assert!(
        stats.l2_hits > 0,
        "the test must read spilled entries back from L2: {stats:?}"
    );
}

fn ttl_store(dir: &std::path::Path) -> StateStore {
    let ttl = Ttl::event_time(Duration::from_millis(100));
    StateStore::builder(dir)
        .l1_capacity(1 << 20)
        .state(StateDescriptor::value("v").with_ttl(ttl))
        .state(StateDescriptor::list("l").with_ttl(ttl))
        .open()
        .unwrap()
}

#[test]
fn event_time_ttl_hides_expired_state_and_compaction_drops_it() {
    let dir = tempfile::tempdir().unwrap();
    {
        let s = ttl_store(dir.path());
        let (v, l) = (
            s.value_state::<u32>("v").unwrap(),
            s.list_state::<u32>("l").unwrap(),
        );
        s.set_record_timestamp(1_000);
        v.update(b"k", 1).unwrap();
        l.add(b"k", 1).unwrap();
        s.set_record_timestamp(1_050);
        l.add(b"k", 2).unwrap();
        s.clock().advance_watermark(1_099);
        assert_eq!(v.get(b"k").unwrap(), Some(1));
        s.clock().advance_watermark(1_100);
        assert_eq!(
            v.get(b"k").unwrap(),
            None,
            "a value exactly ttl old is expired"
        );
        let left: Vec<u32> = l.get(b"k").unwrap().iter().copied().collect();
        assert_eq!(left, vec![2], "expired list elements are skipped");
        s.flush().unwrap();
        s.clock().advance_watermark(1_150);
        s.compact().unwrap();
    }
    // A fresh store on the same directory has no watermark, so only what the
    // compaction filter physically dropped can be missing.
    let s = ttl_store(dir.path());
    assert_eq!(s.value_state::<u32>("v").unwrap().get(b"k").unwrap(), None);
    assert!(s
        .list_state::<u32>("l")
        .unwrap()
        .get(b"k")
        .unwrap()
        .is_empty());
}

#[test]
fn a_restored_snapshot_holds_exactly_the_checkpointed_state_and_uploads_are_incremental() {
    let dir = tempfile::tempdir().unwrap();
    let storage = dir.path().join("storage");
    let s = store(&dir.path().join("live"), 1 << 20);
    let count = s.value_state::<u64>("count").unwrap();
    let events = s.list_state::<u32>("events").unwrap();
    for k in 0..200u32 {
        count.update(&k.to_be_bytes(), u64::from(k)).unwrap();
        events.add(&k.to_be_bytes(), k).unwrap();
    }
    let mut up = IncrementalUploader::new(&storage, "run1");
    s.checkpoint(&dir.path().join("c1"), 1).unwrap();
    let first = up.upload(&dir.path().join("c1"), "chk-1/op-0").unwrap();
    count.update(&0u32.to_be_bytes(), 999).unwrap();
    events.add(&0u32.to_be_bytes(), 999).unwrap();
    s.checkpoint(&dir.path().join("c2"), 2).unwrap();
    let second = up.upload(&dir.path().join("c2"), "chk-2/op-0").unwrap();
    assert!(first.new_bytes > 0);
    assert!(
        second.new_bytes < second.manifest.total_bytes(),
        "unchanged SST files are referenced, not stored again"
    );
    count.update(&1u32.to_be_bytes(), 12345).unwrap();
    drop((count, events, s));

    restore(&storage, &first.manifest, &dir.path().join("restored")).unwrap();
    let r = store(&dir.path().join("restored"), 1 << 20);
    let count = r.value_state::<u64>("count").unwrap();
    let events = r.list_state::<u32>("events").unwrap();
    assert_eq!(
        count.get(&0u32.to_be_bytes()).unwrap(),
        Some(0),
        "a write after checkpoint 1 is not in it"
    );
    assert_eq!(count.get(&1u32.to_be_bytes()).unwrap(), Some(1));
    assert_eq!(events.get(&0u32.to_be_bytes()).unwrap().len(), 1);
    assert_eq!(count.get(&199u32.to_be_bytes()).unwrap(), Some(199));
}

#[test]
fn a_checkpoint_of_a_dirty_set_many_batches_large_holds_every_value() {
    // L1 of 8 MB writes its dirty set in batches of about 1 MB: 20,000
    // values of 120 bytes take several, and every one must be in the
    // checkpoint, the newest write of each key.
    let dir = tempfile::tempdir().unwrap();
    let (live, chk) = (dir.path().join("live"), dir.path().join("chk-1"));
    let builder =
        |dir: &std::path::Path| model::builder(dir, 8 << 20).state(StateDescriptor::value("blob"));
    let s = builder(&live).open().unwrap();
    let blobs = s.value_state::<Vec<u8>>("blob").unwrap();
    let value = |k: u32, round: u8| vec![round ^ (k as u8); 120];
    for round in 0..2u8 {
        for k in 0..20_000u32 {
            blobs.update(&k.to_be_bytes(), value(k, round)).unwrap();
        }
    }
    s.checkpoint(&chk, 1).unwrap();
    blobs.update(&0u32.to_be_bytes(), vec![]).unwrap();
    drop(blobs);
    s.close().unwrap();
    let r = builder(&dir.path().join("restored"))
        .from_checkpoint(&chk)
        .open()
        .unwrap();
    let blobs = r.value_state::<Vec<u8>>("blob").unwrap();
    for k in 0..20_000u32 {
        assert_eq!(
            blobs.get(&k.to_be_bytes()).unwrap(),
            Some(value(k, 1)),
            "key {k}"
        );
    }
}

/// A value whose serialisation fails when `bad`: a write to L2 that fails
/// after the store took it from L1.
#[derive(Clone, Debug, serde::Deserialize)]
struct Poison {
    bad: bool,
}

impl serde::Serialize for Poison {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        if self.bad {
            return Err(serde::ser::Error::custom("poisoned value"));
        }
        s.serialize_bool(self.bad)
    }
}

#[test]
fn a_checkpoint_whose_write_fails_fails_the_store_for_good() {
    let dir = tempfile::tempdir().unwrap();
    let s = model::builder(&dir.path().join("live"), 8 << 20)
        .state(StateDescriptor::value("poison"))
        .open()
        .unwrap();
    let values = s.value_state::<Poison>("poison").unwrap();
    for k in 0..1_000u32 {
        let bad = k == 700;
        values.update(&k.to_be_bytes(), Poison { bad }).unwrap();
    }
    let first = s.checkpoint(&dir.path().join("chk-1"), 1).unwrap_err();
    // postcard keeps serde's error kind, not its message.
    let names_it = |e: &strata_cache::StateError| {
        let e = e.to_string();
        e.contains("state 'poison'") && e.contains("cannot encode")
    };
    assert!(names_it(&first), "{first}");
    // What the failed flush took from the dirty set is not all in L2: no
    // later checkpoint may complete, and no read may pretend otherwise.
    let again = s.checkpoint(&dir.path().join("chk-2"), 2).unwrap_err();
    assert!(
        again.to_string().contains("failed earlier") && names_it(&again),
        "{again}"
    );
    assert!(!dir.path().join("chk-2").exists());
    let read = values.get(&1u32.to_be_bytes()).unwrap_err();
    assert!(
        read.to_string().contains("failed earlier") && names_it(&read),
        "{read}"
    );
}

/// `modify` sees an expired value as absent, whether L1 holds it or only
/// L2 does, and stamps what it writes with the current record time.
#[test]
fn modify_restarts_an_expired_value_from_the_default_in_every_tier() {
    let dir = tempfile::tempdir().unwrap();
    let add = |v: &strata_cache::ValueState<u32>, key: &[u8], d: u32| {
        v.modify(key, |n| {
            *n += d;
            *n
        })
        .unwrap()
    };
    {
        let s = ttl_store(dir.path());
        let v = s.value_state::<u32>("v").unwrap();
        s.set_record_timestamp(1_000);
        for key in [&b"a"[..], b"b", b"c"] {
            assert_eq!(add(&v, key, 5), 5, "an absent value starts at 0");
            assert_eq!(add(&v, key, 1), 6);
        }
        s.clock().advance_watermark(1_099);
        assert_eq!(add(&v, b"a", 1), 7, "not expired yet");
        s.clock().advance_watermark(1_100);
        s.set_record_timestamp(1_100);
        assert_eq!(add(&v, b"a", 1), 1, "written at 1,000: expired in L1");
        s.clock().advance_watermark(1_199);
        assert_eq!(v.get(b"a").unwrap(), Some(1), "stamped 1,100, not 1,000");
        s.clock().advance_watermark(1_200);
        assert_eq!(v.get(b"a").unwrap(), None);
        s.close().unwrap();
    }
    // A new store: L1 is empty, b and c (written at 1,000) are in L2 only.
    let s = ttl_store(dir.path());
    let v = s.value_state::<u32>("v").unwrap();
    s.clock().advance_watermark(1_099);
    s.set_record_timestamp(1_099);
    assert_eq!(add(&v, b"b", 1), 7, "read from L2, not expired");
    s.clock().advance_watermark(1_100);
    assert_eq!(add(&v, b"c", 1), 1, "expired in L2: restarts at 0");
    assert_eq!(v.get(b"b").unwrap(), Some(7), "b was rewritten at 1,099");
}

#[test]
fn asking_for_an_undeclared_or_mistyped_state_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let s = store(dir.path(), 1 << 20);
    assert!(s.value_state::<u64>("nope").is_err());
    assert!(
        s.list_state::<u32>("count").is_err(),
        "count is a ValueState"
    );
    let _ = s.value_state::<u64>("count").unwrap();
    assert!(s.value_state::<String>("count").is_err(), "count holds u64");
    let _: Arc<_> = Arc::new(s);
}

#[test]
fn two_stores_uploading_into_one_storage_never_share_or_overwrite_a_file() {
    let dir = tempfile::tempdir().unwrap();
    let storage = dir.path().join("storage");
    let mut manifests = Vec::new();
    for op in 0..2u64 {
        let s = store(&dir.path().join(format!("live-{op}")), 1 << 20);
        let count = s.value_state::<u64>("count").unwrap();
        for k in 0..100u32 {
            count
                .update(&k.to_be_bytes(), op * 1000 + u64::from(k))
                .unwrap();
        }
        let local = dir.path().join(format!("c-{op}"));
        s.checkpoint(&local, 1).unwrap();
        // Both stores name their first SST files alike; the prefixes keep them apart.
        let up = IncrementalUploader::new(&storage, &format!("run1-op{op}"))
            .upload(&local, &format!("chk-1/op-{op}"))
            .unwrap();
        manifests.push(up.manifest);
    }
    for (op, manifest) in manifests.iter().enumerate() {
        let target = dir.path().join(format!("restored-{op}"));
        restore(&storage, manifest, &target).unwrap();
        let r = store(&target, 1 << 20);
        let count = r.value_state::<u64>("count").unwrap();
        assert_eq!(
            count.get(&7u32.to_be_bytes()).unwrap(),
            Some(op as u64 * 1000 + 7)
        );
    }
}

#[derive(Debug, Clone)]
enum TtlOp {
    Add(u8, i64, u32),
    Watermark(i64),
    Flush,
    Compact,
}

fn ttl_op() -> impl Strategy<Value = TtlOp> {
    prop_oneof![
        6 => (0u8..6, -3i64..6, any::<u32>()).prop_map(|(k, dt, v)| TtlOp::Add(k, dt, v)),
        3 => (0i64..8).prop_map(TtlOp::Watermark),
        1 => Just(TtlOp::Flush),
        1 => Just(TtlOp::Compact),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// A list with an event-time TTL of 10 ms returns exactly the elements
    /// written after `watermark − 10`, whether they sit in L1 (trimmed in
    /// place, in or out of timestamp order), in L2 as merge operands, or were
    /// rewritten by the compaction filter.
    #[test]
    fn ttl_lists_return_exactly_the_unexpired_elements_in_every_tier(ops in proptest::collection::vec(ttl_op(), 1..200)) {
        let dir = tempfile::tempdir().unwrap();
        let s = StateStore::builder(dir.path())
            .l1_capacity(600)
            .state(StateDescriptor::list("l").with_ttl(Ttl::event_time(Duration::from_millis(10))))
            .open()
            .unwrap();
        let l = s.list_state::<u32>("l").unwrap();
        let (mut now, mut watermark) = (100i64, i64::MIN);
        let mut model: HashMap<u8, Vec<(i64, u32)>> = HashMap::new();
        for op in ops {
            match op {
                TtlOp::Add(k, dt, v) => {
                    let ts = now + dt;
                    now = now.max(ts);
                    if watermark != i64::MIN && ts + 10 <= watermark { continue; } // late: the runtime refuses it
                    s.set_record_timestamp(ts);
                    l.add(&[k], v).unwrap();
                    model.entry(k).or_default().push((ts, v));
                }
                TtlOp::Watermark(d) => {
                    watermark = watermark.max(now - 8 + d);
                    s.clock().advance_watermark(watermark);
                }
                TtlOp::Flush => s.flush().unwrap(),
                TtlOp::Compact => { s.flush().unwrap(); s.compact().unwrap(); }
            }
            for k in 0u8..6 {
                let want: Vec<u32> = model.get(&k).map(|v| v.iter().filter(|(ts, _)| watermark == i64::MIN || ts + 10 > watermark).map(|(_, v)| *v).collect()).unwrap_or_default();
                // A query's read first: it must hide the same elements.
                let peeked: Vec<u32> = l.peek(&[k]).unwrap().unwrap_or_default().into_iter().map(|(_, v)| v).collect();
                prop_assert_eq!(&peeked, &want, "peek of key {} at watermark {}", k, watermark);
                let got: Vec<u32> = l.get(&[k]).unwrap().iter().copied().collect();
                prop_assert_eq!(got, want, "key {} at watermark {}", k, watermark);
            }
        }
    }
}

/// An L1 of capacity 0 holds nothing, so every write goes to L2 and every
/// value is still there (moka at capacity 0 dropped entries unannounced).
#[test]
fn an_l1_of_capacity_zero_loses_no_value() {
    let dir = tempfile::tempdir().unwrap();
    let s = store(dir.path(), 0);
    let count = s.value_state::<u64>("count").unwrap();
    for k in 0u64..10_000 {
        count.update(&k.to_be_bytes(), k + 1).unwrap();
    }
    for k in 0u64..10_000 {
        assert_eq!(count.get(&k.to_be_bytes()).unwrap(), Some(k + 1), "key {k}");
    }
}

/// The bytes L2 holds for `state` after a full compaction (with `ttl`, or
/// none), having written `days` days of blind appends for 200 keys; figures
/// at each 30th day.
fn blind_appends(ttl: Option<Ttl>, days: i64) -> Vec<u64> {
    const DAY: i64 = 86_400_000;
    let dir = tempfile::tempdir().unwrap();
    let mut history = StateDescriptor::list("history");
    if let Some(ttl) = ttl {
        history = history.with_ttl(ttl);
    }
    // An L1 of one byte: every add is a blind RocksDB merge.
    let s = StateStore::builder(dir.path())
        .l1_capacity(1)
        .state(history)
        .open()
        .unwrap();
    let list = s.list_state::<u64>("history").unwrap();
    let mut sizes = Vec::new();
    for day in 0..days {
        for key in 0..200u32 {
            for n in 0..2 {
                let ts = day * DAY + i64::from(key) * 1000 + n;
                s.set_record_timestamp(ts);
                s.clock().advance_watermark(ts);
                list.add(&key.to_be_bytes(), ts as u64).unwrap();
            }
        }
        if day % 30 == 29 {
            s.flush().unwrap();
            s.compact().unwrap();
            sizes.push(s.stats().l2_bytes);
        }
    }
    sizes
}

#[test]
fn lists_written_only_by_blind_appends_plateau_once_the_ttl_window_is_full() {
    let ttl = Ttl::event_time(Duration::from_secs(60 * 86_400));
    let with_ttl = blind_appends(Some(ttl), 720);
    let without = blind_appends(None, 720);
    let (at_360, at_720) = (with_ttl[11], with_ttl[23]);
    // Once 60 days are full, state stays about one window large ...
    assert!(
        at_720 < at_360 * 3 / 2,
        "L2 kept growing: {at_360} B at day 360, {at_720} B at day 720 ({with_ttl:?})"
    );
    // ... while without a TTL it holds all 720 days.
    assert!(
        at_720 * 5 < without[23],
        "expired appends were not removed: {at_720} B with a TTL, {} B without",
        without[23]
    );
}

#[test]
fn a_list_over_its_per_key_limit_is_an_error_naming_the_key_in_memory_and_on_disk() {
    let dir = tempfile::tempdir().unwrap();
    let build = |dir: &std::path::Path, l1: u64| {
        StateStore::builder(dir)
            .l1_capacity(l1)
            .max_list_bytes(1_000)
            .state(StateDescriptor::list("history"))
            .open()
            .unwrap()
    };
    // In L1: the append that would pass the limit is refused, the list kept.
    let s = build(&dir.path().join("hot"), 1 << 20);
    let list = s.list_state::<Vec<u8>>("history").unwrap();
    // A read brings the list into L1 (as route-history's add-then-read does).
    list.add(b"user-7", vec![7; 40]).unwrap();
    assert_eq!(list.get(b"user-7").unwrap().len(), 1);
    let mut added = 1;
    let e = loop {
        assert!(added < 1000, "the limit was never enforced");
        match list.add(b"user-7", vec![7; 40]) {
            Ok(()) => added += 1,
            Err(e) => break e.to_string(),
        }
    };
    assert!(
        e.contains("key \"user-7\"") && e.contains("limit of 1000 bytes"),
        "{e}"
    );
    assert_eq!(list.get(b"user-7").unwrap().len(), added);
    // Blind appends (L1 of one byte: they reach L2 as merges) are
    // found out by an append to a list L1 holds past the limit, or else by the
    // next read of the whole list.
    let s = build(&dir.path().join("cold"), 1);
    let list = s.list_state::<Vec<u8>>("history").unwrap();
    let refused = (0..40).find_map(|_| list.add(b"user-8", vec![8; 40]).err());
    let e = match refused {
        Some(e) => e.to_string(),
        None => list.get(b"user-8").err().unwrap().to_string(),
    };
    assert!(
        e.contains("key \"user-8\"") && e.contains("state.max-list-bytes"),
        "{e}"
    );
}

/// Many keys' lists appended to (never read) under an L1 far smaller than
/// them, with flushes between: the appends reach L2 through the write
/// buffer (written when full and at flushes), and every list must read
/// back exactly as appended, each element once and in order; with `ttl`
/// (event time, 10 ms per append), the elements newer than the cutoff.
fn blind_appends_read_back_exactly(ttl: Option<std::time::Duration>) {
    let dir = tempfile::tempdir().unwrap();
    let history = StateDescriptor::list("history");
    let s = StateStore::builder(dir.path().join("l2"))
        .l1_capacity(16 << 10)
        .state(match ttl {
            Some(t) => history.with_ttl(strata_cache::Ttl::event_time(t)),
            None => history,
        })
        .state(StateDescriptor::value("count"))
        .open()
        .unwrap();
    let list = s.list_state::<u64>("history").unwrap();
    let count = s.value_state::<u64>("count").unwrap();
    let mut model: Vec<Vec<u64>> = vec![Vec::new(); 300];
    let mut x = 11u64;
    for i in 0..30_000u64 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let user = (x % model.len() as u64) as usize;
        let key = (user as u64).to_be_bytes();
        s.set_record_timestamp(i as i64 * 10);
        if ttl.is_some() && i % 1024 == 0 {
            s.clock().advance_watermark(i as i64 * 10);
        }
        list.add(&key, i).unwrap();
        let n = count.get(&key).unwrap().unwrap_or(0);
        count.update(&key, n + 1).unwrap();
        model[user].push(i);
        if i % 5_000 == 4_999 {
            s.flush().unwrap();
        }
    }
    let cutoff = ttl.map_or(i64::MIN, |t| 29_999 * 10 - t.as_millis() as i64);
    for (user, want) in model.iter().enumerate() {
        let key = (user as u64).to_be_bytes();
        let newer = |i: &u64| *i as i64 * 10 > cutoff;
        let got: Vec<u64> = list
            .get(&key)
            .unwrap()
            .iter()
            .copied()
            .filter(newer)
            .collect();
        let want: Vec<u64> = want.iter().copied().filter(newer).collect();
        assert_eq!(got, want, "user {user}");
        assert_eq!(
            count.get(&key).unwrap(),
            Some(model[user].len() as u64).filter(|n| *n > 0)
        );
    }
}

#[test]
fn blind_appends_under_a_tiny_l1_read_back_exactly() {
    blind_appends_read_back_exactly(None);
}

#[test]
fn blind_appends_with_ttl_under_a_tiny_l1_read_back_exactly() {
    blind_appends_read_back_exactly(Some(std::time::Duration::from_secs(100)));
}

/// A query's read (`peek`) finds a key in L2 without moving it to L1: the
/// job's next read of it is still an L1 miss, and the peek itself counts
/// no L1 hit or miss.
#[test]
fn a_peek_reads_l2_without_promoting_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let s = store(dir.path(), 16 << 10);
    let events = s.list_state::<u32>("events").unwrap();
    let count = s.value_state::<u64>("count").unwrap();
    for k in 0u32..2_000 {
        events.add(&k.to_be_bytes(), k).unwrap();
        count.update(&k.to_be_bytes(), u64::from(k)).unwrap();
    }
    s.flush().unwrap();
    // Key 0 was written first: long evicted from a 16 KiB L1.
    let key = 0u32.to_be_bytes();
    let before = s.stats();
    let list = events.peek(&key).unwrap().expect("key 0's list");
    assert_eq!(list.iter().map(|(_, v)| *v).collect::<Vec<_>>(), vec![0]);
    assert_eq!(count.peek(&key).unwrap(), Some(0));
    let after = s.stats();
    assert_eq!(
        (after.l1_hits, after.l1_misses),
        (before.l1_hits, before.l1_misses)
    );
    assert!(after.l2_hits > before.l2_hits, "the peeks did not read L2");
    events.get(&key).unwrap();
    assert_eq!(
        s.stats().l1_misses,
        before.l1_misses + 1,
        "the peek promoted the list"
    );
    assert_eq!(
        events.peek(&9_999u32.to_be_bytes()).unwrap(),
        None,
        "a key never written"
    );
}

/// A key the store has never seen is an L2 miss wherever its first read
/// comes from (a value's read, a list's read after its first append, a
/// map's), never an L2 hit.
#[test]
fn a_first_seen_key_is_an_l2_miss_not_a_hit() {
    let dir = tempfile::tempdir().unwrap();
    let s = store(dir.path(), 16 << 10);
    let events = s.list_state::<u32>("events").unwrap();
    let count = s.value_state::<u64>("count").unwrap();
    for k in 0u32..100 {
        let key = k.to_be_bytes();
        assert_eq!(count.get(&key).unwrap(), None);
        events.add(&key, k).unwrap();
        assert_eq!(
            events
                .get(&key)
                .unwrap()
                .iter()
                .copied()
                .collect::<Vec<_>>(),
            vec![k]
        );
        count.update(&key, 1).unwrap();
    }
    let stats = s.stats();
    assert_eq!(stats.l2_hits, 0, "{stats:?}");
    assert!(stats.l2_misses >= 100, "{stats:?}");
}
