//! The Kafka source: the partitions of one or more topics, read from given
//! offsets by a consumer that a reader thread polls.
//!
//! * **Positions.** A checkpoint records, per partition, the offset of the
//!   next message to read ([`PartitionOffset`]); a restore assigns the
//!   partitions at exactly those offsets (no group rebalance decides
//!   anything: the partitions are assigned, as Flink's Kafka source does).
//!   `auto.offset.reset=error`, so an offset the broker no longer holds
//!   (retention) fails the job instead of skipping data. Offsets go to the
//!   consumer group only when the runtime says a checkpoint completed
//!   ([`KafkaSource::commit`]), for lag monitoring; auto commit and auto
//!   offset store are off.
//! * **Backpressure.** The reader thread hands batches to the source task
//!   through a channel of eight batches. When the channel is full (the
//!   task waits on a full edge downstream), the thread stops polling: what
//!   librdkafka fetched waits in its queue, which stops fetching at
//!   `queued.max.messages.kbytes` (8 MB), and the rest waits in Kafka. So
//!   memory stays bounded and, unlike `rd_kafka_pause` (which drops what
//!   was prefetched, to be fetched again at the resume: a source under a
//!   50,000/s sink reached 68 % of it that way), nothing is read twice.
//!   Held back for half a second, the partitions count as paused until the
//!   channel is half empty again. [`SourceStats`] counts paused
//!   partitions, time paused and lag per partition.
//! * **Bounded mode.** With `bounded`, the end offsets are fixed at open
//!   (each partition's high watermark then): a partition is finished once
//!   its message before that offset was read, and the source ends when all
//!   are finished.
//!
//! A broker that goes away is waited for (librdkafka reconnects); errors
//! that lose data (an offset out of range, a topic deleted) end reading.

use super::{client_config, partitions_of, CALL_TIMEOUT};
use crate::error::{ConnectorError, Result};
use crate::RowResult;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::Message;
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::{Offset, TopicPartitionList};
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How a [`KafkaSource`] reads (`--input kafka://…` and `source.kafka.*`).
#[derive(Debug, Clone)]
pub struct KafkaSourceOptions {
    /// `bootstrap.servers`.
    pub brokers: String,
    /// Topics to read, all their partitions (or those `partitions` names).
    pub topics: Vec<String>,
    /// Read only these partitions of the topics (a shard of a consumer
    /// group: see `strata_runtime`'s group mode); `None`: all of them.
    pub partitions: Option<Vec<i32>>,
    /// The consumer group offsets are committed to (monitoring only).
    pub group: String,
    /// Without a restored position: start at the end (`latest`) rather
    /// than at the beginning (`earliest`, the default).
    pub start_latest: bool,
    /// Stop at the end offsets seen at open.
    pub bounded: bool,
    /// Messages per batch handed to the source task.
    pub batch_size: usize,
    /// librdkafka properties (`source.kafka.<property>`), applied last.
    pub properties: Vec<(String, String)>,
    /// Decodes each message into a row on the reader thread
    /// ([`Fetched::row`]); `None`: the caller decodes.
    pub decode: Option<RowDecoder>,
}

/// Turns a message into a row of the job's schema (or says what is wrong
/// with it). It runs on the source's reader thread, beside the task that
/// takes the rows, as a file source's rows are parsed ahead.
#[derive(Clone)]
pub struct RowDecoder(pub Arc<dyn Fn(&Fetched) -> RowResult + Send + Sync>);

impl std::fmt::Debug for RowDecoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RowDecoder")
    }
}

/// Where to resume one partition: the offset of its next message.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PartitionOffset {
    /// Topic.
    pub topic: String,
    /// Partition.
    pub partition: i32,
    /// Offset of the next message to read.
    pub offset: i64,
}

/// One message as read, owned.
#[derive(Debug, Clone)]
pub struct Fetched {
    /// Index of its partition in [`KafkaSource::partitions`].
    pub split: usize,
    /// Its offset.
    pub offset: i64,
    /// Its timestamp (ms since the epoch), if it has one.
    pub timestamp: Option<i64>,
    /// Its key.
    pub key: Option<Vec<u8>>,
    /// Its value (`None`: a tombstone, or decoded into `row`).
    pub payload: Option<Vec<u8>>,
    /// Its value decoded ([`KafkaSourceOptions::decode`]); a value that
    /// decoded is dropped, one that did not is kept (for dead letters).
    pub row: Option<RowResult>,
}

/// What one [`KafkaSource::poll`] found.
#[derive(Debug)]
pub enum Polled {
    /// Messages, in order per partition.
    Records(Vec<Fetched>),
    /// Nothing within the timeout.
    Idle,
    /// Bounded mode: every partition reached its end offset.
    End,
}

/// Backpressure and lag figures of a running source, for metrics.
#[derive(Debug, Default)]
pub struct SourceStats {
    /// Partitions whose reading backpressure holds back now.
    pub paused_partitions: AtomicU64,
    /// Time partitions were paused, ns (the current pause included once it ends).
    pub paused_ns: AtomicU64,
    /// Per partition (as [`KafkaSource::partitions`]): end offset minus the
    /// next offset read, refreshed every two seconds.
    pub lag: Mutex<Vec<i64>>,
}

