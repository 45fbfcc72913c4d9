//! The Kafka source's reader thread: polls the consumer, decodes messages
//! into rows, hands batches to the source task and holds reading back
//! under backpressure (see the `source` module's docs).

use super::fetched::{Batch, Fetched, PartitionOffset, RowDecoder, SourceStats};
use crate::error::{ConnectorError, Result};
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::Message;
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::{Offset, TopicPartitionList};
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, SyncSender, TrySendError};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The reader thread's state.
pub(super) struct Reader {
    pub(super) consumer: BaseConsumer,
    pub(super) index: HashMap<(String, i32), usize>,
    pub(super) partitions: Vec<(String, i32)>,
    pub(super) ends: Option<Vec<i64>>,
    pub(super) finished: Vec<bool>,
    /// Per partition: the offset after the last message read.
    pub(super) next: Vec<i64>,
    /// Read, not yet handed over (at most what was prefetched).
    pub(super) pending: VecDeque<Fetched>,
    pub(super) paused_since: Option<Instant>,
    /// Since when the channel to the task has stayed more than half full.
    pub(super) blocked_since: Option<Instant>,
    /// Batches in the channel to the task.
    pub(super) in_flight: Arc<AtomicUsize>,
    pub(super) batch_size: usize,
    pub(super) decode: Option<RowDecoder>,
    pub(super) stats: Arc<SourceStats>,
    pub(super) tx: SyncSender<Result<Batch>>,
    pub(super) commits: Receiver<Vec<PartitionOffset>>,
    pub(super) last_lag: Instant,
    pub(super) last_warning: Option<Instant>,
}

const POLL: Duration = Duration::from_millis(100);
/// The channel to the task must have stayed more than half full this long
/// before the partitions count as paused; they resume once it is half empty.
const PAUSE_AFTER: Duration = Duration::from_millis(500);
/// Batches between the reader thread and the task.
pub(super) const CHANNEL_BATCHES: usize = 8;

impl Reader {
    pub(super) fn run(mut self) {
        if let Err(e) = self.read() {
            let _ = self.tx.send(Err(e));
        }
    }

    /// Returns when the source is dropped (Ok) or reading failed.
    fn read(&mut self) -> Result<()> {
        loop {
            if !self.serve_commits() {
                return Ok(());
            }
            if self.last_lag.elapsed() >= Duration::from_secs(2) {
                self.refresh_lag();
            }
            if self.in_flight.load(Ordering::Relaxed) <= CHANNEL_BATCHES / 2 {
                // Downstream keeps up (again): whatever wait there was is over.
                self.blocked_since = None;
                self.resume();
            }
            if !self.pending.is_empty() {
                let n = self.pending.len().min(self.batch_size);
                let batch: Vec<Fetched> = self.pending.drain(..n).collect();
                match self.tx.try_send(Ok(Batch::Records(batch))) {
                    Ok(()) => {
                        let queued = self.in_flight.fetch_add(1, Ordering::Relaxed) + 1;
                        if queued > CHANNEL_BATCHES / 2 {
                            self.blocked_since.get_or_insert_with(Instant::now);
                        }
                    }
                    Err(TrySendError::Full(Ok(Batch::Records(batch)))) => {
                        for f in batch.into_iter().rev() {
                            self.pending.push_front(f);
                        }
                        // Reading stops: nothing is polled while `pending`
                        // waits, so librdkafka's queue fills up to
                        // queued.max.messages.kbytes and its fetching
                        // stops, with what it fetched kept.
                        let since = *self.blocked_since.get_or_insert_with(Instant::now);
                        if since.elapsed() >= PAUSE_AFTER {
                            self.pause();
                        }
                        std::thread::sleep(Duration::from_millis(1));
                    }
                    Err(_) => return Ok(()),
                }
                continue;
            }
            if self.finished.iter().all(|f| *f) && self.ends.is_some() {
                let _ = self.tx.send(Ok(Batch::End));
                // The checkpoints of what was read, the final one last,
                // still commit their offsets to the group.
                while let Ok(offsets) = self.commits.recv() {
                    self.commit(&offsets);
                }
                return Ok(());
            }
            self.poll_into(POLL)?;
        }
    }

    fn serve_commits(&mut self) -> bool {
        loop {
            match self.commits.try_recv() {
                Ok(offsets) => self.commit(&offsets),
                Err(mpsc::TryRecvError::Empty) => return true,
                Err(mpsc::TryRecvError::Disconnected) => return false,
            }
        }
    }

    /// Commits a completed checkpoint's `offsets` to the group (a failure
    /// is warned about: the offsets serve lag monitoring and
    /// `start=committed`, never a restore).
    fn commit(&mut self, offsets: &[PartitionOffset]) {
        let mut tpl = TopicPartitionList::new();
        for o in offsets {
            let _ = tpl.add_partition_offset(&o.topic, o.partition, Offset::Offset(o.offset));
        }
        if let Err(e) = self.consumer.commit(&tpl, CommitMode::Sync) {
            self.warn(&format!("committing offsets to the group: {e}"));
        }
    }

