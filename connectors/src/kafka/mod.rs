//! Kafka sources and sinks on `rdkafka` (librdkafka), and the helpers the
//! `strata topic` commands use.
//!
//! * [`KafkaSource`]: reads the partitions of one or more topics from given
//!   offsets, pausing them while strata cannot take more (backpressure),
//!   with per-partition positions a checkpoint records.
//! * [`KafkaSink`]: writes records keyed by the job's key, exactly once
//!   through Kafka transactions (or at least once with an idempotent
//!   producer).
//! * [`KafkaEndpoint`]: the `kafka://host:port[,host:port]/topic[,topic]?k=v`
//!   address form of `--input` and `--output`.
//! * [`load_topic`] / [`read_topic`]: a file into a topic, a topic into JSON lines.
//!
//! Message keys are the job's key bytes ([`encode_key`]): for a key of
//! several columns their `strata_key` encoding, for one column its
//! text. So equal keys land in one
//! partition (Kafka's default partitioner hashes the key), and the source
//! can check that a message's key is the key its fields give.

mod fetched;
mod group;
mod partitioner;
mod produce;
mod publish;
mod reader;
mod security;
mod sink;
mod source;
mod topic;

pub use fetched::{Fetched, PartitionOffset, Polled, RowDecoder, SourceStats};
pub use group::{
    describe_group, group_topics, Commit, Committed, GroupInfo, GroupMember, GroupOptions,
    MemberInfo, RebalanceListener,
};
pub use partitioner::Partitioner;
pub use produce::OutRecord;
pub use security::KafkaSecurity;
pub use sink::{KafkaSink, KafkaSinkOptions};
pub use source::{KafkaSource, KafkaSourceOptions, KafkaStart};
pub use topic::{load_topic, read_topic, LoadOptions, LoadReport, ReadOptions};

use crate::error::{ConnectorError, Result};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::TopicPartitionList;
use std::time::Duration;
use strata_key as composite_key;

/// How long a metadata, watermark or admin call may take before it fails.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(30);

/// A parsed `kafka://` address: `kafka://127.0.0.1:9092/flights?group=g`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KafkaEndpoint {
    /// `bootstrap.servers`: comma-separated `host:port`.
    pub brokers: String,
    /// One or more topics.
    pub topics: Vec<String>,
    /// Query parameters, in order.
    pub params: Vec<(String, String)>,
}

impl KafkaEndpoint {
    /// Whether `text` is a `kafka://` address (rather than a path).
    pub fn is_kafka(text: &str) -> bool {
        text.starts_with("kafka://")
    }

    /// Parses `kafka://host:port[,host:port]/topic[,topic][?k=v&k=v]`.
    ///
    /// Errors: [`ConnectorError::KafkaUsage`] naming what is missing
    /// (brokers, a port, a topic) or malformed.
    pub fn parse(text: &str) -> Result<Self> {
        let bad = |why: &str| {
            ConnectorError::KafkaUsage(format!(
                "{text}: {why} (expected kafka://host:port[,host:port]/topic[,topic][?group=G&start=earliest|latest])"
            ))
        };
        let rest = text
            .strip_prefix("kafka://")
            .ok_or_else(|| bad("not a kafka:// address"))?;
        let (address, query) = rest.split_once('?').unwrap_or((rest, ""));
        let (brokers, topics) = address
            .split_once('/')
            .ok_or_else(|| bad("no topic after the brokers"))?;
        if brokers.is_empty() {
            return Err(bad("no broker"));
        }
        for b in brokers.split(',') {
            let port = b.rsplit_once(':').map(|(_, p)| p);
            if port.and_then(|p| p.parse::<u16>().ok()).is_none() {
                return Err(bad(&format!("broker '{b}' has no port")));
            }
        }
        let topics: Vec<String> = topics
            .split(',')
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .map(String::from)
            .collect();
        if topics.is_empty() {
            return Err(bad("no topic"));
        }
        if let Some(t) = topics.iter().find(|t| !valid_topic(t)) {
            return Err(bad(&format!(
                "'{t}' is not a topic name (letters, digits, '.', '_', '-'; at most 249)"
            )));
        }
        let mut params = Vec::new();
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (k, v) = pair
                .split_once('=')
                .ok_or_else(|| bad(&format!("parameter '{pair}' is not key=value")))?;
            params.push((k.to_owned(), v.to_owned()));
        }
        Ok(Self {
            brokers: brokers.to_owned(),
            topics,
            params,
        })
    }

    /// The value of query parameter `key`, if given.
    pub fn param(&self, key: &str) -> Option<&str> {
        self.params
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// Refuses parameters other than `allowed`, naming them.
    pub fn only_params(&self, allowed: &[&str]) -> Result<()> {
        match self
            .params
            .iter()
            .find(|(k, _)| !allowed.contains(&k.as_str()))
        {
            None => Ok(()),
            Some((k, _)) => Err(ConnectorError::KafkaUsage(format!(
                "kafka://{}/{}: unknown parameter '{k}' (known: {})",
                self.brokers,
                self.topics.join(","),
                allowed.join(", ")
            ))),
        }
    }
}

