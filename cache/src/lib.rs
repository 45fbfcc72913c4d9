//! # strata-cache: tiered keyed state
//!
//! A keyed state store whose hot entries live deserialised in memory (L1,
//! [moka], bounded by bytes), whose warm and spilled entries live in an
//! embedded RocksDB (L2, bounded by one memory budget for block cache and
//! memtables), and whose cold entries may live in a [`ColdTier`] (L3,
//! Cassandra/ScyllaDB: [`l3::CassandraTier`]), moved there by checkpoint-gated
//! cold eviction ([`StateStore::checkpoint_completed`]). It is the state backend of
//! the strata runtime and is useful on its own:
//!
//! ```no_run
//! use strata_cache::{StateDescriptor, StateStore, Ttl};
//! use std::time::Duration;
//!
//! let store = StateStore::builder("/tmp/strata-example")
//!     .l1_capacity(8 << 20)
//!     .state(StateDescriptor::list("events").with_ttl(Ttl::event_time(Duration::from_secs(3600))))
//!     .open()?;
//! let events = store.list_state::<String>("events")?;
//! store.set_record_timestamp(1_000);
//! events.add(b"user-1", "login".to_string())?;     // never reads the list
//! assert_eq!(events.get(b"user-1")?.len(), 1);
//! store.clock().advance_watermark(1_000 + 3_600_000); // an hour of event time later
//! assert!(events.get(b"user-1")?.is_empty());        // expired
//! # Ok::<(), strata_cache::StateError>(())
//! ```
//!
//! A checkpoint is a consistent copy of L1 and L2 (L1 is flushed first);
//! a store opened [`from_checkpoint`](StoreBuilder::from_checkpoint) works
//! on a copy of it, so the checkpoint stays as it was:
//!
//! ```no_run
//! use strata_cache::{StateDescriptor, StateStore};
//! use std::path::Path;
//!
//! let store = StateStore::builder("/tmp/strata-live")
//!     .state(StateDescriptor::value("count"))
//!     .open()?;
//! store.value_state::<u64>("count")?.update(b"bob", 7)?;
//! store.checkpoint(Path::new("/tmp/strata-chk-1"), 1)?; // must not exist yet
//! store.close()?;
//!
//! let restored = StateStore::builder("/tmp/strata-restored") // absent or empty
//!     .state(StateDescriptor::value("count"))      // the same states, kinds and types
//!     .from_checkpoint("/tmp/strata-chk-1")        // read only, never written
//!     .open()?;
//! assert_eq!(restored.value_state::<u64>("count")?.get(b"bob")?, Some(7));
//! # Ok::<(), strata_cache::StateError>(())
//! ```
//!
//! Cargo feature `l3` (on by default) brings the Cassandra/ScyllaDB cold
//! tier and with it the scylla driver, tokio, tower and metrics (135
//! crates in the dependency tree instead of 55). For the L1/L2 store
//! alone, depend on `strata-cache` with `default-features = false`; a
//! [`ColdTier`] of your own still plugs in.
//!
//! Modules: [`key_group`] (partitioning), [`hash`] (key hashes),
//! [`composite_key`] (keys of several fields), [`codec`] (byte layouts),
//! [`ttl`] (expiry), [`schema`] (value types), [`snapshot`] (incremental
//! checkpoint files), [`l3`] (the Cassandra/ScyllaDB cold tier). Inside:
//! `l1` (moka, the front index, the compact tables), `l2` (RocksDB, the
//! write batches and their writer, the chunk log), `tiers` (the tiers
//! together), `state` (the typed handles), `eviction` (cold eviction) and
//! `store` (the public store and its builder), each depending only on
//! those before it.

pub mod codec;
pub use strata_key as composite_key;
mod cold;
mod descriptor;
mod error;
mod eviction;
mod fault;
pub mod hash;
pub mod key_group;
mod l1;
mod l2;
#[cfg(feature = "l3")]
pub mod l3;
pub mod schema;
pub mod snapshot;
mod state;
mod stats;
mod store;
mod sync;
pub(crate) mod tiers;
pub mod ttl;

pub use cold::{ColdTier, ColdWrite};
pub use descriptor::{StateDescriptor, StateKind};
pub use error::{Result, StateError};
pub use eviction::EvictionReport;
pub use l2::report::{L2Report, StateColumns, StateL2Report};
pub use l2::{l2_cf_options, l2_db_options, list_read_options, L2Budget};
pub use state::{ListState, ListView, MapState, ValueState};
pub use stats::TierStats;
pub use store::{StateStore, StoreBuilder, DEFAULT_MAX_LIST_BYTES, MAX_LIST_BYTES_LIMIT};
pub use tiers::PendingCheckpoint;
pub use ttl::{Clock, TimeDomain, Ttl};
