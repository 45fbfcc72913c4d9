//! Querying a running job's state (`--query-addr`) and checking answers
//! against the flights themselves.

use crate::Flight;
use serde_json::Value;
use std::collections::HashMap;

/// A free port on 127.0.0.1 (bound then released).
pub fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a port");
    listener.local_addr().expect("address").port()
}

/// `GET http://<addr><path>` with `token` as bearer: the status and the
/// JSON body (`Value::Null` when it is not JSON).
pub fn get(addr: &str, path: &str, token: Option<&str>) -> (u16, Value) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let mut request = reqwest::Client::new()
            .get(format!("http://{addr}{path}"))
            .timeout(std::time::Duration::from_secs(60));
        if let Some(t) = token {
            request = request.bearer_auth(t);
        }
        match request.send().await {
            Ok(reply) => {
                let status = reply.status().as_u16();
                let body = reply.bytes().await.unwrap_or_default();
                (status, serde_json::from_slice(&body).unwrap_or(Value::Null))
            }
            Err(e) => (0, Value::String(e.to_string())),
        }
    })
}

/// Waits (up to a minute) until `addr`'s `/jobs/current` shows a
/// running pipeline (`shards` not empty).
pub fn wait_until_serving(addr: &str, token: Option<&str>) {
    let start = std::time::Instant::now();
    while start.elapsed() < std::time::Duration::from_secs(60) {
        let (status, body) = get(addr, "/jobs/current", token);
        if status == 200 && body["shards"].as_array().is_some_and(|s| !s.is_empty()) {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    panic!("{addr} did not serve /jobs/current within a minute");
}

/// The 60-day window of route-history's state, ms.
const WINDOW: i64 = 60 * 24 * 3600 * 1000;

/// A route: (origin, destination).
pub type Route = (String, String);

/// Per route, its flights as (index in their split, date ms, delay).
pub type RouteFlights = HashMap<Route, Vec<(u64, i64, i64)>>;

/// Each route's flights with their place in their split: `(index, date
/// ms, delay)` in input order, where the index counts from 0 (a file's
/// row, a partition's offset). `position_of` gets a flight's row in the
/// whole input and returns its index.
pub fn route_positions(
    flights: &[Flight],
    mut position_of: impl FnMut(usize, &Flight) -> u64,
) -> RouteFlights {
    let mut routes = RouteFlights::new();
    for (i, f) in flights.iter().enumerate() {
        let pos = position_of(i, f);
        routes
            .entry((f.2.clone(), f.3.clone()))
            .or_default()
            .push((pos, f.0, f.1));
    }
    routes
}

/// Checks one answer for route-history's `history` of `route` (status
/// and body as [`get`] returns them) against the route's flights: the
/// elements must be exactly the route's flights whose index is below the
/// position the answer reports for the route's split (`split`: the next
/// row or offset to process), oldest first, less the
/// ones expired at the watermark it reports; a 404 must mean there are
/// none. Returns the position the answer stood at.
pub fn check_history_answer(
    route: &(String, String),
    flights: &[(u64, i64, i64)],
    split: usize,
    status: u16,
    body: &Value,
) -> u64 {
    assert!(
        status == 200 || status == 404,
        "{route:?}: status {status}: {body}"
    );
    let as_of = &body["as_of"];
    let next = as_of["positions"][split].as_u64().unwrap_or(0);
    let watermark = as_of["watermark"].as_i64().expect("as_of.watermark");
    let cutoff = watermark.saturating_sub(WINDOW);
    let want: Vec<(String, i64)> = flights
        .iter()
        .filter(|(pos, date, _)| *pos < next && *date > cutoff)
        .map(|(_, date, delay)| (format_date(*date), *delay))
        .collect();
    let got: Vec<(String, i64)> = body["value"]
        .as_array()
        .map(|items| {
            items
                .iter()
                .map(|e| {
                    (
                        e["date"].as_str().unwrap_or_default().to_owned(),
                        e["delay"].as_i64().unwrap_or(i64::MIN),
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    if got != want {
        let first = got.iter().zip(&want).position(|(g, w)| g != w);
        panic!(
            "{route:?} as of position {next}, watermark {watermark}, checkpoint {}: status {status}: {} elements, {} expected; first difference at {first:?}: got {:?}, want {:?}",
            as_of["checkpoint"],
            got.len(),
            want.len(),
            first.map(|i| &got[i]).or(got.last()),
            first.map(|i| &want[i]).or(want.last()),
        );
    }
    if status == 404 {
        assert!(want.is_empty(), "{route:?}: 404 but it has flights");
    }
    next
}

fn format_date(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .expect("date")
        .naive_utc()
        .format("%Y-%m-%dT%H:%M:%S")
        .to_string()
}

/// The query path of route-history's history of `route`.
pub fn history_path(route: &(String, String)) -> String {
    let enc = |s: &str| {
        s.bytes()
            .map(|b| match b {
                b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' => (b as char).to_string(),
                _ => format!("%{b:02X}"),
            })
            .collect::<String>()
    };
    format!("/state/history/{}/{}", enc(&route.0), enc(&route.1))
}
