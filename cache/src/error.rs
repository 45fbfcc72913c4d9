//! The error type of `strata-cache`.

use std::path::PathBuf;

/// Everything that can go wrong in the tiered state store.
///
/// Each variant names the state (or file) involved so a job's one-line error
/// says where to look.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    /// RocksDB (L2) refused an operation.
    #[error("L2 (RocksDB) error: {0}")]
    L2(#[from] rocksdb::Error),
    /// A stored value could not be encoded or decoded with the state's type.
    #[error("state '{state}': cannot {action} value: {source}")]
    Codec {
        /// The state whose value it is.
        state: String,
        /// `encode` or `decode`.
        action: &'static str,
        /// The codec's error.
        source: postcard::Error,
    },
    /// A stored value is shorter or differently shaped than its encoding says.
    #[error("state '{state}': stored value is corrupt: {reason}")]
    Corrupt {
        /// The state whose value it is.
        state: String,
        /// What is wrong with the bytes.
        reason: String,
    },
    /// A state handle was asked for a name that was never declared.
    #[error("state '{0}' was not declared when the store was built")]
    UnknownState(String),
    /// A state was declared twice, or asked for as a different kind.
    #[error("state '{name}' is declared as {declared}, not {requested}")]
    WrongKind {
        /// The state's name.
        name: String,
        /// The kind it was declared as.
        declared: &'static str,
        /// The kind it was asked for as.
        requested: &'static str,
    },
    /// A list would grow, or was found grown, beyond the per-key limit
    /// ([`crate::StoreBuilder::max_list_bytes`]).
    #[error("state '{state}', key {key}: the list holds {bytes} bytes, more than the per-key limit of {limit} bytes (state.max-list-bytes); keep less per key (a TTL, or a finer key)")]
    ListTooLarge {
        /// The list state's name.
        state: String,
        /// The key, as `composite_key::describe` shows it.
        key: String,
        /// The list's encoded size, bytes.
        bytes: u64,
        /// The per-key limit, bytes.
        limit: u64,
    },
    /// A state's value type is not the one its stored values were written
    /// with, and cannot be migrated to it (see [`crate::schema`]).
    #[error("state '{state}': its stored values have schema {stored}, but its type now has schema {declared}; only Option fields added at the end of a struct are migrated")]
    SchemaChanged {
        /// The state's name.
        state: String,
        /// The schema its stored values were written with.
        stored: String,
        /// The schema of its type now.
        declared: String,
    },
    /// The store was closed ([`crate::StateStore::close`]).
    #[error("the state store in {0} is closed")]
    Closed(PathBuf),
    /// An earlier write to L2 failed after the store took entries from L1
    /// (an eviction, the spill buffer or a checkpoint's flush): what they
    /// held is not all in L2, so every later operation is refused. Restore
    /// from the last completed checkpoint.
    #[error("the state store in {path} failed earlier and refuses further use: a dirty entry could not be written to L2: {reason}")]
    Failed {
        /// The store's directory.
        path: PathBuf,
        /// The first failure, which poisoned the store.
        reason: String,
    },
    /// The store's directory is open in another store or process.
    #[error(
        "the state directory {0} is open in another store or process (RocksDB holds its LOCK)"
    )]
    InUse(PathBuf),
    /// An invalid store configuration (capacity, parallelism, names).
    #[error("invalid state store configuration: {0}")]
    Config(String),
    /// The cold tier (L3) failed.
    #[error("L3 error: {0}")]
    L3(String),
    /// A newer run of the job owns its L3 lineage: this one is a zombie
    /// and must stop without writing (see `l3::fence`).
    #[error("L3 error: {0}")]
    Fenced(String),
    /// A file of a snapshot does not hold what the snapshot recorded
    /// (size or xxh3 checksum): the checkpoint that lists `object` is
    /// corrupt.
    #[error("checkpoint file {path} is corrupt: {found}")]
    CorruptFile {
        /// The file as it was read.
        path: PathBuf,
        /// The file's name in checkpoint storage, relative to its root.
        object: String,
        /// What was found instead, and what was recorded.
        found: String,
    },
    /// A file of a snapshot could not be read, written or linked.
    #[error("snapshot file {path}: {source}")]
    SnapshotIo {
        /// The file.
        path: PathBuf,
        /// The operating system's error.
        source: std::io::Error,
    },
}

/// Shorthand for results of this crate.
pub type Result<T, E = StateError> = std::result::Result<T, E>;
