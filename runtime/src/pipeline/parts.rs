//! What a pipeline must have been given, checked before anything is
//! created on disk: a source, a key, timestamps, a sink, directories that
//! are directories, an input that opens, an output without committed parts
//! of an earlier run.

use super::targets::{self, Target};
use super::{Pipeline, RestoreFrom, SinkSpec, SourceSpec, KAFKA_STAGING};
use crate::checkpoint::remote;
use crate::error::{Result, RuntimeError};
use crate::function::{KeyFn, KeyedProcessFunction, TimestampFn};
use serde::Serialize;
use std::path::{Path, PathBuf};
use strata_connectors::kafka::KafkaEndpoint;
use strata_connectors::{FileSource, Format, Position, SourceOptions};

/// The input as [`Pipeline::take_parts`] checked it.
pub(super) enum CheckedInput {
    File(PathBuf, Format),
    Kafka(KafkaEndpoint),
    Generator,
}

/// What [`Pipeline::take_parts`] checked.
pub(super) struct Parts<I> {
    pub(super) options: SourceOptions,
    pub(super) spec: SourceSpec<I>,
    pub(super) input: CheckedInput,
    pub(super) key_of: KeyFn<I>,
    pub(super) timestamp_of: TimestampFn<I>,
    pub(super) output: Target,
    pub(super) dead_letter: Target,
    /// The local checkpoint directory (the local copy, with `remote`).
    pub(super) checkpoint_dir: PathBuf,
    /// The object store the checkpoints live in (`s3://…`), if any.
    pub(super) remote: Option<String>,
}

impl<I> Parts<I> {
    /// The Kafka clusters the run reads or writes (input, output, dead
    /// letters), possibly repeated.
    pub(super) fn kafka_brokers(&self) -> Vec<&str> {
        let input = match &self.input {
            CheckedInput::Kafka(e) => Some(e.brokers.as_str()),
            CheckedInput::File(..) | CheckedInput::Generator => None,
        };
        input
            .into_iter()
            .chain(self.output.brokers())
            .chain(self.dead_letter.brokers())
            .collect()
    }
}

