//! The cold tier (L3) as the store sees it.
//!
//! An embedded run has none; [`crate::l3::CassandraTier`] implements it on
//! Cassandra/ScyllaDB. Byte layouts are those of [`crate::codec`]; a stored
//! key is `[key group][key length][key][map user key]`.

use crate::descriptor::StateDescriptor;
use crate::error::Result;

/// The cold tier: read on an L2 miss, written when cold keys leave L2
/// after a checkpoint completed.
pub trait ColdTier: Send + Sync {
    /// What L3 holds of `stored_key` in `state`: for a value or map entry its
    /// encoded entry; for a list its elements in append order (no base
    /// marker), `None` when it holds none.
    fn get(&self, state: &StateDescriptor, stored_key: &[u8]) -> Result<Option<Vec<u8>>>;

    /// [`ColdTier::get`] for many keys at once (an implementation issues
    /// them concurrently); answers in the order asked.
    fn get_many(&self, keys: &[(&StateDescriptor, &[u8])]) -> Result<Vec<Option<Vec<u8>>>> {
        keys.iter()
            .map(|(state, key)| self.get(state, key))
            .collect()
    }

    /// Every entry L3 holds of one map: `(map user key, encoded entry)` pairs
    /// for the record key whose stored key is `stored_key`.
    fn scan(&self, state: &StateDescriptor, stored_key: &[u8]) -> Result<Vec<(Vec<u8>, Vec<u8>)>>;

    /// Writes the entries picked for eviction at checkpoint `checkpoint_id`,
    /// once that checkpoint completed. The write must be versioned so that
    /// repeating it is harmless and a write for an older checkpoint never
    /// overwrites one for a newer checkpoint.
    fn write(&self, writes: &[ColdWrite<'_>], checkpoint_id: u64) -> Result<()>;
}

/// One L2 entry leaving for L3 (see [`ColdTier::write`]).
#[derive(Debug, Clone, Copy)]
pub struct ColdWrite<'a> {
    /// The state the entry belongs to.
    pub state: &'a StateDescriptor,
    /// Its stored key (for a map entry, including the map user key).
    pub stored_key: &'a [u8],
    /// Its encoded value: an entry, a tombstone, or a list that is complete
    /// (starts with the base marker: replace what L3 holds) or holds appends
    /// only (add them after what L3 holds). Expired elements are already gone.
    pub bytes: &'a [u8],
}
