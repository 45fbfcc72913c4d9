//! Where bad records go under `bad-input.policy=dead-letter`: part files
//! `dead-letter-0-*.jsonl` in the output directory (the error as JSON, with
//! the record's text and where it starts: see `Input::with_text`), or
//! a Kafka topic (`bad-input.dead-letter-topic`): the message as it came
//! (its key and value; for a file input, the error as JSON) with the
//! reason in the header `strata.reason` and where it came from in
//! `strata.origin`. Both are exactly once, like the output.

use crate::error::{Result, RuntimeError};
use crate::task::input::Cursor;
use strata_connectors::kafka::{KafkaSink, OutRecord};
use strata_connectors::{FileSink, RecordError, SinkState};

pub(crate) enum DeadLetter {
    File(FileSink),
    Kafka(Box<KafkaSink>),
}

impl DeadLetter {
    /// Writes bad record `bad`, read at `at`.
    pub(crate) fn write(&mut self, bad: &RecordError, at: &Cursor) -> Result<()> {
        let error = serde_json::to_vec(bad).map_err(|e| RuntimeError::Function(e.to_string()))?;
        match self {
            DeadLetter::File(sink) => Ok(sink.write_line(&error)?),
            DeadLetter::Kafka(sink) => {
                let reason = bad.to_string();
                let (key, value, origin, timestamp) = match at {
                    Cursor::Kafka(f) => (
                        f.key.clone().unwrap_or_default(),
                        f.payload.clone().unwrap_or_default(),
                        format!("split {} offset {}", f.split, f.offset),
                        f.timestamp,
                    ),
                    Cursor::File { .. } | Cursor::Generated { .. } => (
                        Vec::new(),
                        error,
                        format!("record {}", at.record_number()),
                        None,
                    ),
                };
                let headers: [(&str, &[u8]); 2] = [
                    ("strata.reason", reason.as_bytes()),
                    ("strata.origin", origin.as_bytes()),
                ];
                Ok(sink.write(&OutRecord {
                    key: &key,
                    timestamp,
                    value: &value,
                    headers: &headers,
                })?)
            }
        }
    }

    pub(crate) fn pre_commit(&mut self, id: u64) -> Result<SinkState> {
        Ok(match self {
            DeadLetter::File(sink) => sink.pre_commit(id)?,
            DeadLetter::Kafka(sink) => sink.pre_commit(id)?,
        })
    }

    pub(crate) fn commit(&mut self, id: u64) -> Result<()> {
        match self {
            DeadLetter::File(sink) => sink.commit(id)?,
            DeadLetter::Kafka(sink) => sink.commit(id)?,
        }
        Ok(())
    }

    /// Commits `id` and waits until the topic holds it (the end of a run).
    pub(crate) fn finish(&mut self, id: u64) -> Result<()> {
        match self {
            DeadLetter::File(sink) => sink.commit(id)?,
            DeadLetter::Kafka(sink) => sink.finish(id)?,
        }
        Ok(())
    }
}
