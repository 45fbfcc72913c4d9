//! The `pipeline` mode: the workload through strata's real runtime — a
//! generator source (the events of all workers, interleaved), key-by on the
//! user id, the update form as a keyed process function, a discarding sink
//! and checkpoints every 10 s of wall time — so its figure includes the
//! channels, routing, barriers and sink that `embedded` (a harness standing
//! in for the runtime) leaves out. Flink's peer job has the same shape.
//!
//! Its state is verified whole after the run, from the final checkpoint:
//! every operator instance's store is restored and each user is read from
//! the instance that owns its key group.

use crate::backends::{Backend, BenchError, Budget, UserState};
use crate::checkpointing::CheckpointFigures;
use crate::runner::{progress_bar, verify_all, Latency, Mode, ModeReport, ProgressLog};
use crate::timeline::{memory, sample_until, Gauges};
use crate::workload::{Event, Events, Workload};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use strata_cache::{StateDescriptor, StateStore};
use strata_runtime::inspect::CheckpointState;
use strata_runtime::{Context, FunctionError, JobConfig, KeyedProcessFunction, Pipeline};

/// Wall time between two checkpoints.
const CHECKPOINT_INTERVAL: Duration = Duration::from_secs(10);

/// Events an instance applies between two updates of the progress gauges.
const PROGRESS_EVERY: u64 = 64;

/// The events of all workers as one sequence: event `g` is worker
/// `g % threads`'s event number `g / threads`. Workers' events are made by
/// their own random streams in order, so the sequence is read in order; an
/// index before a worker's stream position (a restore) starts it again.
pub(crate) struct Interleaved {
    w: Workload,
    streams: Vec<(Events, u64)>,
}

impl Interleaved {
    /// The sequence of workload `w`.
    pub(crate) fn new(w: &Workload) -> Self {
        Self {
            w: w.clone(),
            streams: (0..w.threads).map(|t| (w.events(t), 0)).collect(),
        }
    }

    /// Event `g`: (user id, event). `None` past the last.
    pub(crate) fn event(&mut self, g: u64) -> Option<(u64, Event)> {
        let threads = u64::from(self.w.threads);
        let (t, k) = ((g % threads) as usize, g / threads);
        let (events, next) = &mut self.streams[t];
        if *next > k {
            *events = self.w.events(t as u32);
            *next = 0;
        }
        let skip = k - *next;
        *next = k + 1;
        events.nth(skip as usize)
    }
}

/// The update form as a keyed process function; emits the user id.
struct UserHistoryBench {
    descriptors: Vec<StateDescriptor>,
    form: crate::workload::Form,
    state: Option<UserState>,
    gauges: Arc<Gauges>,
    progress: indicatif::ProgressBar,
    applied: u64,
}

impl KeyedProcessFunction for UserHistoryBench {
    type In = (u64, Event);
    type Out = u64;

    fn states(&self) -> Vec<StateDescriptor> {
        self.descriptors.clone()
    }

    fn open(&mut self, store: &StateStore) -> Result<(), FunctionError> {
        self.state = Some(UserState::open(store, self.form)?);
        Ok(())
    }

    fn process(
        &mut self,
        key: &[u8],
        (user, event): (u64, Event),
        ctx: &mut Context<'_, u64>,
    ) -> Result<(), FunctionError> {
        self.state
            .as_ref()
            .ok_or("used before open")?
            .apply(key, event)?;
        ctx.emit(user);
        self.applied += 1;
        if self.applied.is_multiple_of(PROGRESS_EVERY) {
            self.gauges
                .events
                .fetch_add(PROGRESS_EVERY, Ordering::Relaxed);
            self.progress.inc(PROGRESS_EVERY);
        }
        Ok(())
    }
}

/// The runtime's configuration for the harness's workload and memory:
/// one keyed instance per worker, the workers' L1 and L2 budgets in all.
fn config(w: &Workload, budget: Budget) -> JobConfig {
    let threads = u64::from(w.threads);
    JobConfig {
        parallelism: w.threads,
        l1_capacity: budget.l1_bytes * threads,
        l2_memory: budget.l2_bytes as u64 * threads,
        checkpoint_interval: CHECKPOINT_INTERVAL,
        ..JobConfig::default()
    }
}