impl<F> Pipeline<F>
where
    F: KeyedProcessFunction,
    F::Out: Serialize,
{
    fn missing(what: &str) -> RuntimeError {
        RuntimeError::Config {
            key: what.into(),
            reason: "the pipeline has none".into(),
        }
    }

    fn source_options(&self) -> SourceOptions {
        SourceOptions {
            csv_multiline_fields: self.config.csv_multiline_fields,
            max_record_bytes: self.config.max_record_bytes,
        }
    }

    /// Everything the builder must have been given, checked before
    /// anything is created on disk.
    pub(super) fn take_parts(&mut self) -> Result<Parts<F::In>> {
        let spec = self.source.take().ok_or_else(|| Self::missing("source"))?;
        let key_of = self.key_of.take().ok_or_else(|| Self::missing("key_by"))?;
        let timestamp_of = self
            .timestamp_of
            .take()
            .ok_or_else(|| Self::missing("timestamps"))?;
        let output = match self.output.as_ref().ok_or_else(|| Self::missing("sink"))? {
            SinkSpec::Named(output) => Target::output(output, &self.name, &self.config)?,
            SinkSpec::Discard => Target::Discard,
        };
        let remote = self
            .checkpoint_dir
            .as_deref()
            .filter(|d| remote::is_remote(d))
            .map(|d| d.to_string_lossy().into_owned());
        let checkpoint_dir = match (&self.checkpoint_dir, &output) {
            (Some(_), _) if remote.is_some() => self.local_copy(&output)?,
            (Some(dir), _) => dir.clone(),
            (None, Target::Dir(out)) => out.join("_checkpoints"),
            (None, Target::Kafka { .. }) => {
                return Err(RuntimeError::Usage(
                    "a Kafka output needs --checkpoint-dir (where checkpoints and the sink's pre-committed epochs live)".into(),
                ))
            }
            (None, Target::Discard) => {
                return Err(RuntimeError::Usage(
                    "a discarding sink needs a checkpoint directory (Pipeline::checkpoint_dir)"
                        .into(),
                ))
            }
        };
        if let Some(out) = output.dir() {
            check_directory(out, "output directory")?;
        }
        check_directory(&checkpoint_dir, "checkpoint directory")?;
        if let Some(local) = &self.config.local_dir {
            check_directory(local, "local state directory (state.local-dir)")?;
        }
        // A shard of a group restores "the latest, if any": its directory
        // appears with its first checkpoint.
        let must_exist = self.restore.filter(|r| *r != RestoreFrom::LatestIfAny);
        if let (Some(from), false, None) = (must_exist, checkpoint_dir.exists(), &remote) {
            return Err(RuntimeError::Usage(format!(
                "cannot restore {}: checkpoint directory {} does not exist (check the path; without --restore a run starts fresh)",
                from.describe(),
                checkpoint_dir.display()
            )));
        }
        if let (None, Some(out)) = (self.restore, output.dir()) {
            refuse_committed_output(out)?;
        }
        let input = self.check_input(&spec)?;
        let kafka_in = match &input {
            CheckedInput::Kafka(e) => Some(e),
            CheckedInput::File(..) | CheckedInput::Generator => None,
        };
        let dead_letter = targets::dead_letter_target(
            &self.config,
            kafka_in,
            &output,
            &self.name,
            &checkpoint_dir.join(KAFKA_STAGING),
        )?;
        Ok(Parts {
            options: self.source_options(),
            spec,
            input,
            key_of,
            timestamp_of,
            output,
            dead_letter,
            checkpoint_dir,
            remote,
        })
    }

    /// Where a job with checkpoints in an object store keeps its local copy
    /// of them: `checkpoint.local-copy`, else `<output>/_checkpoints`.
    fn local_copy(&self, output: &Target) -> Result<PathBuf> {
        match (&self.config.checkpoint_local_copy, output.dir()) {
            (Some(dir), _) => Ok(dir.clone()),
            (None, Some(out)) => Ok(out.join("_checkpoints")),
            (None, None) => Err(RuntimeError::Usage(
                "checkpoints in an object store need a local copy: set -D checkpoint.local-copy=<dir> (a Kafka or discarding output has no output directory to hold it)".into(),
            )),
        }
    }

    /// Checks the input: a readable file of a known format with the
    /// schema's columns, or a well-formed `kafka://` address.
    fn check_input(&self, spec: &SourceSpec<F::In>) -> Result<CheckedInput> {
        let SourceSpec::Rows { input, schema, .. } = spec else {
            return Ok(CheckedInput::Generator);
        };
        if let Some(uri) = input.to_str().filter(|t| KafkaEndpoint::is_kafka(t)) {
            let e = KafkaEndpoint::parse(uri)?;
            targets::source_options(&e, &self.name, &self.config)?;
            return Ok(CheckedInput::Kafka(e));
        }
        let path = PathBuf::from(input);
        if path.is_dir() {
            return Err(RuntimeError::Usage(format!(
                "input {} is a directory: give a .parquet, .csv or .jsonl file",
                path.display()
            )));
        }
        // Open the input once to check it (exists, format, columns).
        let format = Format::from_path(&path)?;
        FileSource::open_with(
            &path,
            format,
            schema,
            Position::default(),
            &self.source_options(),
        )?;
        Ok(CheckedInput::File(path, format))
    }
}

/// Refuses a directory argument that is, or lies under, something other
/// than a directory, naming the path the user gave (before anything is
/// created, so a failed start leaves nothing behind).
fn check_directory(path: &Path, role: &str) -> Result<()> {
    let Some(blocker) = path.ancestors().find(|p| p.exists()) else {
        return Ok(());
    };
    if blocker.is_dir() {
        return Ok(());
    }
    let at = if blocker == path {
        "it is a file".to_owned()
    } else {
        format!("{} is a file", blocker.display())
    };
    Err(RuntimeError::Usage(format!(
        "{role} {}: {at}, not a directory",
        path.display()
    )))
}

/// A fresh run refuses an output directory that already holds committed
/// output (its part files would be mixed with this run's).
fn refuse_committed_output(output: &Path) -> Result<()> {
    for prefix in ["part", "dead-letter"] {
        if let Some(name) = strata_connectors::committed_parts(output, prefix, None, 0)?.first() {
            return Err(RuntimeError::Usage(
                strata_connectors::already_holds(output, name).to_string(),
            ));
        }
    }
    Ok(())
}
