//! Live queryable state (`--query-addr`): queries sent to a running
//! route-history are answered with the route's history exactly as of the
//! source position each answer reports (checked element by element against
//! the flights themselves), also when cold routes live in the real
//! Cassandra; bad requests get clear 4xx answers and the job's output stays
//! exact.

use std::collections::HashMap;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use strata_tests::cassandra::{contact_point, unique_keyspace};
use strata_tests::query::*;
use strata_tests::*;

/// A running `strata run route-history` with a query address.
struct Running {
    child: Child,
    addr: String,
    log: std::path::PathBuf,
}

fn start(
    input: &std::path::Path,
    out: &std::path::Path,
    extra: &[String],
    token: Option<&str>,
) -> Running {
    let addr = format!("127.0.0.1:{}", free_port());
    let log = out.with_extension("log");
    let mut args = route_history_args(input, out, None, &["--query-addr", &addr]);
    args.extend(extra.iter().flat_map(|d| ["-D".to_string(), d.clone()]));
    let mut cmd = Command::new(strata_bin());
    cmd.args(&args)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap());
    if let Some(t) = token {
        cmd.env("STRATA_QUERY_TOKEN", t);
    }
    let child = cmd.spawn().unwrap();
    Running { child, addr, log }
}

impl Running {
    /// Waits for the run to end successfully; its end-of-run summary.
    fn finish(mut self) -> HashMap<String, String> {
        let status = self.child.wait().unwrap();
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        assert!(status.success(), "{status}:\n{log}");
        summary_of(&log, "strata: done.")
    }

    fn running(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none()
    }
}

/// A deterministic pseudo-random sequence (no seed to keep).
fn lcg(state: &mut u64) -> usize {
    *state = state
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (*state >> 33) as usize
}

/// Sends up to `n` queries for random routes, `pause` apart, while the
/// job runs, checking every answer; returns how many were answered, and
/// how many of them before the input's end.
fn query_routes(
    job: &mut Running,
    flights: &[Flight],
    n: usize,
    pause: Duration,
) -> (usize, usize) {
    let routes = route_positions(flights, |i, _| i as u64);
    let names: Vec<&(String, String)> = {
        let mut v: Vec<_> = routes.keys().collect();
        v.sort();
        v
    };
    let (mut seed, mut mid_run, mut answered) = (7u64, 0, 0);
    for _ in 0..n {
        let route = names[lcg(&mut seed) % names.len()];
        let (status, body) = get(&job.addr, &history_path(route), None);
        if status == 503
            && body["error"]
                .as_str()
                .is_some_and(|e| e.contains("stopped"))
        {
            // The input ended: the keyed instances finished before the process.
            break;
        }
        let split = 0;
        let at = check_history_answer(route, &routes[route], split, status, &body);
        answered += 1;
        if at < flights.len() as u64 {
            mid_run += 1;
        }
        std::thread::sleep(pause);
    }
    (answered, mid_run)
}

fn assert_exact(out: &std::path::Path, flights: &[Flight], what: &str) {
    let got = read_output(out);
    if let Some(diff) = first_difference(&got, &reference_from_flights(flights)) {
        panic!("{what}: the output differs from the batch computation: {diff}");
    }
}

/// Sends `request` as it is over a socket (what an HTTP client would not
/// send: a URL over 64 kB, another method): the status and the rest.
fn raw(addr: &str, request: &str) -> (u16, String) {
    use std::io::{Read, Write};
    let mut c = std::net::TcpStream::connect(addr).unwrap();
    let _ = c.write_all(request.as_bytes());
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut answer = Vec::new();
    let _ = c.read_to_end(&mut answer);
    let text = String::from_utf8_lossy(&answer).into_owned();
    let status = text.get(9..12).and_then(|s| s.parse().ok()).unwrap_or(0);
    (status, text)
}

/// The status a request for `/state/history/<field>/PHL` gets.
fn raw_status(addr: &str, field: &str) -> u16 {
    raw(
        addr,
        &format!("GET /state/history/{field}/PHL HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"),
    )
    .0
}

#[test]
fn a_thousand_queries_during_the_3m_flight_run_equal_each_route_history_as_of_its_position() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let flights = parquet_flights(&flights_path());
    // Paced to about 60 s, so that the 1,000 queries land during the run
    // even when other tests share the cores (queries then take tens of ms).
    let mut job = start(
        &flights_path(),
        &out,
        &[
            "checkpoint.interval=2s".into(),
            "source.max-records-per-second=50000".into(),
        ],
        None,
    );
    wait_until_serving(&job.addr, None);
    let (answered, mid_run) = query_routes(&mut job, &flights, 1_000, Duration::from_millis(5));
    assert_eq!(answered, 1_000, "the job ended before 1,000 queries");
    assert!(
        mid_run >= 500,
        "only {mid_run} of 1,000 answers came while the job ran"
    );
    job.finish();
    assert_exact(&out, &flights, "with 1,000 queries");
}

