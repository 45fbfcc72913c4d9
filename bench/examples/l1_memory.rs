//! Measures what an L1 entry costs in real memory against what L1's weigher
//! charges for it, so that `state.l1.capacity` can be held to real bytes.
//!
//! ```text
//! cargo run --release -p strata-bench --example l1_memory
//! ```
//!
//! Into an L1 large enough to hold them all, writes 1,000,000 `u64`
//! counts (`ValueState<u64>`: L1's compact table), 1,000,000 24-byte
//! values (`ValueState<(u64, u64, u64)>`: moka), then appends 1,000,000
//! 100-byte elements to 100,000 lists (`ListState`, ten each, each list
//! put in L1 first), and prints the RSS growth and the weight L1 counted,
//! per entry and per element. The store's per-entry overhead constant
//! comes from the moka figure (see `SLOT_OVERHEAD` in `strata-cache`).
//!
//! Then, each in a process of its own, into a store whose L1 (64 MB) is
//! far smaller than what is written, 4,000,000 counts and 400,000 lists of
//! ten elements: the RSS growth against `state.l1.capacity` (it must stay
//! within 25 %; RocksDB's 8 MB and the write batches count too).
//!
//! It allocates with jemalloc, as the `strata` binary and strata-bench do.

use strata_cache::{StateDescriptor, StateStore};

/// The allocator of the `strata` binary, so that the bytes are those users get.
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

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

/// Bytes of RSS per item and bytes L1 weighed per item, after `write`.
fn per_item(
    store: &StateStore,
    items: u64,
    write: impl FnOnce() -> Result<(), strata_cache::StateError>,
) -> Result<(u64, u64), Box<dyn std::error::Error>> {
    let (rss_before, weighed_before) = (rss(), store.stats().l1_bytes);
    write()?;
    std::thread::sleep(std::time::Duration::from_millis(500));
    Ok((
        (rss() - rss_before) / items,
        (store.stats().l1_bytes - weighed_before) / items,
    ))
}

fn open(dir: &std::path::Path, l1: u64) -> Result<StateStore, strata_cache::StateError> {
    StateStore::builder(dir)
        .l1_capacity(l1)
        .l2_memory(8 << 20)
        .state(StateDescriptor::value("count"))
        .state(StateDescriptor::value("triple"))
        .state(StateDescriptor::list("history"))
        .open()
}

/// Appends ten 100-byte elements to each of `lists` lists, each put in L1
/// first (appends to a list L1 lacks go to the write batch in front of L2).
fn lists(store: &StateStore, lists: u64) -> Result<(), strata_cache::StateError> {
    let history = store.list_state::<Vec<u8>>("history")?;
    for user in 0..lists {
        history.update(&user.to_be_bytes(), Vec::new())?;
    }
    for round in 0..10u8 {
        for user in 0..lists {
            history.add(&user.to_be_bytes(), vec![round; 100])?;
        }
    }
    Ok(())
}

/// Writes far more than a 64 MB L1 holds, in a process of its own (so
/// that memory another part freed does not hide the growth): `counts`
/// (4,000,000 counts) or `lists` (400,000 lists of ten elements).
fn bounded(part: &str) -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let capacity = 64u64 << 20;
    let store = open(dir.path(), capacity)?;
    let n = 4_000_000u64;
    let (rss, _) = match part {
        "counts" => {
            let count = store.value_state::<u64>("count")?;
            per_item(&store, 1, || {
                (0..n).try_for_each(|u| count.update(&u.to_be_bytes(), u))
            })?
        }
        "lists" => per_item(&store, 1, || lists(&store, n / 10))?,
        other => return Err(format!("unknown part {other}: counts or lists").into()),
    };
    println!(
        "{part} ({n} counts, or {} lists of ten 100-byte elements) into a 64 MB L1: RSS grew {:.2}× state.l1.capacity",
        n / 10,
        rss as f64 / capacity as f64
    );
    Ok(())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    if let Some(part) = std::env::args().nth(1) {
        return bounded(&part);
    }
    let dir = tempfile::tempdir()?;
    let store = open(&dir.path().join("all"), 4 << 30)?;
    let n = 1_000_000u64;
    let count = store.value_state::<u64>("count")?;
    let (rss, weighed) = per_item(&store, n, || {
        (0..n).try_for_each(|u| count.update(&u.to_be_bytes(), u))
    })?;
    println!("ValueState<u64> (compact table), 1,000,000 keys: {rss} bytes of RSS per entry, {weighed} weighed");
    let triple = store.value_state::<(u64, u64, u64)>("triple")?;
    let (rss, weighed) = per_item(&store, n, || {
        (0..n).try_for_each(|u| triple.update(&u.to_be_bytes(), (u, u, u)))
    })?;
    println!("ValueState<(u64, u64, u64)> (moka), 1,000,000 keys: {rss} bytes of RSS per entry, {weighed} weighed");
    let (rss, weighed) = per_item(&store, n, || lists(&store, n / 10))?;
    println!("ListState<Vec<u8>> (100,000 lists of ten 100-byte elements): {rss} bytes of RSS per element, {weighed} weighed");
    for part in ["counts", "lists"] {
        let status = std::process::Command::new(std::env::current_exe()?)
            .arg(part)
            .status()?;
        if !status.success() {
            return Err(format!("the {part} part failed: {status}").into());
        }
    }
    Ok(())
}
