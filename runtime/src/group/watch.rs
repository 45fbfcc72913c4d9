//! Watching the shards this process runs: every second their metrics and
//! first records, every 10 s a line saying what each did.

use super::shards::Shards;
use crate::error::{Result, RuntimeError};
use crate::sync::lock;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// One line per 10 s: the shards running here and what they did.
fn log_shards(shards: &Shards, started: Instant) {
    let running = lock(&shards.running);
    let mut parts: Vec<String> = running
        .iter()
        .map(|(p, r)| {
            let read = r.progress.records_in.load(Ordering::Relaxed);
            format!("p{p}: {read} read")
        })
        .collect();
    parts.sort();
    if running.is_empty() {
        eprintln!(
            "[{:>5}s] group: no shard runs here (waiting for partitions, or for the other processes' to end)",
            started.elapsed().as_secs()
        );
        return;
    }
    eprintln!(
        "[{:>5}s] group: {} shards running ({})",
        started.elapsed().as_secs(),
        running.len(),
        parts.join(", ")
    );
}

/// A thread that watches the running shards every second (metrics, first
/// records) and logs them every 10 s, also while a rebalance holds the
/// group loop; stopped when dropped.
pub(super) struct Watcher {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Watcher {
    pub(super) fn start(shards: Arc<Shards>, started: Instant) -> Result<Self> {
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        let thread = std::thread::Builder::new()
            .name("shard-watcher".into())
            .spawn(move || {
                let mut last_log = Instant::now();
                while !stopped.load(Ordering::Acquire) {
                    std::thread::sleep(Duration::from_secs(1));
                    watch_shards(&shards);
                    if last_log.elapsed() >= Duration::from_secs(10) {
                        log_shards(&shards, started);
                        last_log = Instant::now();
                    }
                }
            })
            .map_err(|e| RuntimeError::Function(format!("start the shard watcher: {e}")))?;
        Ok(Self {
            stop,
            thread: Some(thread),
        })
    }
}

impl Drop for Watcher {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Every second: publishes each running shard's metrics, and says when a
/// shard read its first record (how long its start took).
fn watch_shards(shards: &Shards) {
    for (p, r) in lock(&shards.running).iter_mut() {
        r.progress.publish_as_shard(*p);
        if let (false, Some(at)) = (r.announced, r.progress.first_record.get()) {
            r.announced = true;
            eprintln!(
                "strata: shard {p}: first record {:.2} s after its assignment",
                at.duration_since(r.since).as_secs_f64()
            );
        }
    }
}
