//! `kafka-latency <input-topic> <output-topic> <records>`: the end-to-end
//! latency of a route-history run, as a reader of its output sees it.
//!
//! Start it before the job. It reads `<output-topic>` with
//! `isolation.level=read_committed` (a record shows once its transaction
//! committed) until `<records>` records came, noting when each arrived;
//! then it reads `<input-topic>` and matches each output record to the
//! input message of the same flight (route, date, delay; equal flights in
//! order). A record's latency is its arrival minus that message's
//! timestamp, which is when it was produced (`strata topic load --rate`).
//! Prints `latency_ms p50=… p99=… max=… records=…`. The job is left to the
//! caller; the same reader serves strata and the Kafka Streams peer.

use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::{Offset, TopicPartitionList};
use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

type Flight = (String, String, String, i64);

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let [_, input, output, records] = &args[..] else {
        eprintln!("usage: kafka-latency <input-topic> <output-topic> <records>");
        std::process::exit(2);
    };
    let records: usize = records.parse().expect("records: a count");
    let arrived = read(output, true, Some(records), Duration::from_secs(900));
    if arrived.len() < records {
        eprintln!(
            "kafka-latency: only {} of {records} output records arrived within 900 s",
            arrived.len()
        );
        std::process::exit(1);
    }
    let mut produced: HashMap<Flight, VecDeque<i64>> = HashMap::new();
    for (flight, ts) in read(input, false, None, Duration::from_secs(300)) {
        produced.entry(flight).or_default().push_back(ts);
    }
    let mut latencies: Vec<i64> = arrived
        .into_iter()
        .map(|(flight, at)| {
            let sent = produced
                .get_mut(&flight)
                .and_then(VecDeque::pop_front)
                .unwrap_or_else(|| panic!("output {flight:?} matches no input message"));
            at - sent
        })
        .collect();
    latencies.sort_unstable();
    let pct = |p: f64| latencies[((latencies.len() - 1) as f64 * p).round() as usize];
    println!(
        "latency_ms p50={} p99={} max={} records={}",
        pct(0.5),
        pct(0.99),
        latencies.last().copied().unwrap_or(0),
        latencies.len()
    );
}

/// Reads `topic` from the beginning: each record's flight, with its arrival
/// (ms since the epoch) when `arrival`, else its message timestamp; until
/// `want` records came, or (without `want`) to the end of every partition.
fn read(topic: &str, arrival: bool, want: Option<usize>, limit: Duration) -> Vec<(Flight, i64)> {
    let isolation = if arrival {
        "read_committed"
    } else {
        "read_uncommitted"
    };
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", strata_tests::kafka::brokers())
        .set("group.id", format!("kafka-latency-{}", std::process::id()))
        .set("enable.auto.commit", "false")
        .set("enable.partition.eof", "true")
        .set("isolation.level", isolation)
        .set("fetch.wait.max.ms", "10")
        .create()
        .expect("a consumer");
    let started = Instant::now();
    let partitions = loop {
        let metadata = consumer
            .fetch_metadata(Some(topic), Duration::from_secs(10))
            .expect("topic metadata");
        let n = metadata
            .topics()
            .first()
            .map_or(0, |t| t.partitions().len());
        if n > 0 {
            break n;
        }
        assert!(started.elapsed() < limit, "topic {topic} never appeared");
        std::thread::sleep(Duration::from_millis(100));
    };
    let mut tpl = TopicPartitionList::new();
    for p in 0..partitions {
        tpl.add_partition_offset(topic, p as i32, Offset::Beginning)
            .expect("assign");
    }
    consumer.assign(&tpl).expect("assign");
    let (mut got, mut at_end) = (Vec::new(), 0);
    while want.is_none_or(|w| got.len() < w) && started.elapsed() < limit {
        match consumer.poll(Duration::from_millis(100)) {
            Some(Ok(m)) => {
                let v: serde_json::Value =
                    serde_json::from_slice(m.payload().unwrap_or_default()).expect("JSON value");
                let flight = (
                    v["origin"].as_str().expect("origin").to_owned(),
                    v["destination"].as_str().expect("destination").to_owned(),
                    v["date"].as_str().expect("date").to_owned(),
                    v["delay"].as_i64().expect("delay"),
                );
                let when = if arrival {
                    SystemTime::now()
                        .duration_since(UNIX_EPOCH)
                        .unwrap()
                        .as_millis() as i64
                } else {
                    m.timestamp().to_millis().expect("a message timestamp")
                };
                got.push((flight, when));
            }
            Some(Err(rdkafka::error::KafkaError::PartitionEOF(_))) if want.is_none() => {
                at_end += 1;
                if at_end >= partitions {
                    break;
                }
            }
            _ => {}
        }
    }
    got
}
