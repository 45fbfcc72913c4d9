//! Specifications of what a store fixes when it is created and checks
//! at every open: state types (schema evolution by optional fields only),
//! key groups, the codec version, a closed store and a store opened from a
//! checkpoint, which must never write to it.

use strata_cache::{StateDescriptor, StateStore};

mod v1 {
    #[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
    pub(crate) struct Flight {
        pub date: i64,
        pub delay: i64,
    }
}
mod v2 {
    /// v1 plus an optional field at the end: migrated.
    #[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
    pub(crate) struct Flight {
        pub date: i64,
        pub delay: i64,
        pub gate: Option<String>,
    }
}
mod swapped {
    #[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
    pub(crate) struct Flight {
        pub delay: i64,
        pub date: i64,
    }
}
mod unsigned {
    #[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
    pub(crate) struct Flight {
        pub date: u64,
        pub delay: i64,
    }
}

fn flights_store(dir: &std::path::Path) -> StateStore {
    StateStore::builder(dir)
        .l1_capacity(1)
        .state(StateDescriptor::list("history"))
        .state(StateDescriptor::value("last"))
        .open()
        .unwrap()
}

/// Why a store on `dir` refuses a list state of `T`.
fn refusal<T>(dir: &std::path::Path) -> String
where
    T: serde::Serialize + serde::de::DeserializeOwned + Clone + Send + Sync + 'static,
{
    let store = flights_store(dir);
    let e = store.list_state::<T>("history").err().expect("refused");
    drop(store);
    e.to_string()
}

#[test]
fn a_changed_state_type_is_refused_naming_the_state_unless_only_optional_fields_were_added() {
    let dir = tempfile::tempdir().unwrap();
    {
        let s = flights_store(dir.path());
        let history = s.list_state::<v1::Flight>("history").unwrap();
        let last = s.value_state::<v1::Flight>("last").unwrap();
        for i in 0..3 {
            history
                .add(
                    b"LAS",
                    v1::Flight {
                        date: i,
                        delay: 10 * i,
                    },
                )
                .unwrap();
        }
        last.update(b"LAS", v1::Flight { date: 2, delay: 20 })
            .unwrap();
        s.close().unwrap();
    }
    for e in [
        refusal::<swapped::Flight>(dir.path()),
        refusal::<unsigned::Flight>(dir.path()),
    ] {
        assert!(
            e.contains("state 'history'") && e.contains("stored values have schema"),
            "{e}"
        );
    }
    // v2 adds an Option at the end: old values read with it None, new ones
    // are written whole, and both read back.
    let s = flights_store(dir.path());
    let history = s.list_state::<v2::Flight>("history").unwrap();
    let last = s.value_state::<v2::Flight>("last").unwrap();
    let old = |i: i64| v2::Flight {
        date: i,
        delay: 10 * i,
        gate: None,
    };
    assert_eq!(last.get(b"LAS").unwrap(), Some(old(2)));
    let new = v2::Flight {
        date: 3,
        delay: 30,
        gate: Some("B12".into()),
    };
    history.add(b"LAS", new.clone()).unwrap();
    let got: Vec<v2::Flight> = history.get(b"LAS").unwrap().iter().cloned().collect();
    assert_eq!(got, vec![old(0), old(1), old(2), new]);
    drop((history, last));
    s.close().unwrap();
    // Going back to v1 is refused: v2 values are not v1 values.
    let e = refusal::<v1::Flight>(dir.path());
    assert!(e.contains("state 'history'"), "{e}");
}

#[test]
fn state_written_with_other_key_groups_is_refused_at_open() {
    let dir = tempfile::tempdir().unwrap();
    let open = |max: u32| {
        StateStore::builder(dir.path())
            .max_parallelism(max)
            .state(StateDescriptor::value("count"))
            .open()
    };
    {
        let s = open(128).unwrap();
        s.value_state::<u64>("count")
            .unwrap()
            .update(b"bob", 1)
            .unwrap();
        s.close().unwrap();
    }
    let e = open(64).err().unwrap().to_string();
    assert!(
        e.contains("max parallelism 128") && e.contains(".max_parallelism(128)"),
        "{e}"
    );
    let s = open(128).unwrap();
    assert_eq!(
        s.value_state::<u64>("count").unwrap().get(b"bob").unwrap(),
        Some(1)
    );
}

#[test]
fn a_store_dropped_without_close_still_writes_what_only_l1_held() {
    let dir = tempfile::tempdir().unwrap();
    let open = || {
        StateStore::builder(dir.path())
            .l1_capacity(64 << 20)
            .state(StateDescriptor::value("count"))
            .state(StateDescriptor::list("events"))
            .open()
            .unwrap()
    };
    {
        let s = open();
        let (count, events) = (
            s.value_state::<u64>("count").unwrap(),
            s.list_state::<u32>("events").unwrap(),
        );
        count.update(b"alice", 41).unwrap();
        events.get(b"alice").unwrap();
        events.add(b"alice", 7).unwrap();
        // Dropped here: everything above lives only in L1 (write-back).
    }
    let s = open();
    assert_eq!(
        s.value_state::<u64>("count")
            .unwrap()
            .get(b"alice")
            .unwrap(),
        Some(41)
    );
    let events: Vec<u32> = s
        .list_state::<u32>("events")
        .unwrap()
        .get(b"alice")
        .unwrap()
        .iter()
        .copied()
        .collect();
    assert_eq!(events, vec![7]);
}

