//! What a Kafka sink produces: its records ([`OutRecord`]), sending one
//! (waiting while the producer's queue is full), and the deliveries'
//! outcome, whose first failure fails the next barrier.

use crate::error::{ConnectorError, Result};
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{BaseRecord, DeliveryResult, ProducerContext, ThreadedProducer};
use rdkafka::ClientContext;
use std::sync::{Arc, Mutex};

/// Remembers the first failed delivery, which fails the next barrier.
#[derive(Clone, Default)]
pub(super) struct Deliveries {
    failed: Arc<Mutex<Option<String>>>,
}

impl ClientContext for Deliveries {}

impl ProducerContext for Deliveries {
    type DeliveryOpaque = ();
    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        if let Err((e, _)) = result {
            let mut failed = self.failed.lock().unwrap_or_else(|p| p.into_inner());
            failed.get_or_insert_with(|| e.to_string());
        }
    }
}

/// One record as the sink writes it.
pub struct OutRecord<'a> {
    /// Message key.
    pub key: &'a [u8],
    /// Message timestamp, ms since the epoch; `None`: the time it is
    /// produced. (An event time from history would let the topic's
    /// time-based retention delete the output at once.)
    pub timestamp: Option<i64>,
    /// Message value.
    pub value: &'a [u8],
    /// Message headers.
    pub headers: &'a [(&'a str, &'a [u8])],
}

impl Deliveries {
    pub(super) fn check(&self, topic: &str) -> Result<()> {
        let failed = self.failed.lock().unwrap_or_else(|p| p.into_inner());
        match failed.as_ref() {
            None => Ok(()),
            Some(reason) => Err(ConnectorError::Kafka {
                what: format!("deliver to {topic}"),
                reason: reason.clone(),
            }),
        }
    }
}

/// Sends one record, waiting while the producer's queue is full.
pub(super) fn send(
    producer: &ThreadedProducer<Deliveries>,
    topic: &str,
    r: &OutRecord<'_>,
) -> Result<()> {
    let mut record = BaseRecord::to(topic).key(r.key).payload(r.value);
    if !r.headers.is_empty() {
        let mut headers = OwnedHeaders::new_with_capacity(r.headers.len());
        for (k, v) in r.headers {
            headers = headers.insert(Header {
                key: k,
                value: Some(*v),
            });
        }
        record = record.headers(headers);
    }
    if let Some(ts) = r.timestamp {
        record = record.timestamp(ts);
    }
    super::send_waiting(producer, topic, record)
}
