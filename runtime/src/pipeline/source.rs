//! Opening a run's input where the restored checkpoint left it (or at its
//! start), after checking it is the input that checkpoint read: a file,
//! Kafka partitions (a consumer group shard's one), or a generator.

use super::parts::{CheckedInput, Parts};
use super::{targets, SourceSpec};
use crate::checkpoint::{CheckpointMetadata, CheckpointStorage, SourceSnapshot};
use crate::config::JobConfig;
use crate::error::{Result, RuntimeError};
use crate::function::ParseFn;
use crate::shard::Shard;
use crate::task::input::{GeneratorInput, Input, InputKind, KafkaDecoding, KafkaInput};
use std::sync::Arc;
use strata_connectors::kafka::{KafkaEndpoint, KafkaSource};
use strata_connectors::{FileSource, Position, RecordError, Schema};

/// Opens the source at the restored position (or the start), checking that
/// it is the input the restored checkpoint read. Blocking (Kafka calls).
pub(super) fn open_source<I>(
    parts: &Parts<I>,
    config: &JobConfig,
    job: &str,
    restored: Option<&CheckpointMetadata>,
    storage: &CheckpointStorage,
    shard: Option<&Shard>,
) -> Result<Input<I>> {
    let (schema, parse) = match &parts.spec {
        SourceSpec::Rows { schema, parse, .. } => (schema.clone(), parse.clone()),
        SourceSpec::Generator { .. } => (Schema::new(&[]), unparsed::<I>()),
    };
    if let Some(m) = restored {
        let (read, reads) = (what_was_read(&m.source), what_is_read(parts));
        if read != reads {
            return Err(RuntimeError::checkpoint(
                storage.root(),
                format!(
                    "checkpoint {}: it read {read}, not {reads}: restore needs the same input",
                    m.id
                ),
            ));
        }
    }
    let kind = match (&parts.input, &parts.spec) {
        (CheckedInput::Kafka(e), _) => open_kafka(e, config, job, restored, &schema, shard)?,
        (CheckedInput::File(path, format), _) => {
            let position = restored.map_or(Position::default(), |m| m.source.position);
            let mut source =
                FileSource::open_with(path, *format, &schema, position, &parts.options)?;
            if let Some(m) = restored {
                source.verify(&m.source.input).map_err(|reason| {
                    RuntimeError::checkpoint(
                        storage.root(),
                        format!(
                            "checkpoint {}: {reason}: restore needs the same input file",
                            m.id
                        ),
                    )
                })?;
            }
            InputKind::File {
                source,
                start: position,
            }
        }
        (
            CheckedInput::Generator,
            SourceSpec::Generator {
                name,
                total,
                generate,
            },
        ) => {
            let start = restored.map_or(0, |m| m.source.position.records);
            InputKind::Generator(GeneratorInput {
                name: name.clone(),
                generate: generate.clone(),
                next: start,
                total: *total,
                start,
            })
        }
        (CheckedInput::Generator, SourceSpec::Rows { .. }) => {
            unreachable!("check_input names rows a file or Kafka")
        }
    };
    Ok(Input {
        kind,
        schema,
        parse,
    })
}

/// A generator's records are never parsed: its inputs are not rows.
fn unparsed<I>() -> ParseFn<I> {
    Arc::new(|_, _| {
        Err(RecordError {
            record: 0,
            field: None,
            reason: "a generator source has no rows to parse".into(),
            ..Default::default()
        })
    })
}

/// What a restored source snapshot read, for messages.
fn what_was_read(s: &SourceSnapshot) -> String {
    match (&s.generator, s.partitions.is_empty()) {
        (Some(name), _) => format!("generator '{name}'"),
        (None, false) => "Kafka topics".into(),
        (None, true) => "a file".into(),
    }
}

/// What this run reads, in the words of [`what_was_read`].
fn what_is_read<I>(parts: &Parts<I>) -> String {
    match (&parts.input, &parts.spec) {
        (_, SourceSpec::Generator { name, .. }) => format!("generator '{name}'"),
        (CheckedInput::Kafka(_), _) => "Kafka topics".into(),
        _ => "a file".into(),
    }
}

/// `source.kafka.format=csv`: per field of `schema`, its cell in a record
/// (`source.kafka.csv-columns`, else the schema's order).
///
/// Errors: a field of the schema that the columns do not name.
fn csv_cells(config: &JobConfig, schema: &Schema) -> Result<Option<Vec<usize>>> {
    if !config.kafka.csv {
        if config.kafka.csv_columns.is_some() {
            return Err(RuntimeError::Usage(
                "source.kafka.csv-columns needs source.kafka.format=csv".into(),
            ));
        }
        return Ok(None);
    }
    let Some(columns) = &config.kafka.csv_columns else {
        return Ok(Some((0..schema.fields.len()).collect()));
    };
    let cells = schema.fields.iter().map(|(name, _)| {
        columns.iter().position(|c| c == name).ok_or_else(|| {
            RuntimeError::Usage(format!(
                "source.kafka.csv-columns ({}) does not name the job's column '{name}' (the job reads {})",
                columns.join(","),
                schema.fields.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>().join(",")
            ))
        })
    });
    Ok(Some(cells.collect::<Result<_>>()?))
}

/// Opens the Kafka source at the restored offsets (or the group's start).
fn open_kafka<I>(
    e: &KafkaEndpoint,
    config: &JobConfig,
    job: &str,
    restored: Option<&CheckpointMetadata>,
    schema: &Schema,
    shard: Option<&Shard>,
) -> Result<InputKind<I>> {
    let mut options = targets::source_options(e, job, config)?;
    options.partitions = shard.map(|s| vec![s.partition]);
    let offsets: Option<Vec<_>> = restored.map(|m| {
        m.source
            .partitions
            .iter()
            .map(|p| strata_connectors::kafka::PartitionOffset {
                topic: p.topic.clone(),
                partition: p.partition,
                offset: p.offset,
            })
            .collect()
    });
    let decoding = KafkaDecoding {
        require_key: config.kafka.require_key,
        record_time: config.kafka.record_time,
        max_bytes: config.kafka.max_message_bytes as usize,
        csv_cells: csv_cells(config, schema)?,
    };
    options.decode = Some(decoding.decoder(schema));
    let source = KafkaSource::open(&options, offsets.as_deref())?;
    if let (Some(shard), Some(&[end])) = (shard, source.end_offsets()) {
        shard.control.set_end(end);
    }
    let mut input = KafkaInput::new(source, schema.clone(), decoding);
    input.shard = shard.map(|s| s.control.clone());
    Ok(InputKind::Kafka(Box::new(input)))
}
