//! A keyed operator instance: runs the user's [`KeyedProcessFunction`] over
//! its key groups with a tiered [`StateStore`], fires event-time timers as
//! the watermark advances, snapshots its state at barriers, and — when a
//! checkpoint completes — lets the store move the cold keys it picked at
//! that checkpoint's barrier to L3 (between batches, so a slow L3 slows this
//! task and backpressure reaches the source).
//!
//! State access blocks (RocksDB reads and writes, L3 reads, fsyncs), so a
//! batch of records, a round of timers, the synchronous part of a
//! checkpoint and a cold move each run in `block_in_place`: the worker
//! thread's other tasks (metrics, the source, other operators) move to
//! another thread meanwhile. The upload of a checkpoint's files runs on the
//! blocking pool; if it fails, the task declines that checkpoint to the
//! coordinator at once and goes on.

use super::Links;
use crate::channel::{Event, InputGate, Message, Output};
use crate::checkpoint::{Ack, OperatorSnapshot, TaskSnapshot};
use crate::error::{Result, RuntimeError};
use crate::function::{Context, Keyed, KeyedProcessFunction, Timers, TIMERS_STATE};
use crate::progress::Progress;
use crate::query::{AsOf, StateQuery, QUEUE_PER_INSTANCE};
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use strata_cache::key_group::KeyGroupRange;
use strata_cache::snapshot::IncrementalUploader;
use strata_cache::{StateStore, ValueState};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

/// A keyed operator instance's edges: the records it reads and those it
/// emits (in batches of `batch_size`), and, with a query service, the
/// queries for its keys.
pub(crate) struct KeyedEdges<I, O> {
    pub(crate) input: InputGate<Keyed<I>>,
    pub(crate) output: Output<Keyed<O>>,
    pub(crate) batch_size: usize,
    pub(crate) queries: Option<mpsc::Receiver<StateQuery>>,
    /// Per source split, the position the restored checkpoint read to
    /// (where a query's answer stands before the first record).
    pub(crate) positions: Vec<u64>,
}

/// Keyed operator instance `index`: runs the job's function on the
/// records of its key groups, with their state in its store.
pub(crate) struct KeyedTask<F: KeyedProcessFunction> {
    index: u32,
    key_groups: KeyGroupRange,
    function: F,
    store: StateStore,
    timers: Timers,
    gate: InputGate<Keyed<F::In>>,
    out: Output<Keyed<F::Out>>,
    batch_size: usize,
    uploader: Arc<Mutex<IncrementalUploader>>,
    local_checkpoints: PathBuf,
    acks: mpsc::Sender<Ack>,
    progress: Arc<Progress>,
    /// The id of the newest completed checkpoint (the restored one at start).
    completed: watch::Receiver<u64>,
    /// Queries for this instance's keys (with `--query-addr`), answered
    /// between record batches.
    queries: Option<mpsc::Receiver<StateQuery>>,
    /// Per source split, the position after the last record processed.
    positions: Vec<u64>,
}

fn failed(e: crate::function::FunctionError) -> RuntimeError {
    RuntimeError::Function(e.to_string())
}

impl<F: KeyedProcessFunction> KeyedTask<F> {
    /// Instance `index` of key groups `key_groups`, running `function`
    /// on `store` (its timers restored from it), with `edges`; its
    /// snapshots upload through `uploader`, their RocksDB checkpoints
    /// made in `local_checkpoints` first.
    ///
    /// Errors: the store's timers cannot be read.
    pub(crate) fn new(
        (index, key_groups): (u32, KeyGroupRange),
        function: F,
        store: StateStore,
        edges: KeyedEdges<F::In, F::Out>,
        (uploader, local_checkpoints): (IncrementalUploader, PathBuf),
        links: Links,
    ) -> Result<Self> {
        Ok(Self {
            index,
            key_groups,
            function,
            timers: Self::restore_timers(&store)?,
            store,
            gate: edges.input,
            out: edges.output,
            batch_size: edges.batch_size,
            uploader: Arc::new(Mutex::new(uploader)),
            local_checkpoints,
            acks: links.acks,
            progress: links.progress,
            completed: links.completed,
            queries: edges.queries,
            positions: edges.positions,
        })
    }

    /// Reads the timers a restored store holds.
    fn restore_timers(store: &StateStore) -> Result<Timers> {
        let mut timers = Timers::default();
        for (key, times) in Self::timers_state(store)?.local_entries()? {
            timers.restore(key, times);
        }
        Ok(timers)
    }

    fn timers_state(store: &StateStore) -> Result<ValueState<Vec<i64>>> {
        Ok(store.value_state::<Vec<i64>>(TIMERS_STATE)?)
    }

    fn name(&self) -> String {
        format!("keyed-{}", self.index)
    }

    /// Moves the keys picked at checkpoint `id` or earlier to L3. It waits
    /// on L3 (retrying while L3 is down) in `block_in_place`.
    fn checkpoint_completed(&self, id: u64) -> Result<()> {
        tokio::task::block_in_place(|| self.store.checkpoint_completed(id))?;
        Ok(())
    }

