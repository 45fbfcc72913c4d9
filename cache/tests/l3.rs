//! Specifications of the Cassandra cold tier, against the real Cassandra
//! that `scripts/cassandra.sh start` runs (absent, these tests fail): a
//! model-based test with keys crossing all three tiers through
//! checkpoint-gated eviction, versioned writes, and migration mode on an
//! existing `user_events` table.

mod model;

use model::{op, Handles, Model, Op};
use proptest::prelude::*;
use std::sync::Arc;
use std::time::Duration;
use strata_cache::l3::{CassandraTier, L3Config, MigrationTable};
use strata_cache::{ColdTier, ColdWrite, StateDescriptor, StateStore, Ttl};
use strata_tests::cassandra::{contact_point, unique_keyspace, Cql};

fn tier(keyspace: &str, lineage: i64, migration: Option<MigrationTable>) -> Arc<CassandraTier> {
    let mut c = L3Config::new(vec![contact_point()], lineage);
    c.keyspace = keyspace.into();
    c.migration = migration;
    Arc::new(CassandraTier::connect(c).expect("Cassandra answers (scripts/cassandra.sh start)"))
}

fn store(dir: &std::path::Path, cold: Arc<CassandraTier>) -> StateStore {
    model::builder(dir, 1024)
        .l2_capacity(1)
        .cold_tier(cold)
        .open()
        .unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(12))]

    /// With an L2 capacity of one byte every checkpoint moves every key L1
    /// does not hold to Cassandra once it completes; whatever the
    /// interleaving, every read (L1 → L2 → L3, read-ahead or not) returns
    /// what the model holds, and nothing reaches L3 before completion.
    #[test]
    fn every_read_matches_a_model_while_keys_move_to_l3_at_checkpoints(
        ops in proptest::collection::vec(op(), 1..120)
    ) {
        let ks = unique_keyspace("model");
        let dir = tempfile::tempdir().unwrap();
        let cold = tier(&ks, 1_000_000, None);
        let mut s = store(&dir.path().join("l2"), cold.clone());
        let mut h = Handles::of(&s);
        let mut m = Model::default();
        let mut id = 0u64;
        for op in ops {
            if let Op::Flush | Op::Restore = op {
                id += 1;
                let chk = dir.path().join(format!("chk-{id}"));
                s.checkpoint(&chk, id).unwrap();
                let writes_before = cold.stats().writes;
                h.check(&m)?;
                prop_assert_eq!(cold.stats().writes, writes_before, "L3 written before completion");
                s.checkpoint_completed(id).unwrap();
                if let Op::Restore = op {
                    drop((h, s));
                    let live = dir.path().join(format!("l2-{id}"));
                    model::copy_dir(&chk, &live);
                    s = store(&live, cold.clone());
                    // As the runtime does, and as `StoreBuilder::from_checkpoint`
                    // asks: the restored checkpoint completed, so its pick's
                    // move (which the first store ran) is finished before a read.
                    s.checkpoint_completed(id).unwrap();
                    h = Handles::of(&s);
                }
                // Read ahead as the runtime does before a batch of records.
                let keys: Vec<[u8; 1]> = (0u8..12).map(|k| [k]).collect();
                s.prefetch(keys.iter().map(|k| &k[..])).unwrap();
            }
            if let Op::Compact = op {
                s.compact().unwrap();
            }
            h.apply(&op, &mut m);
            h.check(&m)?;
        }
    }
}

