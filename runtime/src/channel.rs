//! Bounded edges between tasks, and the input gate that aligns barriers.
//!
//! Every edge is a bounded tokio channel of [`Message`]s: batches of records
//! and, in the same stream, watermarks, checkpoint barriers and the end of
//! input (timely-dataflow's and Flink's vocabulary: progress travels with the
//! data). A full channel makes the sender wait, which is how backpressure
//! travels from the slowest task back to the source; the time spent waiting
//! is recorded as backpressured time, and time spent waiting for input as
//! idle time ([`TaskTimes`]).
//!
//! A task with several inputs reads them through an `InputGate`, which
//! forwards a watermark once every input has passed it (the minimum), and
//! aligns barriers: after barrier N arrives on one input, that input is not
//! read until barrier N has arrived on all of them (Chandy–Lamport
//! alignment, as in Flink's aligned checkpoints).

use crate::error::{Result, RuntimeError};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::Poll;
use tokio::sync::mpsc;

/// What flows on an edge.
#[derive(Debug)]
pub enum Message<T> {
    /// A batch of records, in order.
    Records(Vec<T>),
    /// No record with a smaller timestamp (ms) follows on this edge.
    Watermark(i64),
    /// Checkpoint barrier N: everything before it belongs to checkpoint N.
    Barrier(u64),
    /// No more messages on this edge.
    End,
}

/// Nanoseconds a task spent idle (waiting for input) and backpressured
/// (waiting to send). Busy time is the rest of the wall-clock time.
#[derive(Debug, Default)]
pub struct TaskTimes {
    idle: WaitClock,
    backpressured: WaitClock,
}

/// Time spent in one kind of wait: finished waits plus the one going on
/// (so a task stalled for minutes shows it every second, not at the end).
#[derive(Debug, Default)]
struct WaitClock {
    total_ns: AtomicU64,
    /// When the current wait began, ns since [`epoch`] plus one; 0 = none.
    since: AtomicU64,
}

fn epoch() -> std::time::Instant {
    static EPOCH: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    *EPOCH.get_or_init(std::time::Instant::now)
}

fn now_ns() -> u64 {
    epoch().elapsed().as_nanos() as u64 + 1
}

impl WaitClock {
    fn begin(&self) -> Wait<'_> {
        let since = now_ns();
        self.since.store(since, Ordering::Relaxed);
        Wait { clock: self, since }
    }

    fn total(&self) -> u64 {
        let since = self.since.load(Ordering::Relaxed);
        let current = if since == 0 {
            0
        } else {
            now_ns().saturating_sub(since)
        };
        self.total_ns.load(Ordering::Relaxed) + current
    }
}

/// A wait in progress; dropping it (also when the waiting future is
/// cancelled) adds its time to the total.
struct Wait<'a> {
    clock: &'a WaitClock,
    since: u64,
}

impl Drop for Wait<'_> {
    fn drop(&mut self) {
        self.clock.since.store(0, Ordering::Relaxed);
        self.clock
            .total_ns
            .fetch_add(now_ns().saturating_sub(self.since), Ordering::Relaxed);
    }
}

impl TaskTimes {
    /// (idle, backpressured) nanoseconds so far, the current wait included.
    pub fn totals(&self) -> (u64, u64) {
        (self.idle.total(), self.backpressured.total())
    }
}

/// Creates one bounded edge of `capacity` messages.
pub(crate) fn edge<T>(capacity: usize) -> (mpsc::Sender<Message<T>>, mpsc::Receiver<Message<T>>) {
    mpsc::channel(capacity)
}

/// The sending end of a task: one or more bounded edges.
pub(crate) struct Output<T> {
    edges: Vec<mpsc::Sender<Message<T>>>,
    times: Arc<TaskTimes>,
}

impl<T> Output<T> {
    pub(crate) fn new(edges: Vec<mpsc::Sender<Message<T>>>, times: Arc<TaskTimes>) -> Self {
        Self { edges, times }
    }

    /// The number of edges.
    pub(crate) fn len(&self) -> usize {
        self.edges.len()
    }

    /// Sends `msg` on edge `i`, waiting (backpressured) while it is full.
    pub(crate) async fn send(&self, i: usize, msg: Message<T>) -> Result<()> {
        let edge = &self.edges[i];
        match edge.try_send(msg) {
            Ok(()) => Ok(()),
            Err(mpsc::error::TrySendError::Full(msg)) => {
                let _wait = self.times.backpressured.begin();
                edge.send(msg).await.map_err(|_| RuntimeError::Disconnected)
            }
            Err(mpsc::error::TrySendError::Closed(_)) => Err(RuntimeError::Disconnected),
        }
    }

    /// Sends a control message (watermark, barrier, end) on every edge.
    pub(crate) async fn broadcast(&self, make: impl Fn() -> Message<T>) -> Result<()> {
        for i in 0..self.edges.len() {
            self.send(i, make()).await?;
        }
        Ok(())
    }
}

