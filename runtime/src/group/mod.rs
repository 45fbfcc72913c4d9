//! Scale-out: several `strata` processes run one job, dividing its Kafka
//! input partitions through a consumer group (`--input
//! kafka://…/topic?group=G`), as Kafka Streams does.
//!
//! * **A partition is a shard.** Records are keyed in Kafka by the job's
//!   key (`strata topic load --key`), so one key's records are in one
//!   partition, and a partition's keyed state, source offset, sink
//!   transaction and checkpoints make one shard: a pipeline of its own
//!   reading only that partition, checkpointing into `<checkpoint-dir>/p-<N>`
//!   on its own schedule (no barrier spans shards), writing through the
//!   `transactional.id` `<prefix>-p<N>-<j>`. A message whose key is not the
//!   key its fields give fails the shard (`source.kafka.require-key` is on).
//! * **Ownership** is the group's: a [`GroupMember`] with the
//!   cooperative-sticky assignor. A partition assigned to this process
//!   starts its shard from the shard's latest checkpoint (downloaded from an
//!   object store if this machine lacks it), or fresh. A revoked partition's
//!   shard stops reading, takes a final checkpoint, commits its output and
//!   ends before the revocation returns, so the next owner starts exactly
//!   there.
//! * **Zombies are fenced.** Every checkpoint of a shard first commits its
//!   offset to the group under this member's generation ([`GroupMember::commit`]);
//!   a process the group expelled (stopped past `session.timeout.ms`) is
//!   refused, and its shard stops without writing anything
//!   ([`RuntimeError::ShardLost`]). Its Kafka producer is fenced too: the new
//!   owner's `init_transactions` on the same `transactional.id` aborts
//!   what it had open. L3 writes follow completed checkpoints only, so a
//!   zombie writes nothing to L3 either.
//! * **Bounded input** (`source.kafka.bounded`): each shard ends at the end
//!   offset its partition had when the shard opened, recorded with its last
//!   checkpoint's offset once that checkpoint's output is all published
//!   (before, a process killed in between would leave it unpublished, with
//!   no one to run the shard again); a process leaves once every partition
//!   of the topic has ended so and none of its shards runs.
//!
//! The committed offsets carry `strata:chk-<id>` (and `:end@<offset>` for
//! an ended shard), which `strata jobs status` reads back.

mod commit;
mod shards;
pub(crate) mod status;
mod watch;

use crate::error::{Result, RuntimeError};
use crate::pipeline::JobReport;
use crate::shard::Shard;
use crate::sync::lock;
use commit::{all_ended, ended};
use shards::{collect, start, Listener, Shards};
use std::sync::Arc;
use std::time::{Duration, Instant};
use strata_connectors::kafka::{GroupMember, GroupOptions};
use watch::Watcher;

/// Runs one shard's pipeline to its end: built by the CLI for its job.
pub(crate) type RunShard = Arc<dyn Fn(Shard) -> Result<JobReport> + Send + Sync>;

/// How one shard's run ended in this process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShardEnd {
    /// Bounded input: it read its partition to the end.
    Finished,
    /// Revoked by the group: final checkpoint taken, output committed.
    Released,
    /// Taken away while this process was out of the group: stopped
    /// without committing anything (its successor had fenced it).
    Lost,
}

/// One shard's run in this process.
#[derive(Debug, Clone)]
pub struct ShardRun {
    /// The input partition.
    pub partition: i32,
    /// How it ended.
    pub end: ShardEnd,
    /// Its pipeline's report (`None` when lost).
    pub report: Option<JobReport>,
    /// From the assignment to the end of its run.
    pub elapsed: Duration,
}

/// What one process of a group did.
#[derive(Debug, Clone)]
pub struct GroupReport {
    /// The shards it ran, in the order they ended.
    pub shards: Vec<ShardRun>,
    /// Wall-clock time in the group.
    pub elapsed: Duration,
}