#[test]
fn an_older_checkpoints_write_never_overwrites_a_newer_one() {
    let ks = unique_keyspace("versions");
    let cold = tier(&ks, 5_000_000, None);
    let value = StateDescriptor::value("count");
    let list = StateDescriptor::list("events");
    let dir = tempfile::tempdir().unwrap();
    // Encodings come from a store, so that the bytes are what strata writes.
    let s = StateStore::builder(dir.path())
        .cold_tier(cold.clone())
        .l2_capacity(1)
        .state(value.clone())
        .state(list.clone())
        .open()
        .unwrap();
    let count = s.value_state::<u64>("count").unwrap();
    let events = s.list_state::<u32>("events").unwrap();
    let encoded = |v: u64, items: &[u32]| {
        count.update(b"k", v).unwrap();
        events.update(b"k", items.to_vec()).unwrap();
        s.flush().unwrap();
        let d = tempfile::tempdir().unwrap();
        s.checkpoint(&d.path().join("c"), 1).unwrap();
        let v = cold_bytes(&s, "count");
        let l = cold_bytes(&s, "events");
        (v, l)
    };
    let (new_value, new_list) = encoded(2, &[7, 8]);
    let (old_value, old_list) = encoded(1, &[5]);
    let key = stored_key(b"k");
    let write = |tier: &CassandraTier, v: &[u8], l: &[u8], id| {
        tier.write(
            &[
                ColdWrite {
                    state: &value,
                    stored_key: &key,
                    bytes: v,
                },
                ColdWrite {
                    state: &list,
                    stored_key: &key,
                    bytes: l,
                },
            ],
            id,
        )
    };
    cold.claim(1, 0, false).unwrap();
    write(&cold, &new_value, &new_list, 9).unwrap();
    // Another run of the same job restored from checkpoint 4 is fenced off…
    let zombie = tier(&ks, 5_000_000, None);
    let fenced = zombie.claim(2, 4, false).unwrap_err();
    assert!(fenced.to_string().contains("fenced"), "{fenced}");
    // …the run it would replace is not…
    write(&cold, &new_value, &new_list, 9).unwrap(); // a repeat: harmless
                                                     // …and a write that slips past the fence with an older version loses.
    cold.pin_version(4, cold.version_of(9) - 10);
    write(&cold, &old_value, &old_list, 4).unwrap();
    assert_eq!(
        cold.get(&value, &key).unwrap().as_deref(),
        Some(&new_value[..])
    );
    let got = cold.get(&list, &key).unwrap().unwrap();
    assert_eq!(
        got,
        new_list[12..],
        "the list L3 holds (without the base marker)"
    );
}

/// The stored key of record key `k` in a store of 128 key groups.
fn stored_key(k: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    strata_cache::codec::put_stored_key(&mut out, strata_cache::key_group::key_group_of(k, 128), k);
    out
}

/// What the store would write to L3 for key `k` of `state` right now: L2's
/// bytes after a flush and a fold of the chunk log (a move to L3 writes a
/// list's whole folded value).
fn cold_bytes(s: &StateStore, state: &str) -> Vec<u8> {
    let d = tempfile::tempdir().unwrap();
    s.compact().unwrap();
    s.checkpoint(&d.path().join("c"), 1).unwrap();
    let cfs = [
        ("count", rocksdb::Options::default()),
        ("events", strata_cache::list_read_options()),
        ("default", rocksdb::Options::default()),
    ]
    .map(|(name, opts)| rocksdb::ColumnFamilyDescriptor::new(name, opts));
    let db = rocksdb::DB::open_cf_descriptors_read_only(
        &rocksdb::Options::default(),
        d.path().join("c"),
        cfs,
        false,
    )
    .unwrap();
    let cf = db.cf_handle(state).unwrap();
    db.get_cf(&cf, stored_key(b"k")).unwrap().unwrap()
}

