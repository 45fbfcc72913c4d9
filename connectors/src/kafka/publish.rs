//! The exactly-once Kafka sink's publisher: a thread of its own that sends
//! each committed epoch's write-ahead file to Kafka in one transaction, so
//! that the sink task goes on writing the next epoch meanwhile.
//!
//! Before issue 25 the sink task published an epoch itself when its
//! checkpoint completed, and the whole job stood still for as long as the
//! transaction took (a Kafka → Kafka run kept 1.2 of the 2 cores busy).
//! Epochs stay in order: one thread, one transaction at a time, files by
//! number (parsed, not by name: `…-1000000` sorts before `…-999999`). At
//! most [`MAX_BEHIND`] commits wait for the publisher; past that the sink
//! task waits too, so a Kafka slower than the job slows the job (as it did
//! before) instead of piling up epochs on disk. A failure (a fenced producer, a transaction that failed five
//! times, a write-ahead file that cannot be read) stops the thread; the
//! sink returns that error at its next call, so the job fails visibly.
//!
//! The write-ahead line ([`encode_wal_line`]) holds the value's bytes as
//! the sink task serialised them; publishing reads them back into a reused
//! buffer and hands librdkafka slices of it (no second serialisation).

use super::produce::{send, Deliveries, OutRecord};
use super::{hex, CALL_TIMEOUT};
use crate::error::{ConnectorError, Result};
use crate::file_sink::committed_parts;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::producer::{Producer, ThreadedProducer};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::{Offset, TopicPartitionList};
use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

/// Transaction calls wait this long (a broker down for a while is waited for).
pub(super) const TXN_TIMEOUT: Duration = Duration::from_secs(60);

/// What the publisher needs to find and send an instance's epochs.
pub(super) struct Publisher {
    pub(super) producer: ThreadedProducer<Deliveries>,
    /// Reads (and, in each transaction, moves) the commit marker.
    pub(super) marker: BaseConsumer,
    pub(super) topic: String,
    pub(super) transactional_id: String,
    pub(super) staging: PathBuf,
    pub(super) prefix: String,
    pub(super) subtask: u32,
    /// Epoch files Kafka holds (the marker's value).
    pub(super) published: u64,
}

/// Commits that may wait for the publisher before the sink task waits.
const MAX_BEHIND: usize = 2;

/// The sink task's side of a running [`Publisher`].
pub(super) struct Publishing {
    requests: mpsc::SyncSender<Request>,
    failed: Arc<Failed>,
}

enum Request {
    /// Publish what is staged.
    Publish,
    /// Publish what is staged, then answer.
    Finish(mpsc::SyncSender<()>),
}

/// The publisher's first error, handed to the sink once.
#[derive(Default)]
struct Failed {
    set: AtomicBool,
    error: Mutex<Option<ConnectorError>>,
}

impl Publishing {
    /// Starts `publisher` on a thread of its own.
    ///
    /// Errors: the thread cannot be started.
    pub(super) fn start(mut publisher: Publisher) -> Result<Self> {
        let (requests, rx) = mpsc::sync_channel(MAX_BEHIND);
        let failed = Arc::new(Failed::default());
        let report = failed.clone();
        std::thread::Builder::new()
            .name("kafka-publish".into())
            .spawn(move || {
                for request in rx {
                    let result = publisher.publish_staged();
                    if let Err(e) = result {
                        *report.error.lock().unwrap_or_else(|p| p.into_inner()) = Some(e);
                        report.set.store(true, Ordering::Release);
                        return;
                    }
                    if let Request::Finish(done) = request {
                        let _ = done.send(());
                    }
                }
            })
            .map_err(|e| ConnectorError::Kafka {
                what: "start the publisher thread".into(),
                reason: e.to_string(),
            })?;
        Ok(Self { requests, failed })
    }

    /// The publisher's error, if it stopped on one (once; later calls get a
    /// reminder that it stopped).
    pub(super) fn check(&self) -> Result<()> {
        if !self.failed.set.load(Ordering::Acquire) {
            return Ok(());
        }
        let taken = self
            .failed
            .error
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        Err(taken.unwrap_or_else(|| ConnectorError::Kafka {
            what: "publish committed epochs".into(),
            reason: "the publisher stopped after the error reported before".into(),
        }))
    }

    /// Asks for what is staged to be published (returns at once, unless
    /// [`MAX_BEHIND`] requests wait already).
    pub(super) fn request(&self) -> Result<()> {
        self.check()?;
        self.requests
            .send(Request::Publish)
            .map_err(|_| self.stopped())
    }

