//! The shards this process runs: one thread each, started when the
//! group assigns a partition, stopped (after a final checkpoint, or at once
//! when the process lost the group) when it is revoked, and collected when
//! they end.

use super::commit::{fence, mark_ended};
use super::{RunShard, ShardEnd, ShardRun};
use crate::checkpoint::storage::Fence;
use crate::checkpoint::CheckpointMetadata;
use crate::error::{Result, RuntimeError};
use crate::pipeline::JobReport;
use crate::progress::Progress;
use crate::shard::{Shard, ShardControl};
use crate::sync::lock;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use strata_connectors::kafka::{GroupMember, RebalanceListener};

pub(super) struct Running {
    pub(super) control: Arc<ShardControl>,
    pub(super) progress: Arc<Progress>,
    pub(super) thread: JoinHandle<Result<JobReport>>,
    pub(super) since: Instant,
    /// Its first record was logged.
    pub(super) announced: bool,
}

/// The shards of this process, shared with the rebalance listener.
#[derive(Default)]
pub(super) struct Shards {
    pub(super) running: Mutex<HashMap<i32, Running>>,
    pub(super) assigned: Mutex<Vec<i32>>,
    pub(super) ended: Mutex<Vec<Ended>>,
}

/// A shard's run that ended, not yet reported.
pub(super) struct Ended {
    pub(super) partition: i32,
    pub(super) result: Result<JobReport>,
    pub(super) end: ShardEnd,
    pub(super) elapsed: Duration,
}

pub(super) struct Listener(pub(super) Arc<Shards>);

impl RebalanceListener for Listener {
    fn assigned(&self, partitions: &[i32]) {
        if !partitions.is_empty() {
            eprintln!("strata: group: assigned partitions {partitions:?}");
            lock(&self.0.assigned).extend_from_slice(partitions);
        }
    }

    fn revoked(&self, partitions: &[i32], lost: bool) {
        lock(&self.0.assigned).retain(|p| !partitions.contains(p));
        self.0.stop(partitions, lost);
    }
}

impl Shards {
    /// Stops the shards of `partitions` that run here (released, or
    /// abandoned when `lost`), all at once, and waits for them.
    pub(super) fn stop(&self, partitions: &[i32], lost: bool) {
        let stopping: Vec<(i32, Running)> = {
            let mut running = lock(&self.running);
            partitions
                .iter()
                .filter_map(|p| running.remove(p).map(|r| (*p, r)))
                .collect()
        };
        if stopping.is_empty() {
            return;
        }
        let ids: Vec<i32> = stopping.iter().map(|(p, _)| *p).collect();
        let how = if lost {
            "lost (this process was out of the group): stopping their shards without a checkpoint"
        } else {
            "revoked: releasing their shards after a final checkpoint"
        };
        eprintln!("strata: group: partitions {ids:?} {how}");
        for (_, r) in &stopping {
            r.control.stop(lost);
        }
        for (p, r) in stopping {
            self.stopped(p, r, lost);
        }
    }

    /// Waits for shard `p`, which was told to stop, and records how it ended.
    fn stopped(&self, p: i32, r: Running, lost: bool) {
        let result = match (join(r.thread, p), lost) {
            (Err(e @ RuntimeError::ShardLost { .. }), _) => Err(e),
            // Whatever a lost shard failed on, its new owner goes on.
            (Err(e), true) => Err(RuntimeError::ShardLost {
                partition: p,
                reason: e.to_string(),
            }),
            (result, _) => result,
        };
        let end = match (&result, lost) {
            (Err(RuntimeError::ShardLost { .. }), _) | (_, true) => ShardEnd::Lost,
            (_, false) => ShardEnd::Released,
        };
        lock(&self.ended).push(Ended {
            partition: p,
            result,
            end,
            elapsed: r.since.elapsed(),
        });
    }

