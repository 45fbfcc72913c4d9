//! Membership in a Kafka consumer group, used to divide a job's input
//! partitions between processes (Kafka Streams' model: the group protocol
//! decides which process owns which partition; strata runs no cluster
//! manager of its own).
//!
//! A [`GroupMember`] subscribes to one topic with the
//! `cooperative-sticky` assignor (KIP-429: a rebalance moves only the
//! partitions that must move, the others keep running). It never reads
//! messages: every partition it is given is paused at once, and the caller
//! reads it with a consumer of its own (`KafkaSource` with
//! `partitions`). What it tells the caller, through a
//! [`RebalanceListener`] called from [`GroupMember::poll`]:
//!
//! * [`RebalanceListener::assigned`]: partitions this process owns now.
//! * [`RebalanceListener::revoked`]: partitions it must give up. The call
//!   must return only once they are released (checkpointed, output
//!   committed): the group hands them to another member only after this
//!   member rejoins, which it does after the call. `lost = true`: the
//!   member was already out of the group (its session expired, e.g. a
//!   process stopped for longer than `session.timeout.ms`); the partitions
//!   may run elsewhere already, so nothing of them may be committed.
//!
//! [`GroupMember::commit`] commits offsets under the member's generation:
//! the broker refuses it once the member is out of the group, which makes
//! it a fence for a zombie (see [`Commit::Fenced`]).

use super::{client_config, partitions_of, KafkaSecurity, CALL_TIMEOUT};
use crate::error::{ConnectorError, Result};
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext, Rebalance};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::{ClientContext, Offset, TopicPartitionList};
use std::time::Duration;

/// What a [`GroupMember`] tells about ownership changes; see the module docs.
pub trait RebalanceListener: Send + Sync + 'static {
    /// This member owns `partitions` now (in addition to what it had).
    fn assigned(&self, partitions: &[i32]);
    /// This member gives up `partitions`; returns once they are released.
    /// `lost`: they were taken away already (nothing may be committed).
    fn revoked(&self, partitions: &[i32], lost: bool);
}

/// How a [`GroupMember`] joins.
#[derive(Debug, Clone)]
pub struct GroupOptions {
    /// `bootstrap.servers`.
    pub brokers: String,
    /// TLS and SASL settings (`kafka.*`), the same for every client.
    pub security: KafkaSecurity,
    /// The one topic whose partitions the group divides.
    pub topic: String,
    /// `group.id`.
    pub group: String,
    /// librdkafka properties (`source.kafka.<property>`), applied last
    /// (e.g. `session.timeout.ms`).
    pub properties: Vec<(String, String)>,
    /// Appended to the member's `client.id` (`strata-pid<pid>`), which the
    /// group's description shows every member: how a process advertises
    /// its query address.
    pub client_id_suffix: String,
}

/// What [`GroupMember::commit`] achieved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Commit {
    /// The offsets are committed: the member was in the group, in its
    /// current generation.
    Done,
    /// The broker no longer knows the member: it was expelled (its session
    /// expired), so its partitions may be owned by another.
    Fenced(String),
    /// Not committed for now (a rebalance in progress, a generation that
    /// moved on, brokers away): try again while the partition is owned.
    Failed(String),
}

/// One partition's committed position in the group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Committed {
    /// The partition.
    pub partition: i32,
    /// The committed offset (the next message to read), if any.
    pub offset: Option<i64>,
    /// The metadata string committed with it ("" if none).
    pub metadata: String,
}

struct Context {
    topic: String,
    listener: Box<dyn RebalanceListener>,
}

impl ClientContext for Context {}

impl ConsumerContext for Context {
    fn pre_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        if let Rebalance::Revoke(tpl) = rebalance {
            let lost = consumer.assignment_lost();
            self.listener.revoked(&self.partitions(tpl), lost);
        }
    }

    fn post_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        if let Rebalance::Assign(tpl) = rebalance {
            // The member only holds the partitions; their readers read them.
            if let Err(e) = consumer.pause(tpl) {
                eprintln!("strata: consumer group: pausing assigned partitions: {e}");
            }
            self.listener.assigned(&self.partitions(tpl));
        }
    }
}