    /// Publishes what is staged and waits until Kafka holds it.
    pub(super) fn finish(&self) -> Result<()> {
        self.check()?;
        let (done, wait) = mpsc::sync_channel(1);
        self.requests
            .send(Request::Finish(done))
            .map_err(|_| self.stopped())?;
        wait.recv().map_err(|_| self.stopped())
    }

    fn stopped(&self) -> ConnectorError {
        self.check().err().unwrap_or_else(|| ConnectorError::Kafka {
            what: "publish committed epochs".into(),
            reason: "the publisher thread ended".into(),
        })
    }
}

impl Publisher {
    /// Publishes the staged files from number `published` on, each in one
    /// transaction with its marker, deleting each once committed (and
    /// those below `published`, which Kafka holds already).
    pub(super) fn publish_staged(&mut self) -> Result<()> {
        for (seq, path) in self.staged(0)? {
            if seq >= self.published {
                self.publish_file(seq, &path)?;
                self.published = seq + 1;
            }
            std::fs::remove_file(&path).map_err(ConnectorError::io(&path))?;
        }
        Ok(())
    }

    /// Staged (committed, not yet published) files numbered `from` or
    /// above, by number.
    pub(super) fn staged(&self, from: u64) -> Result<Vec<(u64, PathBuf)>> {
        let names = committed_parts(&self.staging, &self.prefix, Some(self.subtask), from)?;
        Ok(by_number(names, &self.staging))
    }

    fn publish_file(&mut self, seq: u64, path: &Path) -> Result<()> {
        let mut attempt = 0;
        loop {
            attempt += 1;
            match self.try_publish(seq, path) {
                Ok(()) => return Ok(()),
                Err(Failure::Io(e)) => return Err(self.fenced(seq).unwrap_or(e)),
                Err(Failure::Kafka(e)) => {
                    // A fenced producer can come back "abortable" (e.g. on
                    // the offsets commit): sending again cannot succeed.
                    let fenced = matches!(&e, KafkaError::Transaction(t) if is_fencing(t.code()));
                    let abortable = matches!(&e, KafkaError::Transaction(t) if t.txn_requires_abort() || t.is_retriable())
                        || matches!(&e, KafkaError::Flush(_));
                    if fenced || !abortable || attempt >= 5 {
                        return Err(self.txn_error(e, seq));
                    }
                    eprintln!(
                        "strata: kafka sink {}: transaction of epoch file {seq} failed ({e}); sending it again",
                        self.transactional_id
                    );
                    let _ = self.producer.abort_transaction(TXN_TIMEOUT);
                    std::thread::sleep(Duration::from_secs(2));
                }
            }
        }
    }

    fn what(&self, seq: u64) -> String {
        format!(
            "commit epoch file {seq} to {} (transactional.id {})",
            self.topic, self.transactional_id
        )
    }

    /// The error of a producer a newer instance fenced, if this one was.
    fn fenced(&self, seq: u64) -> Option<ConnectorError> {
        let (code, reason) = self.producer.client().fatal_error()?;
        is_fencing(code).then(|| ConnectorError::KafkaFenced {
            what: self.what(seq),
            reason: format!("{reason}: {FENCED}"),
        })
    }

    fn txn_error(&self, e: KafkaError, seq: u64) -> ConnectorError {
        if let Some(fenced) = self.fenced(seq) {
            return fenced;
        }
        match &e {
            KafkaError::Transaction(t) if is_fencing(t.code()) => ConnectorError::KafkaFenced {
                what: self.what(seq),
                reason: format!("{e}: {FENCED}"),
            },
            _ => ConnectorError::Kafka {
                what: self.what(seq),
                reason: e.to_string(),
            },
        }
    }

    fn try_publish(&mut self, seq: u64, path: &Path) -> std::result::Result<(), Failure> {
        let kafka = Failure::Kafka;
        self.producer.begin_transaction().map_err(kafka)?;
        self.send_file(path).map_err(Failure::Io)?;
        // The records first: the marker's offsets go only to brokers that
        // are up again. librdkafka's send_offsets_to_transaction can wait
        // past its timeout on a coordinator that went away and came back
        // (confluentinc/librdkafka#5456, #5511): a broker stopped for 20 s
        // held a commit for the 300 s of the transaction timeout once.
        self.producer.flush(TXN_TIMEOUT).map_err(kafka)?;
        let mut offsets = TopicPartitionList::new();
        offsets
            .add_partition_offset(&self.topic, 0, Offset::Offset(seq as i64 + 1))
            .map_err(kafka)?;
        let group = self.marker.group_metadata().ok_or_else(|| {
            Failure::Io(ConnectorError::Kafka {
                what: "marker group".into(),
                reason: "no group metadata".into(),
            })
        })?;
        self.producer
            .send_offsets_to_transaction(&offsets, &group, TXN_TIMEOUT)
            .map_err(kafka)?;
        self.producer.commit_transaction(TXN_TIMEOUT).map_err(kafka)
    }

