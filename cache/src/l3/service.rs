//! The tower stack every L3 call goes through: a concurrency limit (where
//! backpressure starts when L3 is slow), retry with exponential backoff
//! (every strata L3 call is idempotent: reads, and writes that carry a fixed
//! version), and a timeout per attempt. Each attempt is measured.
//!
//! Metrics (the `metrics` facade, so the Prometheus endpoint shows them):
//! `strata_l3_request_seconds{op}` (histogram), `strata_l3_in_flight`
//! (gauge), `strata_l3_retries_total`, `strata_l3_errors_total` (counters).

use scylla::client::session::Session;
use scylla::errors::{DbError, ExecutionError, RequestAttemptError};
use scylla::statement::batch::Batch;
use scylla::statement::prepared::PreparedStatement;
use scylla::value::{CqlValue, Row};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tower::util::BoxCloneSyncService;
use tower::{BoxError, ServiceBuilder, ServiceExt};

/// One CQL request; cheap to clone (the retry layer keeps a copy).
#[derive(Clone)]
pub(crate) enum CqlRequest {
    /// A prepared read returning rows.
    Read(Arc<PreparedStatement>, Arc<Vec<CqlValue>>),
    /// A single-partition unlogged batch of writes.
    Write(Arc<Batch>, Arc<Vec<Vec<CqlValue>>>),
}

impl CqlRequest {
    fn op(&self) -> &'static str {
        match self {
            CqlRequest::Read(..) => "read",
            CqlRequest::Write(..) => "write",
        }
    }
}

/// Figures of the L3 client since it connected.
#[derive(Debug, Default)]
pub(crate) struct L3Counters {
    pub(crate) reads: AtomicU64,
    pub(crate) writes: AtomicU64,
    pub(crate) retries: AtomicU64,
    pub(crate) errors: AtomicU64,
    pub(crate) in_flight: AtomicI64,
    pub(crate) busy_ns: AtomicU64,
}

/// A snapshot of the L3 request counters.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct L3Stats {
    /// Read requests answered.
    pub reads: u64,
    /// Write batches acknowledged.
    pub writes: u64,
    /// Attempts repeated after a timeout or a transient error.
    pub retries: u64,
    /// Attempts that failed (each retry follows one).
    pub errors: u64,
    /// Requests in flight now.
    pub in_flight: i64,
    /// Sum of attempt latencies, in milliseconds.
    pub busy_ms: u64,
}

impl L3Counters {
    pub(crate) fn snapshot(&self) -> L3Stats {
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        L3Stats {
            reads: get(&self.reads),
            writes: get(&self.writes),
            retries: get(&self.retries),
            errors: get(&self.errors),
            in_flight: self.in_flight.load(Ordering::Relaxed),
            busy_ms: get(&self.busy_ns) / 1_000_000,
        }
    }
}

/// The boxed stack: `CqlRequest` in, rows out.
pub(crate) type L3Service = BoxCloneSyncService<CqlRequest, Vec<Row>, BoxError>;

/// How the stack behaves.
#[derive(Debug, Clone, Copy)]
pub(crate) struct StackConfig {
    pub(crate) concurrency: usize,
    pub(crate) timeout: Duration,
    pub(crate) retry_for: Duration,
}

/// Builds the stack around `session`.
pub(crate) fn stack(
    session: Arc<Session>,
    config: StackConfig,
    counters: Arc<L3Counters>,
) -> L3Service {
    let policy = RetryPolicy {
        retry_for: config.retry_for,
        started: None,
        attempt: 0,
        counters: counters.clone(),
    };
    let inner = tower::service_fn(move |req: CqlRequest| {
        let (session, counters) = (session.clone(), counters.clone());
        async move { attempt(&session, req, &counters).await }
    });
    BoxCloneSyncService::new(
        ServiceBuilder::new()
            .concurrency_limit(config.concurrency)
            .retry(policy)
            .timeout(config.timeout)
            .service(inner)
            .map_err(BoxError::from),
    )
}

async fn attempt(
    session: &Session,
    req: CqlRequest,
    counters: &L3Counters,
) -> Result<Vec<Row>, BoxError> {
    let op = req.op();
    counters.in_flight.fetch_add(1, Ordering::Relaxed);
    metrics::gauge!("strata_l3_in_flight").increment(1.0);
    let started = Instant::now();
    let result = run(session, &req).await;
    let elapsed = started.elapsed();
    counters.in_flight.fetch_sub(1, Ordering::Relaxed);
    metrics::gauge!("strata_l3_in_flight").decrement(1.0);
    metrics::histogram!("strata_l3_request_seconds", "op" => op).record(elapsed.as_secs_f64());
    counters
        .busy_ns
        .fetch_add(elapsed.as_nanos() as u64, Ordering::Relaxed);
    let counter = match (&req, &result) {
        (_, Err(_)) => &counters.errors,
        (CqlRequest::Read(..), Ok(_)) => &counters.reads,
        (CqlRequest::Write(..), Ok(_)) => &counters.writes,
    };
    counter.fetch_add(1, Ordering::Relaxed);
    if result.is_err() {
        metrics::counter!("strata_l3_errors_total", "op" => op).increment(1);
    }
    result
}