impl Context {
    fn partitions(&self, tpl: &TopicPartitionList) -> Vec<i32> {
        tpl.elements()
            .iter()
            .filter(|e| e.topic() == self.topic)
            .map(|e| e.partition())
            .collect()
    }
}

/// A member of a consumer group; see the module docs.
pub struct GroupMember {
    consumer: BaseConsumer<Context>,
    topic: String,
    partitions: Vec<i32>,
}

impl GroupMember {
    /// Joins group `options.group` on `options.topic`. Nothing is assigned
    /// before the first [`GroupMember::poll`]s.
    ///
    /// Errors: the topic does not exist, the brokers cannot be reached
    /// within 30 s, a property librdkafka refuses.
    pub fn join(options: &GroupOptions, listener: impl RebalanceListener) -> Result<Self> {
        let context = Context {
            topic: options.topic.clone(),
            listener: Box::new(listener),
        };
        let consumer: BaseConsumer<Context> = client_config(
            &options.brokers,
            &options.security,
            &[
                ("group.id", options.group.as_str()),
                (
                    "client.id",
                    &format!(
                        "strata-pid{}{}",
                        std::process::id(),
                        options.client_id_suffix
                    ),
                ),
                ("partition.assignment.strategy", "cooperative-sticky"),
                ("enable.auto.commit", "false"),
                ("enable.auto.offset.store", "false"),
                // A stopped or dead process loses its partitions after
                // 10 s without a heartbeat (Kafka's default is 45 s).
                ("session.timeout.ms", "10000"),
                ("heartbeat.interval.ms", "1000"),
                // Releasing a shard takes a checkpoint: allow it 5 minutes.
                ("max.poll.interval.ms", "300000"),
                // The member pauses what it is given: fetch next to nothing.
                ("queued.max.messages.kbytes", "64"),
                ("fetch.message.max.bytes", "65536"),
            ],
            &options.properties,
        )
        .create_with_context(context)
        .map_err(ConnectorError::kafka("create the group member"))?;
        let partitions = partitions_of(&consumer, &options.topic)?;
        consumer
            .subscribe(&[options.topic.as_str()])
            .map_err(ConnectorError::kafka(format!(
                "subscribe to {} in group {}",
                options.topic, options.group
            )))?;
        Ok(Self {
            consumer,
            topic: options.topic.clone(),
            partitions,
        })
    }

    /// The topic's partitions (all of them, not only this member's).
    pub fn partitions(&self) -> &[i32] {
        &self.partitions
    }

    /// Serves the group protocol for up to `timeout`: heartbeats, and the
    /// listener's calls when a rebalance happens. Call it at least every
    /// few seconds. Messages are never returned (the member pauses what
    /// it is given).
    ///
    /// Errors: a fatal client error.
    pub fn poll(&self, timeout: Duration) -> Result<()> {
        match self.consumer.poll(timeout) {
            Some(Err(e)) if e.rdkafka_error_code() == Some(RDKafkaErrorCode::Fatal) => {
                Err(ConnectorError::kafka("consumer group membership")(e))
            }
            // Transient errors (a broker away) are retried by librdkafka.
            _ => Ok(()),
        }
    }

    /// Commits `offset` (the next message to read) of `partition`, with
    /// `metadata`, under this member's id and generation: one attempt. The
    /// caller retries [`Commit::Failed`] (a rebalance in progress, a
    /// generation that moved on, brokers away) as long as it still owns
    /// the partition.
    pub fn commit(&self, partition: i32, offset: i64, metadata: &str) -> Commit {
        let mut tpl = TopicPartitionList::new();
        if let Err(e) = tpl.add_partition_offset(&self.topic, partition, Offset::Offset(offset)) {
            return Commit::Failed(e.to_string());
        }
        if let Some(mut e) = tpl.find_partition(&self.topic, partition) {
            e.set_metadata(metadata);
        }
        match self
            .consumer
            .commit(&tpl, rdkafka::consumer::CommitMode::Sync)
        {
            Ok(()) => Commit::Done,
            Err(e) => match e.rdkafka_error_code() {
                Some(
                    RDKafkaErrorCode::UnknownMemberId
                    | RDKafkaErrorCode::FencedInstanceId
                    | RDKafkaErrorCode::StaleMemberEpoch,
                ) => Commit::Fenced(e.to_string()),
                _ => Commit::Failed(e.to_string()),
            },
        }
    }