    /// Sends every record of a write-ahead file (in the open transaction).
    fn send_file(&self, path: &Path) -> Result<()> {
        let file = std::fs::File::open(path).map_err(ConnectorError::io(path))?;
        let mut reader = std::io::BufReader::with_capacity(1 << 16, file);
        let (mut line, mut key, mut headers) = (Vec::new(), Vec::new(), Vec::new());
        loop {
            line.clear();
            if reader
                .read_until(b'\n', &mut line)
                .map_err(ConnectorError::io(path))?
                == 0
            {
                return Ok(());
            }
            if line.last() == Some(&b'\n') {
                line.pop();
            }
            let corrupt = || ConnectorError::Corrupt {
                path: path.to_owned(),
                format: "write-ahead",
                reason: "a line is not a staged record".into(),
            };
            let parsed = WalLine::parse(&line, &mut key, &mut headers).ok_or_else(corrupt)?;
            let named: Vec<(&str, &[u8])> = headers
                .iter()
                .map(|(k, v): &(String, Vec<u8>)| (k.as_str(), v.as_slice()))
                .collect();
            let record = OutRecord {
                key: &key,
                timestamp: parsed.timestamp,
                value: &parsed.value,
                headers: &named,
            };
            send(&self.producer, &self.topic, &record)?;
        }
    }
}

/// Part file names as (number, path), by number.
fn by_number(names: Vec<String>, dir: &Path) -> Vec<(u64, PathBuf)> {
    let mut staged: Vec<(u64, PathBuf)> = names
        .into_iter()
        .filter_map(|n| {
            let seq = n.strip_suffix(".jsonl")?.rsplit('-').next()?.parse().ok()?;
            Some((seq, dir.join(n)))
        })
        .collect();
    staged.sort_unstable_by_key(|(seq, _)| *seq);
    staged
}

const FENCED: &str = "this instance was fenced by a newer producer with the same transactional.id: a restore of this job took over, or another job writes with the same sink.kafka.transactional-id-prefix (give each job writing a topic its own); it stops without committing";

enum Failure {
    Io(ConnectorError),
    Kafka(KafkaError),
}

/// The marker: how many epoch files of this sink Kafka holds (0: none).
pub(super) fn read_marker(marker: &BaseConsumer, topic: &str) -> Result<u64> {
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition(topic, 0);
    let committed = marker
        .committed_offsets(tpl, CALL_TIMEOUT)
        .map_err(ConnectorError::kafka(format!(
            "the commit marker on {topic}"
        )))?;
    Ok(committed
        .find_partition(topic, 0)
        .and_then(|e| e.offset().to_raw())
        .filter(|o| *o > 0)
        .map_or(0, |o| o as u64))
}

/// A staged record: `timestamp (or -) \t hex(key) \t headers \t value`, headers
/// as `name=hex(value)` joined by `,`, the value as `r<bytes>` when it has
/// no line break, else `x<hex>`.
pub(super) fn encode_wal_line(out: &mut Vec<u8>, r: &OutRecord<'_>) {
    use std::io::Write;
    out.clear();
    match r.timestamp {
        Some(ts) => {
            let _ = write!(out, "{ts}");
        }
        None => out.push(b'-'),
    }
    out.push(b'\t');
    push_hex(out, r.key);
    out.push(b'\t');
    for (i, (k, v)) in r.headers.iter().enumerate() {
        let _ = write!(out, "{}{k}={}", if i > 0 { "," } else { "" }, hex(v));
    }
    out.push(b'\t');
    if r.value.contains(&b'\n') {
        out.push(b'x');
        push_hex(out, r.value);
    } else {
        out.push(b'r');
        out.extend_from_slice(r.value);
    }
}

fn push_hex(out: &mut Vec<u8>, bytes: &[u8]) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    for b in bytes {
        out.extend_from_slice(&[DIGITS[usize::from(b >> 4)], DIGITS[usize::from(b & 15)]]);
    }
}

/// A staged record read back; the key and headers go to buffers the
/// caller reuses, the value borrows the line unless it was hex.
struct WalLine<'a> {
    timestamp: Option<i64>,
    value: std::borrow::Cow<'a, [u8]>,
}

