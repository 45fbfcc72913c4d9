//! The source task: reads the input, routes records to keyed operator
//! instances by key group, emits watermarks and barriers, and stops reading
//! whenever an edge is full (backpressure).
//!
//! Reading and decoding (Parquet pages, CSV and JSON parsing) block, so the
//! task reads a chunk of up to `channel.batch-size` rows at a time in
//! `block_in_place`, remembering the position after each row: a barrier
//! between two rows of a chunk records the position after the last row
//! routed, never one read ahead.
//!
//! A Kafka input ([`InputKind::Kafka`]) is polled the same way: its reader
//! thread pauses the partitions while this task cannot send (see
//! `strata_connectors::kafka`), each record carries its partition and
//! offset, and a barrier records the next offset of every partition.
//! A generator input makes its records in chunks the same way; its
//! position is the index of the next record.
//! Watermarks are per split (a file is one, a Kafka partition is one): the
//! source's watermark is the least of its splits' that have had a record
//! within `source.idle-timeout`, and lateness is judged per split.
//!
//! At the end of the input the source asks for the final checkpoint and
//! takes every checkpoint triggered until the final one has completed (a
//! failed final checkpoint is triggered again); only then does it end the
//! stream.

use super::Links;
use crate::channel::{Message, Output};
use crate::checkpoint::SourceSnapshot;
use crate::checkpoint::{Ack, TaskSnapshot, Trigger};
use crate::config::{BadInputPolicy, JobConfig};
use crate::error::{Result, RuntimeError};
use crate::function::{KeyFn, Keyed, SourcePos, TimestampFn};
use crate::progress::Progress;
use crate::task::dead_letter::DeadLetter;
use crate::task::input::{Cursor, Input, ReadRecord};
use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use strata_cache::key_group::{key_group_of_hash, KeyGroupRange};
use strata_connectors::{check_timestamp, format_timestamp, RecordError, Throttle};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

/// Where a source sends its records: the job's key and timestamp
/// functions, the edges to the keyed instances, and the coordinator's
/// barrier triggers it takes.
pub(crate) struct SourceEdges<I> {
    pub(crate) key_of: KeyFn<I>,
    pub(crate) timestamp_of: TimestampFn<I>,
    pub(crate) output: Output<Keyed<I>>,
    pub(crate) triggers: mpsc::Receiver<Trigger>,
}

/// The source task: reads, keys, routes by key group, emits watermarks
/// and barriers.
pub(crate) struct SourceTask<I> {
    source: Input<I>,
    key_of: KeyFn<I>,
    timestamp_of: TimestampFn<I>,
    out: Output<Keyed<I>>,
    max_parallelism: u32,
    batch_size: usize,
    throttle: Option<Throttle>,
    policy: BadInputPolicy,
    dead_letter: DeadLetter,
    dead_letters: u64,
    out_of_orderness_ms: i64,
    watermark_interval: std::time::Duration,
    /// Per split, the newest timestamp read before this run (from the
    /// checkpoint).
    max_timestamps: Vec<i64>,
    /// A split without a record this long does not hold the watermark back.
    idle_timeout: Option<std::time::Duration>,
    triggers: mpsc::Receiver<Trigger>,
    acks: mpsc::Sender<Ack>,
    completed: watch::Receiver<u64>,
    progress: Arc<Progress>,
}

struct Routing<I> {
    batches: Vec<Vec<Keyed<I>>>,
    last_flush: Instant,
    /// Per split: the newest timestamp routed, and when its last record came.
    max_ts: Vec<i64>,
    last_seen: Vec<Instant>,
    watermark: i64,
    /// The cursor of the last record routed (what a barrier records).
    routed: Option<Cursor>,
}

