//! [`ValueState`]: one value per key.

use super::{modify_any, read_lower, value_weight, weight_of, with_key, wrong_value_type, Handle};
use crate::codec;
use crate::error::{Result, StateError};
use crate::hash::{KeyBytes, L1Key};
use crate::l1::Slot;
use crate::l2::batch::Op;
use crate::stats::TierCounters;
use crate::tiers::{compact_get, compact_insert, compact_remove, has_table, Hot, Tiers};
use serde::{de::DeserializeOwned, Serialize};
use std::sync::Arc;

/// One value of type `T` per key (Flink's `ValueState`).
///
/// A `T` of at most 16 bytes that owns no heap memory (a count, a
/// timestamp, a small struct of numbers) lives in a compact table of L1
/// for keys of up to 16 bytes: about 40 bytes per entry, no allocation
/// per access; any other value in moka.
pub struct ValueState<T>(Handle<T>);

impl<T> Clone for ValueState<T> {
    fn clone(&self) -> Self {
        Self(self.0.clone())
    }
}

impl<T> ValueState<T>
where
    T: Serialize + DeserializeOwned + Clone + Send + Sync + 'static,
{
    pub(crate) fn new(tiers: Arc<Tiers>, id: u16) -> Self {
        Self(Handle::new(tiers, id))
    }

    fn counted(&self, hit: bool) {
        let c = &self.0.tiers.counters;
        TierCounters::count(hit, &c.l1_hits, &c.l1_misses);
    }

    /// The key's value, or `None` if absent or expired.
    ///
    /// Errors: a lower tier's read; a stored value that does not decode as
    /// a `T` ([`StateError::Codec`]).
    pub fn get(&self, key: &[u8]) -> Result<Option<T>> {
        let t = &*self.0.tiers;
        with_key(t, self.0.id, key, &[], |hot, k| {
            if !has_table(hot, self.0.id, key.len()) {
                return super::read_entry(t, hot, k);
            }
            let held = compact_get::<T, _>(hot, self.0.id, k, key, |ts, v| {
                ((!t.expired(self.0.id, ts)).then(|| v.clone()), None)
            });
            self.counted(held.is_some());
            if let Some(v) = held {
                return Ok(v);
            }
            let Some((ts, value, _)) = read_lower::<T>(t, hot, k)? else {
                return Ok(None);
            };
            compact_insert(t, hot, self.0.id, k, key, ts, value.clone(), false)?;
            Ok(Some(value))
        })
    }

    /// The key's value as [`ValueState::get`] gives it, read without
    /// moving the key between tiers: a value found in L2 or L3 is not
    /// promoted to L1, and nothing is marked dirty or counted as a hit or
    /// miss (a query's read, see `strata_runtime::query`).
    ///
    /// Errors: as [`ValueState::get`].
    pub fn peek(&self, key: &[u8]) -> Result<Option<T>> {
        let t = &*self.0.tiers;
        with_key(t, self.0.id, key, &[], |hot, k| {
            if has_table(hot, self.0.id, key.len()) {
                let held = compact_get::<T, _>(hot, self.0.id, k, key, |ts, v| {
                    ((!t.expired(self.0.id, ts)).then(|| v.clone()), None)
                });
                if let Some(v) = held {
                    return Ok(v);
                }
                return Ok(read_lower::<T>(t, hot, k)?.map(|(_, v, _)| v));
            }
            super::peek_entry(t, hot, k)
        })
    }

    /// Sets the key's value (write-back: it reaches L2 on eviction or
    /// flush). A key L1 holds is changed in place: one probe of its
    /// compact table, or of the front index or moka, and no allocation
    /// when no [`ValueState::get`] copy shares the old value.
    pub fn update(&self, key: &[u8], value: T) -> Result<()> {
        let t = &*self.0.tiers;
        let ts = t.write_ts(self.0.id);
        with_key(t, self.0.id, key, &[], |hot, k| {
            if has_table(hot, self.0.id, key.len()) {
                let mut value = Some(value);
                let held = compact_get::<T, _>(hot, self.0.id, k, key, |_, v| {
                    if let Some(new) = value.take() {
                        *v = new;
                    }
                    ((), Some(ts))
                });
                return match (held, value) {
                    (None, Some(value)) => {
                        compact_insert(t, hot, self.0.id, k, key, ts, value, true)
                    }
                    _ => Ok(()),
                };
            }
            self.update_in_moka(hot, k, ts, value)
        })
    }

    fn update_in_moka(&self, hot: &mut Hot, k: &KeyBytes, ts: i64, value: T) -> Result<()> {
        let t = &*self.0.tiers;
        let weight = value_weight::<T>(weight_of(&value));
        // Replacing the value of an entry already in L1 in place spares moka
        // an insertion, unless its size changed much.
        if let Some(slot) = t.l1_peek(hot, k)? {
            if t.l1.regrow(&slot, weight) {
                slot.update(
                    |any| match Arc::get_mut(any).and_then(|v| v.downcast_mut::<T>()) {
                        Some(held) => *held = value,
                        None => *any = Arc::new(value),
                    },
                );
                slot.set_ts(ts);
                t.l1.mark_dirty(&slot);
                return t.settle(hot);
            }
        }
        self.insert_dirty(hot, k, ts, value, weight)
    }

    /// Puts `value`, written at `ts` and weighing `weight`, in moka as a
    /// dirty entry (L2 lacks it).
    fn insert_dirty(
        &self,
        hot: &mut Hot,
        k: &KeyBytes,
        ts: i64,
        value: T,
        weight: usize,
    ) -> Result<()> {
        let slot = Slot::new(L1Key::from_bytes(k), ts, Arc::new(value), weight, true);
        self.0.tiers.l1_insert(hot, slot)
    }

    /// Reads, changes and writes back the key's value in one state access:
    /// `f` gets the value — `T::default()` when the key has none or it
    /// expired — changes it in place, and its result is returned. The
    /// read-modify-write of a [`ValueState::get`] followed by a
    /// [`ValueState::update`] (Flink's `value()` then `update(..)`), at
    /// the cost of one: for a key L1 holds, one lookup and no copy of the
    /// value; for a key it lacks, one read of the lower tiers and one L1
    /// insertion — or, when L1 is full and the key did not miss recently
    /// (TinyLFU's doorkeeper), a write of the new value to the store's
    /// batch for L2 instead, so that keys met once do not churn L1. Write-back as `update`: the value reaches L2 on eviction
    /// or flush, stamped with the current record timestamp.
    ///
    /// ```no_run
    /// # let store = strata_cache::StateStore::builder("/tmp/l2").state(strata_cache::StateDescriptor::value("count")).open()?;
    /// let count = store.value_state::<u64>("count")?;
    /// let n = count.modify(b"user-1", |n| { *n += 1; *n })?;
    /// # Ok::<(), strata_cache::StateError>(())
    /// ```
    ///
    /// Errors: as [`ValueState::get`]'s, and [`StateError::WrongKind`] if
    /// L1 holds another type under this state.
    pub fn modify<R>(&self, key: &[u8], f: impl FnOnce(&mut T) -> R) -> Result<R>
    where
        T: Default,
    {
        let t = &*self.0.tiers;
        let ts = t.write_ts(self.0.id);
        with_key(t, self.0.id, key, &[], |hot, k| {
            let mut f = Some(f);
            if has_table(hot, self.0.id, key.len()) {
                let held = compact_get::<T, _>(hot, self.0.id, k, key, |written, v| {
                    if t.expired(self.0.id, written) {
                        *v = T::default();
                    }
                    (f.take().map(|f| f(v)), Some(ts))
                });
                self.counted(held.is_some());
                if let Some(out) = held.flatten() {
                    return Ok(out);
                }
            } else if let Some(out) = self.modify_in_moka(hot, k, ts, &mut f)? {
                return Ok(out);
            }
            let f = f.ok_or_else(|| StateError::Config("modify: the function ran twice".into()))?;
            let mut value = read_lower::<T>(t, hot, k)?
                .map(|(_, value, _)| value)
                .unwrap_or_default();
            let out = f(&mut value);
            if has_table(hot, self.0.id, key.len()) {
                compact_insert(t, hot, self.0.id, k, key, ts, value, true)?;
            } else if t.admits(hot, k) {
                let weight = value_weight::<T>(weight_of(&value));
                self.insert_dirty(hot, k, ts, value, weight)?;
            } else {
                let bytes = codec::encode_entry(ts, &codec::encode(t.name(self.0.id), &value)?);
                t.push(hot, k, Op::Put, &bytes);
            }
            Ok(out)
        })
    }

    /// `modify` of a key moka holds; `None` (and `f` untouched) if it does not.
    fn modify_in_moka<R>(
        &self,
        hot: &mut Hot,
        k: &KeyBytes,
        ts: i64,
        f: &mut Option<impl FnOnce(&mut T) -> R>,
    ) -> Result<Option<R>>
    where
        T: Default,
    {
        let t = &*self.0.tiers;
        let Some(slot) = t.l1_get(hot, k)? else {
            return Ok(None);
        };
        let expired = t.expired(self.0.id, slot.ts());
        let Some(f) = f.take() else {
            return Ok(None);
        };
        let (out, weight) = slot
            .update(|any| {
                let out = modify_any::<T, R>(any, expired, f)?;
                Some((out, value_weight::<T>(weight_of(any.downcast_ref::<T>()?))))
            })
            .ok_or_else(|| wrong_value_type::<T>(t, &slot))?;
        slot.set_ts(ts);
        t.l1.mark_dirty(&slot);
        if t.l1.regrow(&slot, weight) {
            t.settle(hot)?;
        } else {
            t.l1_insert(hot, slot.reweighed(weight))?;
        }
        Ok(Some(out))
    }

    /// Removes the key's value from every tier.
    pub fn clear(&self, key: &[u8]) -> Result<()> {
        let t = &*self.0.tiers;
        with_key(t, self.0.id, key, &[], |hot, k| {
            compact_remove(hot, self.0.id, k, key);
            t.remove(hot, k)
        })
    }

    /// Every unexpired entry this store holds locally (L1 and L2, not L3)
    /// as `(record key, value)`, in stored-key order (key group first).
    /// Flushes L1, then reads the state's whole column family: meant for
    /// small state a task loads whole when it starts (the runtime's
    /// timers), not for data state.
    pub fn local_entries(&self) -> Result<Vec<(Vec<u8>, T)>> {
        let t = &*self.0.tiers;
        t.flush()?;
        let name = t.name(self.0.id);
        let mut out = Vec::new();
        let mut hot = t.lock()?;
        t.settle_l2(&mut hot)?;
        t.l2.scan(self.0.id, &[], |stored, value| {
            let (_, key, _) =
                codec::split_stored_key(stored).ok_or_else(|| StateError::Corrupt {
                    state: name.to_owned(),
                    reason: "stored key shorter than its header".into(),
                })?;
            if codec::is_tombstone(value) {
                return Ok(());
            }
            let (ts, body) = codec::split_entry(name, value)?;
            if !t.expired(self.0.id, ts) {
                out.push((key.to_vec(), super::decode(t, self.0.id, body)?));
            }
            Ok(())
        })?;
        Ok(out)
    }
}
