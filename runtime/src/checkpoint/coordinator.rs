//! The checkpoint coordinator: triggers checkpoints, collects the tasks'
//! acknowledgements, commits metadata, notifies the tasks — and fails a
//! checkpoint that a task declines, whose metadata cannot be written, or
//! that is not complete within `checkpoint.timeout`.
//!
//! At most one checkpoint is in flight. A failed one is discarded (its
//! local directory removed) and counted; the next starts at the next interval. A
//! completed one resets the count. Once more than
//! `checkpoint.tolerable-failures` have failed in a row, the coordinator
//! stops with [`RuntimeError::TooManyCheckpointFailures`], which ends the
//! job with the last failure's cause. A failed final checkpoint is retried
//! the same way (the source has read everything and waits for it).
//!
//! Blocking file work (metadata fsync, retention, discarding) runs on
//! tokio's blocking pool.

use super::{Ack, CheckpointMetadata, CheckpointStats, CheckpointStorage};
use super::{OperatorSnapshot, SourceSnapshot, TaskSnapshot, Trigger, FORMAT_VERSION};
use crate::error::{Result, RuntimeError};
use std::time::{Duration, Instant};
use strata_cache::l3::SWEEP_SLICES;
use strata_cache::{StateDescriptor, TimeDomain};
use strata_connectors::SinkState;
use tokio::sync::{mpsc, watch};

/// What the coordinator needs to know about the job.
pub(crate) struct Settings {
    pub(crate) job: String,
    pub(crate) interval: Duration,
    pub(crate) timeout: Duration,
    pub(crate) tolerable_failures: u32,
    pub(crate) retained: usize,
    pub(crate) max_parallelism: u32,
    pub(crate) parallelism: u32,
    pub(crate) sinks: u32,
    /// The job's states (those with a TTL are swept in L3).
    pub(crate) states: Vec<StateDescriptor>,
}

/// A checkpoint in flight: what has been acknowledged so far.
struct InFlight {
    id: u64,
    started: Instant,
    source: Option<SourceSnapshot>,
    operators: Vec<Option<OperatorSnapshot>>,
    sinks: Vec<Option<SinkState>>,
    is_final: bool,
}

impl InFlight {
    fn record(&mut self, snap: TaskSnapshot) {
        match snap {
            TaskSnapshot::Source(s) => self.source = Some(s),
            TaskSnapshot::Operator(o) => {
                let i = o.index as usize;
                self.operators[i] = Some(o);
            }
            TaskSnapshot::Sink(i, s) => self.sinks[i as usize] = Some(s),
        }
    }

    /// The tasks that have not acknowledged yet, for a timeout's message.
    fn missing(&self) -> String {
        let mut missing: Vec<String> = Vec::new();
        if self.source.is_none() {
            missing.push("source".into());
        }
        let unacked = |prefix: &str, acked: Vec<bool>| {
            acked
                .into_iter()
                .enumerate()
                .filter(|(_, a)| !a)
                .map(|(i, _)| format!("{prefix}-{i}"))
                .collect::<Vec<_>>()
        };
        missing.extend(unacked(
            "keyed",
            self.operators.iter().map(Option::is_some).collect(),
        ));
        missing.extend(unacked(
            "sink",
            self.sinks.iter().map(Option::is_some).collect(),
        ));
        missing.join(", ")
    }
}

/// Triggers checkpoints, collects acknowledgements, commits metadata and
/// notifies tasks.
pub(crate) struct Coordinator {
    storage: CheckpointStorage,
    settings: Settings,
    next_id: u64,
    trigger: mpsc::Sender<Trigger>,
    acks: mpsc::Receiver<Ack>,
    completed: watch::Sender<u64>,
    /// L3, the job's lineage there and its `keyspace.table`, if the job has L3.
    cold: Option<super::cold::Cold>,
    /// The version of the last completed checkpoint.
    l3_version: i64,
    /// The L3 expiry sweep running in the background, if any.
    sweep: Option<tokio::task::JoinHandle<Result<u64>>>,
}