    /// The end offset (high watermark) of every partition of the topic.
    ///
    /// Errors: the brokers cannot be reached within 30 s.
    pub fn end_offsets(&self) -> Result<Vec<i64>> {
        self.partitions
            .iter()
            .map(|p| {
                self.consumer
                    .fetch_watermarks(&self.topic, *p, CALL_TIMEOUT)
                    .map(|(_, high)| high)
                    .map_err(ConnectorError::kafka(format!(
                        "end offsets of {}",
                        self.topic
                    )))
            })
            .collect()
    }

    /// What the group has committed for every partition of the topic.
    ///
    /// Errors: the brokers cannot be reached within 30 s.
    pub fn committed(&self) -> Result<Vec<Committed>> {
        committed(&self.consumer, &self.topic, &self.partitions)
    }
}

fn committed<C: ConsumerContext>(
    consumer: &BaseConsumer<C>,
    topic: &str,
    partitions: &[i32],
) -> Result<Vec<Committed>> {
    let mut tpl = TopicPartitionList::new();
    for p in partitions {
        tpl.add_partition(topic, *p);
    }
    let got = consumer
        .committed_offsets(tpl, CALL_TIMEOUT)
        .map_err(ConnectorError::kafka(format!(
            "committed offsets of {topic}"
        )))?;
    Ok(partitions
        .iter()
        .map(|p| {
            let e = got.find_partition(topic, *p);
            Committed {
                partition: *p,
                offset: e
                    .as_ref()
                    .and_then(|e| e.offset().to_raw())
                    .filter(|o| *o >= 0),
                metadata: e.map(|e| e.metadata().to_owned()).unwrap_or_default(),
            }
        })
        .collect())
}

/// One member of a group as the brokers describe it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberInfo {
    /// The member id the coordinator gave it.
    pub id: String,
    /// Its `client.id`.
    pub client_id: String,
    /// The host it connected from.
    pub host: String,
    /// The partitions of the topic assigned to it.
    pub partitions: Vec<i32>,
}

/// What a consumer group looks like on `topic`.
#[derive(Debug, Clone)]
pub struct GroupInfo {
    /// The group's state (`Stable`, `PreparingRebalance`, `Empty`, …).
    pub state: String,
    /// Its members and what each owns.
    pub members: Vec<MemberInfo>,
    /// Per partition: committed position, and the partition's end offset.
    pub partitions: Vec<(Committed, i64)>,
}

/// Describes group `group` on `topic` (what `kafka-consumer-groups
/// --describe` shows).
///
/// Errors: the topic does not exist, the brokers cannot be reached within 30 s.
pub fn describe_group(
    brokers: &str,
    security: &KafkaSecurity,
    group: &str,
    topic: &str,
) -> Result<GroupInfo> {
    let consumer = super::group_reader(brokers, security, group)?;
    let partitions = partitions_of(&consumer, topic)?;
    let list = consumer
        .fetch_group_list(Some(group), CALL_TIMEOUT)
        .map_err(ConnectorError::kafka(format!("describe group {group}")))?;
    let (state, members) = match list.groups().first() {
        None => ("Dead".to_owned(), Vec::new()),
        Some(g) => (
            g.state().to_owned(),
            g.members()
                .iter()
                .map(|m| MemberInfo {
                    id: m.id().to_owned(),
                    client_id: m.client_id().to_owned(),
                    host: m.client_host().to_owned(),
                    partitions: m
                        .assignment()
                        .map(|a| assigned_partitions(a, topic))
                        .unwrap_or_default(),
                })
                .collect(),
        ),
    };
    let mut with_ends = Vec::new();
    for c in committed(&consumer, topic, &partitions)? {
        let (_, high) = consumer
            .fetch_watermarks(topic, c.partition, CALL_TIMEOUT)
            .map_err(ConnectorError::kafka(format!("end offsets of {topic}")))?;
        with_ends.push((c, high));
    }
    Ok(GroupInfo {
        state,
        members,
        partitions: with_ends,
    })
}