/// Where the run under `dir` keeps its checkpoints.
fn checkpoints(dir: &Path) -> std::path::PathBuf {
    dir.join("checkpoints")
}

/// Runs the workload through the runtime with state under `dir`; returns
/// the report and one verifying backend per worker (each reads the whole
/// restored final checkpoint, see [`Restored`]).
pub(crate) fn run(
    dir: &Path,
    w: &Workload,
    budget: Budget,
) -> Result<(ModeReport, Vec<Box<dyn Backend>>), BenchError> {
    let gauges = Arc::new(Gauges::default());
    let progress = progress_bar(Mode::Pipeline, w.events);
    let sequence = Arc::new(Mutex::new(Interleaved::new(w)));
    let (descriptors, form) = (UserState::descriptors(w), w.form);
    let (g, p) = (gauges.clone(), progress.clone());
    let job = Pipeline::new("strata-bench", config(w, budget), move || {
        UserHistoryBench {
            descriptors: descriptors.clone(),
            form,
            state: None,
            gauges: g.clone(),
            progress: p.clone(),
            applied: 0,
        }
    })
    .generator_source("user-history", w.events, move |g| {
        let mut s = sequence.lock().unwrap_or_else(|p| p.into_inner());
        s.event(g)
            .expect("the generator asks only for indexes below its total")
    })
    .key_by(|(user, _)| user.to_be_bytes().to_vec())
    .timestamps(|(_, e)| e.ts)
    .discard_sink()
    .checkpoint_dir(checkpoints(dir));
    let done = AtomicBool::new(false);
    let started = Instant::now();
    let started_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    let (outcome, timeline) = std::thread::scope(|s| {
        let log = ProgressLog::callback(Mode::Pipeline, w.events);
        let sampler = s.spawn(|| sample_until(&done, std::slice::from_ref(&*gauges), started, log));
        let outcome = job.run();
        // The gauges count in steps: the last sample holds every event.
        if let Ok(job) = &outcome {
            gauges.events.store(job.records_in, Ordering::Relaxed);
        }
        done.store(true, Ordering::Relaxed);
        (outcome, sampler.join().unwrap_or_default())
    });
    progress.finish_and_clear();
    let job = outcome?;
    // Peak RSS before the verification builds its model.
    let peak_rss_bytes = memory("VmHWM:");
    let mut backends = open(dir, w)?;
    let verification = verify_all(&mut backends, w, &per_worker(w))?;
    let secs = job.elapsed.as_secs_f64();
    let t = job.tiers;
    let report = ModeReport {
        events: job.records_in,
        events_per_sec: job.records_in as f64 / secs,
        latency_us: Latency::unmeasured(),
        peak_rss_bytes,
        verified: verification.passed() && job.records_in == w.events,
        verification: Some(verification),
        l1_hit_ratio: Some(t.l1_hit_ratio()),
        l2_hit_ratio: Some(t.l2_hit_ratio()),
        l1_bytes: Some(t.l1_bytes),
        l2_bytes: Some(t.l2_bytes),
        checkpoints: Some(figures(&job.checkpoints, started_ms, &timeline)),
        l2: Some(job.l2.clone()),
        timeline,
        ..ModeReport::default()
    };
    Ok((report, backends))
}

/// The events of each worker (what the model of each holds).
fn per_worker(w: &Workload) -> Vec<u64> {
    (0..w.threads).map(|t| w.events_of(t)).collect()
}