    /// Moves shards whose pipeline ended by itself to `ended`.
    pub(super) fn reap(&self) {
        let done: Vec<i32> = lock(&self.running)
            .iter()
            .filter(|(_, r)| r.thread.is_finished())
            .map(|(p, _)| *p)
            .collect();
        for p in done {
            if let Some(r) = lock(&self.running).remove(&p) {
                let result = join(r.thread, p);
                let end = match &result {
                    Err(RuntimeError::ShardLost { .. }) => ShardEnd::Lost,
                    _ => ShardEnd::Finished,
                };
                lock(&self.ended).push(Ended {
                    partition: p,
                    result,
                    end,
                    elapsed: r.since.elapsed(),
                });
            }
        }
    }
}

/// A shard's result; a fenced Kafka producer or L3 lineage means the shard
/// was lost (its new owner started).
fn join(thread: JoinHandle<Result<JobReport>>, partition: i32) -> Result<JobReport> {
    use strata_cache::StateError;
    use strata_connectors::ConnectorError::KafkaFenced;
    let lost = |e: &dyn std::fmt::Display| RuntimeError::ShardLost {
        partition,
        reason: e.to_string(),
    };
    match thread.join() {
        Err(_) => Err(RuntimeError::Function(format!(
            "shard {partition}'s thread panicked"
        ))),
        Ok(Err(RuntimeError::Connector(e @ KafkaFenced { .. }))) => Err(lost(&e)),
        Ok(Err(RuntimeError::State(e @ StateError::Fenced(_)))) => Err(lost(&e)),
        Ok(result) => result,
    }
}

/// Starts shard `p` on a thread of its own.
pub(super) fn start(
    shards: &Shards,
    member: &Arc<GroupMember>,
    p: i32,
    run_shard: &RunShard,
    bounded: bool,
) -> Result<()> {
    let control = ShardControl::new(p);
    let progress = Arc::new(Progress::default());
    let fence = {
        let (member, control) = (member.clone(), control.clone());
        Fence(Arc::new(move |meta: &CheckpointMetadata| {
            fence(&member, &control, meta, bounded)
        }))
    };
    let shard = Shard {
        partition: p,
        control: control.clone(),
        fence,
        progress: progress.clone(),
    };
    let run_shard = run_shard.clone();
    let (member, ending) = (member.clone(), control.clone());
    let thread = std::thread::Builder::new()
        .name(format!("shard-{p}"))
        .spawn(move || {
            let report = run_shard(shard)?;
            mark_ended(&member, &ending)?;
            Ok(report)
        })
        .map_err(|e| RuntimeError::Function(format!("start the thread of shard {p}: {e}")))?;
    lock(&shards.running).insert(
        p,
        Running {
            control,
            progress,
            thread,
            since: Instant::now(),
            announced: false,
        },
    );
    Ok(())
}

/// Records the shards that ended; the first failure (other than a lost
/// shard) is returned.
pub(super) fn collect(shards: &Shards, runs: &mut Vec<ShardRun>) -> Result<()> {
    for Ended {
        partition,
        result,
        end,
        elapsed,
    } in std::mem::take(&mut *lock(&shards.ended))
    {
        let report = match result {
            Ok(report) => Some(report),
            Err(e @ RuntimeError::ShardLost { .. }) => {
                eprintln!("strata: {e}");
                None
            }
            Err(RuntimeError::Interrupted { signal, .. }) => {
                return Err(RuntimeError::Left { signal })
            }
            Err(e) => return Err(e),
        };
        eprintln!(
            "strata: shard {partition} {} {:.1} s after its assignment{}",
            match end {
                ShardEnd::Finished => "finished",
                ShardEnd::Released => "released",
                ShardEnd::Lost => "lost",
            },
            elapsed.as_secs_f64(),
            report.as_ref().map_or(String::new(), shard_summary)
        );
        runs.push(ShardRun {
            partition,
            end,
            report,
            elapsed,
        });
    }
    Ok(())
}

fn shard_summary(r: &JobReport) -> String {
    let restored = r.restored_from.map_or("started fresh".to_owned(), |id| {
        format!("restored checkpoint {id}")
    });
    let fetched = r.object_store.as_ref().map_or(0, |t| t.bytes_down);
    format!(
        ": {} records in, {} out; {restored}, {fetched} bytes downloaded, first record after {} s",
        r.records_in,
        r.records_out,
        r.first_record_after
            .map_or("-".into(), |d| format!("{:.2}", d.as_secs_f64()))
    )
}
