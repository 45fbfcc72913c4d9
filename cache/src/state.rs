//! Typed state handles: [`ValueState`], [`ListState`], [`MapState`] (the
//! names and contracts of Apache Flink's keyed state).
//!
//! Every method takes the record key as bytes; the store maps it to its key
//! group. Values are typed through serde and stored with postcard.
//! Complexities: `ListState::add` is O(1) and never reads the list (an
//! append to the copy already in L1, or to the store's append buffer,
//! merged into L2 in batches); `MapState::get` reads one entry, never the
//! whole map.

use crate::codec;
use crate::error::{Result, StateError};
use crate::store::{AnyValue, Encoded, L1Key, Slot, StateStore};
use crate::ttl::Ttl;
use serde::{de::DeserializeOwned, Serialize};
use std::collections::VecDeque;
use std::marker::PhantomData;
use std::sync::Arc;

/// The kind of a declared state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StateKind {
    /// One value per key.
    Value,
    /// An append-only list per key.
    List,
    /// A map per key.
    Map,
}

impl StateKind {
    pub(crate) fn label(self) -> &'static str {
        match self {
            StateKind::Value => "ValueState",
            StateKind::List => "ListState",
            StateKind::Map => "MapState",
        }
    }
}

/// Declares a named state: its kind and optional TTL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateDescriptor {
    /// The state's name (a RocksDB column family of that name holds it).
    pub name: String,
    /// Value, list or map.
    pub kind: StateKind,
    /// Expiry, if any.
    pub ttl: Option<Ttl>,
}

impl StateDescriptor {
    fn new(name: &str, kind: StateKind) -> Self {
        Self {
            name: name.to_owned(),
            kind,
            ttl: None,
        }
    }

    /// A `ValueState` named `name`.
    pub fn value(name: &str) -> Self {
        Self::new(name, StateKind::Value)
    }

    /// A `ListState` named `name`.
    pub fn list(name: &str) -> Self {
        Self::new(name, StateKind::List)
    }

    /// A `MapState` named `name`.
    pub fn map(name: &str) -> Self {
        Self::new(name, StateKind::Map)
    }

    /// Sets the state's time-to-live.
    pub fn with_ttl(mut self, ttl: Ttl) -> Self {
        self.ttl = Some(ttl);
        self
    }
}

fn downcast<T: Send + Sync + 'static>(store: &StateStore, slot: &Slot) -> Result<Arc<T>> {
    slot.value()
        .downcast::<T>()
        .map_err(|_| wrong_value_type::<T>(store, slot))
}

/// The error for an L1 entry whose value is not a `T`.
fn wrong_value_type<T>(store: &StateStore, slot: &Slot) -> StateError {
    StateError::WrongKind {
        name: store.inner.name(slot.state).to_owned(),
        declared: "another value type",
        requested: std::any::type_name::<T>(),
    }
}

fn weight_of<T: Serialize>(value: &T) -> usize {
    postcard::experimental::serialized_size(value).unwrap_or(64)
}

/// The L1 weight of a `T` whose encoding is `encoded` bytes long: its
/// size in memory, estimated as its inline size plus its encoded size (for
/// what it owns on the heap) plus half for the allocator's rounding and
/// spare capacity (as for lists). The entry's own cost is added by the store.
fn value_weight<T>(encoded: usize) -> usize {
    (std::mem::size_of::<T>() + encoded).saturating_mul(3) / 2
}

pub(crate) fn encode_value<T: Serialize + Send + Sync + 'static>(
    state: &str,
    slot: &Slot,
    _with_cold: bool,
) -> Result<Encoded> {
    let value = slot.value();
    let value = value
        .downcast_ref::<T>()
        .ok_or_else(|| StateError::UnknownState(state.to_owned()))?;
    Ok(Encoded {
        bytes: codec::encode_entry(slot.ts(), &codec::encode(state, value)?),
        append: false,
    })
}