enum Batch {
    Records(Vec<Fetched>),
    End,
}

/// A Kafka source; see the module docs.
pub struct KafkaSource {
    partitions: Vec<(String, i32)>,
    starts: Vec<i64>,
    ends: Option<Vec<i64>>,
    batches: Receiver<Result<Batch>>,
    in_flight: Arc<AtomicUsize>,
    commits: mpsc::Sender<Vec<PartitionOffset>>,
    stats: Arc<SourceStats>,
    worker: Option<std::thread::JoinHandle<()>>,
}

impl KafkaSource {
    /// Assigns every partition of the topics, at `restored` offsets where
    /// given (a partition the restored position does not name starts at
    /// the beginning: it was created since), else at the start position.
    ///
    /// Errors: a topic does not exist, a partition `options.partitions`
    /// names does not exist, the brokers cannot be reached within 30 s, a
    /// property librdkafka refuses.
    pub fn open(
        options: &KafkaSourceOptions,
        restored: Option<&[PartitionOffset]>,
    ) -> Result<Self> {
        let consumer = consumer(options)?;
        let mut partitions = Vec::new();
        for topic in &options.topics {
            let all = partitions_of(&consumer, topic)?;
            let wanted = options.partitions.clone().unwrap_or_else(|| all.clone());
            if let Some(p) = wanted.iter().find(|p| !all.contains(p)) {
                return Err(ConnectorError::KafkaUsage(format!(
                    "topic {topic} has no partition {p} (it has {})",
                    all.len()
                )));
            }
            partitions.extend(wanted.into_iter().map(|p| (topic.clone(), p)));
        }
        let at: HashMap<(&str, i32), i64> = restored
            .unwrap_or_default()
            .iter()
            .map(|o| ((o.topic.as_str(), o.partition), o.offset))
            .collect();
        let mut tpl = TopicPartitionList::new();
        let mut next = Vec::new();
        for (topic, p) in &partitions {
            let offset = match (
                at.get(&(topic.as_str(), *p)),
                restored,
                options.start_latest,
            ) {
                (Some(o), _, _) => Offset::Offset(*o),
                (None, Some(_), _) | (None, None, false) => Offset::Beginning,
                (None, None, true) => Offset::End,
            };
            let (low, high) = watermarks(&consumer, topic, *p)?;
            next.push(match offset {
                Offset::Offset(o) => o,
                Offset::End => high,
                _ => low,
            });
            tpl.add_partition_offset(topic, *p, offset)
                .map_err(ConnectorError::kafka(format!("assign {topic}/{p}")))?;
        }
        let ends = if options.bounded {
            let mut ends = Vec::new();
            for (topic, p) in &partitions {
                ends.push(watermarks(&consumer, topic, *p)?.1);
            }
            Some(ends)
        } else {
            None
        };
        consumer
            .assign(&tpl)
            .map_err(ConnectorError::kafka("assign partitions"))?;
        let (tx, batches) = mpsc::sync_channel(CHANNEL_BATCHES);
        let in_flight = Arc::new(AtomicUsize::new(0));
        let (commits, commit_rx) = mpsc::channel();
        let stats = Arc::new(SourceStats::default());
        *stats.lag.lock().unwrap_or_else(|p| p.into_inner()) = vec![0; partitions.len()];
        let reader = Reader {
            consumer,
            index: partitions
                .iter()
                .enumerate()
                .map(|(i, (t, p))| ((t.clone(), *p), i))
                .collect(),
            partitions: partitions.clone(),
            finished: ends.as_ref().map_or(vec![false; partitions.len()], |e| {
                e.iter().zip(&next).map(|(end, at)| at >= end).collect()
            }),
            ends: ends.clone(),
            next: next.clone(),
            pending: VecDeque::new(),
            paused_since: None,
            blocked_since: None,
            in_flight: in_flight.clone(),
            batch_size: options.batch_size.max(1),
            decode: options.decode.clone(),
            stats: stats.clone(),
            tx,
            commits: commit_rx,
            last_lag: Instant::now() - Duration::from_secs(60),
            last_warning: None,
        };
        let worker = std::thread::Builder::new()
            .name("kafka-source".into())
            .spawn(move || reader.run())
            .map_err(|e| ConnectorError::Kafka {
                what: "start the reader thread".into(),
                reason: e.to_string(),
            })?;
        Ok(Self {
            partitions,
            starts: next,
            ends,
            batches,
            in_flight,
            commits,
            stats,
            worker: Some(worker),
        })
    }

    /// The assigned partitions, `(topic, partition)`; a [`Fetched::split`]
    /// indexes this list.
    pub fn partitions(&self) -> &[(String, i32)] {
        &self.partitions
    }

    /// The offset each partition started at (restored, or the start
    /// position's).
    pub fn start_offsets(&self) -> &[i64] {
        &self.starts
    }

    /// Bounded mode: the end offset of each partition.
    pub fn end_offsets(&self) -> Option<&[i64]> {
        self.ends.as_deref()
    }