    /// Counts the partitions as paused: backpressure has held reading back
    /// for [`PAUSE_AFTER`].
    fn pause(&mut self) {
        if self.paused_since.is_none() {
            self.paused_since = Some(Instant::now());
            let reading = self.finished.iter().filter(|f| !**f).count();
            self.stats
                .paused_partitions
                .store(reading as u64, Ordering::Relaxed);
        }
    }

    fn resume(&mut self) {
        if let Some(since) = self.paused_since.take() {
            self.stats
                .paused_ns
                .fetch_add(since.elapsed().as_nanos() as u64, Ordering::Relaxed);
            self.stats.paused_partitions.store(0, Ordering::Relaxed);
        }
    }

    /// Polls up to a batch of messages into `pending`, waiting up to
    /// `timeout` for the first.
    fn poll_into(&mut self, timeout: Duration) -> Result<()> {
        let mut wait = timeout;
        while self.pending.len() < self.batch_size * 2 {
            let Some(polled) = self.consumer.poll(wait) else {
                return Ok(());
            };
            wait = Duration::ZERO;
            match polled {
                Ok(m) => {
                    let key = (m.topic().to_owned(), m.partition());
                    let Some(&split) = self.index.get(&key) else {
                        continue;
                    };
                    let fetched = Fetched {
                        split,
                        offset: m.offset(),
                        timestamp: m.timestamp().to_millis(),
                        key: m.key().map(<[u8]>::to_vec),
                        payload: m.payload().map(<[u8]>::to_vec),
                        row: None,
                    };
                    self.accept(fetched)?;
                }
                Err(KafkaError::PartitionEOF(_)) => self.check_ends()?,
                Err(e) => self.on_error(e)?,
            }
        }
        Ok(())
    }

    fn accept(&mut self, mut f: Fetched) -> Result<()> {
        let split = f.split;
        if f.offset < self.next[split] && self.next[split] >= 0 {
            return Ok(()); // already read (a refetch after a resume)
        }
        if let Some(end) = self.ends.as_ref().map(|e| e[split]) {
            if f.offset >= end {
                return self.finish(split);
            }
        }
        self.next[split] = f.offset + 1;
        if let Some(decode) = &self.decode {
            let row = (decode.0)(&f);
            if row.is_ok() {
                f.payload = None;
            }
            f.row = Some(row);
        }
        self.pending.push_back(f);
        if self
            .ends
            .as_ref()
            .is_some_and(|e| self.next[split] >= e[split])
        {
            self.finish(split)?;
        }
        Ok(())
    }

    /// Bounded mode: a partition at its end is paused for good.
    fn finish(&mut self, split: usize) -> Result<()> {
        if !self.finished[split] {
            self.finished[split] = true;
            let (t, p) = &self.partitions[split];
            let mut tpl = TopicPartitionList::new();
            tpl.add_partition(t, *p);
            self.consumer
                .pause(&tpl)
                .map_err(ConnectorError::kafka("pause a finished partition"))?;
        }
        Ok(())
    }

    /// At a partition's end (EOF): a bounded partition whose position
    /// passed its end offset (past transaction markers) is finished.
    fn check_ends(&mut self) -> Result<()> {
        let Some(ends) = self.ends.clone() else {
            return Ok(());
        };
        let position = self
            .consumer
            .position()
            .map_err(ConnectorError::kafka("positions"))?;
        for (i, (t, p)) in self.partitions.clone().iter().enumerate() {
            let at = position
                .find_partition(t, *p)
                .and_then(|e| e.offset().to_raw())
                .unwrap_or(-1);
            if at >= ends[i] {
                self.finish(i)?;
            }
        }
        Ok(())
    }

    fn on_error(&mut self, e: KafkaError) -> Result<()> {
        let fatal = matches!(
            e.rdkafka_error_code(),
            Some(
                RDKafkaErrorCode::AutoOffsetReset
                    | RDKafkaErrorCode::OffsetOutOfRange
                    | RDKafkaErrorCode::UnknownTopicOrPartition
                    | RDKafkaErrorCode::UnknownTopic
                    | RDKafkaErrorCode::TopicAuthorizationFailed
                    | RDKafkaErrorCode::Fatal
            )
        );
        if fatal {
            return Err(ConnectorError::Kafka {
                what: "read".into(),
                reason: format!(
                    "{e} (the data at the offsets to read is gone or not readable: reading on would lose records)"
                ),
            });
        }
        self.warn(&format!("{e} (waiting for the brokers)"));
        Ok(())
    }

    fn warn(&mut self, what: &str) {
        if self
            .last_warning
            .is_none_or(|t| t.elapsed() >= Duration::from_secs(10))
        {
            eprintln!("strata: kafka source: {what}");
            self.last_warning = Some(Instant::now());
        }
    }

    fn refresh_lag(&mut self) {
        self.last_lag = Instant::now();
        let mut lag = Vec::with_capacity(self.partitions.len());
        for (i, (t, p)) in self.partitions.iter().enumerate() {
            match self
                .consumer
                .fetch_watermarks(t, *p, Duration::from_secs(1))
            {
                Ok((_, high)) => lag.push((high - self.next[i]).max(0)),
                Err(_) => return,
            }
        }
        *self.stats.lag.lock().unwrap_or_else(|p| p.into_inner()) = lag;
    }
}
