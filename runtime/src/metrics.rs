//! Prometheus metrics (`--metrics-addr`): per-tier hits, misses, spills and
//! bytes; records in/out; per-task busy, backpressured and idle time per
//! second (Flink's `busyTimeMsPerSecond` and friends) and time waited on
//! L2/L3 reads; checkpoint figures.
//!
//! Names: `strata_state_<tier>_<what>`, `strata_records_<in|out>_total`,
//! `strata_task_<busy|backpressured|idle>_ms_per_second{task=..}`,
//! `strata_checkpoint_<duration_ms|state_bytes|new_bytes>`; a Kafka
//! source's `strata_source_kafka_paused_partitions`,
//! `strata_source_kafka_paused_ms_total` and
//! `strata_source_kafka_lag{partition=..}`.

use crate::error::{Result, RuntimeError};
use crate::progress::Progress;
use std::sync::atomic::Ordering;
use strata_cache::TierStats;

/// Starts the Prometheus HTTP endpoint on `addr` (e.g. `127.0.0.1:9249`).
/// Must run inside the tokio runtime.
pub(crate) fn serve(addr: std::net::SocketAddr) -> Result<()> {
    warn_if_exposed(
        "--metrics-addr",
        addr,
        "the job's metrics (record counts, state sizes, lag) without authentication",
    );
    metrics_exporter_prometheus::PrometheusBuilder::new()
        .with_http_listener(addr)
        .install()
        .map_err(|e| {
            RuntimeError::Usage(format!(
                "--metrics-addr: cannot serve metrics on {addr}: {e}"
            ))
        })
}

/// Warns on stderr when `addr` (given by `flag`) is reachable from other
/// machines (not a loopback address), naming what it exposes.
pub(crate) fn warn_if_exposed(flag: &str, addr: std::net::SocketAddr, exposes: &str) {
    if !addr.ip().is_loopback() {
        eprintln!(
            "strata: warning: {flag} {addr} is not a loopback address: every host that can reach it sees {exposes} (bind 127.0.0.1 to keep it local)"
        );
    }
}

pub(crate) fn publish(p: &Progress, t: &TierStats) {
    metrics::counter!("strata_records_in_total").absolute(p.records_in.load(Ordering::Relaxed));
    metrics::counter!("strata_records_out_total").absolute(p.records_out.load(Ordering::Relaxed));
    metrics::counter!("strata_dead_letters_total").absolute(p.dead_letters.load(Ordering::Relaxed));
    metrics::gauge!("strata_source_position").set(p.done.load(Ordering::Relaxed) as f64);
    metrics::gauge!("strata_source_lag").set(
        p.total
            .load(Ordering::Relaxed)
            .saturating_sub(p.done.load(Ordering::Relaxed)) as f64,
    );
    if let Some(k) = p.kafka.get() {
        publish_kafka(k);
    }
    metrics::counter!("strata_state_l1_hits_total").absolute(t.l1_hits);
    metrics::counter!("strata_state_l1_misses_total").absolute(t.l1_misses);
    metrics::counter!("strata_state_l1_spills_total").absolute(t.l1_spills);
    metrics::counter!("strata_state_l2_hits_total").absolute(t.l2_hits);
    metrics::counter!("strata_state_l2_misses_total").absolute(t.l2_misses);
    metrics::counter!("strata_state_l3_hits_total").absolute(t.l3_hits);
    metrics::counter!("strata_state_l3_misses_total").absolute(t.l3_misses);
    metrics::gauge!("strata_state_l1_bytes").set(t.l1_bytes as f64);
    metrics::gauge!("strata_state_l2_bytes").set(t.l2_bytes as f64);
}

/// Time keyed operator instance `task` has waited on L2/L3 reads.
pub(crate) fn publish_state_wait(task: &str, t: &TierStats) {
    metrics::counter!("strata_state_lower_wait_ms_total", "task" => task.to_owned())
        .absolute(t.lower_wait_ms);
}

pub(crate) fn publish_task(task: &str, idle_ms: u64, backpressured_ms: u64) {
    let labels = [("task", task.to_owned())];
    metrics::gauge!("strata_task_idle_ms_per_second", &labels).set(idle_ms as f64);
    metrics::gauge!("strata_task_backpressured_ms_per_second", &labels)
        .set(backpressured_ms as f64);
    metrics::gauge!("strata_task_busy_ms_per_second", &labels)
        .set(1000u64.saturating_sub(idle_ms + backpressured_ms) as f64);
}

pub(crate) fn publish_checkpoint(c: &crate::checkpoint::CheckpointStats) {
    metrics::gauge!("strata_checkpoint_duration_ms").set(c.duration_ms as f64);
    metrics::gauge!("strata_checkpoint_state_bytes").set(c.state_bytes as f64);
    metrics::gauge!("strata_checkpoint_new_bytes").set(c.new_bytes as f64);
    metrics::counter!("strata_checkpoints_completed_total").increment(1);
}

fn publish_kafka(k: &strata_connectors::kafka::SourceStats) {
    metrics::gauge!("strata_source_kafka_paused_partitions")
        .set(k.paused_partitions.load(Ordering::Relaxed) as f64);
    metrics::counter!("strata_source_kafka_paused_ms_total")
        .absolute(k.paused_ns.load(Ordering::Relaxed) / 1_000_000);
    let lag = k.lag.lock().unwrap_or_else(|p| p.into_inner()).clone();
    for (i, l) in lag.into_iter().enumerate() {
        metrics::gauge!("strata_source_kafka_lag", "partition" => i.to_string()).set(l as f64);
    }
}
