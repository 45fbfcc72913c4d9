//! What a source task reads: a file, Kafka partitions or a generator,
//! behind one interface — read a chunk of records ahead (rows parsed by the
//! job's parse function, generated records as they are), say where each
//! came from (its [`Cursor`]), snapshot the position at a barrier, and hear
//! of completed checkpoints (a Kafka source then commits that checkpoint's
//! offsets to its consumer group, for lag monitoring).

use crate::checkpoint::{PartitionSnapshot, SourceSnapshot};
use crate::error::Result;
use crate::function::{GenerateFn, ParseFn};
use crate::shard::ShardControl;
use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;
use strata_connectors::kafka::{Fetched, KafkaSource, PartitionOffset, Polled, RowDecoder};
use strata_connectors::{
    csv_value_row, json_row, FileSource, Position, RecordError, RowResult, Schema,
};

/// One record read ahead (or what is wrong with it), with where it came from.
pub(crate) struct ReadRecord<I> {
    pub(crate) record: std::result::Result<I, RecordError>,
    pub(crate) cursor: Cursor,
}

/// A row read ahead, before parsing.
struct ReadRow {
    row: RowResult,
    cursor: Cursor,
}

/// Where a record came from.
pub(crate) enum Cursor {
    /// A file: where the record starts (bytes; text formats), and the
    /// position and progress after it.
    File {
        start: u64,
        position: Position,
        progress: (u64, u64),
    },
    /// A Kafka message (its value is kept only when it is bad, for the
    /// dead-letter topic).
    Kafka(Fetched),
    /// A generated record: its index, and how many the generator makes.
    Generated { index: u64, total: u64 },
}

impl Cursor {
    /// The split (watermark source) the record belongs to.
    pub(crate) fn split(&self) -> usize {
        match self {
            Cursor::File { .. } | Cursor::Generated { .. } => 0,
            Cursor::Kafka(f) => f.split,
        }
    }

    /// The position after the record in its split: a file's records read
    /// so far, a partition's next offset, the next generated index.
    pub(crate) fn next_position(&self) -> u64 {
        match self {
            Cursor::File { position, .. } => position.records,
            Cursor::Kafka(f) => f.offset as u64 + 1,
            Cursor::Generated { index, .. } => index + 1,
        }
    }

    /// The record's number in errors: its line/record number, or offset.
    pub(crate) fn record_number(&self) -> u64 {
        match self {
            Cursor::File { position, .. } => position.records,
            Cursor::Kafka(f) => f.offset as u64,
            Cursor::Generated { index, .. } => *index,
        }
    }
}

/// How a Kafka input decodes messages (`source.kafka.*`).
#[derive(Debug, Clone)]
pub(crate) struct KafkaDecoding {
    /// A message must carry the job's key as its key.
    pub(crate) require_key: bool,
    /// Event time is the message timestamp, not the job's column.
    pub(crate) record_time: bool,
    /// Larger values are bad records.
    pub(crate) max_bytes: usize,
    /// Values are CSV records: field `i` of the schema is cell
    /// `csv_cells[i]`; `None`: JSON objects.
    pub(crate) csv_cells: Option<Vec<usize>>,
}

/// A source task's input: rows of `schema` turned into records `I` by
/// `parse`, or records `I` generated.
pub(crate) struct Input<I> {
    pub(crate) kind: InputKind<I>,
    pub(crate) schema: Schema,
    pub(crate) parse: ParseFn<I>,
}

pub(crate) enum InputKind<I> {
    File {
        source: FileSource,
        /// Where this run started (what a barrier before any record records).
        start: Position,
    },
    Kafka(Box<KafkaInput>),
    Generator(GeneratorInput<I>),
}

/// A generator source: record `i` is `generate(i)`, for `i` in
/// `next..total`; its position is the index of the next record.
pub(crate) struct GeneratorInput<I> {
    pub(crate) name: String,
    pub(crate) generate: GenerateFn<I>,
    pub(crate) next: u64,
    pub(crate) total: u64,
    /// Where this run started (what a barrier before any record records).
    pub(crate) start: u64,
}

