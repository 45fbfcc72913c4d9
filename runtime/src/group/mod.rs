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

pub(crate) mod command;
pub(crate) mod status;

use crate::checkpoint::storage::Fence;
use crate::checkpoint::CheckpointMetadata;
use crate::error::{Result, RuntimeError};
use crate::pipeline::JobReport;
use crate::progress::Progress;
use crate::sync::lock;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use strata_connectors::kafka::{Commit, GroupMember, GroupOptions, RebalanceListener};

const RUN: u8 = 0;
const RELEASE: u8 = 1;
const ABANDON: u8 = 2;

/// What the process that owns a shard tells its pipeline.
#[derive(Debug)]
pub(crate) struct ShardControl {
    partition: i32,
    state: AtomicU8,
    /// Bounded input: the partition's end offset (-1 until the source opened).
    end: AtomicI64,
    /// Bounded input: the final checkpoint that read the partition to its
    /// end, `(id, offset)`, marked ended in the group only once its output
    /// is all published (see [`mark_ended`]).
    last: Mutex<Option<(u64, i64)>>,
}

impl ShardControl {
    fn new(partition: i32) -> Arc<Self> {
        Arc::new(Self {
            partition,
            state: AtomicU8::new(RUN),
            end: AtomicI64::new(-1),
            last: Mutex::new(None),
        })
    }

    /// Whether the shard was released (stop reading, take a final
    /// checkpoint). Errs once it was lost: stop without committing.
    pub(crate) fn released(&self) -> Result<bool> {
        match self.state.load(Ordering::Acquire) {
            RUN => Ok(false),
            RELEASE => Ok(true),
            _ => Err(self.lost("its partition was taken away")),
        }
    }

    /// Bounded input: the end offset the shard reads to.
    pub(crate) fn set_end(&self, end: i64) {
        self.end.store(end, Ordering::Release);
    }

    fn lost(&self, reason: &str) -> RuntimeError {
        RuntimeError::ShardLost {
            partition: self.partition,
            reason: reason.to_owned(),
        }
    }
}

/// One shard as its pipeline gets it (see `Pipeline::shard`).
#[derive(Clone)]
pub(crate) struct Shard {
    pub(crate) partition: i32,
    pub(crate) control: Arc<ShardControl>,
    pub(crate) fence: Fence,
    pub(crate) progress: Arc<Progress>,
}

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

struct Running {
    control: Arc<ShardControl>,
    progress: Arc<Progress>,
    thread: JoinHandle<Result<JobReport>>,
    since: Instant,
    /// Its first record was logged.
    announced: bool,
}

/// The shards of this process, shared with the rebalance listener.
#[derive(Default)]
struct Shards {
    running: Mutex<HashMap<i32, Running>>,
    assigned: Mutex<Vec<i32>>,
    ended: Mutex<Vec<Ended>>,
}

/// A shard's run that ended, not yet reported.
struct Ended {
    partition: i32,
    result: Result<JobReport>,
    end: ShardEnd,
    elapsed: Duration,
}

