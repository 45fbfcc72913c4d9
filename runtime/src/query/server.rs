//! The HTTP routes of a [`QueryService`] (axum on hyper; strata parses no
//! HTTP itself):
//!
//! * `GET /state/<state>/<key field>/<key field>…[?since=&limit=&entry=]`:
//!   one key's state as JSON, `{"job", "state", "kind", "key", "value",
//!   "as_of": {"positions", "watermark", "checkpoint"}, "partition",
//!   "answered_by"}`. Key fields are percent-encoded path segments, in the
//!   order `strata state get` takes them. `since` is an event time (ms
//!   since the epoch, or `YYYY-MM-DDTHH:MM:SS` UTC), `limit` a count.
//! * `GET /jobs/current`: the job, its queryable states, and per pipeline
//!   (shard) its completed checkpoint, watermark and records processed.
//!
//! Errors are JSON `{"error": "<one line>"}` with a status: 400 (a
//! malformed key, field or option, an option twice or one that does not
//! apply to the state's kind), 401 (no or a wrong token), 404 (an unknown
//! state or route, or a key with no live state; that body has `as_of`
//! too), 405 (not GET), 414 (a path over 8 KiB; hyper itself answers 400,
//! 414 or 431 with an empty body to what it cannot parse), 503 with `Retry-After` (the instance's queue is full, the
//! key's partition is moving, the job is not running), 504 (no answer in
//! 30 s), 500 (a read failed).

use super::answer::StateQuery;
use super::group::GroupRoute;
use super::registry::{QueryService, ShardQueries};
use super::request::{Params, QueryError};
use super::QueryableStates;
use crate::error::{Result, RuntimeError};
use axum::extract::{Query, State};
use axum::http::{header, HeaderMap, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

/// How long a query waits for its instance's answer.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(30);

/// Serves `service` on `listener` as a task of the process's runtime.
pub(super) fn spawn(
    service: Arc<QueryService>,
    listener: std::net::TcpListener,
) -> crate::Result<()> {
    use crate::error::RuntimeError;
    let io = |e: std::io::Error| RuntimeError::Usage(format!("--query-addr: {e}"));
    listener.set_nonblocking(true).map_err(io)?;
    let app = Router::new()
        .route("/state/{*rest}", get(state))
        .route("/jobs/current", get(current))
        .fallback(unknown_route)
        .method_not_allowed_fallback(wrong_method)
        .with_state(service);
    crate::executor::handle()?.spawn(async move {
        match tokio::net::TcpListener::from_std(listener) {
            Ok(listener) => super::connections::serve(listener, app).await,
            Err(e) => eprintln!("strata: the query endpoint could not start: {e}"),
        }
    });
    Ok(())
}

impl QueryService {
    /// Binds `addr` and starts serving queries on the states `spec`
    /// declares for job `job`. A `token` is required of every request
    /// (`Authorization: Bearer <token>`); binding an address other than
    /// loopback without one is refused.
    ///
    /// Errors: [`RuntimeError::Usage`] for a non-loopback address without a
    /// token or an address that cannot be bound.
    pub fn start(
        addr: SocketAddr,
        token: Option<String>,
        job: &str,
        spec: QueryableStates,
    ) -> Result<Arc<Self>> {
        Self::start_in(addr, token, job, spec, None)
    }

    pub(crate) fn start_in(
        addr: SocketAddr,
        token: Option<String>,
        job: &str,
        spec: QueryableStates,
        group: Option<GroupRoute>,
    ) -> Result<Arc<Self>> {
        if !addr.ip().is_loopback() && token.is_none() {
            return Err(RuntimeError::Usage(format!(
                "--query-addr {addr} serves other machines: set STRATA_QUERY_TOKEN (the token every request must bring) or bind 127.0.0.1"
            )));
        }
        crate::metrics::warn_if_exposed(
            "--query-addr",
            addr,
            "the job's state (to requests that bring STRATA_QUERY_TOKEN)",
        );
        let listener = super::connections::bind(addr).map_err(|e| {
            RuntimeError::Usage(format!("--query-addr: cannot serve queries on {addr}: {e}"))
        })?;
        let bound = listener
            .local_addr()
            .map_err(RuntimeError::io(std::path::Path::new("query socket")))?;
        // Other members reach it here (answers name it in `answered_by`).
        let advertised = group.as_ref().map_or(bound, |g| g.advertised(bound));
        let service = Arc::new(Self::new(job, spec, token, advertised, group));
        spawn(service.clone(), listener)?;
        let seen_as = if advertised == bound {
            String::new()
        } else {
            format!(", advertised to the group as {advertised}")
        };
        eprintln!(
            "strata: serving queries on http://{bound}{seen_as} (GET /state/<state>/<key…>, /jobs/current)"
        );
        Ok(service)
    }
}

fn error(e: QueryError) -> Response {
    error_with(e, json!({}))
}

fn error_with(e: QueryError, mut body: Value) -> Response {
    body["error"] = Value::String(e.message);
    let status = StatusCode::from_u16(e.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut response = (status, Json(body)).into_response();
    if status == StatusCode::UNAUTHORIZED {
        response.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            header::HeaderValue::from_static("Bearer"),
        );
    }
    if let Some(secs) = e.retry_after {
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, secs.into());
    }
    response
}