pub(crate) struct KafkaInput {
    pub(crate) source: KafkaSource,
    pub(crate) schema: Schema,
    pub(crate) decoding: KafkaDecoding,
    /// Per partition: the offset after the last record routed.
    pub(crate) offsets: Vec<i64>,
    /// Offsets of checkpoints taken, not yet known completed.
    pub(crate) pending: BTreeMap<u64, Vec<PartitionOffset>>,
    pub(crate) read: u64,
    /// Bounded mode: messages to read in this run (0: unbounded).
    pub(crate) total: u64,
    /// A shard of a consumer group: released or lost by the process that
    /// runs it. Its offsets go to the group with each checkpoint's fence,
    /// not from here.
    pub(crate) shard: Option<Arc<ShardControl>>,
}

impl KafkaInput {
    pub(crate) fn new(source: KafkaSource, schema: Schema, decoding: KafkaDecoding) -> Self {
        let total = source.end_offsets().map_or(0, |ends| {
            let starts = source.start_offsets();
            ends.iter()
                .zip(starts)
                .map(|(e, s)| (e - s).max(0) as u64)
                .sum()
        });
        Self {
            total,
            offsets: source.start_offsets().to_vec(),
            source,
            schema,
            decoding,
            pending: BTreeMap::new(),
            read: 0,
            shard: None,
        }
    }

    /// The message's row: decoded on the reader thread, or here.
    fn decode(&self, mut f: Fetched) -> ReadRow {
        let row = match f.row.take() {
            Some(row) => row,
            None => self.decoding.decode(&f, &self.schema),
        };
        if row.is_ok() {
            f.payload = None;
        }
        ReadRow {
            row,
            cursor: Cursor::Kafka(f),
        }
    }
}

impl KafkaDecoding {
    /// What the source's reader thread runs on each message.
    pub(crate) fn decoder(&self, schema: &Schema) -> RowDecoder {
        let (decoding, schema) = (self.clone(), schema.clone());
        RowDecoder(Arc::new(move |f: &Fetched| decoding.decode(f, &schema)))
    }

    /// A message's value as a row of `schema`; a tombstone or a value
    /// over `max_bytes` is a bad record.
    fn decode(&self, f: &Fetched, schema: &Schema) -> RowResult {
        let bad = |reason: String| RecordError {
            record: f.offset as u64,
            field: None,
            reason,
            ..Default::default()
        };
        match f.payload.as_deref() {
            None => Err(bad("the message has no value (a tombstone)".into())),
            Some(v) if v.len() > self.max_bytes => Err(bad(format!(
                "the message value is {} bytes, more than source.kafka.max-message-bytes ({})",
                v.len(),
                self.max_bytes
            ))),
            Some(v) => match &self.csv_cells {
                Some(cells) => csv_value_row(f.offset as u64, v, schema, cells),
                None => json_row(f.offset as u64, v, schema),
            },
        }
    }
}

impl<I> Input<I> {
    /// Splits: one for a file or a generator, one per Kafka partition.
    pub(crate) fn splits(&self) -> usize {
        match &self.kind {
            InputKind::Kafka(k) => k.source.partitions().len(),
            InputKind::File { .. } | InputKind::Generator(_) => 1,
        }
    }

    /// Whether the input ended because its shard was released (then its
    /// event time did not end: no final watermark).
    pub(crate) fn released(&self) -> bool {
        self.kafka().is_some_and(|k| k.released().unwrap_or(false))
    }

    /// The Kafka input, if the input is Kafka.
    pub(crate) fn kafka(&self) -> Option<&KafkaInput> {
        match &self.kind {
            InputKind::Kafka(k) => Some(k),
            _ => None,
        }
    }

    /// Each split's newest timestamp in restored snapshot `s` (a Kafka
    /// partition it does not name: none yet).
    pub(crate) fn restored_max_timestamps(&self, s: &SourceSnapshot) -> Vec<i64> {
        let Some(k) = self.kafka() else {
            return vec![s.max_timestamp];
        };
        k.source
            .partitions()
            .iter()
            .map(|(t, p)| {
                s.partitions
                    .iter()
                    .find(|r| r.topic == *t && r.partition == *p)
                    .map_or(i64::MIN, |r| r.max_timestamp)
            })
            .collect()
    }

