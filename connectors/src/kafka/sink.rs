//! The Kafka sink: records keyed by the job's key, exactly once through
//! Kafka transactions, or at least once with an idempotent producer.
//!
//! ## Exactly once
//! One sink instance has one `transactional.id`, stable across restarts of
//! the same job and instance; `init_transactions` at open fences every
//! older producer of that id (a zombie's next commit fails) and aborts its
//! open transaction.
//!
//! librdkafka cannot resume a transaction a crashed process left open
//! (Flink's Java sink does, by setting the producer id and epoch through
//! reflection; KIP-939's prepared transactions are not in librdkafka). So
//! the records of a checkpoint epoch are kept first in a write-ahead file
//! ([`FileSink`] in the checkpoint directory: pre-committed, fsynced, named
//! in the checkpoint at the barrier), as Flink's `GenericWriteAheadSink`
//! does. When the checkpoint completes, that epoch goes to Kafka in **one
//! transaction**, which also commits a marker: the offset `seq + 1` of the
//! epoch's file number `seq`, for the consumer group named like the
//! `transactional.id`, on partition 0 of the topic. Records and marker
//! commit atomically. A restore reads the marker: the pre-committed epochs
//! the checkpoint names and the marker does not cover are sent again in a
//! new transaction under the same id (that is, committed), those it covers
//! are already in Kafka; epochs newer than the checkpoint were never
//! committed (their transactions were aborted by the fencing) and their
//! files are deleted. Consumers reading with `isolation.level=read_committed`
//! see every record once.
//!
//! The transactions run on a publisher thread (`publish.rs`), so the sink
//! task writes the next epoch while the last one is sent; at the end of a
//! run [`KafkaSink::finish`] waits for them.
//!
//! ## At least once
//! `exactly_once = false`: an idempotent producer (`enable.idempotence`,
//! `acks=all`); a barrier waits until every record sent is acknowledged. A
//! restore sends the records after the checkpoint again.

use super::produce::{send, Deliveries, OutRecord};
use super::publish::{encode_wal_line, read_marker, Publisher, Publishing, TXN_TIMEOUT};
use super::{client_config, KafkaSecurity};
use crate::error::{ConnectorError, Result};
use crate::file_sink::{FileSink, SinkState};
use rdkafka::consumer::BaseConsumer;
use rdkafka::producer::{Producer, ThreadedProducer};
use std::path::PathBuf;

/// How a [`KafkaSink`] writes (`--output kafka://…` and `sink.kafka.*`).
#[derive(Debug, Clone)]
pub struct KafkaSinkOptions {
    /// `bootstrap.servers`.
    pub brokers: String,
    /// TLS and SASL settings (`kafka.*`), the same for every client.
    pub security: KafkaSecurity,
    /// The topic written.
    pub topic: String,
    /// This instance's `transactional.id` (also the marker's group).
    pub transactional_id: String,
    /// Transactions (default) or an idempotent producer (at least once).
    pub exactly_once: bool,
    /// Where the write-ahead files of pre-committed epochs live (in the
    /// checkpoint directory).
    pub staging: PathBuf,
    /// The write-ahead files' name prefix (`part`, `dead-letter`).
    pub prefix: String,
    /// The sink instance.
    pub subtask: u32,
    /// librdkafka properties (`sink.kafka.<property>`), applied last.
    pub properties: Vec<(String, String)>,
}

/// A Kafka sink instance; see the module docs.
pub struct KafkaSink {
    options: KafkaSinkOptions,
    mode: Mode,
    line: Vec<u8>,
    records: u64,
}

enum Mode {
    /// Epochs go to write-ahead files, which a publisher thread sends.
    ExactlyOnce {
        files: FileSink,
        publishing: Publishing,
    },
    /// Records go straight to the producer.
    AtLeastOnce {
        producer: ThreadedProducer<Deliveries>,
        deliveries: Deliveries,
    },
}

impl KafkaSink {
    /// Opens the instance: the producer (fencing older ones of its
    /// `transactional.id`), then, restoring, commits what `restored`
    /// pre-committed and Kafka does not hold yet (before it returns).
    ///
    /// Errors: the brokers cannot be reached; a fresh run (no `restored`)
    /// whose `transactional.id` already committed output to the topic
    /// (the topic holds this job's output: restore, or write elsewhere);
    /// a restore of a checkpoint older than the output the topic holds.
    pub fn open(options: KafkaSinkOptions, restored: Option<SinkState>) -> Result<Self> {
        let deliveries = Deliveries::default();
        let mut defaults = vec![
            ("enable.idempotence", "true"),
            ("acks", "all"),
            ("linger.ms", "5"),
            ("compression.type", "lz4"),
        ];
        if options.exactly_once {
            defaults.push(("transactional.id", options.transactional_id.as_str()));
            defaults.push(("transaction.timeout.ms", "300000"));
        }
        let producer: ThreadedProducer<Deliveries> = client_config(
            &options.brokers,
            &options.security,
            &defaults,
            &options.properties,
        )
        .create_with_context(deliveries.clone())
        .map_err(ConnectorError::kafka("create the producer"))?;
        let mode = if options.exactly_once {
            open_transactional(&options, producer, restored)?
        } else {
            Mode::AtLeastOnce {
                producer,
                deliveries,
            }
        };
        Ok(Self {
            options,
            mode,
            line: Vec::new(),
            records: 0,
        })
    }

    /// Appends one record: to the epoch's write-ahead file (exactly once),
    /// or to the producer.
    ///
    /// Errors: the write failed, or (exactly once) the publisher stopped
    /// on an error, which this returns.
    pub fn write(&mut self, r: &OutRecord<'_>) -> Result<()> {
        self.records += 1;
        match &mut self.mode {
            Mode::ExactlyOnce { files, publishing } => {
                publishing.check()?;
                encode_wal_line(&mut self.line, r);
                files.write_line(&self.line)
            }
            Mode::AtLeastOnce { producer, .. } => send(producer, &self.options.topic, r),
        }
    }

