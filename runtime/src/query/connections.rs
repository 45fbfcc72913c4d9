//! Accepting the query endpoint's connections without letting clients
//! take the job down: at most [`MAX_CONNECTIONS`] are served at once (the
//! rest get a 503 at once and are closed, so idle or half-sent
//! connections can never use up the process's file descriptors, which
//! the job's files need), a request's head must arrive within
//! [`HEADER_TIMEOUT`] (idle keep-alive connections included), and only
//! HTTP/1.1 is spoken (hyper's server; strata parses no HTTP).

use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;

/// Connections served at once; one more gets a 503 and is closed.
pub const MAX_CONNECTIONS: usize = 512;

/// How long a connection may take to send a request's head, or stay idle
/// between requests, before it is closed.
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(10);

/// What a connection over [`MAX_CONNECTIONS`] gets before it is closed: a
/// fixed answer written whole, without reading its request.
const BUSY: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nretry-after: 1\r\nconnection: close\r\ncontent-length: 80\r\n\r\n{\"error\":\"the query endpoint serves 512 connections at once: retry in a moment\"}";

/// Connections the kernel holds for the endpoint until it accepts them
/// (the standard library's default is 128: a burst of clients would be
/// refused while the endpoint turns away the ones over the limit).
const BACKLOG: i32 = 4096;

/// A listening socket on `addr` with a backlog of [`BACKLOG`].
pub(super) fn bind(addr: std::net::SocketAddr) -> std::io::Result<std::net::TcpListener> {
    use socket2::{Domain, Socket, Type};
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, None)?;
    socket.set_reuse_address(true)?;
    socket.bind(&addr.into())?;
    socket.listen(BACKLOG)?;
    Ok(socket.into())
}

/// Serves `app` on `listener` until the runtime ends.
pub(super) async fn serve(listener: TcpListener, app: Router) {
    let permits = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    // Refused connections read for a moment before closing, at most this
    // many at once (more are closed at once).
    let lingering = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            // Out of file descriptors or a connection reset before it was
            // accepted: wait, as a busy server does, and go on.
            Err(_) => {
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        match permits.clone().try_acquire_owned() {
            Ok(permit) => {
                let service = TowerToHyperService::new(app.clone());
                tokio::spawn(async move {
                    let _ = hyper::server::conn::http1::Builder::new()
                        .timer(TokioTimer::new())
                        .header_read_timeout(HEADER_TIMEOUT)
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                    drop(permit);
                });
            }
            Err(_) => refuse(stream, &lingering),
        }
    }
}

/// Writes [`BUSY`] at once (a fresh socket's send buffer takes it whole;
/// no task waits on it), then, while fewer than [`MAX_CONNECTIONS`]
/// refused connections linger, reads what the client sent for a moment
/// before closing: closing a socket with unread input resets the
/// connection, and the client would see an error instead of the 503.
/// Past that the connection is closed at once, so a flood never holds
/// more descriptors than the two limits.
fn refuse(stream: TcpStream, lingering: &Arc<Semaphore>) {
    let _ = stream.try_write(BUSY);
    let Ok(linger) = lingering.clone().try_acquire_owned() else {
        return;
    };
    tokio::spawn(async move {
        let mut stream = stream;
        let _ = stream.shutdown().await;
        let mut sink = [0u8; 4096];
        let _ = tokio::time::timeout(Duration::from_millis(200), async {
            while matches!(stream.read(&mut sink).await, Ok(n) if n > 0) {}
        })
        .await;
        drop(linger);
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_busy_answer_is_whole_and_names_the_limit() {
        let text = std::str::from_utf8(BUSY).unwrap();
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        assert!(head.contains(&format!("content-length: {}", body.len())));
        assert!(body.contains(&MAX_CONNECTIONS.to_string()));
        serde_json::from_str::<serde_json::Value>(body).unwrap();
    }
}