/// Refuses a request without the service's token (when it has one).
fn authorize(service: &QueryService, headers: &HeaderMap) -> Result<(), QueryError> {
    let Some(token) = &service.token else {
        return Ok(());
    };
    let Some(given) = headers.get(header::AUTHORIZATION) else {
        return Err(QueryError::new(
            401,
            "this endpoint needs a token: Authorization: Bearer <STRATA_QUERY_TOKEN>".into(),
        ));
    };
    // The scheme is case-insensitive (RFC 9110); the token is compared
    // in time independent of where it differs.
    let bearer = given
        .as_bytes()
        .split_at_checked(7)
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case(b"bearer "))
        .map(|(_, t)| t);
    match bearer {
        Some(t) if same_secret(t, token.as_bytes()) => Ok(()),
        Some(_) => Err(QueryError::new(401, "wrong token".into())),
        None => Err(QueryError::new(
            401,
            "the Authorization header is not 'Bearer <token>'".into(),
        )),
    }
}

/// Whether `a` equals `b`, looking at every byte whatever the first
/// difference (no timing hint of how much of a guess was right).
fn same_secret(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |d, (x, y)| d | (x ^ y)) == 0
}

async fn unknown_route(uri: Uri) -> Response {
    error(QueryError::not_found(format!(
        "no route {}: use GET /state/<state>/<key fields…> or GET /jobs/current",
        uri.path()
    )))
}

async fn wrong_method(method: axum::http::Method) -> Response {
    error(QueryError::new(
        405,
        format!("{method} is not served: queries are GET requests"),
    ))
}

async fn current(State(service): State<Arc<QueryService>>, headers: HeaderMap) -> Response {
    match authorize(&service, &headers) {
        Ok(()) => Json(service.status()).into_response(),
        Err(e) => error(e),
    }
}

/// A parsed `/state/…` request.
struct Request {
    state: String,
    fields: Vec<String>,
    params: Params,
    forwarded: bool,
}

/// The longest request path answered (longer: 414; beyond hyper's
/// buffer, hyper answers 431 itself).
const MAX_PATH: usize = 8 << 10;

fn parse(uri: &Uri) -> Result<Request, QueryError> {
    if uri.path().len() > MAX_PATH {
        return Err(QueryError::new(
            414,
            format!(
                "the path is {} bytes long; at most {MAX_PATH} are answered",
                uri.path().len()
            ),
        ));
    }
    let rest = uri.path().strip_prefix("/state/").unwrap_or_default();
    let mut segments = rest.split('/').enumerate().map(|(i, s)| {
        percent_encoding::percent_decode_str(s)
            .decode_utf8()
            .map(|s| s.into_owned())
            .map_err(|_| {
                QueryError::bad_request(format!(
                    "path segment {} is not valid UTF-8 once percent-decoded",
                    i + 1
                ))
            })
    });
    let state = segments.next().transpose()?.unwrap_or_default();
    let fields = segments.collect::<Result<Vec<_>, _>>()?;
    if state.is_empty() || fields.is_empty() || fields.iter().any(String::is_empty) {
        return Err(QueryError::bad_request(
            "expected /state/<state>/<key field>[/<key field>…], no empty segment".into(),
        ));
    }
    let Query(given) = Query::<Vec<(String, String)>>::try_from_uri(uri)
        .map_err(|e| QueryError::bad_request(format!("malformed query string: {e}")))?;
    let mut options = HashMap::new();
    for (name, value) in given {
        if options.insert(name.clone(), value).is_some() {
            return Err(QueryError::bad_request(format!(
                "option '{}' is given twice",
                clip(&name)
            )));
        }
    }
    Ok(Request {
        state,
        fields,
        params: params(&options)?,
        forwarded: options.contains_key("forwarded"),
    })
}