/// Reads one entry (value or map entry) through the tiers, promoting it to L1.
fn read_entry<T>(store: &StateStore, state: u16, l1_key: L1Key) -> Result<Option<T>>
where
    T: DeserializeOwned + Clone + Send + Sync + 'static,
{
    let inner = &store.inner;
    let _tiers = inner.lock_tiers()?;
    if let Some(slot) = inner.l1_get(&l1_key) {
        if inner.expired(state, slot.ts()) {
            return Ok(None);
        }
        return Ok(Some((*downcast::<T>(store, &slot)?).clone()));
    }
    let Some((ts, value, weight)) = read_lower::<T>(store, state, &l1_key)? else {
        return Ok(None);
    };
    let slot = Slot::new(l1_key, state, ts, Arc::new(value.clone()), weight, false);
    inner.l1_insert(slot);
    Ok(Some(value))
}

/// What L2 and L3 hold of an entry L1 lacks, unexpired: its write
/// timestamp, its value and its L1 weight. The caller holds the tier lock.
fn read_lower<T>(store: &StateStore, state: u16, l1_key: &[u8]) -> Result<Option<(i64, T, usize)>>
where
    T: DeserializeOwned,
{
    let inner = &store.inner;
    let Some((bytes, _)) = inner.lower_get(l1_key)? else {
        return Ok(None);
    };
    let (ts, body) = codec::split_entry(inner.name(state), &bytes)?;
    if inner.expired(state, ts) {
        return Ok(None);
    }
    let value: T = inner.decode(state, body)?;
    Ok(Some((ts, value, value_weight::<T>(body.len()))))
}

/// Applies `f` to the `T` an L1 value holds — `T::default()` instead when
/// `reset` (it expired) — copying it first only if a reader shares it.
/// `None` if the value is not a `T`.
fn modify_any<T, R>(any: &mut AnyValue, reset: bool, f: impl FnOnce(&mut T) -> R) -> Option<R>
where
    T: Default + Clone + Send + Sync + 'static,
{
    if reset {
        *any = Arc::new(T::default());
    } else if Arc::get_mut(any).is_none() {
        let copy = any.downcast_ref::<T>()?.clone();
        *any = Arc::new(copy);
    }
    Some(f(Arc::get_mut(any)?.downcast_mut::<T>()?))
}

/// Whether an L1 entry recorded at weight `recorded` may keep it now that
/// its value weighs `weight` (moka re-weighs only on insertion): within a
/// factor of two.
fn weight_holds(weight: usize, recorded: usize) -> bool {
    weight <= 2 * recorded.max(32) && 2 * weight >= recorded
}

/// One value of type `T` per key (Flink's `ValueState`).
pub struct ValueState<T> {
    store: StateStore,
    id: u16,
    _t: PhantomData<fn() -> T>,
}

impl<T> Clone for ValueState<T> {
    fn clone(&self) -> Self {
        Self {
            store: self.store.clone(),
            id: self.id,
            _t: PhantomData,
        }
    }
}

