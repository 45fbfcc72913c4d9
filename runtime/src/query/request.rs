//! What a query asks besides its key ([`Params`]) and why it can get no
//! answer ([`QueryError`]: an HTTP status and a one-line reason).

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
