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
//! At the end of the input the source asks for the final checkpoint and
//! takes every checkpoint triggered until the final one has completed (a
//! failed final checkpoint is triggered again); only then does it end the
//! stream.

use super::Keyed;
use crate::channel::{Message, Output};
use crate::checkpoint::{Ack, SourceSnapshot, TaskSnapshot, Trigger};
use crate::config::BadInputPolicy;
use crate::error::{Result, RuntimeError};
use crate::pipeline::{KeyFn, ParseFn, TimestampFn};
use crate::progress::Progress;
use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use strata_cache::key_group::{key_group_of, KeyGroupRange};
use strata_connectors::{
    check_timestamp, format_timestamp, FileSink, FileSource, Position, RecordError, RowResult,
    Schema, Throttle,
};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

pub(crate) struct SourceTask<I> {
    pub(crate) source: FileSource,
    pub(crate) schema: Schema,
    pub(crate) parse: ParseFn<I>,
    pub(crate) key_of: KeyFn<I>,
    pub(crate) timestamp_of: TimestampFn<I>,
    pub(crate) out: Output<Keyed<I>>,
    pub(crate) max_parallelism: u32,
    pub(crate) batch_size: usize,
    pub(crate) throttle: Option<Throttle>,
    pub(crate) policy: BadInputPolicy,
    pub(crate) dead_letter: FileSink,
    pub(crate) dead_letters: u64,
    pub(crate) out_of_orderness_ms: i64,
    pub(crate) watermark_interval: std::time::Duration,
    /// The newest timestamp read before this run (from the checkpoint).
    pub(crate) max_timestamp: i64,
    pub(crate) triggers: mpsc::Receiver<Trigger>,
    pub(crate) acks: mpsc::Sender<Ack>,
    pub(crate) completed: watch::Receiver<u64>,
    pub(crate) progress: Arc<Progress>,
}

struct Routing<I> {
    batches: Vec<Vec<Keyed<I>>>,
    last_flush: Instant,
    max_ts: i64,
    watermark: i64,
    /// The position after the last record routed (what a barrier records).
    routed: Position,
}

/// One row read ahead, with the source's position and progress after it.
struct ReadRow {
    row: RowResult,
    position: Position,
    progress: (u64, u64),
}

impl<I: Send + 'static> SourceTask<I> {
    pub(crate) async fn run(mut self) -> Result<()> {
        let n = self.out.len();
        let mut routing = Routing {
            batches: (0..n)
                .map(|_| Vec::with_capacity(self.batch_size))
                .collect(),
            last_flush: Instant::now(),
            max_ts: self.max_timestamp,
            watermark: i64::MIN,
            routed: self.source.position(),
        };
        let mut chunk = VecDeque::with_capacity(self.batch_size);
        loop {
            // A barrier goes between records: the position it records must
            // not include a record read but not yet routed.
            if let Ok(trigger) = self.triggers.try_recv() {
                self.checkpoint(trigger.id, &mut routing).await?;
            }
            self.commit_if_completed()?;
            if chunk.is_empty() && !self.read_chunk(&mut chunk)? {
                break;
            }
            let Some(next) = chunk.pop_front() else { break };
            routing.routed = next.position;
            let record = next.row.and_then(|row| (self.parse)(row, &self.schema));
            match record {
                Ok(record) => self.route(record, &mut routing).await?,
                Err(bad) => self.bad_record(bad)?,
            }
            if let Some(t) = &self.throttle {
                t.acquire().await;
            }
            self.progress.source_at(next.progress);
        }
        self.flush(&mut routing).await?;
        self.out.broadcast(|| Message::Watermark(i64::MAX)).await?;
        self.acks
            .send(Ack::SourceFinished)
            .await
            .map_err(|_| RuntimeError::Disconnected)?;
        let id = self.until_final_completes(&mut routing).await?;
        self.out.broadcast(|| Message::End).await?;
        Ok(self.dead_letter.commit(id)?)
    }

    /// Reads up to a batch of rows ahead; `false` at the end of the input.
    fn read_chunk(&mut self, chunk: &mut VecDeque<ReadRow>) -> Result<bool> {
        tokio::task::block_in_place(|| {
            while chunk.len() < self.batch_size {
                let Some(row) = self.source.next_row()? else {
                    break;
                };
                chunk.push_back(ReadRow {
                    row,
                    position: self.source.position(),
                    progress: self.source.progress(),
                });
            }
            Ok(!chunk.is_empty())
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

    async fn route(&mut self, record: I, r: &mut Routing<I>) -> Result<()> {
        let ts = match check_timestamp((self.timestamp_of)(&record)) {
            Ok(ts) => ts,
            Err(reason) => {
                return self.bad_record(RecordError {
                    record: r.routed.records,
                    field: None,
                    reason: format!("its event time: {reason}"),
                })
            }
        };
        // Lateness is judged against the newest timestamp read so far, not
        // against the last watermark sent, so that which records are late
        // does not depend on timing.
        let bound = r.max_ts.saturating_sub(self.out_of_orderness_ms);
        if ts < bound {
            return self.bad_record(RecordError {
                record: r.routed.records,
                field: None,
                reason: format!(
                    "timestamp {} is older than {} (the newest timestamp so far minus watermark.out-of-orderness): the input is more out of order than allowed",
                    format_timestamp(ts),
                    format_timestamp(bound)
                ),
            });
        }
        let key = (self.key_of)(&record);
        let kg = key_group_of(&key, self.max_parallelism);
        let target =
            KeyGroupRange::operator_for(kg, self.max_parallelism, self.out.len() as u32) as usize;
        r.max_ts = r.max_ts.max(ts);
        r.batches[target].push(Keyed {
            key,
            ts,
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
        let watermark = r
            .max_ts
            .saturating_sub(self.out_of_orderness_ms)
            .saturating_sub(1);
        if watermark > r.watermark {
            r.watermark = watermark;
            self.out.broadcast(|| Message::Watermark(watermark)).await?;
        }
        Ok(())
    }

    fn bad_record(&mut self, bad: RecordError) -> Result<()> {
        match self.policy {
            BadInputPolicy::Fail => Err(RuntimeError::BadRecord(bad)),
            BadInputPolicy::DeadLetter => {
                let line =
                    serde_json::to_vec(&bad).map_err(|e| RuntimeError::Function(e.to_string()))?;
                self.dead_letter.write_line(&line)?;
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
            Ok::<_, RuntimeError>(SourceSnapshot {
                position: r.routed,
                dead_letter: self.dead_letter.pre_commit(id)?,
                dead_letters: self.dead_letters,
                input: self.source.identity(r.routed)?,
                max_timestamp: r.max_ts,
            })
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
            tokio::task::block_in_place(|| self.dead_letter.commit(id))?;
        }
        Ok(())
    }
}