impl<T> ValueState<T>
where
    T: Serialize + DeserializeOwned + Clone + Send + Sync + 'static,
{
    pub(crate) fn new(store: StateStore, id: u16) -> Self {
        Self {
            store,
            id,
            _t: PhantomData,
        }
    }

    /// The key's value, or `None` if absent or expired.
    pub fn get(&self, key: &[u8]) -> Result<Option<T>> {
        read_entry(
            &self.store,
            self.id,
            self.store.inner.l1_key(self.id, key, &[]),
        )
    }

    /// Sets the key's value (write-back: it reaches L2 on eviction or
    /// flush). A key L1 holds is changed in place: one front-index probe
    /// or moka lookup, no allocation when no [`ValueState::get`] copy
    /// shares the old value.
    pub fn update(&self, key: &[u8], value: T) -> Result<()> {
        let inner = &self.store.inner;
        let l1_key = inner.l1_key_vec(self.id, key, &[]);
        let weight = value_weight::<T>(weight_of(&value));
        let ts = inner.write_ts(self.id);
        let _tiers = inner.lock_tiers()?;
        // Replacing the value of an entry already in L1 in place spares moka
        // an insertion, unless its size changed much.
        if let Some(slot) = inner.l1_peek(&l1_key) {
            let recorded = slot.weight.load(std::sync::atomic::Ordering::Relaxed) as usize;
            if weight_holds(weight, recorded) {
                slot.update(
                    |any| match Arc::get_mut(any).and_then(|v| v.downcast_mut::<T>()) {
                        Some(held) => *held = value,
                        None => *any = Arc::new(value),
                    },
                );
                slot.set_ts(ts);
                inner.mark_dirty(&slot);
                return Ok(());
            }
        }
        self.insert_dirty(l1_key, ts, value, weight);
        Ok(())
    }

    /// Puts `value`, written at `ts` and weighing `weight`, in L1 as a
    /// dirty entry (L2 lacks it).
    fn insert_dirty(&self, l1_key: Vec<u8>, ts: i64, value: T, weight: usize) {
        let slot = Slot::new(l1_key.into(), self.id, ts, Arc::new(value), weight, true);
        self.store.inner.l1_insert(slot);
    }

    /// Reads, changes and writes back the key's value in one state access:
    /// `f` gets the value — `T::default()` when the key has none or it
    /// expired — changes it in place, and its result is returned. The
    /// read-modify-write of a [`ValueState::get`] followed by a
    /// [`ValueState::update`] (Flink's `value()` then `update(..)`), at
    /// the cost of one: for a key L1 holds, one front-index probe or moka
    /// lookup and no copy of the value; for a key it lacks, one read of
    /// the lower tiers and one L1 insertion. Write-back as `update`: the
    /// value reaches L2 on eviction or flush, stamped with the current
    /// record timestamp.
    ///
    /// ```no_run
    /// # let store = strata_cache::StateStore::builder("/tmp/l2").state(strata_cache::StateDescriptor::value("count")).open()?;
    /// let count = store.value_state::<u64>("count")?;
    /// let n = count.modify(b"user-1", |n| { *n += 1; *n })?;
    /// # Ok::<(), strata_cache::StateError>(())
    /// ```
    ///
    /// Errors: as [`ValueState::get`]'s (a lower tier's read, a value
    /// that does not decode as a `T`), and [`StateError::WrongKind`] if
    /// L1 holds another type under this state.
    pub fn modify<R>(&self, key: &[u8], f: impl FnOnce(&mut T) -> R) -> Result<R>
    where
        T: Default,
    {
        let inner = &self.store.inner;
        let l1_key = inner.l1_key_vec(self.id, key, &[]);
        let ts = inner.write_ts(self.id);
        let _tiers = inner.lock_tiers()?;
        if let Some(slot) = inner.l1_get(&l1_key) {
            let expired = inner.expired(self.id, slot.ts());
            let (out, weight) = slot
                .update(|any| {
                    let out = modify_any::<T, R>(any, expired, f)?;
                    Some((out, value_weight::<T>(weight_of(any.downcast_ref::<T>()?))))
                })
                .ok_or_else(|| wrong_value_type::<T>(&self.store, &slot))?;
            slot.set_ts(ts);
            inner.mark_dirty(&slot);
            let recorded = slot.weight.load(std::sync::atomic::Ordering::Relaxed) as usize;
            if !weight_holds(weight, recorded) {
                inner.l1_insert(slot.reweighed(weight));
            }
            return Ok(out);
        }
        let mut value = read_lower::<T>(&self.store, self.id, &l1_key)?
            .map(|(_, value, _)| value)
            .unwrap_or_default();
        let out = f(&mut value);
        let weight = value_weight::<T>(weight_of(&value));
        self.insert_dirty(l1_key, ts, value, weight);
        Ok(out)
    }

    /// Removes the key's value from every tier.
    pub fn clear(&self, key: &[u8]) -> Result<()> {
        let inner = &self.store.inner;
        let l1_key = inner.l1_key(self.id, key, &[]);
        let _tiers = inner.lock_tiers()?;
        inner.remove(&l1_key)
    }

    /// Every unexpired entry this store holds locally (L1 and L2, not L3)
    /// as `(record key, value)`, in stored-key order (key group first).
    /// Flushes L1, then reads the state's whole column family: meant for
    /// small state a task loads whole when it starts (the runtime's
    /// timers), not for data state.
    pub fn local_entries(&self) -> Result<Vec<(Vec<u8>, T)>> {
        self.store.flush()?;
        let inner = &self.store.inner;
        let name = inner.name(self.id);
        let mut out = Vec::new();
        let _tiers = inner.lock_tiers()?;
        inner.l2_scan(self.id, &[], |stored, value| {
            let (_, key, _) =
                codec::split_stored_key(stored).ok_or_else(|| StateError::Corrupt {
                    state: name.to_owned(),
                    reason: "stored key shorter than its header".into(),
                })?;
            if codec::is_tombstone(value) {
                return Ok(());
            }
            let (ts, body) = codec::split_entry(name, value)?;
            if !inner.expired(self.id, ts) {
                out.push((key.to_vec(), inner.decode(self.id, body)?));
            }
            Ok(())
        })?;
        Ok(out)
    }
}

