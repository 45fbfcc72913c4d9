//! Where a run reads and writes: a file or Kafka topics in, a directory, a
//! Kafka topic or nothing (a discarding sink) out, and where its dead
//! letters go. Parsed and checked
//! before anything is created; opened by the wiring.

use crate::config::{BadInputPolicy, JobConfig};
use crate::error::{Result, RuntimeError};
use crate::task::dead_letter::DeadLetter;
use crate::task::sink::OutputSink;
use std::path::{Path, PathBuf};
use strata_connectors::kafka::{KafkaEndpoint, KafkaSink, KafkaSinkOptions, KafkaSourceOptions};
use strata_connectors::{FileSink, SinkState};

/// Where output (or dead letters) go.
#[derive(Debug, Clone)]
pub(crate) enum Target {
    /// JSON-lines part files in a directory.
    Dir(PathBuf),
    /// A Kafka topic; instance j's `transactional.id` is `<id_prefix>-<j>`.
    Kafka {
        brokers: String,
        topic: String,
        id_prefix: String,
    },
    /// Nowhere: records are counted and dropped.
    Discard,
}

impl Target {
    /// The output named by `--output`: a `kafka://` address of one topic, or
    /// a directory.
    pub(crate) fn output(text: &std::ffi::OsStr, job: &str, config: &JobConfig) -> Result<Self> {
        let Some(uri) = text.to_str().filter(|t| KafkaEndpoint::is_kafka(t)) else {
            return Ok(Target::Dir(PathBuf::from(text)));
        };
        let e = KafkaEndpoint::parse(uri)?;
        e.only_params(&[])?;
        let [topic] = &e.topics[..] else {
            return Err(RuntimeError::Usage(format!(
                "--output {uri}: name one topic to write"
            )));
        };
        let id_prefix = config
            .kafka
            .transactional_id_prefix
            .clone()
            .unwrap_or_else(|| format!("strata-{job}-{topic}"));
        Ok(Target::Kafka {
            brokers: e.brokers.clone(),
            topic: topic.clone(),
            id_prefix,
        })
    }

    /// The brokers, if the target is a Kafka topic.
    pub(crate) fn brokers(&self) -> Option<&str> {
        match self {
            Target::Kafka { brokers, .. } => Some(brokers),
            Target::Dir(_) | Target::Discard => None,
        }
    }

    /// The output directory, if the output is one.
    pub(crate) fn dir(&self) -> Option<&Path> {
        match self {
            Target::Dir(d) => Some(d),
            Target::Kafka { .. } | Target::Discard => None,
        }
    }

    /// Opens sink instance `j` named `name` (`part`, `dead-letter`),
    /// restoring `restored`; a Kafka sink keeps its write-ahead files in
    /// `staging`. Blocking (Kafka calls).
    fn open(
        &self,
        name: &str,
        j: u32,
        restored: Option<SinkState>,
        staging: &Path,
        config: &JobConfig,
    ) -> Result<Opened> {
        Ok(match self {
            Target::Dir(d) => Opened::File(FileSink::open(d, name, j, restored)?),
            Target::Discard => Opened::Discard,
            Target::Kafka {
                brokers,
                topic,
                id_prefix,
            } => {
                let suffix = if name == "part" {
                    j.to_string()
                } else {
                    name.to_owned()
                };
                let options = KafkaSinkOptions {
                    brokers: brokers.clone(),
                    security: config.kafka.security.security()?,
                    topic: topic.clone(),
                    transactional_id: format!("{id_prefix}-{suffix}"),
                    exactly_once: config.kafka.exactly_once,
                    staging: staging.to_owned(),
                    prefix: name.to_owned(),
                    subtask: j,
                    properties: config.kafka.sink_properties.clone(),
                };
                Opened::Kafka(Box::new(KafkaSink::open(options, restored)?))
            }
        })
    }

    /// Sink instance `j` of the output.
    pub(crate) fn open_sink(
        &self,
        j: u32,
        restored: Option<SinkState>,
        staging: &Path,
        config: &JobConfig,
    ) -> Result<OutputSink> {
        Ok(match self.open("part", j, restored, staging, config)? {
            Opened::File(f) => OutputSink::File(f),
            Opened::Kafka(k) => OutputSink::Kafka(k),
            Opened::Discard => OutputSink::Discard,
        })
    }

