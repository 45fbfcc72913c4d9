//! [`MapState`]: a map per key whose entries are read one at a time.

use super::{read_entry, value_weight, with_key, Handle};
use crate::codec;
use crate::error::Result;
use crate::hash::L1Key;
use crate::l1::Slot;
use crate::l2::batch::Op;
use crate::tiers::Tiers;
use serde::{de::DeserializeOwned, Serialize};
use std::sync::Arc;

/// A map from `K` to `V` per key (Flink's `MapState`). Reading one entry
/// reads only that entry. A put goes to L1 and to the store's write batch
/// at once (so iteration finds every local entry in L2 once the batch is
/// written); with a cold tier, iteration adds the entries only L3 holds.
pub struct MapState<K, V>(Handle<(K, V)>);

impl<K, V> Clone for MapState<K, V> {
    fn clone(&self) -> Self {
        Self(self.0.clone())
    }
}

impl<K, V> MapState<K, V>
where
    K: Serialize + DeserializeOwned + Send + Sync + 'static,
    V: Serialize + DeserializeOwned + Clone + Send + Sync + 'static,
{
    pub(crate) fn new(tiers: Arc<Tiers>, id: u16) -> Self {
        Self(Handle::new(tiers, id))
    }

    fn suffix(&self, user_key: &K) -> Result<Vec<u8>> {
        codec::encode(self.0.tiers.name(self.0.id), user_key)
    }

    /// The value at `user_key` in the key's map, if present and unexpired.
    pub fn get(&self, key: &[u8], user_key: &K) -> Result<Option<V>> {
        let t = &*self.0.tiers;
        let suffix = self.suffix(user_key)?;
        with_key(t, self.0.id, key, &suffix, |hot, k| read_entry(t, hot, k))
    }

    /// The value at `user_key` as [`MapState::get`] gives it, read without
    /// promoting the entry to L1 (a query's read).
    pub fn peek(&self, key: &[u8], user_key: &K) -> Result<Option<V>> {
        let t = &*self.0.tiers;
        let suffix = self.suffix(user_key)?;
        with_key(t, self.0.id, key, &suffix, |hot, k| {
            super::peek_entry(t, hot, k)
        })
    }

    /// Sets `user_key` to `value` in the key's map.
    pub fn put(&self, key: &[u8], user_key: &K, value: V) -> Result<()> {
        let t = &*self.0.tiers;
        let ts = t.write_ts(self.0.id);
        let bytes = codec::encode_entry(ts, &codec::encode(t.name(self.0.id), &value)?);
        let suffix = self.suffix(user_key)?;
        with_key(t, self.0.id, key, &suffix, |hot, k| {
            t.push(hot, k, Op::Put, &bytes);
            let weight = value_weight::<V>(bytes.len());
            let slot = Slot::new(L1Key::from_bytes(k), ts, Arc::new(value), weight, false);
            t.l1_insert(hot, slot)
        })
    }

    /// Removes `user_key` from the key's map.
    pub fn remove(&self, key: &[u8], user_key: &K) -> Result<()> {
        let t = &*self.0.tiers;
        let suffix = self.suffix(user_key)?;
        with_key(t, self.0.id, key, &suffix, |hot, k| t.remove(hot, k))
    }

    /// Every unexpired entry of the key's map, in stored-key order. Waits
    /// until L2 holds every write made so far.
    pub fn entries(&self, key: &[u8]) -> Result<Vec<(K, V)>> {
        let t = &*self.0.tiers;
        let name = t.name(self.0.id);
        let mut found = std::collections::BTreeMap::new();
        with_key(t, self.0.id, key, &[], |hot, prefix| {
            t.settle_l2(hot)?;
            t.l2.scan(self.0.id, prefix.stored(), |user_key, value| {
                found.insert(user_key.to_vec(), value.to_vec());
                Ok(())
            })?;
            if let Some(cold) = &t.cold {
                // L2 wins over L3: what L3 holds only fills the gaps.
                for (user_key, value) in cold.scan(&t.meta(self.0.id).desc, prefix.stored())? {
                    found.entry(user_key).or_insert(value);
                }
            }
            Ok(())
        })?;
        let mut out = Vec::with_capacity(found.len());
        for (user_key, value) in found {
            let (ts, body) = codec::split_entry(name, &value)?;
            if !codec::is_tombstone(&value) && !t.expired(self.0.id, ts) {
                out.push((
                    codec::decode(name, &user_key)?,
                    super::decode(t, self.0.id, body)?,
                ));
            }
        }
        Ok(out)
    }
}