    /// Reads up to `max` records into `chunk` (blocking; rows are parsed
    /// here): `Some(n)` records (0: none yet), `None` at the end of the input.
    pub(crate) fn read(
        &mut self,
        chunk: &mut VecDeque<ReadRecord<I>>,
        max: usize,
    ) -> Result<Option<usize>> {
        let Input {
            kind,
            schema,
            parse,
        } = self;
        // Each row is parsed as it is read, straight into the chunk.
        let parsed = |r: ReadRow| ReadRecord {
            record: r.row.and_then(|row| parse(row, schema)),
            cursor: r.cursor,
        };
        let n = match kind {
            InputKind::File { source, .. } => {
                let mut n = 0;
                while n < max {
                    let start = source.position().byte_offset;
                    let Some(row) = source.next_row()? else {
                        break;
                    };
                    chunk.push_back(parsed(ReadRow {
                        row,
                        cursor: Cursor::File {
                            start,
                            position: source.position(),
                            progress: source.progress(),
                        },
                    }));
                    n += 1;
                }
                (n > 0).then_some(n)
            }
            InputKind::Kafka(k) if k.released()? => None,
            InputKind::Kafka(k) => match k.source.poll(Duration::from_millis(100))? {
                Polled::Records(batch) => {
                    let n = batch.len();
                    chunk.extend(batch.into_iter().map(|f| parsed(k.decode(f))));
                    Some(n)
                }
                Polled::Idle => Some(0),
                Polled::End => None,
            },
            InputKind::Generator(g) => g.read(chunk, max),
        };
        Ok(n)
    }

    /// Checks a Kafka message's key against the record's `key` (the job's
    /// key of its fields) and returns it.
    pub(crate) fn check_key(
        &self,
        at: &Cursor,
        key: Vec<u8>,
    ) -> std::result::Result<Vec<u8>, RecordError> {
        let (Some(k), Cursor::Kafka(f)) = (self.kafka(), at) else {
            return Ok(key);
        };
        if !k.decoding.require_key {
            return Ok(key);
        }
        let show = strata_connectors::kafka::key_to_json;
        // A shard of a consumer group must have its keys: no way around.
        let fix = if k.shard.is_some() {
            "reload the topic keyed by the job's key with strata topic load --key ...: a consumer group's shards need it"
        } else {
            "strata topic load --key ...; or source.kafka.require-key=false"
        };
        let reason = match &f.key {
            Some(m) if *m == key => return Ok(key),
            Some(m) => format!(
                "the message key {} is not the record's key {} (its fields): a key must live in one partition, so messages must be keyed by the job's key ({fix})",
                show(m),
                show(&key)
            ),
            None => format!("the message has no key: messages must be keyed by the job's key ({fix})"),
        };
        Err(RecordError {
            record: f.offset as u64,
            field: None,
            reason,
            ..Default::default()
        })
    }

    /// The record's event time when it is the message timestamp.
    pub(crate) fn event_time(&self, at: &Cursor) -> Option<i64> {
        match (self.kafka(), at) {
            (Some(k), Cursor::Kafka(f)) if k.decoding.record_time => {
                Some(f.timestamp.unwrap_or(i64::MIN))
            }
            _ => None,
        }
    }

    /// Names a Kafka message's topic, partition and offset in `bad`.
    pub(crate) fn describe(&self, mut bad: RecordError, at: &Cursor) -> RecordError {
        if let (Some(k), Cursor::Kafka(f)) = (self.kafka(), at) {
            let (topic, p) = &k.source.partitions()[f.split];
            bad.reason = format!("message {topic}/{p} offset {}: {}", f.offset, bad.reason);
        }
        bad
    }

    /// Gives `bad`, read at `at`, the record itself, for a dead letter: a
    /// file's record read again (see `FileSource::record_text`), a Kafka
    /// message's value.
    ///
    /// Errors: the input file can no longer be read.
    pub(crate) fn with_text(&self, mut bad: RecordError, at: &Cursor) -> Result<RecordError> {
        match (&self.kind, at) {
            (
                InputKind::File { source, .. },
                Cursor::File {
                    start, position, ..
                },
            ) => {
                bad.text = source.record_text(*start, position)?;
                if position.byte_offset > 0 {
                    bad.byte_offset = Some(source.record_start(*start)?);
                }
            }
            (_, Cursor::Kafka(f)) => {
                bad.text = f
                    .payload
                    .as_deref()
                    .map(|v| String::from_utf8_lossy(v).into_owned());
            }
            _ => {}
        }
        Ok(bad)
    }