fn params(options: &HashMap<String, String>) -> Result<Params, QueryError> {
    if let Some(unknown) = options
        .keys()
        .find(|k| !["since", "limit", "entry", "forwarded"].contains(&k.as_str()))
    {
        return Err(QueryError::bad_request(format!(
            "unknown option '{}' (known: since, limit, entry)",
            clip(unknown)
        )));
    }
    let limit = options
        .get("limit")
        .map(|l| {
            l.parse::<usize>()
                .map_err(|_| QueryError::bad_request(format!("limit={} is not a count", clip(l))))
        })
        .transpose()?;
    Ok(Params {
        since: options.get("since").map(|s| event_time(s)).transpose()?,
        limit,
        entry: options.get("entry").cloned(),
    })
}

/// `text`, cut to 100 characters for an error message.
fn clip(text: &str) -> String {
    match text.char_indices().nth(100) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_owned(),
    }
}

/// An event time given as ms since the epoch or `YYYY-MM-DDTHH:MM:SS` (UTC).
fn event_time(text: &str) -> Result<i64, QueryError> {
    if let Ok(ms) = text.parse::<i64>() {
        return Ok(ms);
    }
    chrono::NaiveDateTime::parse_from_str(text, "%Y-%m-%dT%H:%M:%S")
        .map(|t| t.and_utc().timestamp_millis())
        .map_err(|_| {
            QueryError::bad_request(format!(
                "since={} is neither ms since the epoch nor YYYY-MM-DDTHH:MM:SS",
                clip(text)
            ))
        })
}

async fn state(State(service): State<Arc<QueryService>>, headers: HeaderMap, uri: Uri) -> Response {
    match answer(&service, &headers, &uri).await {
        Ok(response) => response,
        Err(e) => error(e),
    }
}

async fn answer(
    service: &QueryService,
    headers: &HeaderMap,
    uri: &Uri,
) -> Result<Response, QueryError> {
    authorize(service, headers)?;
    let request = parse(uri)?;
    let reader = service.spec.reader(&request.state)?;
    request.params.applies_to(&request.state, reader.kind())?;
    let key = service.spec.key(&request.fields)?;
    let (shard, partition) = match &service.group {
        None => (service.shard(None), None),
        Some(group) => {
            let p = group.partition_of(&key);
            match service.shard(Some(p)) {
                Some(shard) => (Some(shard), Some(p)),
                None if request.forwarded => {
                    return Err(QueryError::unavailable(format!(
                        "partition {p} is not (or no longer) run here: it is moving, retry"
                    )))
                }
                None => return group.forward(service.addr, p, uri, headers).await,
            }
        }
    };
    let shard = shard.ok_or_else(|| {
        QueryError::unavailable("the job is not running (starting, or ended)".into())
    })?;
    let kind = reader.kind();
    let (found, as_of) = ask(&shard, key, reader, request.params).await?;
    let mut body = json!({
        "job": service.job,
        "state": request.state,
        "kind": kind,
        "key": request.fields,
        "as_of": as_of,
        "partition": partition,
        "answered_by": service.addr.to_string(),
    });
    match found {
        Some(value) => {
            body["value"] = value;
            Ok(Json(body).into_response())
        }
        None => Ok(error_with(
            QueryError::not_found(
                "no state for this key: the job has not seen it, or all of it expired".into(),
            ),
            body,
        )),
    }
}

/// Sends the query to its instance's queue and waits for the answer.
async fn ask(
    shard: &ShardQueries,
    key: Vec<u8>,
    reader: Arc<dyn super::spec::StateReader>,
    params: Params,
) -> Result<(Option<Value>, super::AsOf), QueryError> {
    let (reply, answered) = tokio::sync::oneshot::channel();
    let query = StateQuery {
        reader,
        key,
        params,
        reply,
    };
    shard.send(query)?;
    match tokio::time::timeout(ANSWER_TIMEOUT, answered).await {
        Ok(Ok(answer)) => answer,
        Ok(Err(_)) => Err(QueryError::unavailable(
            "the keyed instance stopped before answering".into(),
        )),
        Err(_) => Err(QueryError::new(
            504,
            format!("no answer within {} s", ANSWER_TIMEOUT.as_secs()),
        )),
    }
}