struct Listener(Arc<Shards>);

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
    fn stop(&self, partitions: &[i32], lost: bool) {
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
        let state = if lost { ABANDON } else { RELEASE };
        for (_, r) in &stopping {
            r.control.state.store(state, Ordering::Release);
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
    fn reap(&self) {
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
    let interrupted = signal_flag()?;
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
        if let Some(signal) = interrupted.get() {
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

/// Starts shard `p` on a thread of its own.
fn start(
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

/// A shard's checkpoint may go out only while this process owns the
/// shard: commits the checkpoint's offset under the member's generation.
fn fence(
    member: &GroupMember,
    control: &ShardControl,
    meta: &CheckpointMetadata,
    bounded: bool,
) -> Result<()> {
    control.released()?;
    let p = control.partition;
    let offset = meta
        .source
        .partitions
        .iter()
        .find(|o| o.partition == p)
        .map(|o| o.offset)
        .ok_or_else(|| {
            RuntimeError::Function(format!(
                "checkpoint {} of shard {p} records no offset of partition {p}",
                meta.id
            ))
        })?;
    if bounded && meta.is_final && control.state.load(Ordering::Acquire) == RUN {
        *lock(&control.last) = Some((meta.id, offset));
    }
    commit(
        member,
        control,
        meta.id,
        offset,
        &format!("strata:chk-{}", meta.id),
    )
}

/// Bounded input, once a shard's run ended with all its output published:
/// marks its partition ended in the group (`strata:chk-<id>:end@<offset>`),
/// so that no process runs it again. Not before: a process killed between
/// its final checkpoint and the publishing of that checkpoint's output
/// leaves the partition to the next owner, whose restore publishes it.
fn mark_ended(member: &GroupMember, control: &ShardControl) -> Result<()> {
    let Some((id, offset)) = *lock(&control.last) else {
        return Ok(());
    };
    let end = control.end.load(Ordering::Acquire);
    commit(
        member,
        control,
        id,
        offset,
        &format!("strata:chk-{id}:end@{end}"),
    )
}

/// Commits `offset` with `metadata` (checkpoint `id`'s) under the member's
/// generation, retrying for [`COMMIT_PATIENCE`].
fn commit(
    member: &GroupMember,
    control: &ShardControl,
    id: u64,
    offset: i64,
    metadata: &str,
) -> Result<()> {
    let p = control.partition;
    let deadline = Instant::now() + COMMIT_PATIENCE;
    loop {
        match member.commit(p, offset, metadata) {
            Commit::Done => return Ok(()),
            Commit::Fenced(why) => {
                return Err(control.lost(&format!(
                    "the group refused checkpoint {id}'s offset ({why}): another process owns the shard now"
                )))
            }
            Commit::Failed(why) if Instant::now() >= deadline => {
                return Err(RuntimeError::Function(format!(
                    "committing the offset of checkpoint {id} to the group failed for {COMMIT_PATIENCE:?}: {why}"
                )))
            }
            // A rebalance moves the generation on: this process learns
            // whether it keeps the shard (then the commit goes through) or
            // lost it (then `released` errs).
            Commit::Failed(_) => {
                std::thread::sleep(Duration::from_millis(200));
                control.released()?;
            }
        }
    }
}

/// How long a checkpoint's fence retries a commit the group does not take.
const COMMIT_PATIENCE: Duration = Duration::from_secs(60);

/// Records the shards that ended; the first failure (other than a lost
/// shard) is returned.
fn collect(shards: &Shards, runs: &mut Vec<ShardRun>) -> Result<()> {
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

/// Bounded input: whether every partition has [`ended`].
fn all_ended(member: &GroupMember) -> Result<bool> {
    Ok(ended(member)?.len() == member.partitions().len())
}

/// Bounded input: the partitions whose last committed checkpoint ended
/// them at the end offset they still have.
fn ended(member: &GroupMember) -> Result<Vec<i32>> {
    let ends = member.end_offsets()?;
    Ok(member
        .committed()?
        .iter()
        .zip(ends)
        .filter(|(c, high)| ended_at(&c.metadata) == Some(*high))
        .map(|(c, _)| c.partition)
        .collect())
}

/// The end offset a committed `strata:chk-<id>:end@<offset>` names.
fn ended_at(metadata: &str) -> Option<i64> {
    metadata
        .rsplit_once(":end@")
        .and_then(|(_, end)| end.parse().ok())
}

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
struct Watcher {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Watcher {
    fn start(shards: Arc<Shards>, started: Instant) -> Result<Self> {
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
        publish_shard(*p, &r.progress);
        if let (false, Some(at)) = (r.announced, r.progress.first_record.get()) {
            r.announced = true;
            eprintln!(
                "strata: shard {p}: first record {:.2} s after its assignment",
                at.duration_since(r.since).as_secs_f64()
            );
        }
    }
}

/// Per-shard metrics, every second: `strata_shard_records_<in|out>_total{partition}`
/// and `strata_shard_lag{partition}`.
fn publish_shard(p: i32, progress: &Progress) {
    let label = [("partition", p.to_string())];
    metrics::counter!("strata_shard_records_in_total", &label)
        .absolute(progress.records_in.load(Ordering::Relaxed));
    metrics::counter!("strata_shard_records_out_total", &label)
        .absolute(progress.records_out.load(Ordering::Relaxed));
    if let Some(k) = progress.kafka.get() {
        let lag: i64 = k.lag.lock().unwrap_or_else(|p| p.into_inner()).iter().sum();
        metrics::gauge!("strata_shard_lag", &label).set(lag as f64);
    }
}

/// Set once SIGINT or SIGTERM arrives (a thread waits for them).
struct SignalFlag(Arc<Mutex<Option<&'static str>>>);

impl SignalFlag {
    fn get(&self) -> Option<&'static str> {
        *lock(&self.0)
    }
}

fn signal_flag() -> Result<SignalFlag> {
    let flag = Arc::new(Mutex::new(None));
    let set = flag.clone();
    let ready = Arc::new(AtomicBool::new(false));
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(RuntimeError::io(std::path::Path::new("tokio runtime")))?;
    let armed = ready.clone();
    std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            runtime.block_on(async move {
                let signal = crate::signals::shutdown_signal();
                armed.store(true, Ordering::Release);
                *lock(&set) = Some(signal.await);
            })
        })
        .map_err(|e| RuntimeError::Function(format!("start the signal thread: {e}")))?;
    while !ready.load(Ordering::Acquire) {
        std::thread::sleep(Duration::from_millis(1));
    }
    Ok(SignalFlag(flag))
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