    /// The next input event; completion notices arriving meanwhile are
    /// handled first (a lost notice is subsumed by the next one), and
    /// queries are answered while no input waits. After each event the
    /// queries that queued up meanwhile are answered (at most a queue's
    /// worth), so a query waits for one batch at most and records for
    /// one queue of queries at most.
    async fn next_event(&mut self, watching: &mut bool) -> Result<Event<Keyed<F::In>>> {
        self.answer_queued();
        loop {
            let querying = self.queries.is_some();
            tokio::select! {
                biased;
                changed = self.completed.changed(), if *watching => match changed {
                    Ok(()) => {
                        let id = *self.completed.borrow_and_update();
                        self.checkpoint_completed(id)?;
                    }
                    Err(_) => *watching = false,
                },
                event = self.gate.next() => return event,
                query = next_query(&mut self.queries), if querying => match query {
                    Some(q) => self.answer(q),
                    None => self.queries = None,
                },
            }
        }
    }

    fn answer_queued(&mut self) {
        for _ in 0..QUEUE_PER_INSTANCE {
            match self.queries.as_mut().map(|q| q.try_recv()) {
                Some(Ok(query)) => self.answer(query),
                _ => return,
            }
        }
    }

    /// Answers a query from this instance's store, as of the records
    /// processed so far (reads block: `block_in_place`).
    fn answer(&self, query: StateQuery) {
        let as_of = AsOf {
            positions: self.positions.clone(),
            watermark: self.store.clock().watermark(),
            checkpoint: *self.completed.borrow(),
        };
        tokio::task::block_in_place(|| query.answer(&self.store, as_of));
    }

    /// After the input ended: waits for the last checkpoint `last` to
    /// complete, then moves what it picked to L3.
    async fn finish_eviction(&mut self, last: u64) -> Result<()> {
        while *self.completed.borrow_and_update() < last {
            if self.completed.changed().await.is_err() {
                return Ok(());
            }
        }
        let id = *self.completed.borrow();
        self.checkpoint_completed(id)
    }

    /// Runs the instance to the end of its input; a corruption RocksDB
    /// finds names the checkpoint file it came from (see
    /// [`super::corruption`]).
    pub(crate) async fn run(mut self) -> Result<()> {
        let result = self.run_to_end().await;
        result.map_err(|e| {
            let uploader = self.uploader.lock().unwrap_or_else(|p| p.into_inner());
            super::corruption::name_checkpoint_file(e, &uploader)
        })
    }

    async fn run_to_end(&mut self) -> Result<()> {
        self.function.open(&self.store).map_err(failed)?;
        // A restored checkpoint may have picked keys it never moved.
        let restored = *self.completed.borrow_and_update();
        self.checkpoint_completed(restored)?;
        let mut buf = Vec::with_capacity(self.batch_size);
        let mut uploads: Vec<JoinHandle<()>> = Vec::new();
        let (mut watching, mut last_barrier) = (true, restored);
        loop {
            match self.next_event(&mut watching).await? {
                Event::Records(batch) => {
                    self.progress
                        .records_processed
                        .fetch_add(batch.len() as u64, Ordering::Relaxed);
                    self.process_batch(batch, &mut buf).await?;
                }
                Event::Watermark(w) => {
                    // The end of a bounded input (watermark = i64::MAX) fires
                    // every timer but is no evidence that event time passed:
                    // state TTL keeps measuring against the last data watermark.
                    if w != i64::MAX {
                        self.store.clock().advance_watermark(w);
                    }
                    self.fire_timers(w, &mut buf).await?;
                    self.out.broadcast(|| Message::Watermark(w)).await?;
                }
                Event::Barrier(id) => {
                    uploads.retain(|u| !u.is_finished());
                    uploads.push(self.checkpoint(id).await?);
                    last_barrier = id;
                }
                Event::End => break,
            }
        }
        self.out.broadcast(|| Message::End).await?;
        for upload in uploads {
            let _ = upload.await;
        }
        self.finish_eviction(last_barrier).await
    }

    /// Processes a batch of records (state access blocks: see the module
    /// docs), sending output whenever a batch of it is full.
    async fn process_batch(
        &mut self,
        batch: Vec<Keyed<F::In>>,
        buf: &mut Vec<Keyed<F::Out>>,
    ) -> Result<()> {
        tokio::task::block_in_place(|| {
            self.store.prefetch(batch.iter().map(|r| r.key.as_slice()))
        })?;
        let mut records = batch.into_iter().peekable();
        while records.peek().is_some() {
            tokio::task::block_in_place(|| {
                for r in records.by_ref() {
                    self.process(r, buf)?;
                    if buf.len() >= self.batch_size {
                        break;
                    }
                }
                Ok::<_, RuntimeError>(())
            })?;
            self.emit(buf).await?;
        }
        Ok(())
    }

