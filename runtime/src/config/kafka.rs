//! The `source.kafka.*`, `sink.kafka.*` and `bad-input.dead-letter-topic`
//! keys. Keys strata knows are listed below; any other key under
//! `source.kafka.` or `sink.kafka.` is handed to librdkafka as it is
//! (`-D source.kafka.fetch.min.bytes=65536`), which refuses unknown ones
//! when the job starts.
//!
//! | key | default | allowed | meaning |
//! |---|---|---|---|
//! | `source.kafka.start` | `earliest` | `earliest`, `latest`, `committed` | where a fresh run starts (also `?start=` in the address); `committed`: the group's committed offsets, as the job strata takes over from left them |
//! | `source.kafka.bounded` | `false` | `true`, `false` | stop at the end offsets seen at start, take a final checkpoint and exit |
//! | `source.kafka.timestamp` | `column` | `column`, `record` | event time from the job's time column, or the message timestamp |
//! | `source.kafka.require-key` | `true` | `true`, `false` | a message must be keyed by the job's key (else it is a bad record) |
//! | `source.kafka.max-message-bytes` | `1MiB` | 1KB–1GB | a larger value is a bad record |
//! | `source.kafka.format` | `json` | `json`, `csv` | a message value is a JSON object (fields by name), or one CSV record without a header |
//! | `source.kafka.csv-columns` | the job's columns, in order | column names, comma-separated | `csv`: the names of the record's cells, in order (cells of other names are ignored) |
//! | `sink.kafka.delivery` | `exactly-once` | `exactly-once`, `at-least-once` | transactions, or an idempotent producer |
//! | `sink.kafka.transactional-id-prefix` | `strata-<job>-<topic>` | text | the sink's `transactional.id` is `<prefix>-<instance>` |
//! | `bad-input.dead-letter-topic` | absent | topic name | dead letters go to this topic (on the input's brokers, or the output's) |

use super::kafka_security::KafkaSecuritySettings;
use super::{bad, flag, size, text};
use crate::error::Result;

/// Kafka settings of a job.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct KafkaSettings {
    /// `source.kafka.start`; `None`: the address's `?start=`, else earliest.
    pub start: Option<strata_connectors::kafka::KafkaStart>,
    /// `source.kafka.bounded`.
    pub bounded: bool,
    /// `source.kafka.timestamp=record`.
    pub record_time: bool,
    /// `source.kafka.require-key`.
    pub require_key: bool,
    /// `source.kafka.max-message-bytes`.
    pub max_message_bytes: u64,
    /// `source.kafka.format=csv`.
    pub csv: bool,
    /// `source.kafka.csv-columns`.
    pub csv_columns: Option<Vec<String>>,
    /// Other `source.kafka.*` keys, for librdkafka.
    pub source_properties: Vec<(String, String)>,
    /// `sink.kafka.delivery=exactly-once`.
    pub exactly_once: bool,
    /// `sink.kafka.transactional-id-prefix`.
    pub transactional_id_prefix: Option<String>,
    /// Other `sink.kafka.*` keys, for librdkafka.
    pub sink_properties: Vec<(String, String)>,
    /// `bad-input.dead-letter-topic`.
    pub dead_letter_topic: Option<String>,
    /// The `kafka.*` keys: TLS and SASL for every client.
    pub security: KafkaSecuritySettings,
}

impl Default for KafkaSettings {
    fn default() -> Self {
        Self {
            start: None,
            bounded: false,
            record_time: false,
            require_key: true,
            max_message_bytes: 1 << 20,
            csv: false,
            csv_columns: None,
            source_properties: Vec::new(),
            exactly_once: true,
            transactional_id_prefix: None,
            sink_properties: Vec::new(),
            dead_letter_topic: None,
            security: KafkaSecuritySettings::default(),
        }
    }
}

fn one_of<'a>(key: &str, v: &toml::Value, allowed: &[&'a str]) -> Result<&'a str> {
    let t = text(key, v)?;
    allowed
        .iter()
        .find(|a| **a == t.trim())
        .copied()
        .ok_or_else(|| bad(key, format!("'{t}' is not one of: {}", allowed.join(", "))))
}

