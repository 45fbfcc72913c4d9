//! Flushes and checkpoints: the dirty set into the open batch, handed to
//! the L2 writer, and a RocksDB checkpoint queued behind it.
//!
//! The synchronous part (on the caller's thread) encodes the dirty
//! entries — the compact tables' and moka's dirty set, not a scan of L1 —
//! into the open batch and hands it over; the rest runs on the writer
//! (see [`crate::l2::writer`]), so the caller goes on at once.

use super::{Hot, Tiers};
use crate::error::Result;
use crate::l2::writer::{Task, Work};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// A checkpoint whose RocksDB part the L2 writer takes (see
/// [`crate::StateStore::begin_checkpoint`]).
pub struct PendingCheckpoint {
    task: Arc<Task>,
    path: PathBuf,
}

impl PendingCheckpoint {
    /// Waits until the checkpoint's directory is complete.
    ///
    /// Errors: the writer's, as [`crate::StateError::Failed`] (the store
    /// is failed then too).
    pub fn wait(&self) -> Result<()> {
        self.task.wait(&self.path)
    }
}

impl Tiers {
    /// Puts every dirty L1 entry into the open batch, marks them clean and
    /// hands the batch over — in batches of the store's batch size, so that
    /// RocksDB takes a checkpoint's dirty set as ordinary write batches
    /// (one batch of the whole set was copied whole into a RocksDB write
    /// batch and a memtable: the read-modify-write benchmark's peak RSS).
    /// A failure fails the store: what it took out of L1 is not all on its
    /// way to L2.
    fn capture(&self, hot: &mut Hot) -> Result<()> {
        let captured = (|| {
            let Hot { tables, open, .. } = &mut *hot;
            open.captured = true;
            for (state, table) in tables.iter_mut().enumerate() {
                if let Some(copy) = table.as_mut().and_then(|t| t.snapshot()) {
                    open.push_table(state as u16, copy);
                }
            }
            for slot in self.l1.take_dirty() {
                if slot.is_gone() || !slot.dirty.swap(false, std::sync::atomic::Ordering::AcqRel) {
                    continue;
                }
                if let Some((op, bytes)) = self.encode_slot(&slot)? {
                    hot.open.push(&slot.key, op, &bytes);
                    if hot.open.bytes() >= self.batch_bytes {
                        self.hand_over(hot);
                        hot.open.captured = true;
                    }
                }
            }
            self.hand_over(hot);
            self.settle(hot)
        })();
        if let Err(e) = &captured {
            self.l2.record_failure(e);
        }
        self.hand_over(hot);
        captured
    }

    /// Writes every dirty L1 entry to L2 and waits until L2 holds it.
    pub(crate) fn flush(&self) -> Result<()> {
        {
            let mut hot = self.lock()?;
            self.capture(&mut hot)?;
        }
        self.l2.wait_idle()
    }

    /// Captures the dirty set, then queues `before` (cold eviction's pick)
    /// and a RocksDB checkpoint into `dir` (which must not exist) for the
    /// writer, behind everything written so far.
    pub(crate) fn begin_checkpoint(
        &self,
        dir: &Path,
        before: Option<Work>,
    ) -> Result<PendingCheckpoint> {
        {
            let mut hot = self.lock()?;
            self.capture(&mut hot)?;
        }
        let target = dir.to_owned();
        let task = self.l2.queue(Box::new(move |l2| {
            if let Some(before) = before {
                before(l2)?;
            }
            l2.create_checkpoint(&target)
        }));
        Ok(PendingCheckpoint {
            task,
            path: self.path.clone(),
        })
    }
}
