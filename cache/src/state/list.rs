//! [`ListState`]: an append-only list per key, and [`ListView`], a read of it.

use super::list_value::ListValue;
use super::{downcast, weight_of, with_key, Handle};
use crate::codec;
use crate::error::{Result, StateError};
use crate::hash::{KeyBytes, L1Key};
use crate::l1::Slot;
use crate::l2::batch::Op;
use crate::tiers::{Hot, Tiers};
use serde::{de::DeserializeOwned, Serialize};
use std::sync::Arc;

/// A read-only view of one key's list, without copying it out of L1.
pub struct ListView<T> {
    list: Option<Arc<ListValue<T>>>,
}

impl<T> ListView<T> {
    /// The elements, oldest write first.
    pub fn iter(&self) -> impl Iterator<Item = &T> + '_ {
        self.iter_with_timestamps().map(|(_, v)| v)
    }

    /// The elements with their write timestamps (ms since the epoch).
    pub fn iter_with_timestamps(&self) -> impl Iterator<Item = (i64, &T)> + '_ {
        self.list
            .iter()
            .flat_map(|l| l.items.iter().map(|(ts, v)| (*ts, v)))
    }

    /// The number of elements.
    pub fn len(&self) -> usize {
        self.list.as_ref().map_or(0, |l| l.items.len())
    }

    /// Whether the list is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// An append-only list of `T` per key (Flink's `ListState`).
///
/// With a TTL, each element expires on its own, relative to its write time.
pub struct ListState<T>(Handle<T>);

impl<T> Clone for ListState<T> {
    fn clone(&self) -> Self {
        Self(self.0.clone())
    }
}

