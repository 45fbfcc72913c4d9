//! Typed state handles: [`ValueState`], [`ListState`], [`MapState`] (the
//! names and contracts of Apache Flink's keyed state).
//!
//! Every method takes the record key as bytes; the store maps it to its key
//! group (with the hash the record brought, see
//! [`crate::StateStore::set_current_key`]). Values are typed through serde
//! and stored with postcard. Complexities: `ListState::add` is O(1) and
//! never reads the list (an append to the copy already in L1, or to the
//! store's write batch, which reaches L2 through the chunk log);
//! `MapState::get` reads one entry, never the whole map; a small
//! `ValueState` (a count, a timestamp) lives inline in a compact table.

mod list;
mod list_value;
mod map;
mod value;

pub use list::{ListState, ListView};
pub(crate) use list_value::{encode_list, ListValue};
pub use map::MapState;
pub use value::ValueState;

use crate::codec;
use crate::error::{Result, StateError};
use crate::hash::{KeyBytes, L1Key};
use crate::l1::{AnyValue, Slot};
use crate::l2::batch::Op;
use crate::tiers::{Hot, Tiers};
use serde::{de::DeserializeOwned, Serialize};
use std::sync::Arc;

/// What every state handle holds: the store's tiers and the state's id.
/// `T` stands for the handle's type parameters (carried, never owned), so
/// a handle is `Clone` whatever they are.
pub(crate) struct Handle<T> {
    tiers: Arc<Tiers>,
    id: u16,
    _t: std::marker::PhantomData<fn() -> T>,
}

impl<T> Clone for Handle<T> {
    fn clone(&self) -> Self {
        Self::new(self.tiers.clone(), self.id)
    }
}

impl<T> Handle<T> {
    pub(crate) fn new(tiers: Arc<Tiers>, id: u16) -> Self {
        Self {
            tiers,
            id,
            _t: std::marker::PhantomData,
        }
    }
}

fn downcast<T: Send + Sync + 'static>(tiers: &Tiers, slot: &Slot) -> Result<Arc<T>> {
    slot.value()
        .downcast::<T>()
        .map_err(|_| wrong_value_type::<T>(tiers, slot))
}

/// The error for an L1 entry whose value is not a `T`.
fn wrong_value_type<T>(tiers: &Tiers, slot: &Slot) -> StateError {
    StateError::WrongKind {
        name: tiers.name(slot.state()).to_owned(),
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
/// spare capacity (as for lists). The entry's own cost is added by moka's
/// weigher.
fn value_weight<T>(encoded: usize) -> usize {
    (std::mem::size_of::<T>() + encoded).saturating_mul(3) / 2
}

/// Encodes a value (or map entry) slot for L2: a put of the whole value.
pub(crate) fn encode_value<T: Serialize + Send + Sync + 'static>(
    state: &str,
    slot: &Slot,
    _with_cold: bool,
) -> Result<Option<(Op, Vec<u8>)>> {
    let value = slot.value();
    let value = value
        .downcast_ref::<T>()
        .ok_or_else(|| StateError::UnknownState(state.to_owned()))?;
    let bytes = codec::encode_entry(slot.ts(), &codec::encode(state, value)?);
    Ok(Some((Op::Put, bytes)))
}

/// What L2 and L3 hold of an entry L1 lacks, unexpired: its write
/// timestamp, its value and its L1 weight. The caller holds the tier lock.
fn read_lower<T>(tiers: &Tiers, hot: &mut Hot, key: &KeyBytes) -> Result<Option<(i64, T, usize)>>
where
    T: DeserializeOwned,
{
    let Some((bytes, _)) = tiers.lower_get(hot, key)? else {
        return Ok(None);
    };
    let state = key.state();
    let (ts, body) = codec::split_entry(tiers.name(state), &bytes)?;
    if tiers.expired(state, ts) {
        return Ok(None);
    }
    let value: T = decode(tiers, state, body)?;
    Ok(Some((ts, value, value_weight::<T>(body.len()))))
}

/// A copy of an L1 entry's value, unless it expired.
fn live_value<T: Clone + Send + Sync + 'static>(tiers: &Tiers, slot: &Slot) -> Result<Option<T>> {
    if tiers.expired(slot.state(), slot.ts()) {
        return Ok(None);
    }
    Ok(Some((*downcast::<T>(tiers, slot)?).clone()))
}

/// Reads one moka entry (value or map entry) through the tiers, promoting
/// it to L1. The caller holds the tier lock.
fn read_entry<T>(tiers: &Tiers, hot: &mut Hot, key: &KeyBytes) -> Result<Option<T>>
where
    T: DeserializeOwned + Clone + Send + Sync + 'static,
{
    if let Some(slot) = tiers.l1_get(hot, key)? {
        return live_value(tiers, &slot);
    }
    let Some((ts, value, weight)) = read_lower::<T>(tiers, hot, key)? else {
        return Ok(None);
    };
    let slot = Slot::new(
        L1Key::from_bytes(key),
        ts,
        Arc::new(value.clone()),
        weight,
        false,
    );
    tiers.l1_insert(hot, slot)?;
    Ok(Some(value))
}

/// Reads one moka entry (value or map entry) through the tiers without
/// moving it: an L1 hit is cloned, a lower tier's value is decoded and not
/// promoted (a query's read: no tier change, no dirtying). The caller
/// holds the tier lock.
fn peek_entry<T>(tiers: &Tiers, hot: &mut Hot, key: &KeyBytes) -> Result<Option<T>>
where
    T: DeserializeOwned + Clone + Send + Sync + 'static,
{
    if let Some(slot) = tiers.l1_peek(hot, key)? {
        return live_value(tiers, &slot);
    }
    Ok(read_lower::<T>(tiers, hot, key)?.map(|(_, value, _)| value))
}

/// Decodes a stored value body of `state`; a value written under an
/// older schema of the state lacks its trailing `Option` fields, which
/// decode as `None` (see [`crate::schema`]).
pub(crate) fn decode<T: DeserializeOwned>(tiers: &Tiers, state: u16, body: &[u8]) -> Result<T> {
    let name = tiers.name(state);
    let first = codec::decode(name, body);
    let pad = tiers.meta(state).pad.get().copied().unwrap_or(0);
    if first.is_ok() || pad == 0 {
        return first;
    }
    (1..=pad)
        .find_map(|k| {
            let padded = [body, &vec![0; k]].concat();
            codec::decode(name, &padded).ok()
        })
        .map_or(first, Ok)
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

/// Runs `f` with the tier lock held and the L1 key of (`state`, `key`,
/// `suffix`) built in the reused buffer.
fn with_key<R>(
    tiers: &Tiers,
    state: u16,
    key: &[u8],
    suffix: &[u8],
    f: impl FnOnce(&mut Hot, &KeyBytes) -> Result<R>,
) -> Result<R> {
    let mut hot = tiers.lock()?;
    let buf = hot.key(tiers, state, key, suffix);
    let out = f(&mut hot, KeyBytes::new(&buf));
    hot.give_back(buf);
    out
}
