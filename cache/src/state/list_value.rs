//! The L1 form of a list, and how it is written back to L2.

use crate::codec;
use crate::error::{Result, StateError};
use crate::l1::Slot;
use crate::l2::batch::Op;
use serde::Serialize;
use std::collections::VecDeque;
use std::sync::Arc;

/// The L1 form of a list: elements with their write timestamps.
///
/// Elements appended in timestamp order (the common case: event time moves
/// forward) expire from the front, so trimming them is O(expired); a list
/// appended out of order is trimmed with a full scan.
///
/// `in_l2` counts the leading elements that L2 holds or will hold (what
/// was read from the lower tiers, and what was written back since):
/// writing the list back appends the elements after them, so a long list
/// is never rewritten because of one append; `None` when L2's copy must be
/// replaced (after `ListState::update`).
///
/// With a cold tier, the first `l3_prefix` elements may be ones L3 already
/// holds (`None`: the list is complete — L2 and L3 get all of it): a
/// replace of the list in L2 then writes only the elements after them.
/// `l3_expired` counts L3's elements that expired since; once they outnumber
/// the live ones the list becomes complete again and its next move to L3
/// replaces the partition (expired rows are cleaned up, amortised O(1)).
#[derive(Clone)]
pub(crate) struct ListValue<T> {
    pub(crate) items: VecDeque<(i64, T)>,
    pub(crate) min_ts: i64,
    in_order: bool,
    pub(crate) bytes: usize,
    pub(crate) in_l2: Option<usize>,
    pub(crate) l3_prefix: Option<usize>,
    pub(crate) l3_expired: usize,
}

impl<T> ListValue<T> {
    pub(crate) fn empty() -> Self {
        Self {
            items: VecDeque::new(),
            min_ts: i64::MAX,
            in_order: true,
            bytes: 0,
            in_l2: Some(0),
            l3_prefix: None,
            l3_expired: 0,
        }
    }

    /// The first `expired` elements expired: those of them L3 holds count
    /// as expired there; once they outnumber the live ones L3 holds, the
    /// list becomes complete (and L2's copy must be replaced by it).
    fn expire_l3(&mut self, expired: usize) {
        let Some(live) = self.l3_prefix else {
            return;
        };
        let gone = expired.min(live);
        self.l3_expired += gone;
        self.l3_prefix = Some(live - gone);
        if self.l3_expired > live - gone {
            self.l3_prefix = None;
            self.in_l2 = None;
        }
    }

    pub(crate) fn push(&mut self, ts: i64, value: T, encoded_len: usize) {
        if self.items.back().is_some_and(|(last, _)| *last > ts) {
            self.in_order = false;
        }
        self.items.push_back((ts, value));
        self.min_ts = self.min_ts.min(ts);
        self.bytes += encoded_len + 12;
    }

    /// The list's L1 weight: its size in memory, estimated as the deque's
    /// inline size (its capacity, spare room included) plus what the
    /// elements own on the heap — their encoded size less what encodes
    /// their inline part (about half of it: postcard's varints), none for
    /// plain structs of numbers — with a quarter more for the allocator's
    /// size classes. Measured against RSS by strata-bench's `l1_memory`
    /// example (100-byte `Vec<u8>` elements of ten-element lists, the
    /// entry's share included); a plain struct of numbers (as
    /// route-history's `FlightEvent`) weighs its inline bytes.
    pub(crate) fn weight(&self) -> usize {
        let n = self.items.len();
        let inline = self.items.capacity() * std::mem::size_of::<(i64, T)>();
        let heap = self
            .bytes
            .saturating_sub(n * (12 + std::mem::size_of::<T>() / 2));
        inline + heap.saturating_mul(5) / 4
    }

    /// Drops the elements written at or before `cutoff`. L2 may keep them
    /// (every read leaves expired elements out), so `in_l2` counts only
    /// the survivors.
    pub(crate) fn trim(&mut self, cutoff: i64) {
        let before = self.items.len();
        if self.in_order {
            let expired = self.items.partition_point(|(ts, _)| *ts <= cutoff);
            self.items.drain(..expired);
            self.in_l2 = self.in_l2.map(|n| n.saturating_sub(expired));
            self.expire_l3(expired);
            self.min_ts = self.items.front().map_or(i64::MAX, |(ts, _)| *ts);
        } else {
            let held = self.in_l2.unwrap_or(0);
            let kept_of_held = self
                .items
                .iter()
                .take(held)
                .filter(|(ts, _)| *ts > cutoff)
                .count();
            self.items.retain(|(ts, _)| *ts > cutoff);
            self.in_l2 = self.in_l2.map(|_| kept_of_held);
            if self.l3_prefix.is_some() {
                self.l3_prefix = None;
                self.in_l2 = None;
            }
            self.min_ts = self
                .items
                .iter()
                .map(|(ts, _)| *ts)
                .min()
                .unwrap_or(i64::MAX);
        }
        self.bytes = self.bytes * self.items.len() / before.max(1);
    }
}

/// Encodes a list slot for L2 and marks it held there: the elements L2
/// lacks as an append, or — when L2's copy must be replaced — the list
/// (with a cold tier, a complete one with the base marker, one whose
/// beginning L3 holds as the elements after it only). `None` when L2
/// holds every element already.
pub(crate) fn encode_list<T: Serialize + Clone + Send + Sync + 'static>(
    state: &str,
    slot: &Slot,
    with_cold: bool,
) -> Result<Option<(Op, Vec<u8>)>> {
    slot.update(|any| {
        if Arc::get_mut(any).is_none() {
            let copy = any
                .downcast_ref::<ListValue<T>>()
                .ok_or_else(|| StateError::UnknownState(state.to_owned()))?
                .clone();
            *any = Arc::new(copy);
        }
        let list = Arc::get_mut(any)
            .and_then(|v| v.downcast_mut::<ListValue<T>>())
            .ok_or_else(|| StateError::UnknownState(state.to_owned()))?;
        let mut out = Vec::new();
        let (op, from) = match (list.in_l2, with_cold, list.l3_prefix) {
            (Some(held), _, _) if held >= list.items.len() => return Ok(None),
            (Some(held), _, _) => (Op::Append, held),
            (None, true, Some(in_l3)) => (Op::Replace, in_l3),
            (None, true, None) => {
                out.extend_from_slice(&codec::list_base_marker());
                (Op::Replace, 0)
            }
            (None, false, _) => (Op::Replace, 0),
        };
        for (ts, item) in list.items.iter().skip(from) {
            codec::put_list_element(&mut out, *ts, &codec::encode(state, item)?);
        }
        list.in_l2 = Some(list.items.len());
        Ok(Some((op, out)))
    })
}