/// The coordinator's ends of a run's checkpoint channels: barrier
/// triggers to the source, acknowledgements from every task, and the id of
/// the newest completed checkpoint to every task.
pub(crate) struct Channels {
    pub(crate) trigger: mpsc::Sender<Trigger>,
    pub(crate) acks: mpsc::Receiver<Ack>,
    pub(crate) completed: watch::Sender<u64>,
}

impl Coordinator {
    /// Coordinates the run's checkpoints, numbered from `next_id`, into
    /// `storage`; with L3 (`cold`), whose last completed checkpoint wrote
    /// at version `l3_version`, it also moves cold keys and sweeps.
    pub(crate) fn new(
        storage: CheckpointStorage,
        settings: Settings,
        next_id: u64,
        channels: Channels,
        cold: Option<super::cold::Cold>,
        l3_version: i64,
    ) -> Self {
        Self {
            storage,
            settings,
            next_id,
            trigger: channels.trigger,
            acks: channels.acks,
            completed: channels.completed,
            cold,
            l3_version,
            sweep: None,
        }
    }
}

/// What the coordinator did, for the run's report.
#[derive(Debug, Default)]
pub(crate) struct Outcome {
    pub(crate) completed: Vec<CheckpointStats>,
    pub(crate) failed: u32,
}

/// Runs blocking file work off the async worker threads.
async fn blocking<T: Send + 'static>(f: impl FnOnce() -> Result<T> + Send + 'static) -> Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| RuntimeError::Function(format!("checkpoint file work: {e}")))?
}

/// How long a commit to an object store runs before a line says so.
const LATE_NOTICE: Duration = Duration::from_secs(5);

/// Awaits `work`, checkpoint `id`'s commit to the object store at `url`,
/// with a line every [`LATE_NOTICE`] while it lasts (its requests are
/// being retried: the store is slow or away).
async fn reported_while_late<T>(
    work: impl std::future::Future<Output = Result<T>>,
    id: u64,
    url: &str,
) -> Result<T> {
    let started = Instant::now();
    tokio::pin!(work);
    loop {
        tokio::select! {
            done = &mut work => return done,
            _ = tokio::time::sleep(LATE_NOTICE) => eprintln!(
                "strata: checkpoint {id} is late: its upload to {url} has taken {} s so far (a failing request is retried for checkpoint.storage.retry-for; processing goes on)",
                started.elapsed().as_secs()
            ),
        }
    }
}

impl Coordinator {
    /// Runs until the final checkpoint completes.
    pub(crate) async fn run(mut self) -> Result<Outcome> {
        let mut ticker = tokio::time::interval(self.settings.interval);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        ticker.tick().await;
        let mut in_flight: Option<InFlight> = None;
        let mut finish_requested = false;
        let (mut outcome, mut failures_in_row) = (Outcome::default(), 0u32);
        loop {
            let deadline = in_flight
                .as_ref()
                .map(|f| f.started + self.settings.timeout);
            let failure = tokio::select! {
                _ = ticker.tick(), if in_flight.is_none() && !finish_requested => {
                    in_flight = Some(self.start(false).await?);
                    None
                }
                _ = sleep_until(deadline), if deadline.is_some() => {
                    in_flight.take().map(|flight| self.expired(&flight))
                }
                ack = self.acks.recv() => match ack.ok_or(RuntimeError::Disconnected)? {
                    Ack::SourceFinished => { finish_requested = true; None }
                    Ack::Declined { id, cause } if in_flight.as_ref().is_some_and(|f| f.id == id) => {
                        in_flight = None;
                        Some(cause.in_checkpoint(id, "coordinator"))
                    }
                    Ack::Declined { .. } => None,
                    Ack::Snapshot(id, snap) => {
                        let Some(flight) = in_flight.as_mut().filter(|f| f.id == id) else { continue };
                        flight.record(snap);
                        match self.complete(flight) {
                            None => None,
                            Some(meta) => {
                                in_flight = None;
                                match self.commit(meta).await {
                                    Ok(stats) => {
                                        failures_in_row = 0;
                                        outcome.completed.push(stats.figures);
                                        if stats.is_final {
                                            self.finish_sweep().await?;
                                            return Ok(outcome);
                                        }
                                        self.sweep_l3(&stats).await?;
                                        None
                                    }
                                    // Another process owns the shard: nothing
                                    // of the checkpoint may be discarded.
                                    Err(e @ RuntimeError::ShardLost { .. }) => return Err(e),
                                    Err(e) => Some(e.in_checkpoint(id, "coordinator")),
                                }
                            }
                        }
                    }
                }
            };
            if let Some(cause) = failure {
                failures_in_row += 1;
                outcome.failed += 1;
                self.failed(cause, failures_in_row).await?;
            }
            if finish_requested && in_flight.is_none() {
                in_flight = Some(self.start(true).await?);
            }
        }
    }