/// Kafka's rule for topic names.
fn valid_topic(t: &str) -> bool {
    !t.is_empty()
        && t.len() <= 249
        && t != "."
        && t != ".."
        && t.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
}

/// A librdkafka configuration: `bootstrap.servers`, the `security`
/// settings, strata's defaults, then the user's `properties` (which win).
pub(crate) fn client_config(
    brokers: &str,
    security: &KafkaSecurity,
    defaults: &[(&str, &str)],
    properties: &[(String, String)],
) -> ClientConfig {
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", brokers);
    c.set("log_level", "3");
    security.apply(&mut c);
    for (k, v) in defaults {
        c.set(*k, *v);
    }
    for (k, v) in properties {
        c.set(k, v);
    }
    c
}

/// The partitions of `topic`, in order. Errors name a missing topic.
pub(crate) fn partitions_of<C: rdkafka::consumer::ConsumerContext>(
    consumer: &BaseConsumer<C>,
    topic: &str,
) -> Result<Vec<i32>> {
    let metadata = consumer
        .fetch_metadata(Some(topic), CALL_TIMEOUT)
        .map_err(ConnectorError::kafka(format!("metadata of topic {topic}")))?;
    let Some(t) = metadata.topics().iter().find(|t| t.name() == topic) else {
        return Err(missing_topic(topic));
    };
    if t.error().is_some() || t.partitions().is_empty() {
        return Err(missing_topic(topic));
    }
    let mut ids: Vec<i32> = t.partitions().iter().map(|p| p.id()).collect();
    ids.sort_unstable();
    Ok(ids)
}

fn missing_topic(topic: &str) -> ConnectorError {
    ConnectorError::KafkaUsage(format!(
        "topic {topic} does not exist (create it, e.g. with strata topic load ... --topic {topic} --partitions N)"
    ))
}

/// How many partitions `topic` has.
///
/// Errors: the topic does not exist, the brokers cannot be reached within 30 s.
pub fn partition_count(brokers: &str, security: &KafkaSecurity, topic: &str) -> Result<usize> {
    let consumer: BaseConsumer = client_config(brokers, security, &[], &[])
        .create()
        .map_err(ConnectorError::kafka("create a consumer"))?;
    Ok(partitions_of(&consumer, topic)?.len())
}

/// The key of `parts` as strata keys messages: one part as it is, several
/// as a [`composite_key`] (so a route's message key is its state key).
pub fn encode_key(parts: &[&[u8]]) -> Vec<u8> {
    match parts {
        [one] => one.to_vec(),
        _ => composite_key::encode(parts),
    }
}

/// A message key as JSON: the text of a one-part key, an array of texts
/// for a composite key of UTF-8 parts, else a hex string `0x…`.
pub fn key_to_json(key: &[u8]) -> serde_json::Value {
    if let Some(parts) = composite_key::decode(key).filter(|p| p.len() >= 2) {
        if let Ok(texts) = parts
            .into_iter()
            .map(|p| std::str::from_utf8(p).map(String::from))
            .collect::<std::result::Result<Vec<_>, _>>()
        {
            return serde_json::Value::from(texts);
        }
    }
    match std::str::from_utf8(key) {
        Ok(text) => serde_json::Value::from(text),
        Err(_) => serde_json::Value::from(format!("0x{}", hex(key))),
    }
}