/// The topics the members of `group` are assigned partitions of.
///
/// Errors: the brokers cannot be reached within 30 s.
pub fn group_topics(brokers: &str, security: &KafkaSecurity, group: &str) -> Result<Vec<String>> {
    let consumer: BaseConsumer = client_config(brokers, security, &[], &[])
        .create()
        .map_err(ConnectorError::kafka("create a consumer"))?;
    let list = consumer
        .fetch_group_list(Some(group), CALL_TIMEOUT)
        .map_err(ConnectorError::kafka(format!("describe group {group}")))?;
    let mut topics: Vec<String> = list
        .groups()
        .iter()
        .flat_map(|g| g.members())
        .filter_map(|m| m.assignment())
        .flat_map(assigned_topics)
        .collect();
    topics.sort();
    topics.dedup();
    Ok(topics)
}

/// The topics named in a consumer protocol assignment.
fn assigned_topics(bytes: &[u8]) -> Vec<String> {
    let mut r = Reader(bytes);
    let mut found = Vec::new();
    let _version = r.i16();
    for _ in 0..r.i32().unwrap_or(0) {
        let (Some(name), Some(n)) = (r.string(), r.i32()) else {
            break;
        };
        if r.take(4 * n.max(0) as usize).is_none() {
            break;
        }
        found.push(name);
    }
    found
}

/// The partitions of `topic` in a consumer protocol assignment (KIP-429's
/// `ConsumerProtocolAssignment`: version i16, then topics with their
/// partitions; what follows is ignored). A malformed one gives what could
/// be read.
fn assigned_partitions(bytes: &[u8], topic: &str) -> Vec<i32> {
    let mut r = Reader(bytes);
    let mut found = Vec::new();
    let _version = r.i16();
    let topics = r.i32().unwrap_or(0);
    for _ in 0..topics {
        let (Some(name), Some(n)) = (r.string(), r.i32()) else {
            break;
        };
        for _ in 0..n {
            match r.i32() {
                Some(p) if name == topic => found.push(p),
                Some(_) => {}
                None => return found,
            }
        }
    }
    found.sort_unstable();
    found
}

/// Big-endian reads off a byte slice (Kafka's protocol encoding).
struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn take(&mut self, n: usize) -> Option<&[u8]> {
        let (head, rest) = (self.0.get(..n)?, self.0.get(n..)?);
        self.0 = rest;
        Some(head)
    }
    fn i16(&mut self) -> Option<i16> {
        Some(i16::from_be_bytes(self.take(2)?.try_into().ok()?))
    }
    fn i32(&mut self) -> Option<i32> {
        Some(i32::from_be_bytes(self.take(4)?.try_into().ok()?))
    }
    fn string(&mut self) -> Option<String> {
        let n = usize::try_from(self.i16()?).ok()?;
        Some(String::from_utf8_lossy(self.take(n)?).into_owned())
    }
}

impl std::fmt::Debug for GroupMember {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "GroupMember({})", self.topic)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn assignments_decode_to_the_topics_partitions() {
        let mut b = vec![0, 1, 0, 0, 0, 2];
        for (topic, parts) in [("other", &[9i32][..]), ("flights", &[5, 2])] {
            b.extend((topic.len() as i16).to_be_bytes());
            b.extend(topic.as_bytes());
            b.extend((parts.len() as i32).to_be_bytes());
            for p in parts {
                b.extend(p.to_be_bytes());
            }
        }
        b.extend([0, 0, 0, 0]); // user data
        assert_eq!(assigned_partitions(&b, "flights"), [2, 5]);
        assert_eq!(assigned_partitions(&b, "other"), [9]);
        assert_eq!(assigned_topics(&b), ["other", "flights"]);
        assert_eq!(assigned_partitions(&b[..b.len() - 8], "flights"), [5]);
        assert!(assigned_partitions(&[], "flights").is_empty());
    }
}
