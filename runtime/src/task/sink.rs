//! The sink task: writes records as JSON lines into transactional part
//! files, pre-commits at barriers and commits on checkpoint completion.

use crate::channel::{Event, InputGate};
use crate::checkpoint::{Ack, TaskSnapshot};
use crate::error::{Result, RuntimeError};
use crate::progress::Progress;
use serde::Serialize;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use strata_connectors::{FileSink, Throttle};
use tokio::sync::{mpsc, watch};

pub(crate) struct SinkTask<O> {
    pub(crate) index: u32,
    pub(crate) gate: InputGate<O>,
    pub(crate) sink: FileSink,
    pub(crate) throttle: Option<Throttle>,
    pub(crate) acks: mpsc::Sender<Ack>,
    pub(crate) completed: watch::Receiver<u64>,
    pub(crate) progress: Arc<Progress>,
}

impl<O: Serialize + Send + 'static> SinkTask<O> {
    pub(crate) async fn run(mut self) -> Result<()> {
        let mut line = Vec::with_capacity(256);
        let mut last_barrier = 0;
        loop {
            tokio::select! {
                event = self.gate.next() => match event? {
                    Event::Records(batch) => {
                        let n = batch.len() as u64;
                        for record in batch {
                            if let Some(t) = &self.throttle {
                                t.acquire().await;
                            }
                            line.clear();
                            serde_json::to_writer(&mut line, &record).map_err(|e| RuntimeError::Function(e.to_string()))?;
                            self.sink.write_line(&line)?;
                        }
                        self.progress.records_out.fetch_add(n, Ordering::Relaxed);
                    }
                    Event::Watermark(_) => {}
                    Event::Barrier(id) => {
                        last_barrier = id;
                        let state = self.sink.pre_commit(id)?;
                        self.acks.send(Ack::Snapshot(id, TaskSnapshot::Sink(self.index, state))).await.map_err(|_| RuntimeError::Disconnected)?;
                    }
                    Event::End => break,
                },
                changed = self.completed.changed() => {
                    changed.map_err(|_| RuntimeError::Disconnected)?;
                    let id = *self.completed.borrow_and_update();
                    self.sink.commit(id)?;
                }
            }
        }
        while *self.completed.borrow_and_update() < last_barrier {
            self.completed
                .changed()
                .await
                .map_err(|_| RuntimeError::Disconnected)?;
        }
        Ok(self.sink.commit(last_barrier)?)
    }
}
