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
//! `strata_source_kafka_lag{partition=..}`; in a consumer group, per shard
//! `strata_shard_records_<in|out>_total{partition=..}` and
//! `strata_shard_lag{partition=..}`.

use crate::error::{Result, RuntimeError};
use std::sync::atomic::Ordering;
use strata_cache::TierStats;
use strata_connectors::kafka::SourceStats;

/// A job's record counters at one moment (see `crate::progress::Progress`).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct RecordFigures {
    pub(crate) records_in: u64,
    pub(crate) records_out: u64,
    pub(crate) dead_letters: u64,
    /// The source's position: records (Parquet) or bytes (text) done.
    pub(crate) position: u64,
    /// The input's size in the same unit (0: unknown).
    pub(crate) total: u64,
}

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

/// Publishes a job's record counters, its Kafka source's figures (if it
/// reads Kafka) and its tiers' figures.
pub(crate) fn publish(r: &RecordFigures, kafka: Option<&SourceStats>, t: &TierStats) {
    metrics::counter!("strata_records_in_total").absolute(r.records_in);
    metrics::counter!("strata_records_out_total").absolute(r.records_out);
    metrics::counter!("strata_dead_letters_total").absolute(r.dead_letters);
    metrics::gauge!("strata_source_position").set(r.position as f64);
    metrics::gauge!("strata_source_lag").set(r.total.saturating_sub(r.position) as f64);
    if let Some(k) = kafka {
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

/// A completed checkpoint's duration (ms) and sizes (bytes: all its
/// state, and what it uploaded that no earlier checkpoint holds).
pub(crate) fn publish_checkpoint(duration_ms: u64, state_bytes: u64, new_bytes: u64) {
    metrics::gauge!("strata_checkpoint_duration_ms").set(duration_ms as f64);
    metrics::gauge!("strata_checkpoint_state_bytes").set(state_bytes as f64);
    metrics::gauge!("strata_checkpoint_new_bytes").set(new_bytes as f64);
    metrics::counter!("strata_checkpoints_completed_total").increment(1);
}

/// One shard of a consumer group: its record counters and its lag.
pub(crate) fn publish_shard(partition: i32, r: &RecordFigures, kafka: Option<&SourceStats>) {
    let label = [("partition", partition.to_string())];
    metrics::counter!("strata_shard_records_in_total", &label).absolute(r.records_in);
    metrics::counter!("strata_shard_records_out_total", &label).absolute(r.records_out);
    if let Some(k) = kafka {
        let lag: i64 = k.lag.lock().unwrap_or_else(|p| p.into_inner()).iter().sum();
        metrics::gauge!("strata_shard_lag", &label).set(lag as f64);
    }
}

fn publish_kafka(k: &SourceStats) {
    metrics::gauge!("strata_source_kafka_paused_partitions")
        .set(k.paused_partitions.load(Ordering::Relaxed) as f64);
    metrics::counter!("strata_source_kafka_paused_ms_total")
        .absolute(k.paused_ns.load(Ordering::Relaxed) / 1_000_000);
    let lag = k.lag.lock().unwrap_or_else(|p| p.into_inner()).clone();
    for (i, l) in lag.into_iter().enumerate() {
        metrics::gauge!("strata_source_kafka_lag", "partition" => i.to_string()).set(l as f64);
    }
}