#[test]
fn migration_mode_reads_the_old_jobs_rows_and_its_versioned_writes_win() {
    let cql = Cql::connect();
    let ks = unique_keyspace("migrate");
    cql.query(&format!(
        "CREATE KEYSPACE {ks} WITH replication = {{'class': 'SimpleStrategy', 'replication_factor': 1}}"
    ));
    cql.query(&format!(
        "CREATE TABLE {ks}.user_events (user_id text, event_time timestamp, payload blob, PRIMARY KEY (user_id, event_time))"
    ));
    // The old job's rows, written with ordinary client timestamps.
    for (t, p) in [(1_000, "a"), (2_000, "bb")] {
        cql.query(&format!(
            "INSERT INTO {ks}.user_events (user_id, event_time, payload) VALUES ('u1', {t}, textAsBlob('{p}'))"
        ));
    }
    let migration = MigrationTable {
        state: "events".into(),
        table: "user_events".into(),
        key_column: "user_id".into(),
        time_column: "event_time".into(),
        value_column: "payload".into(),
    };
    let now_us = chrono_like_now_us();
    let cold = tier(&ks, now_us, Some(migration));
    let dir = tempfile::tempdir().unwrap();
    // An L1 of one byte holds nothing: every key is cold at once.
    let s = StateStore::builder(dir.path())
        .l1_capacity(1)
        .cold_tier(cold.clone())
        .l2_capacity(1)
        .state(StateDescriptor::list("events"))
        .open()
        .unwrap();
    let events = s.list_state::<Vec<u8>>("events").unwrap();
    let got: Vec<(i64, Vec<u8>)> = events
        .get(b"u1")
        .unwrap()
        .iter_with_timestamps()
        .map(|(t, p)| (t, p.clone()))
        .collect();
    assert_eq!(got, vec![(1_000, b"a".to_vec()), (2_000, b"bb".to_vec())]);
    s.set_record_timestamp(3_000);
    events.add(b"u1", b"ccc".to_vec()).unwrap();
    let evict = |id: u64| {
        // Reads of other users make moka's housekeeping drop u1 from the
        // one-byte L1 (L1 keeps hot keys out of eviction).
        for u in 0..200 {
            events.get(format!("other-{u}").as_bytes()).unwrap();
        }
        s.checkpoint(&dir.path().join(format!("chk-{id}")), id)
            .unwrap();
        s.checkpoint_completed(id).unwrap()
    };
    let report = evict(1);
    assert!(report.moved >= 1, "u1 moved to L3: {report:?}");
    // Other readers of the table see strata's row, in the old schema.
    let rows = cql.query(&format!(
        "SELECT event_time, blobAsText(payload), writetime(payload) FROM {ks}.user_events WHERE user_id = 'u1'"
    ));
    let texts: Vec<String> = rows.iter().map(|r| format!("{:?}", r.columns[1])).collect();
    assert_eq!(texts.len(), 3, "{texts:?}");
    assert!(texts[2].contains("ccc"), "{texts:?}");
    let again: Vec<Vec<u8>> = events.get(b"u1").unwrap().iter().cloned().collect();
    assert_eq!(again, vec![b"a".to_vec(), b"bb".to_vec(), b"ccc".to_vec()]);
    // Clearing u1 deletes the partition with strata's version, which wins
    // over the old job's client timestamps: no row of u1 is left.
    events.clear(b"u1").unwrap();
    evict(2);
    let rows = cql.query(&format!(
        "SELECT event_time FROM {ks}.user_events WHERE user_id = 'u1'"
    ));
    assert!(
        rows.is_empty(),
        "the old job's rows survived strata's deletion: {rows:?}"
    );
    assert!(events.get(b"u1").unwrap().is_empty());
}

fn chrono_like_now_us() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_micros() as i64
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(16))]

    /// route-history in miniature: appends in event-time order with a TTL,
    /// each followed by a read of the key's window, checkpoints (and cold
    /// eviction with an L2 of one byte) every few records, reads ahead as
    /// the runtime does. Every read equals the model's unexpired elements.
    #[test]
    fn ttl_lists_read_back_exactly_across_all_three_tiers(
        keys in proptest::collection::vec(0u8..40, 50..1500),
        every in 3usize..60,
        l1 in prop_oneof![Just(1u64), Just(2048u64), Just(16384u64)],
        lag in 0u64..3,
        watermark_lag in 0i64..60,
    ) {
        let ks = unique_keyspace("ttl");
        let dir = tempfile::tempdir().unwrap();
        let cold = tier(&ks, 2_000_000, None);
        let s = StateStore::builder(dir.path().join("l2"))
            .l1_capacity(l1)
            .l2_capacity(1)
            .cold_tier(cold)
            .state(StateDescriptor::value("timers"))
            .state(StateDescriptor::list("events").with_ttl(Ttl::event_time(Duration::from_millis(100))))
            .open()
            .unwrap();
        let events = s.list_state::<u32>("events").unwrap();
        let timers = s.value_state::<u64>("timers").unwrap();
        let mut model: std::collections::HashMap<u8, Vec<(i64, u32)>> = Default::default();
        let mut id = 0;
        for (i, k) in keys.iter().enumerate() {
            let ts = 10 * i as i64;
            s.set_record_timestamp(ts);
            s.clock().advance_watermark(ts - watermark_lag);
            if i % every == 0 {
                id += 1;
                timers.update(b"t", id).unwrap();
                s.checkpoint(&dir.path().join(format!("c{id}")), id).unwrap();
                // Completion notices arrive late, or are lost and subsumed.
                s.checkpoint_completed(id.saturating_sub(lag)).unwrap();
                s.prefetch(keys[i..(i + every).min(keys.len())].iter().map(std::slice::from_ref)).unwrap();
            }
            events.add(&[*k], i as u32).unwrap();
            model.entry(*k).or_default().push((ts, i as u32));
            let got: Vec<u32> = events.get(&[*k]).unwrap().iter().copied().collect();
            // Event-time TTL measures against the watermark.
            let cutoff = s.clock().watermark() - 100;
            let want: Vec<u32> = model[k].iter().filter(|(t, _)| *t > cutoff).map(|(_, v)| *v).collect();
            prop_assert_eq!(got, want, "key {} after record {}", k, i);
        }
    }
}

