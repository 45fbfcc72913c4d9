//! A query on its way to a keyed operator instance ([`StateQuery`]), and
//! what comes back.

use super::request::{Params, QueryError};
use super::spec::StateReader;
use serde_json::Value;
use std::sync::Arc;
use strata_cache::StateStore;
use tokio::sync::oneshot;

/// Where the answering instance stood: every record of the key before
/// these positions has been applied, none after.
#[derive(Debug, Clone, serde::Serialize)]
pub(crate) struct AsOf {
    /// Per source split (a file; a Kafka partition of the shard), the
    /// position after the last record the instance processed from it: a
    /// file's record count, a partition's next offset.
    pub(crate) positions: Vec<u64>,
    /// The instance's watermark (ms; TTL is measured against it).
    pub(crate) watermark: i64,
    /// The newest completed checkpoint.
    pub(crate) checkpoint: u64,
}

/// One query for the instance that owns the key.
pub(crate) struct StateQuery {
    pub(crate) reader: Arc<dyn StateReader>,
    pub(crate) key: Vec<u8>,
    pub(crate) params: Params,
    /// The key's state (`None`: no tier holds any of it live) and where
    /// the instance stood.
    pub(crate) reply: oneshot::Sender<Result<(Option<Value>, AsOf), QueryError>>,
}

impl StateQuery {
    /// Answers from the instance's `store` (blocking: RocksDB and L3 reads)
    /// as of `as_of`. A client that gave up (timed out, went away) is not
    /// answered.
    pub(crate) fn answer(self, store: &StateStore, as_of: AsOf) {
        if self.reply.is_closed() {
            return;
        }
        let answer = self
            .reader
            .read(store, &self.key, &self.params)
            .map(|found| (found, as_of));
        let _ = self.reply.send(answer);
    }
}
