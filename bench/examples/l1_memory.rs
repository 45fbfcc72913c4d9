//! Measures what an L1 entry costs in real memory against what L1's weigher
//! charges for it, so that `state.l1.capacity` can be held to real bytes.
//!
//! ```text
//! cargo run --release -p strata-bench --example l1_memory
//! ```
//!
//! Writes 1,000,000 `u64` values (`ValueState`), then appends 1,000,000
//! 100-byte elements to 100,000 lists (`ListState`, ten each, each list
//! put in L1 first), into an L1
//! large enough to hold them all, and prints the RSS growth and the weight
//! L1 counted, per entry and per element. The store's per-entry overhead
//! constant comes from the first figure (see `SLOT_OVERHEAD` in
//! `strata-cache`).

use strata_cache::{StateDescriptor, StateStore};

/// The resident set of this process, bytes (Linux).
fn rss() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            let line = s.lines().find(|l| l.starts_with("VmRSS:"))?.to_owned();
            line.split_whitespace().nth(1)?.parse::<u64>().ok()
        })
        .map_or(0, |kib| kib * 1024)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let store = StateStore::builder(dir.path().join("l2"))
        .l1_capacity(4 << 30)
        .l2_memory(8 << 20)
        .state(StateDescriptor::value("count"))
        .state(StateDescriptor::list("history"))
        .open()?;
    let count = store.value_state::<u64>("count")?;
    let history = store.list_state::<Vec<u8>>("history")?;
    let settle = || std::thread::sleep(std::time::Duration::from_millis(500));
    let n = 1_000_000u64;
    let before = rss();
    for user in 0..n {
        count.update(&user.to_be_bytes(), user)?;
    }
    settle();
    let (values, weighed) = (rss() - before, store.stats().l1_bytes);
    println!(
        "ValueState<u64>: {} bytes of RSS per entry, {} weighed",
        values / n,
        weighed / n
    );
    // An empty list in L1 first: appends to a list L1 holds are made there
    // (those to a list it lacks go to the write buffer in front of L2).
    for user in 0..n / 10 {
        history.update(&user.to_be_bytes(), Vec::new())?;
    }
    for round in 0..10u8 {
        for user in 0..n / 10 {
            history.add(&user.to_be_bytes(), vec![round; 100])?;
        }
    }
    settle();
    let lists = rss() - before - values;
    let weighed_lists = store.stats().l1_bytes - weighed;
    println!(
        "ListState<Vec<u8>> (100,000 lists of ten 100-byte elements): {} bytes of RSS per element, {} weighed",
        lists / n,
        weighed_lists / n
    );
    Ok(())
}