    /// At barrier `checkpoint`: closes the epoch's file as pre-committed
    /// (exactly once), or waits for every record's acknowledgement (at
    /// least once). Returns the state the checkpoint keeps.
    pub fn pre_commit(&mut self, checkpoint: u64) -> Result<SinkState> {
        match &mut self.mode {
            Mode::ExactlyOnce { files, publishing } => {
                publishing.check()?;
                files.pre_commit(checkpoint)
            }
            Mode::AtLeastOnce {
                producer,
                deliveries,
            } => {
                producer
                    .flush(TXN_TIMEOUT)
                    .map_err(ConnectorError::kafka(format!(
                        "flush to {}",
                        self.options.topic
                    )))?;
                deliveries.check(&self.options.topic)?;
                Ok(SinkState::default())
            }
        }
    }

    /// On completion of `completed`: marks the epochs pre-committed for it
    /// or earlier committed, and has the publisher send each in one
    /// transaction. Returns at once (see [`KafkaSink::finish`]).
    /// Idempotent.
    pub fn commit(&mut self, completed: u64) -> Result<()> {
        match &mut self.mode {
            Mode::ExactlyOnce { files, publishing } => {
                files.commit(completed)?;
                publishing.request()
            }
            Mode::AtLeastOnce { .. } => Ok(()),
        }
    }

    /// [`KafkaSink::commit`], then waits until Kafka holds every committed
    /// epoch (at the end of a run).
    pub fn finish(&mut self, completed: u64) -> Result<()> {
        self.commit(completed)?;
        match &self.mode {
            Mode::ExactlyOnce { publishing, .. } => publishing.finish(),
            Mode::AtLeastOnce { .. } => Ok(()),
        }
    }

    /// Records written since the sink was opened.
    pub fn records(&self) -> u64 {
        self.records
    }
}

/// The reader of instance `o`'s commit marker (the committed offset of
/// group `transactional.id`), reading with `isolation` (`read_committed`
/// waits for a pending transaction's offsets; `read_uncommitted` does not).
fn marker_reader(o: &KafkaSinkOptions, isolation: &str) -> Result<BaseConsumer> {
    client_config(
        &o.brokers,
        &o.security,
        &[
            ("group.id", o.transactional_id.as_str()),
            ("enable.auto.commit", "false"),
            ("isolation.level", isolation),
        ],
        &[],
    )
    .create()
    .map_err(ConnectorError::kafka("create the marker reader"))
}

/// Exactly once: a fresh run checks that no output of its
/// `transactional.id` was committed before it fences anyone (a refused run
/// must not end a job that writes the topic with the same id); then it
/// fences older producers of the id, checks the marker against
/// `restored`, publishes what `restored` pre-committed and Kafka lacks,
/// and starts the publisher.
fn open_transactional(
    o: &KafkaSinkOptions,
    producer: ThreadedProducer<Deliveries>,
    restored: Option<SinkState>,
) -> Result<Mode> {
    let refusal = |what: &str, published: u64| {
        ConnectorError::KafkaUsage(format!(
            "topic {} already holds output of this sink (transactional.id {}, {published} epoch(s) committed) that {what} does not know of: another job writing it with the same transactional id, or an earlier run; writing on would write records twice; continue the run that wrote it (--restore latest), write to a new topic, or give this job its own sink.kafka.transactional-id-prefix",
            o.topic, o.transactional_id
        ))
    };
    if restored.is_none() {
        // Committed offsets only: a pending transaction (of a live job,
        // or of a dead one that fencing would abort) is not waited for.
        let published = read_marker(&marker_reader(o, "read_uncommitted")?, &o.topic)?;
        if published > 0 {
            return Err(refusal("a fresh run", published));
        }
    }
    // Fencing aborts a dead producer's pending transaction: only then are
    // the marker's offsets stable to read.
    producer
        .init_transactions(TXN_TIMEOUT)
        .map_err(ConnectorError::kafka(format!(
            "init transactions of {}",
            o.transactional_id
        )))?;
    let marker = marker_reader(o, "read_committed")?;
    let published = read_marker(&marker, &o.topic)?;
    let next_seq = restored.as_ref().map(|s| s.next_seq);
    match next_seq {
        None if published > 0 => return Err(refusal("a fresh run", published)),
        Some(next) if published > next => {
            return Err(refusal("the restored checkpoint", published))
        }
        _ => {}
    }
    std::fs::create_dir_all(&o.staging).map_err(ConnectorError::io(&o.staging))?;
    let mut publisher = Publisher {
        producer,
        marker,
        topic: o.topic.clone(),
        transactional_id: o.transactional_id.clone(),
        staging: o.staging.clone(),
        prefix: o.prefix.clone(),
        subtask: o.subtask,
        published,
    };
    // Staged epochs at or past the checkpoint's next file belong to a
    // branch no checkpoint continues (the marker above did not reach
    // them: they never went to Kafka).
    if let Some(next) = next_seq {
        for (_, path) in publisher.staged(next)? {
            std::fs::remove_file(&path).map_err(ConnectorError::io(&path))?;
        }
    }
    // Pre-committed epochs the marker covers are in Kafka already (and
    // their files gone): only the others are committed again.
    let restored = restored.map(|mut state| {
        state.pending.retain(|p| p.seq >= published);
        state
    });
    let files = FileSink::open(&o.staging, &o.prefix, o.subtask, restored)?;
    publisher.publish_staged()?;
    Ok(Mode::ExactlyOnce {
        files,
        publishing: Publishing::start(publisher)?,
    })
}