    fn expired(&self, flight: &InFlight) -> RuntimeError {
        RuntimeError::CheckpointFailed {
            id: flight.id,
            task: "coordinator".into(),
            reason: format!(
                "not complete {:?} after its trigger (checkpoint.timeout); not acknowledged by: {}",
                self.settings.timeout,
                flight.missing()
            ),
        }
    }

    /// Discards a failed checkpoint and reports it; errors once more have
    /// failed in a row than are tolerated.
    async fn failed(&self, cause: RuntimeError, in_row: u32) -> Result<()> {
        let tolerable = self.settings.tolerable_failures;
        if let RuntimeError::CheckpointFailed { id, .. } = &cause {
            let (storage, id) = (self.storage.clone(), *id);
            if let Err(e) = blocking(move || storage.discard(id)).await {
                eprintln!("strata: warning: could not remove failed checkpoint {id}: {e}");
            }
        }
        metrics::counter!("strata_checkpoints_failed_total").increment(1);
        if in_row > tolerable {
            return Err(RuntimeError::TooManyCheckpointFailures {
                failures: in_row,
                tolerable,
                last: Box::new(cause),
            });
        }
        eprintln!(
            "strata: {cause} ({in_row} in a row; checkpoint.tolerable-failures = {tolerable}): the next checkpoint is taken at the next interval"
        );
        Ok(())
    }

    /// Versions, commits and retains a complete checkpoint, then notifies
    /// the tasks.
    async fn commit(&mut self, mut meta: CheckpointMetadata) -> Result<Stats> {
        self.version(&mut meta);
        let storage = self.storage.clone();
        let retained = self.settings.retained;
        let url = storage.remote().map(|r| r.url().to_owned());
        let id = meta.id;
        let work = blocking(move || {
            storage.commit(&meta)?;
            if let Err(e) = storage.retain(retained) {
                eprintln!(
                    "strata: warning: retention after checkpoint {}: {e}",
                    meta.id
                );
            }
            Ok(meta)
        });
        let meta = match url {
            Some(url) => reported_while_late(work, id, &url).await?,
            None => work.await?,
        };
        let _ = self.completed.send(meta.id);
        let figures = CheckpointStats {
            id: meta.id,
            duration_ms: meta.duration_ms,
            completed_at_ms: meta.completed_at_ms.max(0) as u64,
            state_bytes: meta.state_bytes,
            new_bytes: meta.new_bytes,
        };
        crate::metrics::publish_checkpoint(
            figures.duration_ms,
            figures.state_bytes,
            figures.new_bytes,
        );
        Ok(Stats {
            figures,
            is_final: meta.is_final,
            min_watermark: meta
                .operators
                .iter()
                .map(|o| o.watermark)
                .min()
                .unwrap_or(i64::MIN),
        })
    }

    /// Starts the L3 expiry sweep of the slice of checkpoint `stats.id`
    /// with its cutoffs (see `strata_cache::l3::sweep`), unless the last
    /// one still runs; a failed last one fails the job.
    async fn sweep_l3(&mut self, stats: &Stats) -> Result<()> {
        let Some(cold) = self.cold.as_ref().map(|c| c.tier.clone()) else {
            return Ok(());
        };
        if self.sweep.as_ref().is_some_and(|s| !s.is_finished()) {
            return Ok(());
        }
        self.finish_sweep().await?;
        let expiring = expiry_cutoffs(&self.settings.states, stats.min_watermark);
        let id = stats.figures.id;
        self.sweep = Some(tokio::task::spawn_blocking(move || {
            cold.sweep_expired(&expiring, id, id % SWEEP_SLICES)
                .map_err(|e| {
                    RuntimeError::Function(format!("L3 expiry sweep after checkpoint {id}: {e}"))
                })
        }));
        Ok(())
    }