impl KafkaSettings {
    /// Sets `key` (one of this module's keys); `false` if it is not one.
    pub(super) fn set(&mut self, key: &str, v: &toml::Value) -> Result<bool> {
        if self.security.set(key, v)? {
            return Ok(true);
        }
        match key {
            "source.kafka.start" => {
                self.start = Some(kafka_start(one_of(key, v, START)?));
            }
            "source.kafka.bounded" => self.bounded = flag(key, v)?,
            "source.kafka.timestamp" => {
                self.record_time = one_of(key, v, &["column", "record"])? == "record"
            }
            "source.kafka.require-key" => self.require_key = flag(key, v)?,
            "source.kafka.max-message-bytes" => {
                self.max_message_bytes = size(key, v, 1_000..=1_000_000_000)?
            }
            "source.kafka.format" => self.csv = one_of(key, v, &["json", "csv"])? == "csv",
            "source.kafka.csv-columns" => {
                let names: Vec<String> = text(key, v)?
                    .split(',')
                    .map(|n| n.trim().to_owned())
                    .collect();
                if names.iter().any(String::is_empty) {
                    return Err(bad(key, "an empty column name"));
                }
                self.csv_columns = Some(names)
            }
            "sink.kafka.delivery" => {
                self.exactly_once =
                    one_of(key, v, &["exactly-once", "at-least-once"])? == "exactly-once"
            }
            "sink.kafka.transactional-id-prefix" => {
                let t = text(key, v)?.trim().to_owned();
                if t.is_empty() {
                    return Err(bad(key, "must not be empty"));
                }
                self.transactional_id_prefix = Some(t)
            }
            "bad-input.dead-letter-topic" => {
                strata_connectors::kafka::KafkaEndpoint::parse(&format!(
                    "kafka://h:1/{}",
                    text(key, v)?.trim()
                ))
                .map_err(|_| bad(key, "is not a topic name (letters, digits, '.', '_', '-')"))?;
                self.dead_letter_topic = Some(text(key, v)?.trim().to_owned())
            }
            k => {
                let (list, property) = if let Some(p) = k.strip_prefix("source.kafka.") {
                    (&mut self.source_properties, p)
                } else if let Some(p) = k.strip_prefix("sink.kafka.") {
                    (&mut self.sink_properties, p)
                } else {
                    return Ok(false);
                };
                let lower = property.to_ascii_lowercase();
                if ["security.", "sasl.", "ssl."]
                    .iter()
                    .any(|p| lower.starts_with(p))
                {
                    return Err(bad(key, format!("TLS and SASL settings apply to every Kafka client strata opens: set kafka.{} instead (see \"Connecting to secured clusters\" in docs/operations.md)", property_hint(&lower))));
                }
                for reserved in [
                    "bootstrap.servers",
                    "group.id",
                    "transactional.id",
                    "enable.auto.commit",
                    "enable.auto.offset.store",
                    "auto.offset.reset",
                ] {
                    if property == reserved {
                        return Err(bad(key, format!("strata sets {reserved} itself (brokers and group come from the kafka:// address)")));
                    }
                }
                list.push((property.to_owned(), text(key, v)?));
            }
        }
        Ok(true)
    }
}

/// The `kafka.*` key that stands for librdkafka property `p`.
fn property_hint(p: &str) -> &'static str {
    match p {
        "security.protocol" => "security.protocol",
        "sasl.mechanism" | "sasl.mechanisms" => "sasl.mechanism",
        "sasl.username" => "sasl.username",
        "sasl.password" => "sasl.username (the password in STRATA_KAFKA_PASSWORD)",
        "ssl.ca.location" => "ssl.ca",
        "ssl.certificate.location" => "ssl.certificate",
        "ssl.key.location" => "ssl.key",
        "ssl.endpoint.identification.algorithm" => "ssl.verify-hostname",
        _ => "* (security.protocol, sasl.mechanism, sasl.username, ssl.ca, ssl.certificate, ssl.key, ssl.verify-hostname)",
    }
}

/// The values of `source.kafka.start` and `?start=`.
pub(crate) const START: &[&str] = &["earliest", "latest", "committed"];

/// The start of one of [`START`]'s values (earliest for any other).
pub(crate) fn kafka_start(text: &str) -> strata_connectors::kafka::KafkaStart {
    use strata_connectors::kafka::KafkaStart;
    match text {
        "latest" => KafkaStart::Latest,
        "committed" => KafkaStart::Committed,
        _ => KafkaStart::Earliest,
    }
}