#[test]
fn answers_read_through_l1_l2_and_cassandra_are_exact() {
    // A slice of 200,000 flights, paced: with 1 MB of L1 and 2 MB of L2
    // cold routes move to Cassandra at every checkpoint, and the queries
    // read them back from there as the job does (the full 3 M flights
    // would prove no more and take minutes).
    let input = flights_head(200_000);
    let flights = parquet_flights(&input);
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let keyspace = unique_keyspace("query");
    let settings: Vec<String> = vec![
        "checkpoint.interval=1s".into(),
        "source.max-records-per-second=10000".into(),
        "state.l1.capacity=1MB".into(),
        "state.l2.capacity=2MB".into(),
        format!("state.l3.contact-points={}", contact_point()),
        format!("state.l3.keyspace={keyspace}"),
    ];
    let mut job = start(&input, &out, &settings, None);
    wait_until_serving(&job.addr, None);
    // Each query waits for the batch its instance is in, which reads
    // Cassandra: tens of ms here.
    let (answered, mid_run) = query_routes(&mut job, &flights, 300, Duration::from_millis(5));
    assert!(
        answered >= 200 && mid_run * 2 >= answered,
        "{answered} answers, {mid_run} of them while the job ran"
    );
    let summary = job.finish();
    for figure in ["l3_evictions", "l3_hits"] {
        let n: u64 = summary[figure].parse().unwrap();
        assert!(n > 0, "{figure}=0: no route went through Cassandra");
    }
    assert_exact(&out, &flights, "with L3 and queries");
}

