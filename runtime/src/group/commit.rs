//! What a shard commits to the group: each checkpoint's offset under this
//! member's generation (the fence of zombies), and, for bounded input, the
//! end of its partition; and reading back which partitions have ended.

use crate::checkpoint::CheckpointMetadata;
use crate::error::{Result, RuntimeError};
use crate::shard::ShardControl;
use std::time::{Duration, Instant};
use strata_connectors::kafka::{Commit, GroupMember};

/// A shard's checkpoint may go out only while this process owns the
/// shard: commits the checkpoint's offset under the member's generation.
pub(super) fn fence(
    member: &GroupMember,
    control: &ShardControl,
    meta: &CheckpointMetadata,
    bounded: bool,
) -> Result<()> {
    control.released()?;
    let p = control.partition();
    let offset = meta
        .source
        .partitions
        .iter()
        .find(|o| o.partition == p)
        .map(|o| o.offset)
        .ok_or_else(|| {
            RuntimeError::Function(format!(
                "checkpoint {} of shard {p} records no offset of partition {p}",
                meta.id
            ))
        })?;
    if bounded && meta.is_final && control.running() {
        control.set_final(meta.id, offset);
    }
    commit(
        member,
        control,
        meta.id,
        offset,
        &format!("strata:chk-{}", meta.id),
    )
}

/// Bounded input, once a shard's run ended with all its output published:
/// marks its partition ended in the group (`strata:chk-<id>:end@<offset>`),
/// so that no process runs it again. Not before: a process killed between
/// its final checkpoint and the publishing of that checkpoint's output
/// leaves the partition to the next owner, whose restore publishes it.
pub(super) fn mark_ended(member: &GroupMember, control: &ShardControl) -> Result<()> {
    let Some((id, offset)) = control.final_checkpoint() else {
        return Ok(());
    };
    let end = control.end();
    commit(
        member,
        control,
        id,
        offset,
        &format!("strata:chk-{id}:end@{end}"),
    )
}

/// Commits `offset` with `metadata` (checkpoint `id`'s) under the member's
/// generation, retrying for [`COMMIT_PATIENCE`].
fn commit(
    member: &GroupMember,
    control: &ShardControl,
    id: u64,
    offset: i64,
    metadata: &str,
) -> Result<()> {
    let p = control.partition();
    let deadline = Instant::now() + COMMIT_PATIENCE;
    loop {
        match member.commit(p, offset, metadata) {
            Commit::Done => return Ok(()),
            Commit::Fenced(why) => {
                return Err(control.lost(&format!(
                    "the group refused checkpoint {id}'s offset ({why}): another process owns the shard now"
                )))
            }
            Commit::Failed(why) if Instant::now() >= deadline => {
                return Err(RuntimeError::Function(format!(
                    "committing the offset of checkpoint {id} to the group failed for {COMMIT_PATIENCE:?}: {why}"
                )))
            }
            // A rebalance moves the generation on: this process learns
            // whether it keeps the shard (then the commit goes through) or
            // lost it (then `released` errs).
            Commit::Failed(_) => {
                std::thread::sleep(Duration::from_millis(200));
                control.released()?;
            }
        }
    }
}

/// How long a checkpoint's fence retries a commit the group does not take.
const COMMIT_PATIENCE: Duration = Duration::from_secs(60);

/// Bounded input: whether every partition has [`ended`].
pub(super) fn all_ended(member: &GroupMember) -> Result<bool> {
    Ok(ended(member)?.len() == member.partitions().len())
}

/// Bounded input: the partitions whose last committed checkpoint ended
/// them at the end offset they still have.
pub(super) fn ended(member: &GroupMember) -> Result<Vec<i32>> {
    let ends = member.end_offsets()?;
    Ok(member
        .committed()?
        .iter()
        .zip(ends)
        .filter(|(c, high)| ended_at(&c.metadata) == Some(*high))
        .map(|(c, _)| c.partition)
        .collect())
}

/// The end offset a committed `strata:chk-<id>:end@<offset>` names.
fn ended_at(metadata: &str) -> Option<i64> {
    metadata
        .rsplit_once(":end@")
        .and_then(|(_, end)| end.parse().ok())
}