/// The L1 form of a list: elements with their write timestamps.
///
/// Elements appended in timestamp order (the common case: event time moves
/// forward) expire from the front, so trimming them is O(expired); a list
/// appended out of order is trimmed with a full scan.
///
/// With a cold tier, the first `l3_prefix` elements may be ones L3 already
/// holds (`None`: the list is complete — L2 and L3 get all of it): writing
/// the list back to L2 then writes only the elements after them, so a long
/// history read from L3 is never rewritten there because of one append.
/// `l3_expired` counts L3's elements that expired since; once they outnumber
/// the live ones the list becomes complete again and its next move to L3
/// replaces the partition (expired rows are cleaned up, amortised O(1)).
#[derive(Clone)]
pub(crate) struct ListValue<T> {
    items: VecDeque<(i64, T)>,
    min_ts: i64,
    in_order: bool,
    bytes: usize,
    l3_prefix: Option<usize>,
    l3_expired: usize,
}

impl<T> ListValue<T> {
    fn empty() -> Self {
        Self {
            items: VecDeque::new(),
            min_ts: i64::MAX,
            in_order: true,
            bytes: 0,
            l3_prefix: None,
            l3_expired: 0,
        }
    }

    /// The first `expired` elements expired: those of them L3 holds count
    /// as expired there; once they outnumber the live ones L3 holds, the
    /// list becomes complete.
    fn expire_l3(&mut self, expired: usize) {
        let Some(live) = self.l3_prefix else {
            return;
        };
        let gone = expired.min(live);
        self.l3_expired += gone;
        self.l3_prefix = Some(live - gone);
        if self.l3_expired > live - gone {
            self.l3_prefix = None;
        }
    }

    fn push(&mut self, ts: i64, value: T, encoded_len: usize) {
        if self.items.back().is_some_and(|(last, _)| *last > ts) {
            self.in_order = false;
        }
        self.items.push_back((ts, value));
        self.min_ts = self.min_ts.min(ts);
        self.bytes += encoded_len + 12;
    }

    /// The list's L1 weight: its size in memory, estimated as the elements'
    /// inline size (in the deque) plus what they own on the heap — their
    /// encoded size less what encodes their inline part (about half of it:
    /// postcard's varints), none for plain structs of numbers — plus a
    /// quarter for the deque's spare room. It underestimates byte payloads:
    /// 168 weighed of 281 bytes of RSS per 100-byte `Vec<u8>` element of
    /// 100,000 ten-element lists (the entry's share included; measured by
    /// strata-bench's `l1_memory` example); a plain struct of numbers (as
    /// route-history's `FlightEvent`) weighs its inline bytes.
    fn weight(&self) -> usize {
        let n = self.items.len();
        let inline = n * std::mem::size_of::<(i64, T)>();
        let heap = self
            .bytes
            .saturating_sub(n * (12 + std::mem::size_of::<T>() / 2));
        (inline + heap).saturating_mul(5) / 4
    }

