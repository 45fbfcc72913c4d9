//! The L2 writer: one thread per store that writes the store's batches to
//! RocksDB in the order they were handed over, and runs the jobs queued
//! between them (a checkpoint's RocksDB checkpoint, a flush's wait).
//!
//! The store hands a batch over when it fills, when L1 is flushed and at
//! a checkpoint barrier, and goes on at once: encoding chunks, RocksDB's
//! memtable inserts and a checkpoint's synchronous RocksDB work happen
//! here, off the task (Flink's asynchronous snapshot phase; foyer's
//! batching flushers). A checkpoint is a job queued after the batches the
//! barrier closed and before any written after it, so the RocksDB
//! checkpoint holds exactly the state at the barrier while processing
//! goes on. Until the writer has written a batch, reads look in it (see
//! [`super::batch`]). The queue is bounded in bytes: a store that hands
//! over faster than RocksDB takes waits (backpressure).
//!
//! A failed write fails the store (every later operation is refused, see
//! [`crate::StateError::Failed`]); the jobs queued after it fail too, so a
//! checkpoint never waits forever on a writer that gave up.

use super::batch::Batch;
use super::L2;
use crate::error::{Result, StateError};
use crate::sync::lock;
use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex};

/// A job of the writer.
pub(crate) enum Job {
    /// Write this batch.
    Batch(Arc<Batch>),
    /// Run this on the writer thread (after every earlier job), then report.
    Run(Arc<Task>),
    /// Stop after every earlier job.
    Stop,
}

/// The work of a [`Job::Run`].
pub(crate) type Work = Box<dyn FnOnce(&L2) -> Result<()> + Send>;

/// A [`Job::Run`]: its work, and its outcome once it ran.
pub(crate) struct Task {
    work: Mutex<Option<Work>>,
    result: Mutex<Option<std::result::Result<(), String>>>,
    ran: Condvar,
}

impl Task {
    pub(crate) fn new(work: Work) -> Arc<Self> {
        Arc::new(Self {
            work: Mutex::new(Some(work)),
            result: Mutex::new(None),
            ran: Condvar::new(),
        })
    }

    fn set(&self, result: Result<()>) {
        *lock(&self.result) = Some(result.map_err(|e| e.to_string()));
        self.ran.notify_all();
    }

    /// Waits until the job ran; its error, as a [`StateError::Failed`] of
    /// the store at `path`.
    pub(crate) fn wait(&self, path: &std::path::Path) -> Result<()> {
        let mut result = lock(&self.result);
        loop {
            if let Some(r) = result.as_ref() {
                return r.clone().map_err(|reason| StateError::Failed {
                    path: path.to_owned(),
                    reason,
                });
            }
            result = self.ran.wait(result).unwrap_or_else(|p| p.into_inner());
        }
    }
}

#[derive(Default)]
struct Queue {
    jobs: VecDeque<Job>,
    /// Bytes of the queued batches.
    bytes: usize,
    /// Bytes of those that hold a checkpoint's capture of the dirty set.
    captured: usize,
    /// Run jobs queued (a checkpoint's RocksDB part among them).
    runs: usize,
    stopped: bool,
}

/// The queue between the store and its writer.
#[derive(Default)]
pub(crate) struct Pending {
    queue: Mutex<Queue>,
    changed: Condvar,
}

impl Pending {
    /// Queues a job (a task queued after the writer stopped fails at once).
    pub(crate) fn push(&self, job: Job) {
        let mut q = lock(&self.queue);
        if q.stopped {
            if let Job::Run(task) = &job {
                task.set(Err(StateError::Config("the L2 writer has stopped".into())));
            }
            return;
        }
        match &job {
            Job::Batch(b) => {
                q.bytes += b.bytes();
                q.captured += if b.captured { b.bytes() } else { 0 };
            }
            Job::Run(_) => q.runs += 1,
            Job::Stop => {}
        }
        q.jobs.push_back(job);
        self.changed.notify_all();
    }

    /// Waits until the queued batches hold at most `bytes`, or — while
    /// a run job (a checkpoint's RocksDB part) is queued, which holds the
    /// writer up for a while — at most `bytes_during_run`. A checkpoint's
    /// capture of the dirty set does not count: it is bounded by L1's
    /// dirty entries, and the writer takes it while processing goes on
    /// (the asynchronous part of the checkpoint), so only what processing
    /// hands over after it holds processing back.
    pub(crate) fn wait_below(&self, bytes: usize, bytes_during_run: usize) {
        let mut q = lock(&self.queue);
        let limit = |q: &Queue| if q.runs > 0 { bytes_during_run } else { bytes };
        while q.bytes - q.captured > limit(&q) && !q.stopped {
            q = self.changed.wait(q).unwrap_or_else(|p| p.into_inner());
        }
    }