#[test]
fn a_migration_table_of_another_shape_is_a_clear_error_at_connect() {
    let cql = Cql::connect();
    let ks = unique_keyspace("shape");
    cql.query(&format!(
        "CREATE KEYSPACE {ks} WITH replication = {{'class': 'SimpleStrategy', 'replication_factor': 1}}"
    ));
    cql.query(&format!(
        "CREATE TABLE {ks}.user_events (user_id text, event_time bigint, payload text, PRIMARY KEY (user_id, event_time))"
    ));
    let migration = |table: &str| MigrationTable {
        state: "events".into(),
        table: table.into(),
        key_column: "user_id".into(),
        time_column: "event_time".into(),
        value_column: "payload".into(),
    };
    let connect = |table: &str| {
        let mut c = L3Config::new(vec![contact_point()], 1);
        c.keyspace = ks.clone();
        c.migration = Some(migration(table));
        CassandraTier::connect(c)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default()
    };
    let wrong_type = connect("user_events");
    assert!(
        wrong_type.contains("event_time") && wrong_type.contains("must be timestamp, is bigint"),
        "{wrong_type}"
    );
    let missing = connect("no_such_table");
    assert!(missing.contains("does not exist"), "{missing}");
    // A sequence in the clustering key (events with equal times) is a
    // column strata cannot fill: refused at connect, naming it.
    cql.query(&format!(
        "CREATE TABLE {ks}.with_seq (user_id text, event_time timestamp, seq int, payload blob, PRIMARY KEY (user_id, event_time, seq))"
    ));
    let extra_key = connect("with_seq");
    assert!(
        extra_key.contains("primary key must be (user_id, event_time)")
            && extra_key.contains("seq (clustering)"),
        "{extra_key}"
    );
    // The time column must cluster the rows, not be a plain column.
    cql.query(&format!(
        "CREATE TABLE {ks}.by_user (user_id text PRIMARY KEY, event_time timestamp, payload blob)"
    ));
    let regular = connect("by_user");
    assert!(
        regular.contains("must be its clustering column, is regular"),
        "{regular}"
    );
}

/// A store whose L2 holds one byte (every checkpoint moves every key L1
/// does not hold) with a list state of 100 ms event-time TTL.
fn ttl_store(dir: &std::path::Path, cold: Arc<CassandraTier>) -> StateStore {
    StateStore::builder(dir)
        .l1_capacity(1)
        .l2_capacity(1)
        .cold_tier(cold)
        .state(
            StateDescriptor::list("events").with_ttl(Ttl::event_time(Duration::from_millis(100))),
        )
        .open()
        .unwrap()
}

#[test]
fn a_move_repeated_after_a_restore_writes_the_same_cells_though_the_watermark_moved_on() {
    let cql = Cql::connect();
    let ks = unique_keyspace("repeat");
    let dir = tempfile::tempdir().unwrap();
    let cold = tier(&ks, 3_000_000, None);
    let a = ttl_store(&dir.path().join("a"), cold.clone());
    let events = a.list_state::<u32>("events").unwrap();
    for i in 0..200u32 {
        let ts = 10 * i64::from(i);
        a.set_record_timestamp(ts);
        a.clock().advance_watermark(ts - 500);
        events.add(&[(i % 10) as u8], i).unwrap();
    }
    // Checkpoint 1 picks every key; its move reaches L3 — then the
    // process dies before L2 forgets them (the `before-l2-delete` crash).
    a.checkpoint(&dir.path().join("chk-1"), 1).unwrap();
    a.checkpoint_completed(1).unwrap();
    let version = cold.version_of(1);
    let written = cql.fingerprint(&ks);
    assert_eq!(written.len(), 60, "the unexpired elements at the barrier");
    drop((events, a));

    // The restored run repeats the move, its watermark already further on
    // (more elements have expired by now): the cells must be the same.
    let cold = tier(&ks, 3_000_000, None);
    cold.claim(42, 1, true).unwrap();
    cold.pin_version(1, version);
    model::copy_dir(&dir.path().join("chk-1"), &dir.path().join("b"));
    let b = ttl_store(&dir.path().join("b"), cold);
    b.clock().advance_watermark(1990 + 60);
    b.checkpoint_completed(1).unwrap();
    assert_eq!(
        cql.fingerprint(&ks),
        written,
        "the repeated move wrote other cells"
    );
}