impl<'a> WalLine<'a> {
    fn parse(
        line: &'a [u8],
        key: &mut Vec<u8>,
        headers: &mut Vec<(String, Vec<u8>)>,
    ) -> Option<Self> {
        let mut parts = line.splitn(4, |b| *b == b'\t');
        let timestamp = match std::str::from_utf8(parts.next()?).ok()? {
            "-" => None,
            ts => Some(ts.parse().ok()?),
        };
        key.clear();
        unhex_into(parts.next()?, key)?;
        headers.clear();
        for h in parts
            .next()?
            .split(|b| *b == b',')
            .filter(|h| !h.is_empty())
        {
            let text = std::str::from_utf8(h).ok()?;
            let (k, v) = text.split_once('=')?;
            let mut value = Vec::new();
            unhex_into(v.as_bytes(), &mut value)?;
            headers.push((k.to_owned(), value));
        }
        let value = match parts.next()?.split_first()? {
            (b'r', rest) => std::borrow::Cow::Borrowed(rest),
            (b'x', rest) => {
                let mut bytes = Vec::new();
                unhex_into(rest, &mut bytes)?;
                std::borrow::Cow::Owned(bytes)
            }
            _ => return None,
        };
        Some(Self { timestamp, value })
    }
}

fn unhex_into(text: &[u8], out: &mut Vec<u8>) -> Option<()> {
    fn nibble(c: u8) -> Option<u8> {
        match c {
            b'0'..=b'9' => Some(c - b'0'),
            b'a'..=b'f' => Some(c - b'a' + 10),
            b'A'..=b'F' => Some(c - b'A' + 10),
            _ => None,
        }
    }
    if !text.len().is_multiple_of(2) {
        return None;
    }
    for pair in text.chunks_exact(2) {
        out.push(nibble(pair[0])? << 4 | nibble(pair[1])?);
    }
    Some(())
}

/// Whether `code` says a newer producer with the same `transactional.id`
/// fenced this one. librdkafka normalises the brokers' `PRODUCER_FENCED`
/// and `INVALID_PRODUCER_EPOCH` to its local `__FENCED` (-144); the
/// brokers' codes are kept too, should one reach us unnormalised.
fn is_fencing(code: RDKafkaErrorCode) -> bool {
    matches!(
        code,
        RDKafkaErrorCode::Fenced
            | RDKafkaErrorCode::ProducerFenced
            | RDKafkaErrorCode::InvalidProducerEpoch
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_a_fenced_producer_gets_counts_as_fencing() {
        // The CI once saw a fenced commit reported as __FENCED (-144) with
        // "old epoch" in its text, which an earlier check missed.
        for code in [
            RDKafkaErrorCode::Fenced,
            RDKafkaErrorCode::ProducerFenced,
            RDKafkaErrorCode::InvalidProducerEpoch,
        ] {
            assert!(is_fencing(code), "{code:?}");
        }
        assert!(!is_fencing(RDKafkaErrorCode::InvalidTransactionalState));
    }

    #[test]
    fn epochs_go_by_number_past_six_digits() {
        // By name, 1000000 sorts first: it would be sent, and 999999 taken
        // for already sent and deleted unsent.
        let names = vec!["part-0-1000000.jsonl".into(), "part-0-999999.jsonl".into()];
        let order: Vec<u64> = by_number(names, Path::new("/s"))
            .iter()
            .map(|s| s.0)
            .collect();
        assert_eq!(order, [999_999, 1_000_000]);
    }

    #[test]
    fn staged_records_read_back_byte_for_byte() {
        let mut line = Vec::new();
        let (mut key, mut headers) = (Vec::new(), Vec::new());
        for value in [&b"{\"a\":1}"[..], b"two\nlines\t\xff"] {
            let named: [(&str, &[u8]); 2] = [("strata.reason", b"bad, very"), ("n", b"")];
            let r = OutRecord {
                key: b"\x03LAS\x03PHL\xff",
                timestamp: Some(-5),
                value,
                headers: &named,
            };
            encode_wal_line(&mut line, &r);
            assert!(!line.contains(&b'\n'));
            let back = WalLine::parse(&line, &mut key, &mut headers).unwrap();
            assert_eq!(key, r.key);
            assert_eq!(back.timestamp, Some(-5));
            assert_eq!(&*back.value, value);
            assert_eq!(
                headers[0],
                ("strata.reason".to_owned(), b"bad, very".to_vec())
            );
            assert_eq!(headers[1], ("n".to_owned(), Vec::new()));
        }
        assert!(WalLine::parse(b"-\t0g\t\tr{}", &mut key, &mut headers).is_none());
        assert!(WalLine::parse(b"-\t0\t\tr{}", &mut key, &mut headers).is_none());
    }
}
