//! Queries across a consumer group: which partition holds a key, which
//! member owns it (the group's assignment), and forwarding to it.
//!
//! A member advertises its query address in its `client.id`
//! (`strata-pid<pid>-query-<host>_<port>`), which every member reads back
//! from the group's description (as Kafka Streams' `application.server`
//! travels in the member metadata: librdkafka lets no user data into the
//! assignment protocol, the `client.id` is what it shares).

use super::request::QueryError;
use crate::sync::lock;
use axum::http::{header, HeaderMap, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::Mutex;
use std::time::{Duration, Instant};
use strata_connectors::kafka::{describe_group, KafkaSecurity, MemberInfo, Partitioner};

/// How long a read of the group's assignment is reused.
const ASSIGNMENT_TTL: Duration = Duration::from_secs(1);

/// What the `client.id` carries before the query address.
const ADVERTISED: &str = "-query-";

/// The `client.id` suffix that advertises query address `addr`.
pub(crate) fn advertise(addr: std::net::SocketAddr) -> String {
    format!("{ADVERTISED}{}_{}", addr.ip(), addr.port())
}

/// The query address a member advertised in `client_id`, if any.
fn advertised(client_id: &str) -> Option<String> {
    let (_, at) = client_id.split_once(ADVERTISED)?;
    let (host, port) = at.rsplit_once('_')?;
    let host = if host.contains(':') {
        format!("[{host}]")
    } else {
        host.to_owned()
    };
    Some(format!("{host}:{port}"))
}

/// How a query finds the owner of a key in a consumer group.
pub(crate) struct GroupRoute {
    pub(crate) brokers: String,
    security: KafkaSecurity,
    pub(crate) group: String,
    pub(crate) topic: String,
    pub(crate) partitions: usize,
    partitioner: Partitioner,
    members: Mutex<Option<(Instant, Vec<MemberInfo>)>>,
    client: reqwest::Client,
}

impl GroupRoute {
    pub(crate) fn new(
        brokers: &str,
        security: &KafkaSecurity,
        group: &str,
        topic: &str,
        partitions: usize,
        partitioner: Partitioner,
    ) -> Self {
        Self {
            brokers: brokers.to_owned(),
            security: security.clone(),
            group: group.to_owned(),
            topic: topic.to_owned(),
            partitions,
            partitioner,
            members: Mutex::new(None),
            client: reqwest::Client::new(),
        }
    }

    /// The address other members reach `bound` at: itself, or for an
    /// unspecified address (`0.0.0.0`, `::`) the address of the interface
    /// this machine reaches the first broker through.
    pub(crate) fn advertised(&self, bound: SocketAddr) -> SocketAddr {
        if !bound.ip().is_unspecified() {
            return bound;
        }
        let toward = self.brokers.split(',').next().unwrap_or_default();
        let local = toward
            .to_socket_addrs()
            .ok()
            .and_then(|mut a| a.next())
            .and_then(|broker| {
                let any: SocketAddr = match broker {
                    SocketAddr::V4(_) => ([0, 0, 0, 0], 0).into(),
                    SocketAddr::V6(_) => (std::net::Ipv6Addr::UNSPECIFIED, 0).into(),
                };
                let probe = std::net::UdpSocket::bind(any).ok()?;
                probe.connect(broker).ok()?;
                probe.local_addr().ok()
            });
        match local {
            Some(local) => SocketAddr::new(local.ip(), bound.port()),
            None => bound,
        }
    }

    pub(crate) fn describe(&self) -> serde_json::Value {
        serde_json::json!({"group": self.group, "topic": self.topic, "partitions": self.partitions})
    }

    /// The partition of the topic that holds `key`.
    pub(crate) fn partition_of(&self, key: &[u8]) -> i32 {
        self.partitioner.partition(key, self.partitions)
    }

    /// The members as the brokers describe them (reused for a second).
    async fn members(&self) -> Result<Vec<MemberInfo>, QueryError> {
        if let Some((at, members)) = &*lock(&self.members) {
            if at.elapsed() < ASSIGNMENT_TTL {
                return Ok(members.clone());
            }
        }
        let (brokers, group, topic) =
            (self.brokers.clone(), self.group.clone(), self.topic.clone());
        let security = self.security.clone();
        let info = tokio::task::spawn_blocking(move || {
            describe_group(&brokers, &security, &group, &topic)
        })
        .await
        .map_err(|e| QueryError::internal(format!("describing the group: {e}")))?
        .map_err(|e| QueryError::unavailable(format!("cannot describe the group: {e}")))?;
        *lock(&self.members) = Some((Instant::now(), info.members.clone()));
        Ok(info.members)
    }

    /// Answers by asking the member that owns partition `p`, or 503 while
    /// none does (a rebalance), the owner advertised no query address, or
    /// it is this member (`own`, its advertised address) still starting
    /// the partition's shard.
    pub(crate) async fn forward(
        &self,
        own: SocketAddr,
        p: i32,
        uri: &Uri,
        headers: &HeaderMap,
    ) -> Result<Response, QueryError> {
        let members = self.members().await?;
        let owner = members.iter().find(|m| m.partitions.contains(&p));
        let Some(owner) = owner else {
            return Err(QueryError::unavailable(format!(
                "partition {p} has no owner now (the group is rebalancing): retry"
            )));
        };
        let Some(addr) = advertised(&owner.client_id) else {
            return Err(QueryError::unavailable(format!(
                "partition {p}'s owner ({}) serves no queries (run it with --query-addr)",
                owner.client_id
            )));
        };
        if addr == own.to_string() {
            return Err(QueryError::unavailable(format!(
                "partition {p} is starting here: retry"
            )));
        }
        let sep = if uri.query().is_some() { "&" } else { "?" };
        let url = format!("http://{addr}{uri}{sep}forwarded=1");
        let mut request = self.client.get(&url).timeout(Duration::from_secs(35));
        if let Some(auth) = headers.get(header::AUTHORIZATION) {
            request = request.header(header::AUTHORIZATION, auth.clone());
        }
        let reply = request.send().await.map_err(|e| {
            QueryError::unavailable(format!(
                "partition {p}'s owner at {addr} did not answer: {e}"
            ))
        })?;
        let status =
            StatusCode::from_u16(reply.status().as_u16()).unwrap_or(StatusCode::BAD_GATEWAY);
        let retry = reply.headers().get(header::RETRY_AFTER).cloned();
        let body = reply
            .bytes()
            .await
            .map_err(|e| QueryError::unavailable(format!("reading {addr}'s answer: {e}")))?;
        let mut response =
            (status, [(header::CONTENT_TYPE, "application/json")], body).into_response();
        if let Some(retry) = retry {
            response.headers_mut().insert(header::RETRY_AFTER, retry);
        }
        Ok(response)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_advertised_address_reads_back() {
        for addr in ["127.0.0.1:8081", "[::1]:9000"] {
            let addr: std::net::SocketAddr = addr.parse().unwrap();
            let id = format!("strata-pid42{}", advertise(addr));
            assert_eq!(advertised(&id), Some(addr.to_string()));
        }
        assert_eq!(advertised("strata-pid42"), None);
    }
}