    /// Drops the elements written at or before `cutoff`.
    fn trim(&mut self, cutoff: i64) {
        let before = self.items.len();
        if self.in_order {
            let expired = self.items.partition_point(|(ts, _)| *ts <= cutoff);
            self.items.drain(..expired);
            self.expire_l3(expired);
        } else {
            self.items.retain(|(ts, _)| *ts > cutoff);
            self.l3_prefix = None;
        }
        self.min_ts = self
            .items
            .iter()
            .map(|(ts, _)| *ts)
            .min()
            .unwrap_or(i64::MAX);
        if self.in_order {
            self.min_ts = self.items.front().map_or(i64::MAX, |(ts, _)| *ts);
        }
        self.bytes = self.bytes * self.items.len() / before.max(1);
    }
}

/// Encodes a list for L2: with a cold tier, a complete list with the base
/// marker, one whose beginning L3 holds as the elements after it only.
pub(crate) fn encode_list<T: Serialize + Send + Sync + 'static>(
    state: &str,
    slot: &Slot,
    with_cold: bool,
) -> Result<Encoded> {
    let list = slot.value();
    let list = list
        .downcast_ref::<ListValue<T>>()
        .ok_or_else(|| StateError::UnknownState(state.to_owned()))?;
    let mut out = Vec::with_capacity(list.bytes + 12);
    let skip = match (with_cold, list.l3_prefix) {
        (false, _) => 0,
        (true, Some(in_l3)) => in_l3,
        (true, None) => {
            out.extend_from_slice(&codec::list_base_marker());
            0
        }
    };
    for (ts, item) in list.items.iter().skip(skip) {
        codec::put_list_element(&mut out, *ts, &codec::encode(state, item)?);
    }
    Ok(Encoded {
        bytes: out,
        append: false,
    })
}

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
pub struct ListState<T> {
    store: StateStore,
    id: u16,
    _t: PhantomData<fn() -> T>,
}

impl<T> Clone for ListState<T> {
    fn clone(&self) -> Self {
        Self {
            store: self.store.clone(),
            id: self.id,
            _t: PhantomData,
        }
    }
}