#[test]
fn bad_requests_get_clear_errors_and_the_job_stays_exact() {
    let input = flights_head(200_000);
    let flights = parquet_flights(&input);
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let token = "s3cret";
    let mut job = start(
        &input,
        &out,
        &["source.max-records-per-second=8000".into()],
        Some(token),
    );
    wait_until_serving(&job.addr, Some(token));
    let a = job.addr.clone();
    let ask = |path: &str| get(&a, path, Some(token));
    let cases: Vec<(&str, String, u16, &str)> = vec![
        ("no token", "/jobs/current".into(), 401, "needs a token"),
        (
            "unknown state",
            "/state/nope/LAS/PHL".into(),
            404,
            "no queryable state 'nope'",
        ),
        (
            "one key field",
            "/state/history/LAS".into(),
            400,
            "two fields",
        ),
        (
            "three key fields",
            "/state/history/LAS/PHL/X".into(),
            400,
            "two fields",
        ),
        (
            "not UTF-8",
            "/state/history/%FF%FE/PHL".into(),
            400,
            "not valid UTF-8",
        ),
        (
            "empty field",
            "/state/history//PHL".into(),
            400,
            "no empty segment",
        ),
        (
            "bad since",
            "/state/history/LAS/PHL?since=yesterday".into(),
            400,
            "since=yesterday",
        ),
        (
            "bad limit",
            "/state/history/LAS/PHL?limit=-1".into(),
            400,
            "limit=-1",
        ),
        (
            "unknown option",
            "/state/history/LAS/PHL?colour=red".into(),
            400,
            "unknown option",
        ),
        ("unknown route", "/metrics".into(), 404, "no route /metrics"),
        (
            "unseen key",
            "/state/history/ZZZ/YYY".into(),
            404,
            "has not seen it",
        ),
        (
            "an option twice",
            "/state/history/LAS/PHL?limit=1&limit=2".into(),
            400,
            "given twice",
        ),
        (
            "a map option on a list",
            "/state/history/LAS/PHL?entry=x".into(),
            400,
            "entry applies to map states",
        ),
    ];
    for (what, path, want, says) in cases {
        let (status, body) = if what == "no token" {
            get(&a, &path, None)
        } else {
            ask(&path)
        };
        let error = body["error"].as_str().unwrap_or_default();
        assert_eq!(status, want, "{what}: {body}");
        assert!(
            error.contains(says),
            "{what}: '{error}' does not say '{says}'"
        );
    }
    assert_eq!(
        get(&a, "/jobs/current", Some("wrong")).0,
        401,
        "a wrong token"
    );
    // The command line's client, with the token from the environment,
    // for the route of the first flight (seen at once).
    let url = format!("http://{a}");
    let (origin, destination) = (&flights[0].2, &flights[0].3);
    let first = history_path(&(origin.clone(), destination.clone()));
    let waited = Instant::now();
    while ask(&first).0 != 200 {
        assert!(
            waited.elapsed() < Duration::from_secs(30),
            "the first flight never showed"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let cli = |token: &str| {
        Command::new(strata_bin())
            .args([
                "state",
                "get",
                "--job",
                &url,
                "history",
                origin,
                destination,
            ])
            .env("STRATA_QUERY_TOKEN", token)
            .output()
            .unwrap()
    };
    let o = cli(token);
    assert!(o.status.success(), "{}", error_line(&o));
    let answer: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        answer["key"],
        serde_json::json!([origin, destination]),
        "{answer}"
    );
    assert!(
        answer["value"].as_array().is_some_and(|v| !v.is_empty()),
        "{answer}"
    );
    let o = cli("wrong");
    assert!(
        !o.status.success() && error_line(&o).contains("401"),
        "{}",
        error_line(&o)
    );
    let url_for_limit = format!("http://{a}");
    let o = Command::new(strata_bin())
        .args([
            "state",
            "get",
            "--job",
            &url_for_limit,
            "--since",
            "0",
            "--limit",
            "1",
        ])
        .args(["history", origin, destination])
        .env("STRATA_QUERY_TOKEN", token)
        .output()
        .unwrap();
    let one: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap_or_default();
    assert_eq!(
        one["value"].as_array().map(Vec::len),
        Some(1),
        "--limit 1: {}",
        error_line(&o)
    );
    let o = strata(&["state", "get", "--job", &a, "history", "LAS", "PHL"]);
    assert!(
        error_line(&o).contains("not an http:// address"),
        "{}",
        error_line(&o)
    );
    // The scheme is case-insensitive; other methods are refused in JSON.
    let (status, body) = raw(&a, &format!("GET /jobs/current HTTP/1.1\r\nHost: x\r\nAuthorization: bearer {token}\r\nConnection: close\r\n\r\n"));
    assert_eq!(status, 200, "{body}");
    let (status, body) = raw(
        &a,
        "POST /jobs/current HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(status, 405, "{body}");
    assert!(body.contains("\"error\""), "{body}");
    let long = format!("/state/history/{}/PHL", "A".repeat(10_000));
    let (status, body) = ask(&long);
    assert_eq!(status, 414, "a 10 kB path: {body}");
    assert_eq!(
        raw_status(&a, &"A".repeat(1 << 20)),
        431,
        "a 1 MB request line"
    );
    // 10,000 connections held open with half a request each: at most 512
    // are served at once, the others get a 503 and are closed (so they
    // cannot use up the job's file descriptors); the endpoint still
    // answers, and the job goes on.
    let mut held = Vec::new();
    for _ in 0..10_000 {
        match std::net::TcpStream::connect(&a) {
            Ok(mut c) => {
                use std::io::Write;
                let _ = c.write_all(b"GET /jobs/current HTTP/1.1\r\n");
                held.push(c);
            }
            Err(e) => panic!("connection {} refused: {e}", held.len()),
        }
    }
    let fds = std::fs::read_dir(format!("/proc/{}/fd", job.child.id()))
        .unwrap()
        .count();
    assert!(
        fds < 2_000,
        "the job holds {fds} file descriptors with 10,000 connections open"
    );
    // While refused connections linger (512 at most, 200 ms each), one
    // more is reset: a client retries it, and gets an answer or a 503.
    let started = Instant::now();
    let (status, body) = loop {
        let (status, body) = ask("/state/history/LAS/PHL");
        if status != 0 || started.elapsed() > Duration::from_secs(10) {
            break (status, body);
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(
        status == 200 || status == 503,
        "with 10,000 connections open: {status} {body}"
    );
    assert!(started.elapsed() < Duration::from_secs(30));
    drop(held);
    let closed = Instant::now();
    let (status, body) = loop {
        let (status, body) = ask("/jobs/current");
        if status == 200 || closed.elapsed() > Duration::from_secs(10) {
            break (status, body);
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(
        status,
        200,
        "{body} ({:?} after closing the connections)",
        closed.elapsed()
    );
    assert!(job.running(), "the job ended early");
    job.finish();
    assert_exact(&out, &flights, "after bad requests");
}

#[test]
fn serving_other_machines_needs_a_token() {
    let dir = tempfile::tempdir().unwrap();
    let args = route_history_args(
        &flights_head(1_000),
        &dir.path().join("out"),
        None,
        &["--query-addr", "0.0.0.0:0"],
    );
    let o = Command::new(strata_bin())
        .args(&args)
        .env_remove("STRATA_QUERY_TOKEN")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", error_line(&o));
    assert!(
        error_line(&o).contains("STRATA_QUERY_TOKEN"),
        "{}",
        error_line(&o)
    );
    let bad = strata(&route_history_args(
        &flights_head(1_000),
        &dir.path().join("out2"),
        None,
        &["--query-addr", "nowhere"],
    ));
    assert!(
        error_line(&bad).contains("--query-addr nowhere"),
        "{}",
        error_line(&bad)
    );
}