    /// Waits for the running L3 expiry sweep; its failure fails the job.
    async fn finish_sweep(&mut self) -> Result<()> {
        if let Some(sweep) = self.sweep.take() {
            let deleted = sweep
                .await
                .map_err(|e| RuntimeError::Function(format!("L3 expiry sweep: {e}")))??;
            metrics::counter!("strata_l3_swept_rows_total").increment(deleted);
        }
        Ok(())
    }

    /// Gives a completing checkpoint its L3 version and pins it in L3.
    fn version(&mut self, meta: &mut CheckpointMetadata) {
        if let Some(cold) = &self.cold {
            self.l3_version = strata_cache::l3::next_version(self.l3_version);
            cold.tier.pin_version(meta.id, self.l3_version);
            meta.l3_lineage = Some(cold.lineage);
            meta.l3_table = Some(cold.tier.table().to_owned());
            meta.l3_migration_table = cold.migration_table.clone();
            meta.l3_version = Some(self.l3_version);
        }
    }

    async fn start(&mut self, is_final: bool) -> Result<InFlight> {
        let id = self.next_id;
        self.next_id += 1;
        self.trigger
            .send(Trigger { id, is_final })
            .await
            .map_err(|_| RuntimeError::Disconnected)?;
        let s = &self.settings;
        Ok(InFlight {
            id,
            started: Instant::now(),
            source: None,
            operators: vec![None; s.parallelism as usize],
            sinks: vec![None; s.sinks as usize],
            is_final,
        })
    }

    fn complete(&self, f: &InFlight) -> Option<CheckpointMetadata> {
        let source = f.source.clone()?;
        let operators: Vec<OperatorSnapshot> =
            f.operators.iter().cloned().collect::<Option<_>>()?;
        let sinks: Vec<SinkState> = f.sinks.iter().cloned().collect::<Option<_>>()?;
        let s = &self.settings;
        Some(CheckpointMetadata {
            format_version: FORMAT_VERSION,
            id: f.id,
            job: s.job.clone(),
            completed_at_ms: chrono::Utc::now().timestamp_millis(),
            max_parallelism: s.max_parallelism,
            parallelism: s.parallelism,
            state_bytes: operators.iter().map(|o| o.manifest.total_bytes()).sum(),
            new_bytes: operators.iter().map(|o| o.new_bytes).sum(),
            source,
            operators,
            sinks,
            duration_ms: f.started.elapsed().as_millis() as u64,
            is_final: f.is_final,
            l3_lineage: None,
            l3_table: None,
            l3_migration_table: None,
            l3_version: None,
        })
    }
}

/// A committed checkpoint's figures, whether it was the final one, and the
/// smallest watermark of its operator instances.
#[derive(Debug, Clone, Copy)]
struct Stats {
    figures: CheckpointStats,
    is_final: bool,
    min_watermark: i64,
}

/// The states with a TTL and their expiry cutoffs (ms; written at or
/// before it = expired) for a checkpoint whose smallest operator watermark
/// is `watermark`: event time measures against it, processing time
/// against the wall clock. Before the first watermark nothing has expired.
fn expiry_cutoffs(states: &[StateDescriptor], watermark: i64) -> Vec<(StateDescriptor, i64)> {
    states
        .iter()
        .filter_map(|s| {
            let ttl = s.ttl?;
            let now = match ttl.domain {
                TimeDomain::EventTime if watermark == i64::MIN => return None,
                TimeDomain::EventTime => watermark,
                TimeDomain::ProcessingTime => chrono::Utc::now().timestamp_millis(),
            };
            Some((s.clone(), now.saturating_sub(ttl.millis)))
        })
        .collect()
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(at) => tokio::time::sleep_until(at.into()).await,
        None => std::future::pending().await,
    }
}
