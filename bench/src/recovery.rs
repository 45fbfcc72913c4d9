//! The restore after SIGKILL: a tiered mode's child goes on working after
//! its run until the parent kills it ([`tail`]); a new process then
//! restores every worker from its last checkpoint and verifies the
//! restored counts ([`recover`]).

use crate::backends::{Backend, BenchError, Budget};
use crate::cassandra::Target;
use crate::runner::{join_all, verify_all, worker_dir, Context, Mode};
use crate::workload::Workload;
use serde::{Deserialize, Serialize};
use std::path::Path;

/// A restore after SIGKILL (tiered modes).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Recovery {
    /// From the SIGKILL to every worker's state restored from its last
    /// checkpoint and open again (process start included), milliseconds.
    pub restore_ms: f64,
    /// Events the restored checkpoints hold.
    pub events: u64,
    /// The sum of the restored per-user counts.
    pub counted: u64,
    /// Whether the restored state matched the model of those events
    /// (counts and histories; see [`crate::verify`]).
    pub verified: bool,
    /// What the verification compared.
    #[serde(default)]
    pub verification: crate::verify::Verification,
}

/// Keeps applying the workload's events again (without checkpoints) to the
/// workers' backends until the process is killed: the work a crash loses.
pub(crate) fn tail(backends: Vec<Box<dyn Backend>>, w: &Workload) -> Result<(), BenchError> {
    std::thread::scope(|s| {
        for (t, mut backend) in backends.into_iter().enumerate() {
            s.spawn(move || -> Result<(), BenchError> {
                loop {
                    for (i, (user, event)) in w.events(t as u32).enumerate() {
                        if i % 1024 == 0 {
                            crate::runner::check_parent()?;
                        }
                        backend.apply(user, event)?;
                    }
                }
            });
        }
    });
    Err("the tail work after the run stopped".into())
}

/// Waits until the process is killed (a `pipeline` run: the runtime ended
/// with its final checkpoint, so there is no work after it to lose).
pub(crate) fn idle() -> Result<(), BenchError> {
    loop {
        crate::runner::check_parent()?;
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

/// A restored worker's backend and the events its checkpoint holds.
type Restored = (Box<dyn Backend>, u64);

/// Restores every worker of a killed `mode` run under `dir` from its last
/// checkpoint, calls `ready` once all are open, then verifies that the
/// restored per-user counts add up to the events the checkpoints hold.
pub(crate) fn recover(
    mode: Mode,
    dir: &Path,
    w: &Workload,
    budget: Budget,
    target: &Target,
    ready: impl FnOnce(),
) -> Result<Recovery, BenchError> {
    if mode == Mode::Pipeline {
        return crate::pipeline::recover(dir, w, ready);
    }
    let cx = Context {
        mode,
        dir,
        w,
        budget,
        target,
    };
    let restored: Vec<Result<Restored, BenchError>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..w.threads)
            .map(|t| {
                let cx = &cx;
                s.spawn(move || {
                    let wd = worker_dir(cx.dir, t);
                    let latest =
                        crate::checkpointing::restore(&wd.join("checkpoints"), &wd.join("l2"))?;
                    let mut backend = cx.open(t)?;
                    backend.restored(&latest)?;
                    Ok((backend, latest.events))
                })
            })
            .collect();
        join_all(handles)
    });
    let (mut backends, mut held) = (Vec::new(), Vec::new());
    for r in restored {
        let (backend, events) = r?;
        backends.push(backend);
        held.push(events);
    }
    ready();
    let verification = verify_all(&mut backends, w, &held)?;
    let events = held.iter().sum();
    Ok(Recovery {
        restore_ms: 0.0,
        events,
        counted: verification.counted,
        verified: verification.passed() && events == w.events,
        verification,
    })
}