impl<T> ListState<T>
where
    T: Serialize + DeserializeOwned + Clone + Send + Sync + 'static,
{
    pub(crate) fn new(tiers: Arc<Tiers>, id: u16) -> Self {
        Self(Handle::new(tiers, id))
    }

    fn name(&self) -> &str {
        self.0.tiers.name(self.0.id)
    }

    fn wrong_type(&self) -> StateError {
        StateError::WrongKind {
            name: self.name().to_owned(),
            declared: "another element type",
            requested: std::any::type_name::<T>(),
        }
    }

    /// Fails if a list of `bytes` is over the store's per-key limit.
    fn check_size(&self, key: &[u8], bytes: u64) -> Result<()> {
        let limit = self.0.tiers.max_list_bytes;
        if bytes <= limit {
            return Ok(());
        }
        Err(StateError::ListTooLarge {
            state: self.name().to_owned(),
            key: crate::composite_key::describe(key),
            bytes,
            limit,
        })
    }

    /// Changes the list in an L1 slot in place (copying it first only if a
    /// [`ListView`] still shares it), marks it dirty, and charges what it
    /// grew by (re-weighing the entry in moka when it doubled or halved).
    fn modify_l1(
        &self,
        hot: &mut Hot,
        slot: Arc<Slot>,
        f: impl FnOnce(&mut ListValue<T>),
    ) -> Result<Arc<ListValue<T>>> {
        let list = slot.update(|any| {
            if Arc::get_mut(any).is_none() {
                let copy = any.downcast_ref::<ListValue<T>>()?.clone();
                *any = Arc::new(copy);
            }
            f(Arc::get_mut(any)?.downcast_mut::<ListValue<T>>()?);
            any.clone().downcast::<ListValue<T>>().ok()
        });
        let list = list.ok_or_else(|| self.wrong_type())?;
        self.0.tiers.l1.mark_dirty(&slot);
        let now = list.weight();
        if self.0.tiers.l1.regrow(&slot, now) {
            self.0.tiers.settle(hot)?;
        } else {
            self.0.tiers.l1_insert(hot, slot.reweighed(now))?;
        }
        Ok(list)
    }

    fn put_l1(
        &self,
        hot: &mut Hot,
        key: &KeyBytes,
        list: ListValue<T>,
        dirty: bool,
    ) -> Result<Arc<ListValue<T>>> {
        let list = Arc::new(list);
        let weight = list.weight();
        let slot = Slot::new(
            L1Key::from_bytes(key),
            list.min_ts,
            list.clone(),
            weight,
            dirty,
        );
        self.0.tiers.l1_insert(hot, slot)?;
        Ok(list)
    }

    /// Appends `value`, stamped with the current record timestamp. Never
    /// reads the list: an append in place to the copy in L1 if there is
    /// one, else a copy of its encoding into the store's open write batch,
    /// which reaches L2 with the batch's other list writes as one chunk per
    /// key group (see the crate docs). Appends to lists nobody reads so
    /// never crowd L1, and cost no LSM entry of their own.
    ///
    /// Errors: [`StateError::ListTooLarge`] if the list in L1 would pass
    /// the per-key limit; [`StateError::Codec`] if `value` does not encode.
    pub fn add(&self, key: &[u8], value: T) -> Result<()> {
        let t = &*self.0.tiers;
        let ts = t.write_ts(self.0.id);
        with_key(t, self.0.id, key, &[], |hot, k| {
            if t.l1.may_hold(self.0.id) {
                if let Some(slot) = t.l1_peek(hot, k)? {
                    let len = weight_of(&value);
                    let held = downcast::<ListValue<T>>(t, &slot)?.bytes;
                    self.check_size(key, (held + len + 12) as u64)?;
                    self.modify_l1(hot, slot, |list| list.push(ts, value, len))?;
                    return Ok(());
                }
            }
            let mut element = std::mem::take(&mut hot.element_buf);
            element.clear();
            element.extend_from_slice(&ts.to_be_bytes());
            element.extend_from_slice(&[0; 4]);
            let encoded =
                postcard::to_extend(&value, element).map_err(|source| StateError::Codec {
                    state: self.name().to_owned(),
                    action: "encode",
                    source,
                });
            let mut element = encoded?;
            let body = (element.len() - 12) as u32;
            element[8..12].copy_from_slice(&body.to_be_bytes());
            t.push(hot, k, Op::Append, &element);
            hot.element_buf = element;
            Ok(())
        })
    }

    /// The key's unexpired elements (empty if none). Expired elements are
    /// trimmed from the list in L1 as a side effect.
    ///
    /// Errors: a lower tier's read; [`StateError::ListTooLarge`] if the
    /// list found is over the per-key limit.
    pub fn get(&self, key: &[u8]) -> Result<ListView<T>> {
        let t = &*self.0.tiers;
        with_key(t, self.0.id, key, &[], |hot, k| {
            if let Some(slot) = t.l1_get(hot, k)? {
                let list = downcast::<ListValue<T>>(t, &slot)?;
                if !t.expired(self.0.id, list.min_ts) {
                    return Ok(ListView { list: Some(list) });
                }
                drop(list);
                let cutoff = t.expiry_cutoff(self.0.id).unwrap_or(i64::MIN);
                let list = self.modify_l1(hot, slot, |list| list.trim(cutoff))?;
                return Ok(ListView { list: Some(list) });
            }
            let Some((bytes, from_l3)) = t.lower_get(hot, k)? else {
                return Ok(ListView { list: None });
            };
            self.check_size(key, bytes.len() as u64)?;
            let list = self.decode_list(&bytes, from_l3)?;
            // A list that became complete must replace L2's copy.
            let dirty = list.in_l2.is_none();
            Ok(ListView {
                list: Some(self.put_l1(hot, k, list, dirty)?),
            })
        })
    }

    /// The key's unexpired elements with their write timestamps (ms),
    /// oldest write first, read through L1, L2 and L3 without moving the
    /// list between tiers: a list found below L1 is not promoted, an L1
    /// list is not trimmed, nothing is marked dirty (a query's read, see
    /// `strata_runtime::query`). `None` when no tier holds a live element.
    ///
    /// Errors: as [`ListState::get`].
    pub fn peek(&self, key: &[u8]) -> Result<Option<Vec<(i64, T)>>> {
        let t = &*self.0.tiers;
        let cutoff = t.expiry_cutoff(self.0.id);
        let live = with_key(t, self.0.id, key, &[], |hot, k| {
            if let Some(slot) = t.l1_peek(hot, k)? {
                let list = downcast::<ListValue<T>>(t, &slot)?;
                return Ok(list
                    .items
                    .iter()
                    .filter(|(ts, _)| cutoff.is_none_or(|c| *ts > c))
                    .cloned()
                    .collect());
            }
            let Some((bytes, from_l3)) = t.lower_get(hot, k)? else {
                return Ok(Vec::new());
            };
            self.check_size(key, bytes.len() as u64)?;
            Ok(self.decode_list(&bytes, from_l3)?.items.into())
        })?;
        Ok((!live.is_empty()).then_some(live))
    }

    /// Decodes a list whose first `from_l3` bytes came from L3, leaving out
    /// expired elements; all of it is held by L2 or L3 (or on its way).
    fn decode_list(&self, bytes: &[u8], from_l3: usize) -> Result<ListValue<T>> {
        let t = &*self.0.tiers;
        let mut list = ListValue::empty();
        let (mut l3_live, mut l3_expired) = (0, 0);
        let cutoff = t.expiry_cutoff(self.0.id);
        for element in codec::list_elements(self.name(), bytes) {
            let (ts, body) = element?;
            let in_l3 = (body.as_ptr() as usize) < bytes.as_ptr() as usize + from_l3;
            let expired = cutoff.is_some_and(|c| ts <= c);
            match (expired, in_l3) {
                (true, true) => l3_expired += 1,
                (true, false) => {}
                (false, in_l3) => {
                    l3_live += usize::from(in_l3);
                    list.push(ts, super::decode(t, self.0.id, body)?, body.len());
                }
            }
        }
        list.in_l2 = Some(list.items.len());
        if from_l3 > 0 && l3_expired <= l3_live {
            (list.l3_prefix, list.l3_expired) = (Some(l3_live), l3_expired);
        } else if from_l3 > 0 {
            // Complete now: L3's expired rows go at its next move.
            list.in_l2 = None;
        }
        Ok(list)
    }

    fn unexpired(&self, ts: i64, values: Vec<T>) -> ListValue<T> {
        let mut list = ListValue::empty();
        if !self.0.tiers.expired(self.0.id, ts) {
            for v in values {
                let len = weight_of(&v);
                list.push(ts, v, len);
            }
        }
        list
    }

    /// Replaces the key's list with `values`, all stamped now.
    pub fn update(&self, key: &[u8], values: Vec<T>) -> Result<()> {
        let t = &*self.0.tiers;
        let ts = t.write_ts(self.0.id);
        let mut list = self.unexpired(ts, values);
        list.in_l2 = None;
        with_key(t, self.0.id, key, &[], |hot, k| {
            self.put_l1(hot, k, list, true).map(|_| ())
        })
    }

    /// Removes the key's list from every tier.
    pub fn clear(&self, key: &[u8]) -> Result<()> {
        let t = &*self.0.tiers;
        with_key(t, self.0.id, key, &[], |hot, k| t.remove(hot, k))
    }
}