    /// Calls `f` with the batches queued, oldest first (under the queue's
    /// lock: the writer does not remove one meanwhile).
    pub(crate) fn with_batches<R>(
        &self,
        f: impl FnOnce(&mut dyn Iterator<Item = &Batch>) -> R,
    ) -> R {
        let q = lock(&self.queue);
        let mut batches = q.jobs.iter().filter_map(|j| match j {
            Job::Batch(b) => Some(&**b),
            _ => None,
        });
        f(&mut batches)
    }

    /// Removes the job at the front (the writer, once it is done with it).
    pub(crate) fn pop(&self) {
        let mut q = lock(&self.queue);
        match q.jobs.pop_front() {
            Some(Job::Batch(b)) => {
                q.bytes -= b.bytes();
                q.captured -= if b.captured { b.bytes() } else { 0 };
            }
            Some(Job::Run(_)) => q.runs -= 1,
            _ => {}
        }
        self.changed.notify_all();
    }

    /// The job at the front, waiting for one (it stays queued until
    /// [`Pending::pop`]).
    fn front(&self) -> Job {
        let mut q = lock(&self.queue);
        loop {
            match q.jobs.front() {
                Some(Job::Batch(b)) => return Job::Batch(b.clone()),
                Some(Job::Run(t)) => return Job::Run(t.clone()),
                Some(Job::Stop) => return Job::Stop,
                None => q = self.changed.wait(q).unwrap_or_else(|p| p.into_inner()),
            }
        }
    }
}

/// Marks the queue stopped when the writer ends (a panic included) and
/// fails the tasks still queued, so nobody waits on them forever.
struct Stopping<'a>(&'a Pending);

impl Drop for Stopping<'_> {
    fn drop(&mut self) {
        let mut q = lock(&self.0.queue);
        q.stopped = true;
        for job in q.jobs.drain(..) {
            if let Job::Run(task) = job {
                task.set(Err(StateError::Config("the L2 writer has stopped".into())));
            }
        }
        (q.bytes, q.captured, q.runs) = (0, 0, 0);
        self.0.changed.notify_all();
    }
}

/// Runs the writer of `l2` until it is told to stop.
pub(crate) fn run(l2: Arc<L2>) {
    let _stopping = Stopping(&l2.pending);
    loop {
        match l2.pending.front() {
            Job::Batch(batch) => {
                // `apply` removes the batch from the queue when it commits.
                if let Err(e) = l2.apply(&batch) {
                    l2.record_failure(&e);
                    l2.pending.pop();
                }
                if let Err(e) = l2.maintain() {
                    l2.record_failure(&e);
                }
            }
            Job::Run(task) => {
                let work = lock(&task.work).take();
                let result = l2.check().and_then(|()| work.map_or(Ok(()), |w| w(&l2)));
                if let Err(e) = &result {
                    l2.record_failure(e);
                }
                l2.pending.pop();
                task.set(result);
            }
            Job::Stop => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hash::{put_l1_key, KeyBytes};
    use std::sync::atomic::{AtomicBool, Ordering};

    fn batch(bytes: usize, captured: bool) -> Arc<Batch> {
        let mut key = Vec::new();
        put_l1_key(&mut key, 7, 0, 0, b"k", b"");
        let mut b = Batch::default();
        b.push(
            KeyBytes::new(&key),
            crate::l2::batch::Op::Put,
            &vec![0; bytes],
        );
        b.captured = captured;
        Arc::new(b)
    }

    #[test]
    fn a_checkpoints_capture_does_not_hold_processing_back_but_later_batches_do() {
        let pending = Pending::default();
        pending.push(Job::Batch(batch(1 << 20, true)));
        // Only the capture is queued: processing goes on.
        pending.wait_below(1 << 10, 1 << 10);
        pending.push(Job::Batch(batch(1 << 20, false)));
        let waited = Arc::new(AtomicBool::new(true));
        std::thread::scope(|s| {
            let w = waited.clone();
            let p = &pending;
            s.spawn(move || {
                p.wait_below(1 << 10, 1 << 10);
                w.store(false, Ordering::SeqCst);
            });
            std::thread::sleep(std::time::Duration::from_millis(50));
            assert!(
                waited.load(Ordering::SeqCst),
                "an ordinary batch holds it back"
            );
            pending.pop();
            pending.pop();
        });
        assert!(!waited.load(Ordering::SeqCst));
    }
}
