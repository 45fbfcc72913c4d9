//! The restore after SIGKILL: a tiered mode's child goes on working after
//! its run until the parent kills it ([`tail`]); a new process then
//! restores every worker from its last checkpoint and verifies the
//! restored counts ([`recover`]).

use crate::backends::{Backend, BenchError, Budget};
use crate::cassandra::Target;
use crate::runner::{count_all, join_all, worker_dir, Context, Mode};
use crate::workload::Workload;
use serde::{Deserialize, Serialize};
use std::path::Path;

/// A restore after SIGKILL (tiered modes).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Recovery {
    /// From the SIGKILL to every worker's state restored from its last
    /// checkpoint and open again (process start included), milliseconds.
    pub restore_ms: f64,
    /// Events the restored checkpoints hold.
    pub events: u64,
    /// The sum of the restored per-user counts.
    pub counted: u64,
    /// Whether the restored per-user counts add up to those events.
    pub verified: bool,
}

/// Keeps applying the workload's events again (without checkpoints) to the
/// workers' backends until the process is killed: the work a crash loses.
pub fn tail(backends: Vec<Box<dyn Backend>>, w: &Workload) -> Result<(), BenchError> {
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

/// A restored worker's backend and the events its checkpoint holds.
type Restored = (Box<dyn Backend>, u64);

/// Restores every worker of a killed `mode` run under `dir` from its last
/// checkpoint, calls `ready` once all are open, then verifies that the
/// restored per-user counts add up to the events the checkpoints hold.
pub fn recover(
    mode: Mode,
    dir: &Path,
    w: &Workload,
    budget: Budget,
    target: &Target,
    ready: impl FnOnce(),
) -> Result<Recovery, BenchError> {
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
                    Ok((cx.open(t)?, latest.events))
                })
            })
            .collect();
        join_all(handles)
    });
    let mut workers = Vec::new();
    for r in restored {
        workers.push(r?);
    }
    ready();
    let (mut events, mut counted) = (0, 0);
    for (t, (mut backend, held)) in workers.into_iter().enumerate() {
        events += held;
        let users: Vec<u64> = w.events(t as u32).users().collect();
        counted += count_all(backend.as_mut(), &users)?;
    }
    Ok(Recovery {
        restore_ms: 0.0,
        events,
        counted,
        verified: counted == events && events == w.events,
    })
}
