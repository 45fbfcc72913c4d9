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

use super::fetched::{Batch, PartitionOffset, Polled, RowDecoder, SourceStats};
use super::reader::{Reader, CHANNEL_BATCHES};
use super::{client_config, partitions_of, KafkaSecurity, CALL_TIMEOUT};
use crate::error::{ConnectorError, Result};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::{Offset, TopicPartitionList};
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How a [`KafkaSource`] reads (`--input kafka://…` and `source.kafka.*`).
#[derive(Debug, Clone)]
pub struct KafkaSourceOptions {
    /// `bootstrap.servers`.
    pub brokers: String,
    /// TLS and SASL settings (`kafka.*`), the same for every client.
    pub security: KafkaSecurity,
    /// Topics to read, all their partitions (or those `partitions` names).
    pub topics: Vec<String>,
    /// Read only these partitions of the topics (a shard of a consumer
    /// group: see `strata_runtime`'s group mode); `None`: all of them.
    pub partitions: Option<Vec<i32>>,
    /// The consumer group offsets are committed to (monitoring only).
    pub group: String,
    /// Where a partition without a restored position starts.
    pub start: KafkaStart,
    /// Stop at the end offsets seen at open.
    pub bounded: bool,
    /// Messages per batch handed to the source task.
    pub batch_size: usize,
    /// librdkafka properties (`source.kafka.<property>`), applied last.
    pub properties: Vec<(String, String)>,
    /// Decodes each message into a row on the reader thread
    /// ([`super::Fetched::row`]); `None`: the caller decodes.
    pub decode: Option<RowDecoder>,
}

/// Where a [`KafkaSource`] starts a partition it has no restored position
/// for (`?start=` / `source.kafka.start`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum KafkaStart {
    /// At the beginning of the partition (the default).
    #[default]
    Earliest,
    /// At its end when the source opens.
    Latest,
    /// At the offset the consumer group (`group`) committed, as another
    /// consumer left it (the job strata takes over from); at the beginning
    /// where the group committed none. An offset strata itself committed
    /// (its metadata starts `strata:`) is refused: it belongs to a run
    /// whose checkpoints hold the state that goes with it.
    Committed,
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
        let committed = match (restored, options.start) {
            (None, KafkaStart::Committed) => committed_offsets(&consumer, options, &partitions)?,
            _ => HashMap::new(),
        };
        let mut tpl = TopicPartitionList::new();
        let mut next = Vec::new();
        for (topic, p) in &partitions {
            let key = (topic.as_str(), *p);
            let offset = match (at.get(&key), restored, options.start) {
                (Some(o), _, _) => Offset::Offset(*o),
                (None, None, KafkaStart::Latest) => Offset::End,
                (None, None, KafkaStart::Committed) => committed
                    .get(&(topic.clone(), *p))
                    .map_or(Offset::Beginning, |o| Offset::Offset(*o)),
                (None, _, _) => Offset::Beginning,
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

    /// The assigned partitions, `(topic, partition)`; a [`super::Fetched::split`]
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
        &options.security,
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

/// The offsets group `options.group` committed for `partitions` (none
/// for a partition it committed nothing for).
///
/// Errors: the group cannot be asked; an offset strata committed.
fn committed_offsets(
    consumer: &BaseConsumer,
    options: &KafkaSourceOptions,
    partitions: &[(String, i32)],
) -> Result<HashMap<(String, i32), i64>> {
    let mut tpl = TopicPartitionList::new();
    for (topic, p) in partitions {
        tpl.add_partition(topic, *p);
    }
    let group = &options.group;
    let committed =
        consumer
            .committed_offsets(tpl, CALL_TIMEOUT)
            .map_err(ConnectorError::kafka(format!(
                "the offsets group {group} committed"
            )))?;
    let mut out = HashMap::new();
    for e in committed.elements() {
        let Offset::Offset(offset) = e.offset() else {
            continue;
        };
        if e.metadata().starts_with("strata:") {
            return Err(ConnectorError::KafkaUsage(format!(
                "start=committed: group {group} holds the offset {offset} of {}/{} that strata committed ({}): continue that run from its checkpoints, or name the group of the job strata takes over from",
                e.topic(),
                e.partition(),
                e.metadata()
            )));
        }
        out.insert((e.topic().to_owned(), e.partition()), offset);
    }
    Ok(out)
}

fn watermarks(consumer: &BaseConsumer, topic: &str, p: i32) -> Result<(i64, i64)> {
    consumer
        .fetch_watermarks(topic, p, CALL_TIMEOUT)
        .map_err(ConnectorError::kafka(format!("offsets of {topic}/{p}")))
}