/// The runtime's checkpoints in the harness's terms; `started_ms` is when
/// the run began (ms since the Unix epoch), `timeline` its samples.
fn figures(
    all: &[strata_runtime::checkpoint::CheckpointStats],
    started_ms: u64,
    timeline: &[crate::timeline::Sample],
) -> CheckpointFigures {
    let n = all.len().max(1) as f64;
    let windows: Vec<(f64, f64)> = all
        .iter()
        .map(|c| {
            let end = c.completed_at_ms.saturating_sub(started_ms) as f64 / 1000.0;
            (end - c.duration_ms as f64 / 1000.0, end)
        })
        .collect();
    // Each checkpoint but the final one (it follows the last event).
    let during_input = &windows[..windows.len().saturating_sub(1)];
    CheckpointFigures {
        during_ratio: crate::timeline::rate_ratio(timeline, during_input),
        windows,
        count: all.len() as u64,
        mean_ms: all.iter().map(|c| c.duration_ms as f64).sum::<f64>() / n,
        max_ms: all.iter().map(|c| c.duration_ms as f64).fold(0.0, f64::max),
        last_bytes: all.last().map_or(0, |c| c.state_bytes),
        mean_new_bytes: all.iter().map(|c| c.new_bytes as f64).sum::<f64>() / n,
    }
}

/// Restores the final checkpoint of the run under `dir` (every instance's
/// store, into `dir/restored`) and returns one reading backend per worker.
pub(crate) fn open(dir: &Path, w: &Workload) -> Result<Vec<Box<dyn Backend>>, BenchError> {
    let restored = dir.join("restored");
    if restored.exists() {
        std::fs::remove_dir_all(&restored)?;
    }
    let state = strata_runtime::inspect::open_checkpoint(
        &checkpoints(dir),
        &UserState::descriptors(w),
        &restored,
    )?;
    let users = state
        .stores
        .iter()
        .map(|s| UserState::open(s, w.form))
        .collect::<Result<Vec<_>, _>>()?;
    let shared = Arc::new((state, users));
    Ok((0..w.threads)
        .map(|_| Box::new(Restored(shared.clone())) as Box<dyn Backend>)
        .collect())
}

/// The restored final checkpoint, read by user (each from the instance
/// that owns its key group).
struct Restored(Arc<(CheckpointState, Vec<UserState>)>);

impl Restored {
    fn user(&self, key: &[u8]) -> &UserState {
        &self.0 .1[self.0 .0.instance_of(key)]
    }
}

impl Backend for Restored {
    fn apply(&mut self, _: u64, _: Event) -> Result<(), BenchError> {
        Err("a restored pipeline checkpoint is read, not written".into())
    }

    fn count(&mut self, user: u64) -> Result<u64, BenchError> {
        self.user(&user.to_be_bytes()).count(&user.to_be_bytes())
    }

    fn history(&mut self, user: u64) -> Result<Option<Vec<Event>>, BenchError> {
        let key = user.to_be_bytes();
        self.user(&key).history(&key).map(Some)
    }
}

/// After SIGKILL: restores the killed run's final checkpoint in this new
/// process, calls `ready`, and verifies it whole.
pub(crate) fn recover(
    dir: &Path,
    w: &Workload,
    ready: impl FnOnce(),
) -> Result<crate::recovery::Recovery, BenchError> {
    let mut backends = open(dir, w)?;
    ready();
    let held = per_worker(w);
    let verification = verify_all(&mut backends, w, &held)?;
    Ok(crate::recovery::Recovery {
        restore_ms: 0.0,
        events: held.iter().sum(),
        counted: verification.counted,
        verified: verification.passed(),
        verification,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::Form;

    fn workload(threads: u32) -> Workload {
        Workload {
            users: 50,
            events: 1001,
            zipf: 0.0,
            payload: 8,
            history_days: 60,
            spread_days: 120,
            form: Form::ListAdd,
            threads,
            checkpoint_every: 0,
        }
    }

    #[test]
    fn the_interleaved_sequence_holds_every_workers_events_once_in_order() {
        let w = workload(3);
        let mut s = Interleaved::new(&w);
        let all: Vec<_> = (0..w.events).map(|g| s.event(g).unwrap()).collect();
        assert!(s.event(w.events).is_none());
        for t in 0..3u32 {
            let mine: Vec<_> = all.iter().skip(t as usize).step_by(3).cloned().collect();
            assert_eq!(mine, w.events(t).collect::<Vec<_>>(), "worker {t}");
        }
        // A restore asks again from an earlier index: the same events.
        assert_eq!(s.event(500), Some(all[500].clone()));
        assert_eq!(s.event(501), Some(all[501].clone()));
        assert_eq!(per_worker(&w).iter().sum::<u64>(), w.events);
    }
}
