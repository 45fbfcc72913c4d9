//! The sink task: writes records as JSON lines into transactional part
//! files or a Kafka topic (keyed by the record's key), or drops them (a
//! discarding sink), pre-commits at barriers and commits on checkpoint
//! completion. Pre-commits and commits fsync or wait on Kafka, so they run
//! in `block_in_place`; a failed pre-commit fails the job naming the
//! checkpoint (what reached the file is uncertain after a failed fsync).

use super::Links;
use crate::channel::{Event, InputGate};
use crate::checkpoint::{Ack, TaskSnapshot};
use crate::error::{Result, RuntimeError};
use crate::function::Keyed;
use crate::progress::Progress;
use serde::Serialize;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use strata_connectors::kafka::{KafkaSink, OutRecord};
use strata_connectors::{FileSink, SinkState, Throttle};
use tokio::sync::{mpsc, watch};

/// Sink instance `index`: writes what its input gate delivers.
pub(crate) struct SinkTask<O> {
    index: u32,
    gate: InputGate<Keyed<O>>,
    sink: OutputSink,
    throttle: Option<Throttle>,
    acks: mpsc::Sender<Ack>,
    completed: watch::Receiver<u64>,
    progress: Arc<Progress>,
}

impl<O: Serialize + Send + 'static> SinkTask<O> {
    /// Sink instance `index`, writing what `gate` delivers into `sink`
    /// (at most as fast as `throttle` lets it).
    pub(crate) fn new(
        index: u32,
        gate: InputGate<Keyed<O>>,
        sink: OutputSink,
        throttle: Option<Throttle>,
        links: Links,
    ) -> Self {
        Self {
            index,
            gate,
            sink,
            throttle,
            acks: links.acks,
            completed: links.completed,
            progress: links.progress,
        }
    }

    pub(crate) async fn run(mut self) -> Result<()> {
        let mut line = Vec::with_capacity(256);
        let mut last_barrier = 0;
        let mut watching = true;
        loop {
            tokio::select! {
                event = self.gate.next() => match event? {
                    Event::Records(batch) => {
                        let n = batch.len() as u64;
                        self.write(batch, &mut line).await?;
                        self.progress.records_out.fetch_add(n, Ordering::Relaxed);
                    }
                    Event::Watermark(_) => {}
                    Event::Barrier(id) => {
                        last_barrier = id;
                        let name = format!("sink-{}", self.index);
                        let state = tokio::task::block_in_place(|| self.sink.pre_commit(id))
                            .map_err(|e| RuntimeError::from(e).in_checkpoint(id, &name))?;
                        self.acks.send(Ack::Snapshot(id, TaskSnapshot::Sink(self.index, state))).await.map_err(|_| RuntimeError::Disconnected)?;
                    }
                    Event::End => break,
                },
                // The coordinator ends after the final checkpoint completes
                // (closing this channel) and before the end of the stream
                // arrives here: stop watching then, the end commits.
                changed = self.completed.changed(), if watching => match changed {
                    Ok(()) => {
                        let id = *self.completed.borrow_and_update();
                        tokio::task::block_in_place(|| self.sink.commit(id))?;
                    }
                    Err(_) => watching = false,
                },
            }
        }
        while *self.completed.borrow_and_update() < last_barrier {
            self.completed
                .changed()
                .await
                .map_err(|_| RuntimeError::Disconnected)?;
        }
        Ok(tokio::task::block_in_place(|| {
            self.sink.finish(last_barrier)
        })?)
    }

    /// Writes a batch as JSON lines (`line`: a reused buffer); a
    /// discarding sink only keeps to the rate limit.
    async fn write(&mut self, batch: Vec<Keyed<O>>, line: &mut Vec<u8>) -> Result<()> {
        for record in batch {
            if let Some(t) = &self.throttle {
                t.acquire().await;
            }
            if matches!(self.sink, OutputSink::Discard) {
                continue;
            }
            line.clear();
            serde_json::to_writer(&mut *line, &record.value)
                .map_err(|e| RuntimeError::Function(e.to_string()))?;
            self.sink.write(&record.key, line)?;
        }
        Ok(())
    }
}

/// Where a sink instance writes.
pub(crate) enum OutputSink {
    File(FileSink),
    Kafka(Box<KafkaSink>),
    /// Drops what it is given (Flink's `DiscardingSink`).
    Discard,
}

impl OutputSink {
    fn write(&mut self, key: &[u8], line: &[u8]) -> Result<()> {
        match self {
            OutputSink::File(s) => s.write_line(line)?,
            OutputSink::Kafka(s) => s.write(&OutRecord {
                key,
                timestamp: None,
                value: line,
                headers: &[],
            })?,
            OutputSink::Discard => {}
        }
        Ok(())
    }

    fn pre_commit(&mut self, id: u64) -> strata_connectors::Result<SinkState> {
        match self {
            OutputSink::File(s) => s.pre_commit(id),
            OutputSink::Kafka(s) => s.pre_commit(id),
            OutputSink::Discard => Ok(SinkState::default()),
        }
    }

    /// Commits `id` (a Kafka sink's transactions follow on its publisher).
    fn commit(&mut self, id: u64) -> strata_connectors::Result<()> {
        match self {
            OutputSink::File(s) => s.commit(id),
            OutputSink::Kafka(s) => s.commit(id),
            OutputSink::Discard => Ok(()),
        }
    }

    /// Commits `id` and waits until the output holds it (the end of a run).
    fn finish(&mut self, id: u64) -> strata_connectors::Result<()> {
        match self {
            OutputSink::Kafka(s) => s.finish(id),
            _ => self.commit(id),
        }
    }
}
