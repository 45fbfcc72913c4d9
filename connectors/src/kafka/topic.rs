//! `strata topic load` and `strata topic read`: a file into a topic, a
//! topic into JSON lines.

use super::{client_config, encode_key, key_to_json, partitions_of, KafkaSecurity, CALL_TIMEOUT};
use crate::error::{ConnectorError, Result};
use crate::file_source::{FileSource, Format, Position};
use crate::row::{format_timestamp, FieldType, Schema, Value};
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::{Headers, Message};
use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::{Offset, TopicPartitionList};
use std::io::{BufRead, Write};
use std::path::Path;
use std::time::Duration;

/// What [`load_topic`] wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadReport {
    /// Records written.
    pub records: u64,
    /// Partitions of the topic.
    pub partitions: usize,
    /// Whether the topic was created.
    pub created: bool,
}

/// How [`load_topic`] writes.
#[derive(Debug, Clone, Default)]
pub struct LoadOptions {
    /// The key columns (at least one).
    pub key: Vec<String>,
    /// Partitions of a topic created here (default 1).
    pub partitions: Option<i32>,
    /// At most this many records per second.
    pub rate: Option<u64>,
}

/// Writes every record of `file` (Parquet, CSV or JSON lines) to `topic`
/// as a JSON object, keyed by the columns `options.key` (see
/// [`super::encode_key`]), creating the topic with `options.partitions`
/// partitions (default 1) if it is absent. Parquet columns keep their types
/// (timestamps as `YYYY-MM-DDTHH:MM:SS`); CSV values are text; JSON lines
/// are sent as they are. `progress(done, total)` is called as it goes.
/// With `options.rate`, at most that many records per second are sent (a load
/// test's steady input; each message's timestamp is when it was sent).
///
/// Errors: the file cannot be read, a record lacks a key column or is not
/// a JSON object (naming the record), the topic exists with another
/// number of partitions than asked, a delivery failed.
pub fn load_topic(
    file: &Path,
    brokers: &str,
    security: &KafkaSecurity,
    topic: &str,
    options: &LoadOptions,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<LoadReport> {
    let LoadOptions {
        key,
        partitions,
        rate,
    } = options;
    let (partitions, rate) = (*partitions, *rate);
    let format = Format::from_path(file)?;
    if key.is_empty() {
        return Err(ConnectorError::KafkaUsage(
            "--key needs at least one column".into(),
        ));
    }
    let (count, created) = ensure_topic(brokers, security, topic, partitions)?;
    let producer: ThreadedProducer<DefaultProducerContext> = client_config(
        brokers,
        security,
        &[
            ("enable.idempotence", "true"),
            ("acks", "all"),
            ("linger.ms", "20"),
            ("compression.type", "lz4"),
            ("queue.buffering.max.kbytes", "65536"),
        ],
        &[],
    )
    .create()
    .map_err(ConnectorError::kafka("create the producer"))?;
    let (started, mut sent) = (std::time::Instant::now(), 0u64);
    let mut send = |k: Vec<u8>, v: Vec<u8>| {
        if let Some(rate) = rate {
            pace(started, sent, rate);
        }
        sent += 1;
        send_record(&producer, topic, &k, &v)
    };
    let records = match format {
        Format::JsonLines => load_json_lines(file, key, &mut send, progress)?,
        _ => load_rows(file, format, key, &mut send, progress)?,
    };
    producer
        .flush(Duration::from_secs(120))
        .map_err(ConnectorError::kafka(format!("flush to {topic}")))?;
    Ok(LoadReport {
        records,
        partitions: count,
        created,
    })
}

/// Sleeps until record `sent` is due at `rate` per second from `started`
/// (only when a millisecond or more ahead).
fn pace(started: std::time::Instant, sent: u64, rate: u64) {
    let due = Duration::from_secs_f64(sent as f64 / rate.max(1) as f64);
    if let Some(ahead) = due.checked_sub(started.elapsed()) {
        if ahead >= Duration::from_millis(1) {
            std::thread::sleep(ahead);
        }
    }
}

fn send_record(
    producer: &ThreadedProducer<DefaultProducerContext>,
    topic: &str,
    key: &[u8],
    value: &[u8],
) -> Result<()> {
    super::send_waiting(
        producer,
        topic,
        BaseRecord::to(topic).key(key).payload(value),
    )
}

/// The topic's partition count, creating it first if absent.
fn ensure_topic(
    brokers: &str,
    security: &KafkaSecurity,
    topic: &str,
    partitions: Option<i32>,
) -> Result<(usize, bool)> {
    let probe: BaseConsumer = client_config(brokers, security, &[], &[])
        .create()
        .map_err(ConnectorError::kafka("create a client"))?;
    if let Ok(existing) = partitions_of(&probe, topic) {
        return match partitions {
            Some(n) if n as usize != existing.len() => Err(ConnectorError::KafkaUsage(format!(
                "topic {topic} exists with {} partitions, not {n}: drop --partitions or use another topic",
                existing.len()
            ))),
            _ => Ok((existing.len(), false)),
        };
    }
    let n = partitions.unwrap_or(1);
    let admin: AdminClient<DefaultClientContext> = client_config(brokers, security, &[], &[])
        .create()
        .map_err(ConnectorError::kafka("create an admin client"))?;
    let new = NewTopic::new(topic, n, TopicReplication::Fixed(1));
    let options = AdminOptions::new().operation_timeout(Some(CALL_TIMEOUT));
    let results = futures::executor::block_on(admin.create_topics([&new], &options))
        .map_err(ConnectorError::kafka(format!("create topic {topic}")))?;
    for r in results {
        if let Err((_, code)) = r {
            if code != RDKafkaErrorCode::TopicAlreadyExists {
                return Err(ConnectorError::Kafka {
                    what: format!("create topic {topic}"),
                    reason: code.to_string(),
                });
            }
        }
    }
    // Metadata lags creation by a moment.
    for _ in 0..100 {
        if let Ok(p) = partitions_of(&probe, topic) {
            return Ok((p.len(), true));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Ok((n as usize, true))
}

/// The schema of a Parquet file's columns strata can read, or of a CSV
/// file's header (all text).
fn file_schema(file: &Path, format: Format) -> Result<Schema> {
    let fields: Vec<(String, FieldType)> = match format {
        Format::Parquet => {
            let f = std::fs::File::open(file).map_err(ConnectorError::io(file))?;
            let builder = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(f)
                .map_err(|e| crate::file_source::corrupt(file, "Parquet", e))?;
            builder
                .schema()
                .fields()
                .iter()
                .filter_map(|f| Some((f.name().clone(), field_type(f.data_type())?)))
                .collect()
        }
        _ => {
            let mut reader = csv::Reader::from_path(file)
                .map_err(|e| crate::file_source::corrupt(file, "CSV", e))?;
            let header = reader
                .headers()
                .map_err(|e| crate::file_source::corrupt(file, "CSV", e))?;
            header
                .iter()
                .map(|h| (h.to_owned(), FieldType::String))
                .collect()
        }
    };
    Ok(Schema { fields })
}

fn field_type(t: &arrow::datatypes::DataType) -> Option<FieldType> {
    use arrow::datatypes::DataType as D;
    match t {
        D::Utf8 | D::LargeUtf8 | D::Utf8View => Some(FieldType::String),
        t if t.is_integer() => Some(FieldType::Int64),
        t if t.is_floating() => Some(FieldType::Float64),
        D::Timestamp(..) | D::Date32 | D::Date64 => Some(FieldType::Timestamp),
        D::Binary | D::LargeBinary | D::BinaryView => Some(FieldType::Bytes),
        _ => None,
    }
}

fn load_rows(
    file: &Path,
    format: Format,
    key: &[String],
    send: &mut dyn FnMut(Vec<u8>, Vec<u8>) -> Result<()>,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<u64> {
    let schema = file_schema(file, format)?;
    let key_at = key_columns(
        &schema
            .fields
            .iter()
            .map(|(n, _)| n.clone())
            .collect::<Vec<_>>(),
        key,
        file,
    )?;
    let mut source = FileSource::open(file, format, &schema, Position::default())?;
    let mut n = 0;
    while let Some(row) = source.next_row()? {
        let row =
            row.map_err(|e| ConnectorError::KafkaUsage(format!("{}: {e}", file.display())))?;
        let mut object = serde_json::Map::new();
        for ((name, _), v) in schema.fields.iter().zip(&row.values) {
            object.insert(name.clone(), Value::to_json(v));
        }
        let mut parts = Vec::with_capacity(key_at.len());
        for &i in &key_at {
            parts.push(
                key_text(&row.values[i])
                    .ok_or_else(|| null_key(file, row.number, &schema.fields[i].0))?,
            );
        }
        let refs: Vec<&[u8]> = parts.iter().map(|p| p.as_bytes()).collect();
        let value =
            serde_json::to_vec(&object).map_err(|e| ConnectorError::KafkaUsage(e.to_string()))?;
        send(encode_key(&refs), value)?;
        n += 1;
        if n % 10_000 == 0 {
            let (done, total) = source.progress();
            progress(done, total);
        }
    }
    let (done, total) = source.progress();
    progress(done, total);
    Ok(n)
}

fn load_json_lines(
    file: &Path,
    key: &[String],
    send: &mut dyn FnMut(Vec<u8>, Vec<u8>) -> Result<()>,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<u64> {
    let total = std::fs::metadata(file)
        .map_err(ConnectorError::io(file))?
        .len();
    let reader =
        std::io::BufReader::new(std::fs::File::open(file).map_err(ConnectorError::io(file))?);
    let (mut n, mut done) = (0, 0);
    for (i, line) in reader.lines().enumerate() {
        let line = line.map_err(ConnectorError::io(file))?;
        done += line.len() as u64 + 1;
        if line.trim().is_empty() {
            continue;
        }
        let bad = |why: String| {
            ConnectorError::KafkaUsage(format!("{} line {}: {why}", file.display(), i + 1))
        };
        let object: serde_json::Map<String, serde_json::Value> =
            serde_json::from_str(&line).map_err(|e| bad(format!("not a JSON object: {e}")))?;
        let mut parts = Vec::with_capacity(key.len());
        for k in key {
            let text = match object.get(k) {
                Some(serde_json::Value::String(s)) => s.clone(),
                Some(v @ (serde_json::Value::Number(_) | serde_json::Value::Bool(_))) => {
                    v.to_string()
                }
                _ => return Err(bad(format!("key column '{k}' is missing or null"))),
            };
            parts.push(text);
        }
        let refs: Vec<&[u8]> = parts.iter().map(|p| p.as_bytes()).collect();
        send(encode_key(&refs), line.into_bytes())?;
        n += 1;
        if n % 10_000 == 0 {
            progress(done, total);
        }
    }
    progress(total, total);
    Ok(n)
}

fn key_columns(columns: &[String], key: &[String], file: &Path) -> Result<Vec<usize>> {
    key.iter()
        .map(|k| {
            columns
                .iter()
                .position(|c| c == k)
                .ok_or_else(|| ConnectorError::MissingColumn {
                    path: file.to_owned(),
                    column: k.clone(),
                    found: columns.join(", "),
                })
        })
        .collect()
}

fn null_key(file: &Path, record: u64, column: &str) -> ConnectorError {
    ConnectorError::KafkaUsage(format!(
        "{} record {record}: key column '{column}' is empty",
        file.display()
    ))
}

fn key_text(v: &Value) -> Option<String> {
    match v {
        Value::Null => None,
        Value::String(s) => Some(s.clone()),
        Value::Int64(i) => Some(i.to_string()),
        Value::Float64(f) => Some(f.to_string()),
        Value::Timestamp(ms) => Some(format_timestamp(*ms)),
        Value::Bytes(b) => Some(String::from_utf8_lossy(b).into_owned()),
    }
}

/// How [`read_topic`] reads.
#[derive(Debug, Clone, Default)]
pub struct ReadOptions {
    /// `isolation.level=read_committed`: only committed transactions.
    pub read_committed: bool,
}

/// Writes every record of `topic`, from the beginning to the end of each
/// partition as it is when reading reaches it, to `out` as JSON lines
/// `{"partition","offset","timestamp","key","value","headers"}`: the key
/// as [`key_to_json`] shows it, the value as JSON when it is JSON, else as
/// text. Returns the number of records.
///
/// Errors: the topic does not exist, the brokers cannot be reached, `out`
/// cannot be written.
pub fn read_topic(
    brokers: &str,
    security: &KafkaSecurity,
    topic: &str,
    options: &ReadOptions,
    out: &mut dyn Write,
) -> Result<u64> {
    let isolation = if options.read_committed {
        "read_committed"
    } else {
        "read_uncommitted"
    };
    let group = format!("strata-topic-read-{}", std::process::id());
    let consumer: BaseConsumer = client_config(
        brokers,
        security,
        &[
            ("group.id", group.as_str()),
            ("enable.auto.commit", "false"),
            ("enable.partition.eof", "true"),
            ("isolation.level", isolation),
        ],
        &[],
    )
    .create()
    .map_err(ConnectorError::kafka("create the consumer"))?;
    let partitions = partitions_of(&consumer, topic)?;
    let mut tpl = TopicPartitionList::new();
    for p in &partitions {
        tpl.add_partition_offset(topic, *p, Offset::Beginning)
            .map_err(ConnectorError::kafka("assign"))?;
    }
    consumer
        .assign(&tpl)
        .map_err(ConnectorError::kafka("assign"))?;
    let mut open: std::collections::HashSet<i32> = partitions.into_iter().collect();
    let mut n = 0;
    let write_err = |e: std::io::Error| ConnectorError::io(Path::new("output"))(e);
    while !open.is_empty() {
        match consumer.poll(Duration::from_millis(500)) {
            None => {}
            Some(Err(KafkaError::PartitionEOF(p))) => {
                open.remove(&p);
            }
            Some(Err(e))
                if e.rdkafka_error_code()
                    .is_some_and(|c| c == RDKafkaErrorCode::UnknownTopicOrPartition) =>
            {
                return Err(ConnectorError::kafka(format!("read {topic}"))(e))
            }
            Some(Err(e)) => eprintln!("strata: topic read: {e} (waiting)"),
            Some(Ok(m)) => {
                let mut headers = serde_json::Map::new();
                if let Some(hs) = m.headers() {
                    for h in hs.iter() {
                        let v = h.value.map(|v| String::from_utf8_lossy(v).into_owned());
                        headers.insert(h.key.to_owned(), serde_json::Value::from(v));
                    }
                }
                let value = m.payload().map_or(serde_json::Value::Null, |p| {
                    serde_json::from_slice(p).unwrap_or_else(|_| {
                        serde_json::Value::from(String::from_utf8_lossy(p).into_owned())
                    })
                });
                let line = serde_json::json!({
                    "partition": m.partition(),
                    "offset": m.offset(),
                    "timestamp": m.timestamp().to_millis(),
                    "key": m.key().map_or(serde_json::Value::Null, key_to_json),
                    "value": value,
                    "headers": headers,
                });
                serde_json::to_writer(&mut *out, &line).map_err(|e| write_err(e.into()))?;
                out.write_all(b"\n").map_err(write_err)?;
                n += 1;
            }
        }
    }
    out.flush().map_err(write_err)?;
    Ok(n)
}
