//! The state store embedded without the runtime: per-user event histories
//! with a 60-day event-time TTL and a per-user counter, under an L1 far
//! smaller than the state so that L2 (RocksDB) serves most reads.
//!
//! Run: `cargo run --release -p strata-cache --example embedded [users] [events]`

use std::time::{Duration, Instant};
use strata_cache::{StateDescriptor, StateStore, Ttl};

const DAY_MS: i64 = 86_400_000;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1).map(|a| a.parse::<u64>());
    let users = args.next().transpose()?.unwrap_or(100_000);
    let events = args.next().transpose()?.unwrap_or(1_000_000);
    let dir = std::env::temp_dir().join(format!("strata-embedded-{}", std::process::id()));
    let store = StateStore::builder(&dir)
        .l1_capacity(4 << 20)
        .l2_memory(64 << 20)
        .state(
            StateDescriptor::list("events")
                .with_ttl(Ttl::event_time(Duration::from_millis(60 * DAY_MS as u64))),
        )
        .state(StateDescriptor::value("count"))
        .open()?;
    let history = store.list_state::<u32>("events")?;
    let count = store.value_state::<u64>("count")?;
    let started = Instant::now();
    for i in 0..events {
        let user = format!("user-{}", i.wrapping_mul(2_654_435_761) % users);
        let event_time = (i as i64) * (120 * DAY_MS) / events as i64; // 120 days of events
        store.set_record_timestamp(event_time);
        store.clock().advance_watermark(event_time);
        history.add(user.as_bytes(), i as u32)?;
        let n = count.get(user.as_bytes())?.unwrap_or(0);
        count.update(user.as_bytes(), n + 1)?;
    }
    let secs = started.elapsed().as_secs_f64();
    let stats = store.stats();
    println!(
        "{events} events for {users} users in {secs:.2}s ({:.0} events/s)",
        events as f64 / secs
    );
    println!(
        "user-1: {} events in the last 60 days, {} in all",
        history.get(b"user-1")?.len(),
        count.get(b"user-1")?.unwrap_or(0)
    );
    println!(
        "L1 hit ratio {:.3}, L2 hit ratio {:.3}, L1 spills {}, L2 {} bytes",
        stats.l1_hit_ratio(),
        stats.l2_hit_ratio(),
        stats.l1_spills,
        stats.l2_bytes
    );
    // Flushes what only L1 holds into L2, reporting any error.
    drop((history, count));
    store.close()?;
    std::fs::remove_dir_all(&dir)?;
    Ok(())
}
