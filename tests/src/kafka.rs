//! The real Kafka the Kafka tests run against (`scripts/kafka.sh start`;
//! `scripts/test.sh` starts it): where it is, a check that fails the test
//! when it is not there (never a quiet skip), and helpers to fill topics
//! and read what strata committed.

use crate::{strata, Line};
use rdkafka::config::ClientConfig;
use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};
use std::path::Path;
use std::time::Duration;

/// `127.0.0.1:<STRATA_KAFKA_PORT or 9092>`.
pub fn brokers() -> String {
    let port = std::env::var("STRATA_KAFKA_PORT").unwrap_or_else(|_| "9092".into());
    format!("127.0.0.1:{port}")
}

/// Panics (fails the test) unless a broker answers: the tests need the real
/// Kafka that `scripts/kafka.sh start` runs.
pub fn require_kafka() -> String {
    let b = brokers();
    let addr: std::net::SocketAddr = b.parse().expect("broker address");
    if std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(5)).is_err() {
        panic!("no Kafka broker answers on {b}: start one with scripts/kafka.sh start (scripts/test.sh does)");
    }
    b
}

/// A topic name no other test run uses.
pub fn unique_topic(tag: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("t-{tag}-{}-{}", std::process::id(), nanos % 1_000_000_000)
}

/// `kafka://<brokers>/<topic>`.
pub fn uri(topic: &str) -> String {
    format!("kafka://{}/{topic}", brokers())
}

/// Loads `file` into a new `topic` of `partitions` partitions keyed by
/// route, with `strata topic load`.
pub fn load_flights(file: &Path, topic: &str, partitions: u32) {
    let o = strata(&[
        "topic",
        "load",
        &file.display().to_string(),
        "--brokers",
        &brokers(),
        "--topic",
        topic,
        "--key",
        "origin,destination",
        "--partitions",
        &partitions.to_string(),
    ]);
    assert!(
        o.status.success(),
        "topic load: {}",
        String::from_utf8_lossy(&o.stderr)
    );
}

/// Every record of `topic` as `strata topic read` prints it (JSON values),
/// with `--read-committed` when `committed`.
pub fn read_records(topic: &str, committed: bool) -> Vec<serde_json::Value> {
    let mut args = vec!["topic", "read", "--brokers"];
    let b = brokers();
    args.extend([b.as_str(), "--topic", topic]);
    if committed {
        args.push("--read-committed");
    }
    let o = strata(&args);
    assert!(
        o.status.success(),
        "topic read: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect()
}

/// route-history's committed output in `topic`, sorted, each record's key
/// checked against its route.
pub fn read_route_history(topic: &str) -> Vec<Line> {
    let mut lines: Vec<Line> = read_records(topic, true)
        .into_iter()
        .map(|r| {
            let line = Line::from_json(&r["value"]);
            assert_eq!(
                r["key"],
                serde_json::json!([line.origin, line.destination]),
                "record keyed by its route"
            );
            line
        })
        .collect();
    lines.sort();
    lines
}

/// A producer for hand-made messages (`send(key, value)`; flushed on drop).
pub struct RawProducer(ThreadedProducer<DefaultProducerContext>);

impl RawProducer {
    /// A producer to the test broker ([`brokers`]).
    pub fn new() -> Self {
        let p = ClientConfig::new()
            .set("bootstrap.servers", brokers())
            .create()
            .expect("a producer");
        Self(p)
    }

    /// Sends one message to partition 0 of `topic`.
    pub fn send(&self, topic: &str, key: Option<&[u8]>, value: Option<&[u8]>) {
        let mut r: BaseRecord<'_, [u8], [u8]> = BaseRecord::to(topic).partition(0);
        if let Some(k) = key {
            r = r.key(k);
        }
        if let Some(v) = value {
            r = r.payload(v);
        }
        self.0.send(r).map_err(|(e, _)| e).expect("send");
    }

    /// Sends one message to `topic`, partitioned by its key.
    pub fn send_keyed(&self, topic: &str, key: &[u8], value: &[u8]) {
        let mut r: BaseRecord<'_, [u8], [u8]> = BaseRecord::to(topic).key(key).payload(value);
        loop {
            match self.0.send(r) {
                Ok(()) => return,
                Err((_, back)) => {
                    r = back;
                    std::thread::sleep(Duration::from_millis(5));
                }
            }
        }
    }

    /// Waits until every message sent so far is delivered.
    pub fn flush(&self) {
        self.0.flush(Duration::from_secs(30)).expect("flush");
    }
}

impl Default for RawProducer {
    fn default() -> Self {
        Self::new()
    }
}

/// Resident memory of process `pid`, bytes.
pub fn rss_bytes(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kb: u64 = status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()?;
    Some(kb * 1024)
}

/// `strata run route-history` from topic `input` to topic `output` with
/// checkpoints in `chk`, bounded (it stops at the input's end offsets),
/// then `extra`.
pub fn run_command(input: &str, output: &str, chk: &Path, extra: &[&str]) -> std::process::Command {
    let mut cmd = std::process::Command::new(crate::strata_bin());
    cmd.args([
        "run",
        "route-history",
        "--input",
        &uri(input),
        "--output",
        &uri(output),
    ])
    .arg("--checkpoint-dir")
    .arg(chk)
    .args(["-D", "source.kafka.bounded=true"])
    .args(extra);
    cmd
}

/// The offsets consumer group `group` committed on `topic`, summed over
/// its partitions (a partition without one counts 0): on a topic filled
/// from offset 0, the records a job's completed checkpoints hold.
pub fn committed_total(group: &str, topic: &str) -> i64 {
    use rdkafka::consumer::{BaseConsumer, Consumer};
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", brokers())
        .set("group.id", group)
        .create()
        .expect("a consumer");
    let timeout = Duration::from_secs(30);
    let metadata = consumer
        .fetch_metadata(Some(topic), timeout)
        .expect("the topic's metadata");
    let mut tpl = rdkafka::TopicPartitionList::new();
    for p in metadata.topics()[0].partitions() {
        tpl.add_partition(topic, p.id());
    }
    let committed = consumer
        .committed_offsets(tpl, timeout)
        .expect("the committed offsets");
    committed
        .elements()
        .iter()
        .filter_map(|e| match e.offset() {
            rdkafka::Offset::Offset(o) => Some(o),
            _ => None,
        })
        .sum()
}