impl<T> ListState<T>
where
    T: Serialize + DeserializeOwned + Clone + Send + Sync + 'static,
{
    pub(crate) fn new(store: StateStore, id: u16) -> Self {
        Self {
            store,
            id,
            _t: PhantomData,
        }
    }

    fn name(&self) -> &str {
        self.store.inner.name(self.id)
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
        let limit = self.store.inner.max_list_bytes;
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
    /// [`ListView`] still shares it), marks it dirty, and re-weighs the
    /// entry in moka when it has grown to twice its recorded weight.
    fn modify_l1(
        &self,
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
        self.store.inner.mark_dirty(&slot);
        let weight = slot.weight.load(std::sync::atomic::Ordering::Relaxed) as usize;
        // A list growing by appends is re-weighed at every quarter of
        // growth, so moka never underestimates it by more than that.
        let now = list.weight();
        if 4 * now > 5 * weight.max(64) || 2 * now < weight {
            self.store.inner.l1_insert(slot.reweighed(now));
        }
        Ok(list)
    }

    fn put_l1(&self, l1_key: L1Key, list: ListValue<T>, dirty: bool) -> Arc<ListValue<T>> {
        let list = Arc::new(list);
        let weight = list.weight();
        let slot = Slot::new(l1_key, self.id, list.min_ts, list.clone(), weight, dirty);
        self.store.inner.l1_insert(slot);
        list
    }

    /// Appends `value`, stamped with the current record timestamp. Never
    /// reads the list: an append in place to the copy in L1 if there is
    /// one, else to the store's append buffer, which L2 receives as a batch
    /// of RocksDB merges (appends to one key coalesce there; reads see the
    /// buffer). Appends to lists nobody reads so never crowd L1.
    pub fn add(&self, key: &[u8], value: T) -> Result<()> {
        let inner = &self.store.inner;
        let l1_key = inner.l1_key_vec(self.id, key, &[]);
        let ts = inner.write_ts(self.id);
        let _tiers = inner.lock_tiers()?;
        if let Some(slot) = inner.l1_peek(&l1_key) {
            let len = weight_of(&value);
            let held = downcast::<ListValue<T>>(&self.store, &slot)?.bytes;
            self.check_size(key, (held + len + 12) as u64)?;
            self.modify_l1(slot, |list| list.push(ts, value, len))?;
            return Ok(());
        }
        let body = codec::encode(self.name(), &value)?;
        let mut element = Vec::with_capacity(body.len() + 12);
        codec::put_list_element(&mut element, ts, &body);
        inner.buffer_append(l1_key.into(), element)
    }

    /// The key's unexpired elements (empty if none). Expired elements are
    /// trimmed from the stored list as a side effect.
    pub fn get(&self, key: &[u8]) -> Result<ListView<T>> {
        let inner = &self.store.inner;
        let l1_key = inner.l1_key(self.id, key, &[]);
        let _tiers = inner.lock_tiers()?;
        if let Some(slot) = inner.l1_get(&l1_key) {
            let list = downcast::<ListValue<T>>(&self.store, &slot)?;
            if !inner.expired(self.id, list.min_ts) {
                return Ok(ListView { list: Some(list) });
            }
            drop(list);
            let cutoff = inner.expiry_cutoff(self.id).unwrap_or(i64::MIN);
            let list = self.modify_l1(slot, |list| list.trim(cutoff))?;
            return Ok(ListView { list: Some(list) });
        }
        let Some((bytes, from_l3)) = inner.lower_get(&l1_key)? else {
            return Ok(ListView { list: None });
        };
        self.check_size(key, bytes.len() as u64)?;
        let (list, trimmed) = self.decode_list(&bytes, from_l3)?;
        Ok(ListView {
            list: Some(self.put_l1(l1_key, list, trimmed)),
        })
    }

    /// Decodes a list whose first `from_l3` bytes came from L3, leaving out
    /// expired elements; says whether any were left out of L2's part (then
    /// L2 should be rewritten).
    fn decode_list(&self, bytes: &[u8], from_l3: usize) -> Result<(ListValue<T>, bool)> {
        let mut list = ListValue::empty();
        let (mut trimmed, mut l3_live, mut l3_expired) = (false, 0, 0);
        let cutoff = self.store.inner.expiry_cutoff(self.id);
        for element in codec::list_elements(self.name(), bytes) {
            let (ts, body) = element?;
            let in_l3 = (body.as_ptr() as usize) < bytes.as_ptr() as usize + from_l3;
            let expired = cutoff.is_some_and(|c| ts <= c);
            match (expired, in_l3) {
                (true, true) => l3_expired += 1,
                (true, false) => trimmed = true,
                (false, in_l3) => {
                    l3_live += usize::from(in_l3);
                    list.push(ts, self.store.inner.decode(self.id, body)?, body.len());
                }
            }
        }
        if from_l3 > 0 && l3_expired <= l3_live {
            (list.l3_prefix, list.l3_expired) = (Some(l3_live), l3_expired);
        } else if from_l3 > 0 {
            trimmed = true; // complete now: L3's expired rows go at its next move
        }
        Ok((list, trimmed))
    }

    fn unexpired(&self, ts: i64, values: Vec<T>) -> ListValue<T> {
        let mut list = ListValue::empty();
        if !self.store.inner.expired(self.id, ts) {
            for v in values {
                let len = weight_of(&v);
                list.push(ts, v, len);
            }
        }
        list
    }

    /// Replaces the key's list with `values`, all stamped now.
    pub fn update(&self, key: &[u8], values: Vec<T>) -> Result<()> {
        let inner = &self.store.inner;
        let l1_key = inner.l1_key(self.id, key, &[]);
        let ts = inner.write_ts(self.id);
        let list = self.unexpired(ts, values);
        let _tiers = inner.lock_tiers()?;
        self.put_l1(l1_key, list, true);
        Ok(())
    }

    /// Removes the key's list from every tier.
    pub fn clear(&self, key: &[u8]) -> Result<()> {
        let inner = &self.store.inner;
        let l1_key = inner.l1_key(self.id, key, &[]);
        let _tiers = inner.lock_tiers()?;
        inner.remove(&l1_key)
    }
}

/// A map from `K` to `V` per key (Flink's `MapState`). Reading one entry
/// reads only that entry. Writes go through to L2 so that iteration sees
/// every local entry in one place; with a cold tier, iteration adds the
/// entries only L3 holds.
pub struct MapState<K, V> {
    store: StateStore,
    id: u16,
    _t: PhantomData<fn() -> (K, V)>,
}

impl<K, V> Clone for MapState<K, V> {
    fn clone(&self) -> Self {
        Self {
            store: self.store.clone(),
            id: self.id,
            _t: PhantomData,
        }
    }
}

impl<K, V> MapState<K, V>
where
    K: Serialize + DeserializeOwned + Send + Sync + 'static,
    V: Serialize + DeserializeOwned + Clone + Send + Sync + 'static,
{
    pub(crate) fn new(store: StateStore, id: u16) -> Self {
        Self {
            store,
            id,
            _t: PhantomData,
        }
    }

    fn entry_key(&self, key: &[u8], user_key: &K) -> Result<L1Key> {
        let inner = &self.store.inner;
        let suffix = codec::encode(inner.name(self.id), user_key)?;
        Ok(inner.l1_key(self.id, key, &suffix))
    }

    /// The value at `user_key` in the key's map, if present and unexpired.
    pub fn get(&self, key: &[u8], user_key: &K) -> Result<Option<V>> {
        read_entry(&self.store, self.id, self.entry_key(key, user_key)?)
    }

    /// Sets `user_key` to `value` in the key's map.
    pub fn put(&self, key: &[u8], user_key: &K, value: V) -> Result<()> {
        let inner = &self.store.inner;
        let l1_key = self.entry_key(key, user_key)?;
        let ts = inner.write_ts(self.id);
        let bytes = codec::encode_entry(ts, &codec::encode(inner.name(self.id), &value)?);
        let _tiers = inner.lock_tiers()?;
        inner.l2_put(&l1_key, &bytes)?;
        let weight = value_weight::<V>(bytes.len());
        let slot = Slot::new(l1_key, self.id, ts, Arc::new(value), weight, false);
        inner.l1_insert(slot);
        Ok(())
    }

    /// Removes `user_key` from the key's map.
    pub fn remove(&self, key: &[u8], user_key: &K) -> Result<()> {
        let l1_key = self.entry_key(key, user_key)?;
        let _tiers = self.store.inner.lock_tiers()?;
        self.store.inner.remove(&l1_key)
    }

    /// Every unexpired entry of the key's map, in stored-key order.
    pub fn entries(&self, key: &[u8]) -> Result<Vec<(K, V)>> {
        let inner = &self.store.inner;
        let prefix = inner.l1_key(self.id, key, &[]);
        let name = inner.name(self.id);
        let mut found = std::collections::BTreeMap::new();
        let _tiers = inner.lock_tiers()?;
        inner.l2_scan(self.id, &prefix[2..], |user_key, value| {
            found.insert(user_key.to_vec(), value.to_vec());
            Ok(())
        })?;
        if let Some(cold) = &inner.cold {
            // L2 wins over L3: what L3 holds only fills the gaps.
            for (user_key, value) in cold.scan(&inner.meta(self.id).desc, &prefix[2..])? {
                found.entry(user_key).or_insert(value);
            }
        }
        let mut out = Vec::with_capacity(found.len());
        for (user_key, value) in found {
            let (ts, body) = codec::split_entry(name, &value)?;
            if !codec::is_tombstone(&value) && !inner.expired(self.id, ts) {
                out.push((
                    codec::decode(name, &user_key)?,
                    inner.decode(self.id, body)?,
                ));
            }
        }
        Ok(out)
    }
}