/// What a task reads from its inputs, after watermark merging and barrier
/// alignment.
#[derive(Debug)]
pub(crate) enum Event<T> {
    Records(Vec<T>),
    Watermark(i64),
    Barrier(u64),
    End,
}

/// Reads a task's inputs, merging watermarks and aligning barriers.
pub(crate) struct InputGate<T> {
    inputs: Vec<mpsc::Receiver<Message<T>>>,
    watermarks: Vec<i64>,
    blocked: Vec<bool>,
    ended: Vec<bool>,
    watermark: i64,
    next: usize,
    times: Arc<TaskTimes>,
}

impl<T> InputGate<T> {
    pub(crate) fn new(inputs: Vec<mpsc::Receiver<Message<T>>>, times: Arc<TaskTimes>) -> Self {
        let n = inputs.len();
        Self {
            inputs,
            watermarks: vec![i64::MIN; n],
            blocked: vec![false; n],
            ended: vec![false; n],
            watermark: i64::MIN,
            next: 0,
            times,
        }
    }

    fn readable(&self, i: usize) -> bool {
        !self.blocked[i] && !self.ended[i]
    }

    fn try_read(&mut self) -> Option<(usize, Option<Message<T>>)> {
        let n = self.inputs.len();
        for k in 0..n {
            let i = (self.next + k) % n;
            if !self.readable(i) {
                continue;
            }
            match self.inputs[i].try_recv() {
                Ok(m) => {
                    self.next = (i + 1) % n;
                    return Some((i, Some(m)));
                }
                Err(mpsc::error::TryRecvError::Disconnected) => return Some((i, None)),
                Err(mpsc::error::TryRecvError::Empty) => {}
            }
        }
        None
    }

    async fn read(&mut self) -> (usize, Option<Message<T>>) {
        if let Some(got) = self.try_read() {
            return got;
        }
        let times = self.times.clone();
        let _wait = times.idle.begin();
        std::future::poll_fn(|cx| {
            for i in 0..self.inputs.len() {
                if !self.readable(i) {
                    continue;
                }
                if let Poll::Ready(m) = self.inputs[i].poll_recv(cx) {
                    return Poll::Ready((i, m));
                }
            }
            Poll::Pending
        })
        .await
    }

    fn merged_watermark(&self) -> i64 {
        (0..self.inputs.len())
            .filter(|&i| !self.ended[i])
            .map(|i| self.watermarks[i])
            .min()
            .unwrap_or(i64::MAX)
    }

    fn aligned(&self) -> bool {
        (0..self.inputs.len()).all(|i| self.blocked[i] || self.ended[i])
    }

    /// The next event. Cancel-safe: a message is either returned or not read.
    pub(crate) async fn next(&mut self) -> Result<Event<T>> {
        loop {
            let (i, msg) = self.read().await;
            match msg.ok_or(RuntimeError::Disconnected)? {
                Message::Records(batch) => return Ok(Event::Records(batch)),
                Message::Watermark(w) => {
                    self.watermarks[i] = self.watermarks[i].max(w);
                    if let Some(w) = self.advance_watermark() {
                        return Ok(Event::Watermark(w));
                    }
                }
                Message::Barrier(n) => {
                    self.blocked[i] = true;
                    if self.aligned() {
                        self.blocked.iter_mut().for_each(|b| *b = false);
                        return Ok(Event::Barrier(n));
                    }
                }
                Message::End => {
                    self.ended[i] = true;
                    if self.ended.iter().all(|e| *e) {
                        return Ok(Event::End);
                    }
                    if let Some(w) = self.advance_watermark() {
                        return Ok(Event::Watermark(w));
                    }
                }
            }
        }
    }

    fn advance_watermark(&mut self) -> Option<i64> {
        let merged = self.merged_watermark();
        (merged > self.watermark).then(|| {
            self.watermark = merged;
            merged
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn barriers_align_and_watermarks_take_the_minimum() {
        let times = Arc::new(TaskTimes::default());
        let (a_tx, a_rx) = edge::<u32>(8);
        let (b_tx, b_rx) = edge::<u32>(8);
        let mut gate = InputGate::new(vec![a_rx, b_rx], times);
        a_tx.send(Message::Watermark(10)).await.unwrap();
        a_tx.send(Message::Barrier(1)).await.unwrap();
        a_tx.send(Message::Records(vec![99])).await.unwrap();
        b_tx.send(Message::Records(vec![1])).await.unwrap();
        b_tx.send(Message::Watermark(5)).await.unwrap();
        b_tx.send(Message::Barrier(1)).await.unwrap();
        // Input a is blocked after its barrier: b's record comes first, then
        // the watermark min(10, 5), then the aligned barrier, then a's record.
        assert!(matches!(gate.next().await.unwrap(), Event::Records(v) if v == vec![1]));
        assert!(matches!(gate.next().await.unwrap(), Event::Watermark(5)));
        assert!(matches!(gate.next().await.unwrap(), Event::Barrier(1)));
        assert!(matches!(gate.next().await.unwrap(), Event::Records(v) if v == vec![99]));
    }
}