#[test]
fn expired_cold_elements_are_swept_from_l3_and_reads_stay_exact() {
    let cql = Cql::connect();
    let ks = unique_keyspace("sweep");
    let dir = tempfile::tempdir().unwrap();
    let cold = tier(&ks, 4_000_000, None);
    let s = ttl_store(&dir.path().join("l2"), cold.clone());
    let events = s.list_state::<u32>("events").unwrap();
    let desc =
        StateDescriptor::list("events").with_ttl(Ttl::event_time(Duration::from_millis(100)));
    // Ten rounds of 100 ms of event time: each round's elements move to L3
    // and the keys are never read again; every round sweeps the whole ring.
    let mut most = 0;
    for round in 0..10i64 {
        for i in 0..50i64 {
            let ts = round * 100 + 2 * i;
            s.set_record_timestamp(ts);
            s.clock().advance_watermark(ts);
            events
                .add(&[(i % 5) as u8], (round * 50 + i) as u32)
                .unwrap();
        }
        let id = round as u64 + 1;
        s.checkpoint(&dir.path().join(format!("c{id}")), id)
            .unwrap();
        s.checkpoint_completed(id).unwrap();
        let cutoff = s.clock().watermark() - 100;
        for slice in 0..strata_cache::l3::SWEEP_SLICES {
            cold.sweep_expired(&[(desc.clone(), cutoff)], id, slice)
                .unwrap();
        }
        let rows = cql.query(&format!("SELECT ts FROM {ks}.state"));
        assert!(
            rows.iter().all(
                |r| matches!(r.columns[0], Some(scylla::value::CqlValue::BigInt(ts)) if ts > cutoff)
            ),
            "round {round}: an expired row is left"
        );
        most = most.max(rows.len());
    }
    // The state plateaus at one window's worth (50 elements per 100 ms).
    assert!(most <= 50, "L3 grew to {most} rows");
    let got: Vec<u32> = events.get(&[4]).unwrap().iter().copied().collect();
    let want: Vec<u32> = (0..50).filter(|i| i % 5 == 4).map(|i| 450 + i).collect();
    assert_eq!(got, want);
}

#[test]
fn a_strata_table_of_another_shape_is_refused_at_connect_naming_the_column() {
    let cql = Cql::connect();
    let ks = unique_keyspace("ownshape");
    cql.query(&format!(
        "CREATE KEYSPACE {ks} WITH replication = {{'class': 'SimpleStrategy', 'replication_factor': 1}}"
    ));
    cql.query(&format!(
        "CREATE TABLE {ks}.state (state text, key blob, ck blob, ts text, value blob, PRIMARY KEY ((state, key), ck))"
    ));
    let connect = || {
        let mut c = L3Config::new(vec![contact_point()], 1);
        c.keyspace = ks.clone();
        CassandraTier::connect(c)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default()
    };
    let e = connect();
    assert!(
        e.contains("column ts as text") && e.contains("needs bigint"),
        "{e}"
    );
    cql.query(&format!("DROP TABLE {ks}.state"));
    cql.query(&format!(
        "CREATE TABLE {ks}.state (state text, key blob, ck blob, ts bigint, value blob, PRIMARY KEY (state, key, ck))"
    ));
    let e = connect();
    assert!(
        e.contains("column key as blob (clustering)") && e.contains("partition_key"),
        "{e}"
    );
}

#[test]
fn a_read_the_server_cannot_execute_fails_at_once_naming_key_and_table() {
    let cql = Cql::connect();
    let ks = unique_keyspace("tombstones");
    let dir = tempfile::tempdir().unwrap();
    let mut c = L3Config::new(vec![contact_point()], 5_000_000);
    c.keyspace = ks.clone();
    let cold = Arc::new(CassandraTier::connect(c).unwrap());
    let s = StateStore::builder(dir.path())
        .l2_capacity(1)
        .cold_tier(cold)
        .state(StateDescriptor::list("events"))
        .open()
        .unwrap();
    // 120,000 row tombstones in the partition of key "hot": more than
    // Cassandra's tombstone_failure_threshold (100,000), so reading it
    // fails on the server however often it is retried.
    let mut stored = Vec::new();
    let kg = strata_cache::key_group::key_group_of(b"hot", 128);
    strata_cache::codec::put_stored_key(&mut stored, kg, b"hot");
    cql.delete_rows(&ks, "events", &stored, 120_000);
    let started = std::time::Instant::now();
    let e = s
        .list_state::<u32>("events")
        .unwrap()
        .get(b"hot")
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "retried as if transient for {:?}",
        started.elapsed()
    );
    assert!(
        e.contains("key \"hot\"")
            && e.contains(&format!("{ks}.state"))
            && e.contains("not retried"),
        "{e}"
    );
}
