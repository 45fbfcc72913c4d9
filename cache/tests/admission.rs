//! Admission to L1 of values met on a miss (TinyLFU's doorkeeper): a key
//! met once while L1 is full has its value written towards L2, not into
//! moka, so it evicts nothing; every read stays exact either way.

use strata_cache::{StateDescriptor, StateStore};

#[test]
fn values_met_once_while_l1_is_full_go_to_l2_without_churning_l1() {
    let dir = tempfile::tempdir().unwrap();
    let store = StateStore::builder(dir.path())
        .l1_capacity(256 << 10)
        .state(StateDescriptor::value("v"))
        .open()
        .unwrap();
    let v = store.value_state::<Vec<u8>>("v").unwrap();
    // 2,000 values of 1 KB, each met once: L1 holds about a hundred.
    for i in 0..2000u32 {
        v.modify(&i.to_be_bytes(), |x| x.resize(1000, i as u8))
            .unwrap();
    }
    // Admitted, each would have evicted a dirty one (~1,900 spills).
    let spills = store.stats().l1_spills;
    assert!(spills < 500, "{spills} dirty entries left L1");
    // A key met again and again reads back every change.
    for n in 0..5u8 {
        v.modify(b"again", |x| x.push(n)).unwrap();
    }
    assert_eq!(v.get(b"again").unwrap(), Some(vec![0, 1, 2, 3, 4]));
    for i in 0..2000u32 {
        assert_eq!(
            v.get(&i.to_be_bytes()).unwrap(),
            Some(vec![i as u8; 1000]),
            "key {i}"
        );
    }
    store.close().unwrap();
}
