//! [`QueryService`]: the process's query endpoint and the shards it can
//! answer for.

use super::answer::StateQuery;
use super::group::GroupRoute;
use super::request::QueryError;
use super::QueryableStates;
use crate::progress::Progress;
use crate::sync::lock;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use strata_cache::key_group::{key_group_of, KeyGroupRange};
use strata_cache::ttl::Clock;
use tokio::sync::{mpsc, watch};

/// What a running pipeline (a whole job, or one shard of a group) lets
/// queries reach: a bounded queue per keyed operator instance.
pub(crate) struct ShardQueries {
    pub(crate) instances: Vec<mpsc::Sender<StateQuery>>,
    pub(crate) max_parallelism: u32,
    pub(crate) clocks: Vec<Arc<Clock>>,
    pub(crate) completed: watch::Receiver<u64>,
    pub(crate) progress: Arc<Progress>,
}

impl ShardQueries {
    /// Hands `query` to the instance that owns its key without waiting: a
    /// full queue or an instance that ended is a 503.
    pub(crate) fn send(&self, query: StateQuery) -> std::result::Result<(), QueryError> {
        let n = self.instances.len() as u32;
        let kg = key_group_of(&query.key, self.max_parallelism);
        let index = KeyGroupRange::operator_for(kg, self.max_parallelism, n) as usize;
        self.instances[index].try_send(query).map_err(|e| match e {
            mpsc::error::TrySendError::Full(_) => QueryError::unavailable(format!(
                "keyed instance {index} has {} queries waiting: retry",
                super::QUEUE_PER_INSTANCE
            )),
            mpsc::error::TrySendError::Closed(_) => {
                QueryError::unavailable(format!("keyed instance {index} has stopped"))
            }
        })
    }

    fn status(&self, partition: Option<i32>) -> serde_json::Value {
        let watermark = self.clocks.iter().map(|c| c.watermark()).min();
        serde_json::json!({
            "partition": partition,
            "checkpoint": *self.completed.borrow(),
            "watermark": watermark,
            "records_processed": self.progress.records_processed.load(Ordering::Relaxed),
            "instances": self.instances.len(),
        })
    }
}

/// A job's query endpoint (`--query-addr`): serves HTTP/1.1 with JSON as
/// tasks of the process's runtime (`crate::executor`; a connection holds
/// no worker while it waits), and answers for the pipelines
/// registered with it: the job's, or in a consumer group every shard this
/// process runs, forwarding the others to their owners (see
/// `query::server` for the routes).
pub struct QueryService {
    pub(crate) job: String,
    pub(crate) spec: QueryableStates,
    pub(crate) token: Option<String>,
    pub(crate) addr: SocketAddr,
    pub(crate) group: Option<GroupRoute>,
    shards: Mutex<BTreeMap<Option<i32>, Arc<ShardQueries>>>,
}

impl QueryService {
    /// A service for job `job`'s states `spec`, answering at `addr` (as
    /// other members of a consumer group reach it), with no pipeline
    /// registered yet.
    pub(super) fn new(
        job: &str,
        spec: QueryableStates,
        token: Option<String>,
        addr: SocketAddr,
        group: Option<GroupRoute>,
    ) -> Self {
        Self {
            job: job.to_owned(),
            spec,
            token,
            addr,
            group,
            shards: Mutex::new(BTreeMap::new()),
        }
    }

    /// The address it serves on (the port chosen when given port 0; in a
    /// group, for an unspecified address, the one other members use).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Makes a running pipeline's instances answer queries until the
    /// returned guard drops (the pipeline ended).
    pub(crate) fn register(
        self: &Arc<Self>,
        partition: Option<i32>,
        shard: ShardQueries,
    ) -> Registration {
        lock(&self.shards).insert(partition, Arc::new(shard));
        Registration {
            service: self.clone(),
            partition,
        }
    }

    pub(crate) fn shard(&self, partition: Option<i32>) -> Option<Arc<ShardQueries>> {
        lock(&self.shards).get(&partition).cloned()
    }

    pub(crate) fn status(&self) -> serde_json::Value {
        let shards: Vec<_> = lock(&self.shards)
            .iter()
            .map(|(p, s)| s.status(*p))
            .collect();
        serde_json::json!({
            "job": self.job,
            "query_addr": self.addr.to_string(),
            "states": self.spec.names(),
            "key_fields": self.spec.key_fields(),
            "group": self.group.as_ref().map(|g| g.describe()),
            "partitions": shards.iter().filter_map(|s| s["partition"].as_i64()).collect::<Vec<_>>(),
            "shards": shards,
        })
    }
}

/// Keeps a pipeline registered with a [`QueryService`] while it lives.
pub(crate) struct Registration {
    service: Arc<QueryService>,
    partition: Option<i32>,
}

impl Drop for Registration {
    fn drop(&mut self) {
        lock(&self.service.shards).remove(&self.partition);
    }
}
