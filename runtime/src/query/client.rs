//! The command line's side of queries: `--query-addr` and
//! `strata state get --job <url>`.

use crate::error::{Result, RuntimeError};
use std::net::SocketAddr;

/// The environment variable holding the query token (never a config key:
/// a config file or `-D` would show it).
pub const TOKEN_ENV: &str = "STRATA_QUERY_TOKEN";

/// The token from the environment, if set and not empty.
pub fn token() -> Option<String> {
    std::env::var(TOKEN_ENV).ok().filter(|t| !t.is_empty())
}

/// `--query-addr`: `HOST:PORT` (an address, or a host name resolved to
/// its first address), or `PORT` / `:PORT` for 127.0.0.1.
///
/// Errors: [`RuntimeError::Usage`] naming the value.
pub fn parse_addr(text: &str) -> Result<SocketAddr> {
    use std::net::ToSocketAddrs;
    let port_only = text.strip_prefix(':').unwrap_or(text);
    if let Ok(port) = port_only.parse::<u16>() {
        return Ok(SocketAddr::from(([127, 0, 0, 1], port)));
    }
    let wrong = |why: String| {
        RuntimeError::Usage(format!(
            "--query-addr {text}: {why}; expected HOST:PORT (e.g. 127.0.0.1:8081, 0.0.0.0:8081, localhost:8081) or a port"
        ))
    };
    text.to_socket_addrs()
        .map_err(|e| wrong(e.to_string()))?
        .next()
        .ok_or_else(|| wrong("it names no address".into()))
}

/// `strata state get --job <url> [--since T] [--limit N] [--entry K]
/// <state> <key…>`: asks a running job (with the options that are set)
/// and returns its answer's JSON.
///
/// Errors: the job cannot be reached, or answers with an error (its
/// status and reason).
pub fn get(
    job: &str,
    state: &str,
    key: &[String],
    options: &[(&str, Option<String>)],
) -> Result<serde_json::Value> {
    let base = job.trim_end_matches('/');
    let wrong = |why: &str| {
        RuntimeError::Usage(format!(
            "--job {job}: {why}; expected the job's query address as http://HOST:PORT"
        ))
    };
    match base.strip_prefix("http://") {
        None => return Err(wrong("not an http:// address")),
        Some(rest) if rest.is_empty() || rest.contains(['/', '?', '#']) => {
            return Err(wrong("give the address alone, without a path"))
        }
        Some(_) => {}
    }
    let mut url = format!("{base}/state/{}", encode(state));
    for field in key {
        url.push('/');
        url.push_str(&encode(field));
    }
    let mut sep = '?';
    for (name, value) in options {
        if let Some(value) = value {
            url.push_str(&format!("{sep}{name}={}", encode(value)));
            sep = '&';
        }
    }
    crate::executor::block_on(async {
        let mut request = reqwest::Client::new()
            .get(&url)
            .timeout(std::time::Duration::from_secs(60));
        if let Some(token) = token() {
            request = request.bearer_auth(token);
        }
        let failed =
            |e: reqwest::Error| RuntimeError::Usage(format!("--job {job}: {}", causes(&e)));
        let reply = request.send().await.map_err(failed)?;
        let status = reply.status();
        let bytes = reply.bytes().await.map_err(failed)?;
        let body: serde_json::Value = serde_json::from_slice(&bytes).map_err(|e| {
            RuntimeError::Usage(format!(
                "--job {job}: {status}, and its answer is not JSON: {e}"
            ))
        })?;
        if status.is_success() {
            return Ok(body);
        }
        Err(RuntimeError::Usage(format!(
            "--job {job}: {status}: {}",
            body["error"].as_str().unwrap_or("(no reason given)")
        )))
    })?
}

/// An error with its causes, innermost last ("error sending request: …:
/// Connection refused").
fn causes(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        let more = c.to_string();
        if !text.contains(&more) {
            text = format!("{text}: {more}");
        }
        cause = c.source();
    }
    text
}

fn encode(segment: &str) -> String {
    percent_encoding::utf8_percent_encode(segment, percent_encoding::NON_ALPHANUMERIC).to_string()
}
