//! What a pipeline runs with when it is one shard (one Kafka input
//! partition) of a consumer group: the [`Shard`] it is given and the
//! [`ShardControl`] through which the process that owns the partition tells
//! it to run on, to release the partition (a final checkpoint, then stop) or
//! to abandon it (stop without writing). The group that owns shards is
//! `crate::group`; the pipeline and its source task only read this.

use crate::checkpoint::storage::Fence;
use crate::error::{Result, RuntimeError};
use crate::progress::Progress;
use crate::sync::lock;
use std::sync::atomic::{AtomicI64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};

const RUN: u8 = 0;
const RELEASE: u8 = 1;
const ABANDON: u8 = 2;

/// What the process that owns a shard tells its pipeline.
#[derive(Debug)]
pub(crate) struct ShardControl {
    partition: i32,
    state: AtomicU8,
    /// Bounded input: the partition's end offset (-1 until the source opened).
    end: AtomicI64,
    /// Bounded input: the final checkpoint that read the partition to its
    /// end, `(id, offset)`, marked ended in the group only once its output
    /// is all published.
    last: Mutex<Option<(u64, i64)>>,
}

impl ShardControl {
    /// The control of a running shard of `partition`.
    pub(crate) fn new(partition: i32) -> Arc<Self> {
        Arc::new(Self {
            partition,
            state: AtomicU8::new(RUN),
            end: AtomicI64::new(-1),
            last: Mutex::new(None),
        })
    }

    /// The shard's partition.
    pub(crate) fn partition(&self) -> i32 {
        self.partition
    }

    /// Tells the pipeline to stop: after a final checkpoint (`lost`:
    /// false, the partition was revoked), or at once without writing
    /// anything (`lost`: true, this process is out of the group).
    pub(crate) fn stop(&self, lost: bool) {
        let state = if lost { ABANDON } else { RELEASE };
        self.state.store(state, Ordering::Release);
    }

    /// Whether the shard runs on (neither released nor lost).
    pub(crate) fn running(&self) -> bool {
        self.state.load(Ordering::Acquire) == RUN
    }

    /// Whether the shard was released (stop reading, take a final
    /// checkpoint). Errs once it was lost: stop without committing.
    pub(crate) fn released(&self) -> Result<bool> {
        match self.state.load(Ordering::Acquire) {
            RUN => Ok(false),
            RELEASE => Ok(true),
            _ => Err(self.lost("its partition was taken away")),
        }
    }

    /// Bounded input: the end offset the shard reads to.
    pub(crate) fn set_end(&self, end: i64) {
        self.end.store(end, Ordering::Release);
    }

    /// Bounded input: the end offset the shard reads to (-1 before its
    /// source opened).
    pub(crate) fn end(&self) -> i64 {
        self.end.load(Ordering::Acquire)
    }

    /// Bounded input: checkpoint `id` read the partition to its end, at
    /// `offset`.
    pub(crate) fn set_final(&self, id: u64, offset: i64) {
        *lock(&self.last) = Some((id, offset));
    }

    /// Bounded input: the final checkpoint `(id, offset)`, once there is one.
    pub(crate) fn final_checkpoint(&self) -> Option<(u64, i64)> {
        *lock(&self.last)
    }

    /// The error a shard that lost its partition ends with.
    pub(crate) fn lost(&self, reason: &str) -> RuntimeError {
        RuntimeError::ShardLost {
            partition: self.partition,
            reason: reason.to_owned(),
        }
    }
}

/// One shard as its pipeline gets it (see `Pipeline::shard`).
#[derive(Clone)]
pub(crate) struct Shard {
    pub(crate) partition: i32,
    pub(crate) control: Arc<ShardControl>,
    /// Asked before each of the shard's checkpoints goes out.
    pub(crate) fence: Fence,
    /// The shard's counters, which the group shows and publishes.
    pub(crate) progress: Arc<Progress>,
}