/// Sends `record`, waiting while the producer's queue is full.
pub(crate) fn send_waiting<C>(
    producer: &rdkafka::producer::ThreadedProducer<C>,
    topic: &str,
    mut record: rdkafka::producer::BaseRecord<'_, [u8], [u8]>,
) -> Result<()>
where
    C: rdkafka::producer::ProducerContext<DeliveryOpaque = ()> + 'static,
{
    use rdkafka::error::KafkaError;
    use rdkafka::types::RDKafkaErrorCode;
    loop {
        match producer.send(record) {
            Ok(()) => return Ok(()),
            Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), back)) => {
                record = back;
                std::thread::sleep(Duration::from_millis(5));
            }
            Err((e, _)) => return Err(ConnectorError::kafka(format!("send to {topic}"))(e)),
        }
    }
}

/// A consumer of `group` that only reads what the group committed (it
/// never joins nor commits).
pub(crate) fn group_reader(
    brokers: &str,
    security: &KafkaSecurity,
    group: &str,
) -> Result<BaseConsumer> {
    client_config(
        brokers,
        security,
        &[("group.id", group), ("enable.auto.commit", "false")],
        &[],
    )
    .create()
    .map_err(ConnectorError::kafka("create a consumer"))
}

/// Lower-case hex of `bytes`.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Lag of consumer group `group` on `topic`: per partition, the end
/// offset minus the group's committed offset (the whole partition when the
/// group committed nothing). What `kafka-consumer-groups --describe` shows.
pub fn group_lag(
    brokers: &str,
    security: &KafkaSecurity,
    group: &str,
    topic: &str,
) -> Result<Vec<(i32, i64)>> {
    let consumer = group_reader(brokers, security, group)?;
    let partitions = partitions_of(&consumer, topic)?;
    let mut tpl = TopicPartitionList::new();
    for p in &partitions {
        tpl.add_partition(topic, *p);
    }
    let committed =
        consumer
            .committed_offsets(tpl, CALL_TIMEOUT)
            .map_err(ConnectorError::kafka(format!(
                "committed offsets of group {group}"
            )))?;
    let mut lag = Vec::new();
    for p in partitions {
        let (low, high) = consumer
            .fetch_watermarks(topic, p, CALL_TIMEOUT)
            .map_err(ConnectorError::kafka(format!("end offsets of {topic}")))?;
        let at = committed
            .find_partition(topic, p)
            .and_then(|e| e.offset().to_raw())
            .filter(|o| *o >= 0)
            .unwrap_or(low);
        lag.push((p, (high - at).max(0)));
    }
    Ok(lag)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_parse_and_bad_ones_name_the_fault() {
        let e =
            KafkaEndpoint::parse("kafka://127.0.0.1:9092,h:1/a,b?group=g&start=latest").unwrap();
        assert_eq!(e.brokers, "127.0.0.1:9092,h:1");
        assert_eq!(e.topics, ["a", "b"]);
        assert_eq!(
            (e.param("group"), e.param("start")),
            (Some("g"), Some("latest"))
        );
        for (text, named) in [
            ("kafka://127.0.0.1:9092", "no topic"),
            ("kafka:///t", "no broker"),
            ("kafka://host/t", "no port"),
            ("kafka://h:1/bad topic", "not a topic name"),
            ("kafka://h:1/t?group", "not key=value"),
        ] {
            let err = KafkaEndpoint::parse(text).unwrap_err().to_string();
            assert!(err.contains(named), "{text}: {err}");
        }
    }

    #[test]
    fn keys_of_several_parts_read_back_as_arrays() {
        let k = encode_key(&[b"LAS", b"PHL"]);
        assert_eq!(key_to_json(&k), serde_json::json!(["LAS", "PHL"]));
        assert_eq!(
            key_to_json(&encode_key(&[b"u-17"])),
            serde_json::json!("u-17")
        );
        assert_eq!(key_to_json(&[0xff, 0x00]), serde_json::json!("0xff00"));
    }
}