/// How a process takes part in a group.
pub(crate) struct GroupSettings {
    pub(crate) options: GroupOptions,
    /// `source.kafka.bounded`: leave once every partition has ended.
    pub(crate) bounded: bool,
}

/// Joins the group and runs the shards it assigns to this process until
/// the input ends (bounded) or the process is asked to stop (SIGINT,
/// SIGTERM: [`RuntimeError::Interrupted`], its shards resume elsewhere
/// from their last checkpoints).
///
/// Errors: the first shard that fails for another reason than losing its
/// partition fails the process (the others are stopped without a
/// checkpoint, as a crash would); the group cannot be joined.
pub(crate) fn run(settings: &GroupSettings, run_shard: RunShard) -> Result<GroupReport> {
    let started = Instant::now();
    let shards = Arc::new(Shards::default());
    let member = Arc::new(GroupMember::join(
        &settings.options,
        Listener(shards.clone()),
    )?);
    eprintln!(
        "strata: joined consumer group {} on topic {} ({} partitions); waiting for partitions",
        settings.options.group,
        settings.options.topic,
        member.partitions().len()
    );
    // Listens for SIGINT and SIGTERM from here on.
    crate::signals::received();
    let watcher = Watcher::start(shards.clone(), started)?;
    let mut runs = Vec::new();
    let mut last_end_check = Instant::now();
    let outcome = loop {
        if let Err(e) = member.poll(Duration::from_millis(100)) {
            break Err(e.into());
        }
        let assigned = std::mem::take(&mut *lock(&shards.assigned));
        let done = match settings.bounded && !assigned.is_empty() {
            true => ended(&member)?,
            false => Vec::new(),
        };
        for p in assigned {
            if done.contains(&p) {
                eprintln!("strata: group: partition {p} has ended already (its last checkpoint read it to its end): no shard to run");
                continue;
            }
            start(&shards, &member, p, &run_shard, settings.bounded)?;
        }
        shards.reap();
        if let Err(e) = collect(&shards, &mut runs) {
            break Err(e);
        }
        if let Some(signal) = crate::signals::received() {
            break Err(RuntimeError::Left { signal });
        }
        // Bounded: asks the brokers once a second whether the topic is done.
        if settings.bounded
            && lock(&shards.running).is_empty()
            && last_end_check.elapsed() >= Duration::from_secs(1)
        {
            last_end_check = Instant::now();
            if all_ended(&member)? {
                break Ok(());
            }
        }
    };
    // Stop what still runs as a crash would: no final checkpoint.
    let left: Vec<i32> = lock(&shards.running).keys().copied().collect();
    shards.stop(&left, true);
    drop(member);
    drop(watcher);
    let report = GroupReport {
        shards: runs,
        elapsed: started.elapsed(),
    };
    if let Err(RuntimeError::Left { .. }) = &outcome {
        // Asked to stop: what this process did is still worth a line.
        eprintln!("{}", summary(&report));
    }
    outcome.map(|()| report)
}

/// The end-of-run line of a process of a group (parsed by tests), also
/// printed when it leaves on a signal.
pub(crate) fn summary(r: &GroupReport) -> String {
    let count = |end| r.shards.iter().filter(|s| s.end == end).count();
    let reports = || r.shards.iter().filter_map(|s| s.report.as_ref());
    let records_in: u64 = reports().map(|j| j.records_in).sum();
    let records_out: u64 = reports().map(|j| j.records_out).sum();
    let down: u64 = reports()
        .filter_map(|j| j.object_store.as_ref())
        .map(|t| t.bytes_down)
        .sum();
    let secs = r.elapsed.as_secs_f64().max(1e-9);
    format!(
        "strata: left the group. shards={} finished={} released={} lost={} records_in={records_in} records_out={records_out} elapsed_s={secs:.2} records_per_s={:.0} object_store_bytes_down={down}",
        r.shards.len(),
        count(ShardEnd::Finished),
        count(ShardEnd::Released),
        count(ShardEnd::Lost),
        records_in as f64 / secs,
    )
}