impl<I: Send + 'static> SourceTask<I> {
    /// Reads `source` into `edges` as `config` says (batch size, rate,
    /// bad input policy, watermarks), with its bad records going to
    /// `dead_letter`; a restored run continues the counts and timestamps
    /// of `restored`.
    pub(crate) fn new(
        source: Input<I>,
        edges: SourceEdges<I>,
        dead_letter: DeadLetter,
        restored: Option<&SourceSnapshot>,
        config: &JobConfig,
        links: Links,
    ) -> Self {
        let max_timestamps = restored.map_or_else(Vec::new, |s| source.restored_max_timestamps(s));
        Self {
            source,
            key_of: edges.key_of,
            timestamp_of: edges.timestamp_of,
            out: edges.output,
            max_parallelism: config.max_parallelism,
            batch_size: config.batch_size,
            throttle: config.source_rate.map(Throttle::new),
            policy: config.bad_input,
            dead_letter,
            dead_letters: restored.map_or(0, |s| s.dead_letters),
            out_of_orderness_ms: config.out_of_orderness_ms,
            watermark_interval: config.watermark_interval,
            max_timestamps,
            idle_timeout: config.idle_timeout,
            triggers: edges.triggers,
            acks: links.acks,
            completed: links.completed,
            progress: links.progress,
        }
    }

    pub(crate) async fn run(mut self) -> Result<()> {
        let n = self.out.len();
        let splits = self.source.splits();
        let mut max_ts = std::mem::take(&mut self.max_timestamps);
        max_ts.resize(splits, i64::MIN);
        let mut routing = Routing {
            batches: (0..n)
                .map(|_| Vec::with_capacity(self.batch_size))
                .collect(),
            last_flush: Instant::now(),
            max_ts,
            last_seen: vec![Instant::now(); splits],
            watermark: i64::MIN,
            routed: None,
        };
        let mut chunk = VecDeque::with_capacity(self.batch_size);
        loop {
            // A barrier goes between records: the position it records must
            // not include a record read but not yet routed.
            if let Ok(trigger) = self.triggers.try_recv() {
                self.checkpoint(trigger.id, &mut routing).await?;
            }
            self.commit_if_completed()?;
            if chunk.is_empty() {
                match self.read_chunk(&mut chunk)? {
                    Read::End => break,
                    Read::Idle => {
                        // No record for a while: idle splits may let the
                        // watermark pass, and partial batches go out.
                        if routing.last_flush.elapsed() >= self.watermark_interval {
                            self.flush(&mut routing).await?;
                        }
                        // Let the runtime run (and cancel) this task.
                        tokio::task::yield_now().await;
                        continue;
                    }
                    Read::Records => {}
                }
            }
            let Some(next) = chunk.pop_front() else {
                continue;
            };
            let record = next.record.and_then(|record| {
                self.source
                    .check_key(&next.cursor, (self.key_of)(&record))
                    .map(|key| (key, record))
            });
            match record {
                Ok((key, record)) => self.route(key, record, &next.cursor, &mut routing).await?,
                Err(bad) => self.bad_record(bad, &next.cursor)?,
            }
            self.progress.source_at(self.source.advance(&next.cursor));
            routing.routed = Some(next.cursor);
            if let Some(t) = &self.throttle {
                t.acquire().await;
            }
        }
        self.flush(&mut routing).await?;
        if !self.source.released() {
            // The input ended, and with it event time: every timer fires.
            self.out.broadcast(|| Message::Watermark(i64::MAX)).await?;
        }
        self.acks
            .send(Ack::SourceFinished)
            .await
            .map_err(|_| RuntimeError::Disconnected)?;
        let id = self.until_final_completes(&mut routing).await?;
        self.out.broadcast(|| Message::End).await?;
        self.source.completed(id);
        tokio::task::block_in_place(|| self.dead_letter.finish(id))
    }

    /// Reads up to a batch of records ahead (blocking, off the async workers).
    fn read_chunk(&mut self, chunk: &mut VecDeque<ReadRecord<I>>) -> Result<Read> {
        let n = tokio::task::block_in_place(|| self.source.read(chunk, self.batch_size))?;
        Ok(match n {
            None => Read::End,
            Some(0) => Read::Idle,
            Some(_) => Read::Records,
        })
    }

    /// Takes every checkpoint triggered after the input ended — periodic
    /// ones triggered before the coordinator learnt of the end, and the
    /// final one, again if it failed — until the final one has completed;
    /// returns its id.
    async fn until_final_completes(&mut self, routing: &mut Routing<I>) -> Result<u64> {
        let mut final_id = None;
        loop {
            if let Some(id) = final_id.filter(|id| *self.completed.borrow() >= *id) {
                return Ok(id);
            }
            // The coordinator publishes the final completion before it
            // ends (closing the trigger channel): look at completions first.
            tokio::select! {
                biased;
                changed = self.completed.changed(), if final_id.is_some() => {
                    changed.map_err(|_| RuntimeError::Disconnected)?;
                }
                trigger = self.triggers.recv() => {
                    let trigger = trigger.ok_or(RuntimeError::Disconnected)?;
                    self.checkpoint(trigger.id, routing).await?;
                    if trigger.is_final {
                        final_id = Some(trigger.id);
                    }
                }
            }
        }
    }

    async fn route(
        &mut self,
        key: Vec<u8>,
        record: I,
        at: &Cursor,
        r: &mut Routing<I>,
    ) -> Result<()> {
        let ts = self
            .source
            .event_time(at)
            .unwrap_or_else(|| (self.timestamp_of)(&record));
        let ts = match check_timestamp(ts) {
            Ok(ts) => ts,
            Err(reason) => {
                let bad = RecordError {
                    record: at.record_number(),
                    field: None,
                    reason: format!("its event time: {reason}"),
                    ..Default::default()
                };
                return self.bad_record(bad, at);
            }
        };
        // Lateness is judged against the newest timestamp read so far in
        // the record's split, not against the last watermark sent, so that
        // which records are late does not depend on timing.
        let split = at.split();
        let bound = r.max_ts[split].saturating_sub(self.out_of_orderness_ms);
        if ts < bound {
            let bad = RecordError {
                record: at.record_number(),
                field: None,
                reason: format!(
                    "timestamp {} is older than {} (the newest timestamp so far minus watermark.out-of-orderness): the input is more out of order than allowed",
                    format_timestamp(ts),
                    format_timestamp(bound)
                ),
                ..Default::default()
            };
            return self.bad_record(bad, at);
        }
        let hash = strata_cache::hash::hash_key(&key);
        let kg = key_group_of_hash(hash, self.max_parallelism);
        let target =
            KeyGroupRange::operator_for(kg, self.max_parallelism, self.out.len() as u32) as usize;
        r.max_ts[split] = r.max_ts[split].max(ts);
        r.last_seen[split] = Instant::now();
        r.batches[target].push(Keyed {
            key,
            hash,
            ts,
            pos: SourcePos {
                split: split as u32,
                next: at.next_position(),
            },
            value: record,
        });
        if r.batches[target].len() >= self.batch_size {
            let batch =
                std::mem::replace(&mut r.batches[target], Vec::with_capacity(self.batch_size));
            self.out.send(target, Message::Records(batch)).await?;
        }
        if r.last_flush.elapsed() >= self.watermark_interval {
            self.flush(r).await?;
        }
        Ok(())
    }

    /// Sends every partial batch, then a watermark if it advanced. Runs every
    /// `watermark.interval` (Flink's auto-watermark interval and buffer
    /// timeout in one), at barriers and at the end.
    async fn flush(&mut self, r: &mut Routing<I>) -> Result<()> {
        for (i, batch) in r.batches.iter_mut().enumerate() {
            if !batch.is_empty() {
                let batch = std::mem::replace(batch, Vec::with_capacity(self.batch_size));
                self.out.send(i, Message::Records(batch)).await?;
            }
        }
        r.last_flush = Instant::now();
        let Some(newest) = self.slowest_split(r) else {
            return Ok(());
        };
        let watermark = newest
            .saturating_sub(self.out_of_orderness_ms)
            .saturating_sub(1);
        if watermark > r.watermark {
            r.watermark = watermark;
            self.out.broadcast(|| Message::Watermark(watermark)).await?;
        }
        Ok(())
    }

    /// The newest timestamp of the split furthest behind, among those
    /// with a record within the idle timeout (`None`: all are idle).
    fn slowest_split(&self, r: &Routing<I>) -> Option<i64> {
        let active = |i: &usize| {
            self.idle_timeout
                .is_none_or(|t| r.last_seen[*i].elapsed() < t)
        };
        (0..r.max_ts.len())
            .filter(active)
            .map(|i| r.max_ts[i])
            .min()
    }

    fn bad_record(&mut self, bad: RecordError, at: &Cursor) -> Result<()> {
        let bad = self.source.describe(bad, at);
        match self.policy {
            BadInputPolicy::Fail => Err(RuntimeError::BadRecord(bad)),
            BadInputPolicy::DeadLetter => {
                tokio::task::block_in_place(|| {
                    let bad = self.source.with_text(bad, at)?;
                    self.dead_letter.write(&bad, at)
                })?;
                self.dead_letters += 1;
                self.progress
                    .dead_letters
                    .store(self.dead_letters, Ordering::Relaxed);
                Ok(())
            }
        }
    }

    async fn checkpoint(&mut self, id: u64, r: &mut Routing<I>) -> Result<()> {
        self.flush(r).await?;
        let snapshot = tokio::task::block_in_place(|| {
            let mut snapshot = self.source.snapshot(r.routed.as_ref(), &r.max_ts, id)?;
            snapshot.dead_letter = self.dead_letter.pre_commit(id)?;
            snapshot.dead_letters = self.dead_letters;
            Ok::<_, RuntimeError>(snapshot)
        })
        .map_err(|e| e.in_checkpoint(id, "source"))?;
        self.acks
            .send(Ack::Snapshot(id, TaskSnapshot::Source(snapshot)))
            .await
            .map_err(|_| RuntimeError::Disconnected)?;
        self.out.broadcast(|| Message::Barrier(id)).await
    }

    fn commit_if_completed(&mut self) -> Result<()> {
        if self.completed.has_changed().unwrap_or(false) {
            let id = *self.completed.borrow_and_update();
            self.source.completed(id);
            tokio::task::block_in_place(|| self.dead_letter.commit(id))?;
        }
        Ok(())
    }
}

/// What one read found.
enum Read {
    Records,
    /// Nothing yet (a Kafka source waiting for messages).
    Idle,
    End,
}