#[test]
fn a_closed_store_refuses_every_handle_and_a_store_in_use_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let open = || {
        StateStore::builder(dir.path())
            .state(StateDescriptor::value("count"))
            .open()
    };
    let s = open().unwrap();
    let count = s.value_state::<u64>("count").unwrap();
    count.update(b"alice", 3).unwrap();
    let e = open().err().unwrap().to_string();
    assert!(e.contains("open in another store or process"), "{e}");
    s.close().unwrap();
    let e = count.update(b"alice", 100).err().unwrap().to_string();
    assert!(e.contains("is closed"), "{e}");
    drop(count);
    let s = open().unwrap();
    assert_eq!(
        s.value_state::<u64>("count")
            .unwrap()
            .get(b"alice")
            .unwrap(),
        Some(3)
    );
}

/// Every file of `dir` with its bytes.
fn files_of(dir: &std::path::Path) -> Vec<(String, Vec<u8>)> {
    let mut out: Vec<(String, Vec<u8>)> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            let name = e.file_name().to_string_lossy().into_owned();
            (name, std::fs::read(e.path()).unwrap())
        })
        .collect();
    out.sort();
    out
}

#[test]
fn a_store_opened_from_a_checkpoint_checks_what_the_checkpoint_fixed_and_never_writes_it() {
    let dir = tempfile::tempdir().unwrap();
    let (live, chk) = (dir.path().join("live"), dir.path().join("chk-1"));
    let store = StateStore::builder(&live)
        .state(StateDescriptor::value("count"))
        .state(StateDescriptor::list("events"))
        .open()
        .unwrap();
    store
        .value_state::<u64>("count")
        .unwrap()
        .update(b"bob", 7)
        .unwrap();
    let events = store.list_state::<String>("events").unwrap();
    for e in ["a", "b", "c"] {
        events.add(b"bob", e.to_string()).unwrap();
    }
    store.checkpoint(&chk, 1).unwrap();
    let e = store.checkpoint(&chk, 2).unwrap_err().to_string();
    assert!(e.contains("exists already") && e.contains("chk-1"), "{e}");
    store.close().unwrap();
    let before = files_of(&chk);
    let restored = dir.path().join("restored");
    let open = |max: u32, count: StateDescriptor| {
        StateStore::builder(&restored)
            .max_parallelism(max)
            .state(count)
            .state(StateDescriptor::list("events"))
            .from_checkpoint(&chk)
            .open()
    };
    let refusal = |r: strata_cache::Result<StateStore>| r.err().unwrap().to_string();
    let e = refusal(open(64, StateDescriptor::value("count")));
    assert!(e.contains("max parallelism 128"), "{e}");
    let e = refusal(open(128, StateDescriptor::list("count")));
    assert!(
        e.contains("state 'count'")
            && e.contains("written as a ValueState")
            && e.contains("ListState"),
        "{e}"
    );
    {
        let s = open(128, StateDescriptor::value("count")).unwrap();
        assert_eq!(
            s.value_state::<u64>("count").unwrap().get(b"bob").unwrap(),
            Some(7)
        );
        let got = s
            .list_state::<String>("events")
            .unwrap()
            .get(b"bob")
            .unwrap();
        assert_eq!(got.iter().cloned().collect::<Vec<_>>(), ["a", "b", "c"]);
        // Writes go to the copy, never into the checkpoint.
        s.value_state::<u64>("count")
            .unwrap()
            .update(b"bob", 8)
            .unwrap();
        s.list_state::<String>("events")
            .unwrap()
            .add(b"eve", "d".into())
            .unwrap();
        s.compact().unwrap();
        s.close().unwrap();
    }
    assert!(files_of(&chk) == before, "the checkpoint was written");
    let e = refusal(open(128, StateDescriptor::value("count")));
    assert!(e.contains("is not empty"), "{e}");

    // A checkpoint of another codec version is refused by name.
    {
        let names = rocksdb::DB::list_cf(&rocksdb::Options::default(), &chk).unwrap();
        let db = rocksdb::DB::open_cf(&rocksdb::Options::default(), &chk, names).unwrap();
        db.put(b"strata.codec-version", 1u32.to_be_bytes()).unwrap();
    }
    std::fs::remove_dir_all(&restored).unwrap();
    let e = refusal(open(128, StateDescriptor::value("count")));
    assert!(
        e.contains("codec version 1") && e.contains("reads version 2"),
        "{e}"
    );
    assert!(!restored.exists(), "a refused copy stays behind");
    let e = refusal(
        StateStore::builder(dir.path().join("other"))
            .from_checkpoint(dir.path())
            .open(),
    );
    assert!(e.contains("is not a store checkpoint"), "{e}");
}
