//! `query-load`: sends route-history queries to a running job's query
//! endpoint and prints what it measured, for `scripts/bench-query.sh`.
//!
//! ```text
//! query-load <addr> <flights.parquet> <rate per second, 0 = as fast as it can> <concurrency>
//! ```
//!
//! Asks for random routes of the flights file (each route equally likely)
//! over `concurrency` keep-alive connections, until the job's keyed
//! instances stop answering (its input ended) or the endpoint goes away.
//! Prints one JSON line: queries sent, answers by status, queries/s, and
//! latency p50/p99/max in ms over the answered (200 and 404) queries.

use std::time::{Duration, Instant};

#[derive(Default)]
struct Tally {
    latencies_us: Vec<u64>,
    ok: u64,
    not_found: u64,
    unavailable: u64,
    other: u64,
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let [_, addr, flights, rate, concurrency] = &args[..] else {
        eprintln!("usage: query-load <addr> <flights.parquet> <rate per second, 0 = unlimited> <concurrency>");
        std::process::exit(2);
    };
    let (rate, concurrency): (u64, usize) = (
        rate.parse().expect("rate"),
        concurrency.parse().expect("concurrency"),
    );
    let mut routes: Vec<String> = strata_tests::parquet_flights(std::path::Path::new(flights))
        .into_iter()
        .map(|f| strata_tests::query::history_path(&(f.2, f.3)))
        .collect();
    routes.sort();
    routes.dedup();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("runtime");
    let started = Instant::now();
    let tallies = runtime.block_on(run(addr, &routes, rate, concurrency));
    let elapsed = started.elapsed().as_secs_f64();
    let mut all = Tally::default();
    for t in tallies {
        all.latencies_us.extend(t.latencies_us);
        all.ok += t.ok;
        all.not_found += t.not_found;
        all.unavailable += t.unavailable;
        all.other += t.other;
    }
    all.latencies_us.sort_unstable();
    let pct = |p: f64| {
        let l = &all.latencies_us;
        l.get(((l.len() as f64 * p) as usize).min(l.len().saturating_sub(1)))
            .map_or(0.0, |us| *us as f64 / 1000.0)
    };
    let answered = all.ok + all.not_found;
    println!(
        "{}",
        serde_json::json!({
            "answered": answered, "ok": all.ok, "not_found": all.not_found,
            "unavailable": all.unavailable, "other": all.other,
            "seconds": elapsed, "queries_per_s": answered as f64 / elapsed,
            "p50_ms": pct(0.50), "p99_ms": pct(0.99),
            "max_ms": all.latencies_us.last().map_or(0.0, |us| *us as f64 / 1000.0),
        })
    );
}

/// `concurrency` workers, each with its share of `rate`, until the job's
/// instances stop answering.
async fn run(addr: &str, routes: &[String], rate: u64, concurrency: usize) -> Vec<Tally> {
    let client = reqwest::Client::new();
    let workers = (0..concurrency).map(|w| {
        let client = client.clone();
        let every = (rate > 0).then(|| Duration::from_secs_f64(concurrency as f64 / rate as f64));
        async move { worker(&client, addr, routes, every, w as u64).await }
    });
    futures::future::join_all(workers).await
}

async fn worker(
    client: &reqwest::Client,
    addr: &str,
    routes: &[String],
    every: Option<Duration>,
    seed: u64,
) -> Tally {
    let mut tally = Tally::default();
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut next = tokio::time::Instant::now();
    loop {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        let path = &routes[(state % routes.len() as u64) as usize];
        let sent = Instant::now();
        let reply = client.get(format!("http://{addr}{path}")).send().await;
        let Ok(reply) = reply else {
            return tally;
        };
        let status = reply.status().as_u16();
        let body = reply.bytes().await.unwrap_or_default();
        match status {
            200 | 404 => {
                tally.latencies_us.push(sent.elapsed().as_micros() as u64);
                if status == 200 {
                    tally.ok += 1;
                } else {
                    tally.not_found += 1;
                }
            }
            503 if String::from_utf8_lossy(&body).contains("stopped") => return tally,
            503 => tally.unavailable += 1,
            _ => tally.other += 1,
        }
        if let Some(every) = every {
            next += every;
            tokio::time::sleep_until(next).await;
        }
    }
}
