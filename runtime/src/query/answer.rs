//! A query on its way to a keyed operator instance ([`StateQuery`]), and
//! what comes back.

use super::spec::StateReader;
use serde_json::Value;
use std::sync::Arc;
use strata_cache::StateStore;
use tokio::sync::oneshot;

/// A query's options (`?since=&limit=` for lists, `?entry=` for maps).
#[derive(Debug, Clone, Default)]
pub(crate) struct Params {
    /// Only list elements written at or after this event time (ms).
    pub(crate) since: Option<i64>,
    /// At most this many list elements (the oldest first).
    pub(crate) limit: Option<usize>,
    /// One map entry's key.
    pub(crate) entry: Option<String>,
}

impl Params {
    /// Refuses options that mean nothing for a state of `kind`.
    pub(crate) fn applies_to(&self, state: &str, kind: &str) -> Result<(), QueryError> {
        let wrong = |option: &str, applies: &str| {
            Err(QueryError::bad_request(format!(
                "{option} applies to {applies} states; '{state}' is a {kind} state"
            )))
        };
        if kind != "list" && (self.since.is_some() || self.limit.is_some()) {
            return wrong("since and limit", "list");
        }
        if kind != "map" && self.entry.is_some() {
            return wrong("entry", "map");
        }
        Ok(())
    }
}

/// Why a query got no answer: an HTTP status and a one-line reason.
#[derive(Debug, Clone)]
pub(crate) struct QueryError {
    pub(crate) status: u16,
    pub(crate) message: String,
    /// Seconds for `Retry-After` (503 only).
    pub(crate) retry_after: Option<u32>,
}

impl QueryError {
    pub(crate) fn new(status: u16, message: String) -> Self {
        Self {
            status,
            message,
            retry_after: None,
        }
    }

    pub(crate) fn bad_request(message: String) -> Self {
        Self::new(400, message)
    }

    pub(crate) fn not_found(message: String) -> Self {
        Self::new(404, message)
    }

    pub(crate) fn internal(message: String) -> Self {
        Self::new(500, message)
    }

    /// 503 with `Retry-After: 1`.
    pub(crate) fn unavailable(message: String) -> Self {
        Self {
            status: 503,
            message,
            retry_after: Some(1),
        }
    }
}

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
