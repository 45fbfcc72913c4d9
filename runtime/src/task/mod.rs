//! The three kinds of task a pipeline runs: the source, keyed operator
//! instances and sink instances. Each is a tokio task connected to its
//! neighbours by bounded edges (see [`crate::channel`]).

pub(crate) mod dead_letter;
pub(crate) mod input;
pub(crate) mod keyed;
pub(crate) mod sink;
pub(crate) mod source;

/// A record with its key and event timestamp (ms), as it travels from the
/// source to keyed operators.
#[derive(Debug)]
pub(crate) struct Keyed<T> {
    pub(crate) key: Vec<u8>,
    /// `strata_cache::hash::hash_key(&key)`, computed once by the source
    /// (it routes by it) and reused by the state store.
    pub(crate) hash: u64,
    pub(crate) ts: i64,
    pub(crate) value: T,
}
