//! The three kinds of task a pipeline runs: the source, keyed operator
//! instances and sink instances. Each is a tokio task connected to its
//! neighbours by bounded edges (see [`crate::channel`]).

pub(crate) mod corruption;
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
    /// Where the source read it (default for records a keyed function emits).
    pub(crate) pos: SourcePos,
    pub(crate) value: T,
}

/// A record's source split and the position after it there (a file's
/// record count, a Kafka partition's next offset): what a query's answer
/// reports (see [`crate::query`]).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct SourcePos {
    pub(crate) split: u32,
    pub(crate) next: u64,
}