    /// Backpressure and lag figures.
    pub fn stats(&self) -> Arc<SourceStats> {
        self.stats.clone()
    }

    /// Waits up to `timeout` for the next batch (blocking).
    ///
    /// Errors: what ended the reader (an offset out of range, a deleted
    /// topic, a fatal client error).
    pub fn poll(&mut self, timeout: Duration) -> Result<Polled> {
        match self.batches.recv_timeout(timeout) {
            Ok(Ok(Batch::Records(r))) => {
                self.in_flight.fetch_sub(1, Ordering::Relaxed);
                Ok(Polled::Records(r))
            }
            Ok(Ok(Batch::End)) => Ok(Polled::End),
            Ok(Err(e)) => Err(e),
            Err(RecvTimeoutError::Timeout) => Ok(Polled::Idle),
            Err(RecvTimeoutError::Disconnected) => Err(ConnectorError::Kafka {
                what: "read".into(),
                reason: "the reader thread ended".into(),
            }),
        }
    }

    /// Commits `offsets` to the consumer group (on the reader thread; for lag
    /// monitoring, never read back by strata).
    pub fn commit(&self, offsets: Vec<PartitionOffset>) {
        let _ = self.commits.send(offsets);
    }
}

impl Drop for KafkaSource {
    fn drop(&mut self) {
        // Closing the channels ends the reader at its next loop.
        let (tx, rx) = mpsc::sync_channel(0);
        drop(tx);
        self.batches = rx;
        let (commits, _) = mpsc::channel();
        self.commits = commits;
        if let Some(worker) = self.worker.take() {
            let _ = worker.join();
        }
    }
}

fn consumer(options: &KafkaSourceOptions) -> Result<BaseConsumer> {
    client_config(
        &options.brokers,
        &[
            ("group.id", options.group.as_str()),
            ("enable.auto.commit", "false"),
            ("enable.auto.offset.store", "false"),
            ("enable.partition.eof", "true"),
            ("auto.offset.reset", "error"),
            ("isolation.level", "read_committed"),
            // What librdkafka prefetches stays small (8 MB), so a source
            // held back by backpressure holds little...
            ("queued.max.messages.kbytes", "8192"),
            ("queued.min.messages", "10000"),
            ("fetch.message.max.bytes", "1048576"),
            // ...and it fetches again 5 ms after its queue was full, not
            // after librdkafka's default second: with the default, a
            // reader faster than the job idled most of each second
            // (route-history Kafka -> file at 112 k records/s with its
            // cores half idle, 327 k with 5 ms; issue 25).
            ("fetch.queue.backoff.ms", "5"),
        ],
        &options.properties,
    )
    .create()
    .map_err(ConnectorError::kafka("create the consumer"))
}

fn watermarks(consumer: &BaseConsumer, topic: &str, p: i32) -> Result<(i64, i64)> {
    consumer
        .fetch_watermarks(topic, p, CALL_TIMEOUT)
        .map_err(ConnectorError::kafka(format!("offsets of {topic}/{p}")))
}

/// The reader thread's state.
struct Reader {
    consumer: BaseConsumer,
    index: HashMap<(String, i32), usize>,
    partitions: Vec<(String, i32)>,
    ends: Option<Vec<i64>>,
    finished: Vec<bool>,
    /// Per partition: the offset after the last message read.
    next: Vec<i64>,
    /// Read, not yet handed over (at most what was prefetched).
    pending: VecDeque<Fetched>,
    paused_since: Option<Instant>,
    /// Since when the channel to the task has stayed more than half full.
    blocked_since: Option<Instant>,
    /// Batches in the channel to the task.
    in_flight: Arc<AtomicUsize>,
    batch_size: usize,
    decode: Option<RowDecoder>,
    stats: Arc<SourceStats>,
    tx: SyncSender<Result<Batch>>,
    commits: Receiver<Vec<PartitionOffset>>,
    last_lag: Instant,
    last_warning: Option<Instant>,
}

const POLL: Duration = Duration::from_millis(100);
/// The channel to the task must have stayed more than half full this long
/// before the partitions count as paused; they resume once it is half empty.
const PAUSE_AFTER: Duration = Duration::from_millis(500);
/// Batches between the reader thread and the task.
const CHANNEL_BATCHES: usize = 8;

impl Reader {
    fn run(mut self) {
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
                return Ok(());
            }
            self.poll_into(POLL)?;
        }
    }

    fn serve_commits(&mut self) -> bool {
        loop {
            match self.commits.try_recv() {
                Ok(offsets) => {
                    let mut tpl = TopicPartitionList::new();
                    for o in &offsets {
                        let _ = tpl.add_partition_offset(
                            &o.topic,
                            o.partition,
                            Offset::Offset(o.offset),
                        );
                    }
                    if let Err(e) = self.consumer.commit(&tpl, CommitMode::Sync) {
                        self.warn(&format!("committing offsets to the group: {e}"));
                    }
                }
                Err(mpsc::TryRecvError::Empty) => return true,
                Err(mpsc::TryRecvError::Disconnected) => return false,
            }
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