    fn process(&mut self, r: Keyed<F::In>, buf: &mut Vec<Keyed<F::Out>>) -> Result<()> {
        let split = r.pos.split as usize;
        if split >= self.positions.len() {
            self.positions.resize(split + 1, 0);
        }
        self.positions[split] = r.pos.next;
        self.store.set_record_timestamp(r.ts);
        self.store.set_current_key(&r.key, r.hash);
        let mut ctx = Context {
            out: buf,
            timers: &mut self.timers,
            key: &r.key,
            key_hash: r.hash,
            timestamp: r.ts,
            watermark: self.store.clock().watermark(),
        };
        self.function
            .process(&r.key, r.value, &mut ctx)
            .map_err(failed)
    }

    async fn emit(&mut self, buf: &mut Vec<Keyed<F::Out>>) -> Result<()> {
        if buf.is_empty() {
            return Ok(());
        }
        let batch = std::mem::replace(buf, Vec::with_capacity(self.batch_size));
        self.out.send(0, Message::Records(batch)).await
    }

    async fn fire_timers(&mut self, watermark: i64, buf: &mut Vec<Keyed<F::Out>>) -> Result<()> {
        loop {
            let more = tokio::task::block_in_place(|| {
                while let Some((ts, key)) = self.timers.pop_due(watermark) {
                    self.store.set_record_timestamp(ts);
                    let key_hash = strata_cache::hash::hash_key(&key);
                    self.store.set_current_key(&key, key_hash);
                    let mut ctx = Context {
                        out: buf,
                        timers: &mut self.timers,
                        key: &key,
                        key_hash,
                        timestamp: ts,
                        watermark,
                    };
                    self.function.on_timer(&key, ts, &mut ctx).map_err(failed)?;
                    if buf.len() >= self.batch_size {
                        return Ok::<_, RuntimeError>(true);
                    }
                }
                Ok(false)
            })?;
            self.emit(buf).await?;
            if !more {
                return Ok(());
            }
        }
    }

    /// Takes the synchronous part of checkpoint `id` (changed timers into
    /// state, L1's dirty set encoded and handed to the store's L2 writer),
    /// forwards the barrier, and in the background waits for the store's
    /// RocksDB checkpoint (the writer takes it behind the barrier's writes)
    /// and moves its files to storage; the returned handle acknowledges, or
    /// declines if that failed. A failure of the synchronous part leaves the
    /// task's state uncertain: it fails the job.
    async fn checkpoint(&mut self, id: u64) -> Result<JoinHandle<()>> {
        let local = self.local_checkpoints.join(format!("chk-{id}"));
        let pending = tokio::task::block_in_place(|| self.snapshot_locally(id, &local))
            .map_err(|e| e.in_checkpoint(id, &self.name()))?;
        self.out.broadcast(|| Message::Barrier(id)).await?;
        let (uploader, acks, index, key_groups, task) = (
            self.uploader.clone(),
            self.acks.clone(),
            self.index,
            self.key_groups,
            self.name(),
        );
        let watermark = self.store.clock().watermark();
        Ok(tokio::spawn(async move {
            let upload = tokio::task::spawn_blocking(move || {
                pending.wait()?;
                let mut uploader = uploader.lock().unwrap_or_else(|p| p.into_inner());
                let upload = uploader.upload(&local, &format!("chk-{id}/op-{index}"));
                let _ = std::fs::remove_dir_all(&local);
                upload
            })
            .await;
            let ack = match upload {
                Ok(Ok(upload)) => Ack::Snapshot(
                    id,
                    TaskSnapshot::Operator(OperatorSnapshot {
                        index,
                        key_groups,
                        watermark,
                        manifest: upload.manifest,
                        new_bytes: upload.new_bytes,
                    }),
                ),
                Ok(Err(e)) => Ack::Declined {
                    id,
                    cause: RuntimeError::from(e).in_checkpoint(id, &task),
                },
                Err(e) => Ack::Declined {
                    id,
                    cause: RuntimeError::Function(format!("upload task: {e}"))
                        .in_checkpoint(id, &task),
                },
            };
            // A closed channel means the job is ending; nothing to report to.
            let _ = acks.send(ack).await;
        }))
    }

    /// Writes the timers that changed into state, then lets the store hand
    /// its dirty set to its L2 writer, which takes a RocksDB checkpoint
    /// into `local`.
    fn snapshot_locally(
        &mut self,
        id: u64,
        local: &std::path::Path,
    ) -> Result<strata_cache::PendingCheckpoint> {
        crate::fault::slow_disk_delay();
        let timers = Self::timers_state(&self.store)?;
        for (key, times) in self.timers.take_changed() {
            if times.is_empty() {
                timers.clear(&key)?;
            } else {
                timers.update(&key, times)?;
            }
        }
        if local.exists() {
            std::fs::remove_dir_all(local).map_err(RuntimeError::io(local))?;
        }
        std::fs::create_dir_all(&self.local_checkpoints)
            .map_err(RuntimeError::io(&self.local_checkpoints))?;
        Ok(self.store.begin_checkpoint(local, id)?)
    }
}

/// The next query, once there is one (`None`: the sender is gone).
async fn next_query(queries: &mut Option<mpsc::Receiver<StateQuery>>) -> Option<StateQuery> {
    match queries {
        Some(q) => q.recv().await,
        None => std::future::pending().await,
    }
}