    /// Notes that the record at `at` was handled (routed or bad); returns
    /// the progress (done, total).
    pub(crate) fn advance(&mut self, at: &Cursor) -> (u64, u64) {
        match (&mut self.kind, at) {
            (InputKind::Kafka(k), Cursor::Kafka(f)) => {
                k.offsets[f.split] = f.offset + 1;
                k.read += 1;
                (k.read, k.total)
            }
            (_, Cursor::File { progress, .. }) => *progress,
            (_, Cursor::Generated { index, total }) => (index + 1, *total),
            _ => (0, 0),
        }
    }

    /// The position part of checkpoint `id`, after the record at `routed`
    /// (`None`: nothing routed in this run), with each split's newest
    /// timestamp.
    pub(crate) fn snapshot(
        &mut self,
        routed: Option<&Cursor>,
        max_ts: &[i64],
        id: u64,
    ) -> Result<SourceSnapshot> {
        let newest = max_ts.iter().copied().max().unwrap_or(i64::MIN);
        match &mut self.kind {
            InputKind::File { source, start } => {
                let position = match routed {
                    Some(Cursor::File { position, .. }) => *position,
                    _ => *start,
                };
                Ok(SourceSnapshot {
                    position,
                    input: source.identity(position)?,
                    max_timestamp: newest,
                    ..SourceSnapshot::default()
                })
            }
            InputKind::Kafka(k) => Ok(k.snapshot(max_ts, newest, id)),
            InputKind::Generator(g) => {
                let records = match routed {
                    Some(Cursor::Generated { index, .. }) => index + 1,
                    _ => g.start,
                };
                Ok(SourceSnapshot {
                    position: Position {
                        records,
                        ..Position::default()
                    },
                    generator: Some(g.name.clone()),
                    max_timestamp: newest,
                    ..SourceSnapshot::default()
                })
            }
        }
    }

    /// Checkpoint `id` completed: a Kafka source commits its offsets (and
    /// forgets older ones).
    pub(crate) fn completed(&mut self, id: u64) {
        if let InputKind::Kafka(k) = &mut self.kind {
            let commit = k.shard.is_none();
            let done: Vec<u64> = k.pending.range(..=id).map(|(i, _)| *i).collect();
            if let Some(offsets) = done.last().and_then(|i| k.pending.remove(i)) {
                if commit {
                    k.source.commit(offsets);
                }
            }
            for i in done {
                k.pending.remove(&i);
            }
        }
    }
}

impl KafkaInput {
    /// Whether its shard was released; errs once it was lost.
    fn released(&self) -> Result<bool> {
        self.shard.as_ref().map_or(Ok(false), |s| s.released())
    }

    /// Each partition's next offset, remembered for checkpoint `id`'s commit.
    fn snapshot(&mut self, max_ts: &[i64], newest: i64, id: u64) -> SourceSnapshot {
        let mut partitions = Vec::new();
        let mut offsets = Vec::new();
        for (i, (topic, partition)) in self.source.partitions().iter().enumerate() {
            partitions.push(PartitionSnapshot {
                topic: topic.clone(),
                partition: *partition,
                offset: self.offsets[i],
                max_timestamp: max_ts[i],
            });
            offsets.push(PartitionOffset {
                topic: topic.clone(),
                partition: *partition,
                offset: self.offsets[i],
            });
        }
        self.pending.insert(id, offsets);
        SourceSnapshot {
            max_timestamp: newest,
            partitions,
            ..SourceSnapshot::default()
        }
    }
}

impl<I> GeneratorInput<I> {
    /// Generates up to `max` records into `chunk`; `None` after the last.
    fn read(&mut self, chunk: &mut VecDeque<ReadRecord<I>>, max: usize) -> Option<usize> {
        let end = self.total.min(self.next.saturating_add(max as u64));
        if self.next >= end {
            return None;
        }
        for index in self.next..end {
            chunk.push_back(ReadRecord {
                record: Ok((self.generate)(index)),
                cursor: Cursor::Generated {
                    index,
                    total: self.total,
                },
            });
        }
        let n = (end - self.next) as usize;
        self.next = end;
        Some(n)
    }
}