    /// The dead-letter output.
    pub(crate) fn open_dead_letter(
        &self,
        restored: Option<SinkState>,
        staging: &Path,
        config: &JobConfig,
    ) -> Result<DeadLetter> {
        Ok(
            match self.open("dead-letter", 0, restored, staging, config)? {
                Opened::File(f) => DeadLetter::File(f),
                Opened::Kafka(k) => DeadLetter::Kafka(k),
                Opened::Discard => unreachable!("dead_letter_target never discards"),
            },
        )
    }
}

enum Opened {
    File(FileSink),
    Kafka(Box<KafkaSink>),
    Discard,
}

/// Where dead letters go: `bad-input.dead-letter-topic` on the input's
/// brokers (else the output's), or the output directory.
///
/// Errors: dead letters are asked for, the output is a topic and no
/// dead-letter topic is named.
pub(crate) fn dead_letter_target(
    config: &JobConfig,
    input: Option<&KafkaEndpoint>,
    output: &Target,
    job: &str,
    staging: &Path,
) -> Result<Target> {
    let brokers = input
        .map(|e| e.brokers.clone())
        .or(output.brokers().map(String::from));
    match (&config.kafka.dead_letter_topic, brokers, output) {
        (Some(topic), Some(brokers), _) => Ok(Target::Kafka {
            id_prefix: config
                .kafka
                .transactional_id_prefix
                .clone()
                .unwrap_or_else(|| format!("strata-{job}-{topic}")),
            brokers,
            topic: topic.clone(),
        }),
        (Some(_), None, _) => Err(RuntimeError::Config {
            key: "bad-input.dead-letter-topic".into(),
            reason: "names a Kafka topic, but neither the input nor the output is Kafka".into(),
        }),
        (None, _, Target::Dir(d)) => Ok(Target::Dir(d.clone())),
        (None, _, Target::Kafka { .. }) if config.bad_input == BadInputPolicy::DeadLetter => {
            Err(RuntimeError::Config {
                key: "bad-input.dead-letter-topic".into(),
                reason: "bad-input.policy=dead-letter with a Kafka output needs a dead-letter topic: set bad-input.dead-letter-topic".into(),
            })
        }
        (None, _, Target::Discard) if config.bad_input == BadInputPolicy::DeadLetter => {
            Err(RuntimeError::Config {
                key: "bad-input.policy".into(),
                reason: "dead-letter with a discarding sink needs a Kafka input and bad-input.dead-letter-topic (a discarding sink has no directory to write dead letters to)".into(),
            })
        }
        // Never written (policy fail): the checkpoint directory's staging
        // area stands in.
        (None, _, Target::Kafka { .. } | Target::Discard) => Ok(Target::Dir(staging.to_owned())),
    }
}

/// The Kafka source's options from `--input` and `source.kafka.*`.
pub(crate) fn source_options(
    e: &KafkaEndpoint,
    job: &str,
    config: &JobConfig,
) -> Result<KafkaSourceOptions> {
    e.only_params(&["group", "start"])?;
    use crate::config::kafka::{kafka_start, START};
    let start = match (config.kafka.start, e.param("start")) {
        (Some(start), _) => start,
        (None, None) => Default::default(),
        (None, Some(text)) if START.contains(&text) => kafka_start(text),
        (None, Some(other)) => {
            return Err(RuntimeError::Usage(format!(
                "--input: start={other} is not one of {}",
                START.join(", ")
            )))
        }
    };
    Ok(KafkaSourceOptions {
        brokers: e.brokers.clone(),
        security: config.kafka.security.security()?,
        topics: e.topics.clone(),
        partitions: None,
        group: e
            .param("group")
            .map_or_else(|| format!("strata-{job}"), String::from),
        start,
        bounded: config.kafka.bounded,
        batch_size: config.batch_size,
        properties: config.kafka.source_properties.clone(),
        decode: None,
    })
}