async fn run(session: &Session, req: &CqlRequest) -> Result<Vec<Row>, BoxError> {
    match req {
        CqlRequest::Read(stmt, values) => {
            let result = session.execute_unpaged(stmt, values.as_slice()).await?;
            let malformed = |e: &dyn std::fmt::Display| Malformed(e.to_string());
            let rows = result.into_rows_result().map_err(|e| malformed(&e))?;
            let rows = rows.rows::<Row>().map_err(|e| malformed(&e))?;
            Ok(rows.collect::<Result<_, _>>().map_err(|e| malformed(&e))?)
        }
        CqlRequest::Write(batch, values) => {
            session.batch(batch, values.as_slice()).await?;
            Ok(Vec::new())
        }
    }
}

/// An answer of an unexpected shape (no retry helps).
#[derive(Debug, thiserror::Error)]
#[error("unexpected answer from L3: {0}")]
struct Malformed(String);

/// Errors no retry can fix: the request is wrong, or the replicas failed
/// to execute it (a read over too many tombstones, a failing function, a
/// server bug) rather than being slow or unavailable. Timeouts,
/// unavailability, overload, bootstrapping, an unprepared statement, rate
/// limits and connection errors are transient.
pub(crate) fn is_permanent(e: &BoxError) -> bool {
    if e.is::<Malformed>() {
        return true;
    }
    match e.downcast_ref::<ExecutionError>() {
        Some(ExecutionError::BadQuery(_) | ExecutionError::PrepareError(_)) => true,
        Some(ExecutionError::LastAttemptError(RequestAttemptError::DbError(db, _))) => !matches!(
            db,
            DbError::Unavailable { .. }
                | DbError::Overloaded
                | DbError::IsBootstrapping
                | DbError::ReadTimeout { .. }
                | DbError::WriteTimeout { .. }
                | DbError::Unprepared { .. }
                | DbError::RateLimitReached { .. }
                | DbError::TruncateError
        ),
        _ => false,
    }
}

/// Retries until `retry_for` has passed since the first failure, waiting
/// 50 ms, 100 ms, … up to 2 s between attempts.
#[derive(Clone)]
struct RetryPolicy {
    retry_for: Duration,
    started: Option<Instant>,
    attempt: u32,
    counters: Arc<L3Counters>,
}

impl tower::retry::Policy<CqlRequest, Vec<Row>, BoxError> for RetryPolicy {
    type Future = Pin<Box<dyn Future<Output = ()> + Send>>;

    fn retry(
        &mut self,
        _req: &mut CqlRequest,
        result: &mut Result<Vec<Row>, BoxError>,
    ) -> Option<Self::Future> {
        let e = result.as_ref().err()?;
        let started = *self.started.get_or_insert_with(Instant::now);
        if is_permanent(e) || started.elapsed() >= self.retry_for {
            return None;
        }
        let backoff = Duration::from_millis(50 << self.attempt.min(5)).min(Duration::from_secs(2));
        self.attempt += 1;
        self.counters.retries.fetch_add(1, Ordering::Relaxed);
        metrics::counter!("strata_l3_retries_total").increment(1);
        Some(Box::pin(tokio::time::sleep(backoff)))
    }

    fn clone_request(&mut self, req: &CqlRequest) -> Option<CqlRequest> {
        Some(req.clone())
    }
}

/// Sends one request through the stack.
pub(crate) async fn call(svc: &L3Service, req: CqlRequest) -> Result<Vec<Row>, BoxError> {
    svc.clone().oneshot(req).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use scylla::statement::Consistency;

    fn db(error: DbError) -> BoxError {
        Box::new(ExecutionError::LastAttemptError(
            RequestAttemptError::DbError(error, "from the server".into()),
        ))
    }

    #[test]
    fn failures_of_the_replicas_are_permanent_and_slowness_is_transient() {
        let read_failure = DbError::ReadFailure {
            consistency: Consistency::One,
            received: 0,
            required: 1,
            numfailures: 1,
            data_present: false,
        };
        for permanent in [read_failure, DbError::Invalid, DbError::ServerError] {
            assert!(is_permanent(&db(permanent.clone())), "{permanent:?}");
        }
        let read_timeout = DbError::ReadTimeout {
            consistency: Consistency::One,
            received: 0,
            required: 1,
            data_present: false,
        };
        for transient in [read_timeout, DbError::Overloaded, DbError::IsBootstrapping] {
            assert!(!is_permanent(&db(transient.clone())), "{transient:?}");
        }
    }
}
