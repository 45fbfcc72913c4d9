//! [`StoreBuilder`]: every tier's capacity in one place.

use super::StateStore;
use crate::cold::ColdTier;
use crate::descriptor::{StateDescriptor, StateKind};
use crate::error::{Result, StateError};
use crate::eviction::ColdEviction;
use crate::l1::L1;
use crate::l2::access::AccessBits;
use crate::l2::{options::chunk_cf_name, L2Budget, L2};
use crate::tiers::{Settings, StateMeta, Tiers, BATCHES_IN_FLIGHT};
use crate::ttl::Clock;
use std::path::PathBuf;
use std::sync::Arc;

/// The default per-key list limit (see [`StoreBuilder::max_list_bytes`]).
pub const DEFAULT_MAX_LIST_BYTES: u64 = 256 << 20;
/// The largest allowed per-key list limit.
pub const MAX_LIST_BYTES_LIMIT: u64 = 3 << 30;

/// Builds a [`StateStore`]: every tier's capacity in one place.
///
/// ```no_run
/// use strata_cache::{StateStore, StateDescriptor, Ttl};
/// use std::time::Duration;
/// let store = StateStore::builder("/tmp/strata-l2")
///     .l1_capacity(64 << 20)                       // L1: 64 MiB of values
///     .l2_memory(256 << 20)                        // L2: block cache + memtables
///     .state(StateDescriptor::value("count"))
///     .state(StateDescriptor::list("history").with_ttl(Ttl::event_time(Duration::from_secs(60 * 86_400))))
///     .open()?;
/// let count = store.value_state::<u64>("count")?;
/// count.update(b"user-1", 1)?;
/// assert_eq!(count.get(b"user-1")?, Some(1));
/// # Ok::<(), strata_cache::StateError>(())
/// ```
pub struct StoreBuilder {
    path: PathBuf,
    l1_capacity: u64,
    budget: Option<L2Budget>,
    l2_memory: usize,
    states: Vec<StateDescriptor>,
    max_parallelism: u32,
    clock: Option<Arc<Clock>>,
    cold: Option<Arc<dyn ColdTier>>,
    l2_capacity: Option<u64>,
    max_list_bytes: u64,
    flush_on_drop: bool,
    from_checkpoint: Option<PathBuf>,
}

impl StoreBuilder {
    pub(crate) fn new(path: PathBuf) -> Self {
        Self {
            path,
            l1_capacity: 64 << 20,
            budget: None,
            l2_memory: 128 << 20,
            states: Vec::new(),
            max_parallelism: crate::key_group::DEFAULT_MAX_PARALLELISM,
            clock: None,
            cold: None,
            l2_capacity: None,
            max_list_bytes: DEFAULT_MAX_LIST_BYTES,
            flush_on_drop: true,
            from_checkpoint: None,
        }
    }

    /// Opens a copy of `checkpoint`, a directory [`StateStore::checkpoint`]
    /// wrote, at the builder's path (which must be absent or empty): the
    /// checkpoint itself is only read, so it stays valid and can be opened
    /// again. Everything fixed for the state's life is checked as on any
    /// open (key groups, codec version, state kinds, value types) and a
    /// mismatch is an error naming it. See the crate docs for an example.
    ///
    /// With a cold tier, call [`StateStore::checkpoint_completed`] with the
    /// restored checkpoint's id before reading: the keys that checkpoint
    /// picked for L3 may have been moved there by the run that wrote it,
    /// and until the restored store finishes the move, a list whose
    /// appends L2 still holds would read them twice (once from L3).
    ///
    /// Errors at [`StoreBuilder::open`]: [`StateError::Config`] if
    /// `checkpoint` is not a store checkpoint or the path is not empty.
    pub fn from_checkpoint(mut self, checkpoint: impl Into<PathBuf>) -> Self {
        self.from_checkpoint = Some(checkpoint.into());
        self
    }

    /// L1 capacity in bytes (default 64 MiB): moka's entries (keys plus
    /// weighed values plus their bookkeeping), the compact tables and the
    /// front index, and the L2 write batches on their way (the open one,
    /// up to two queued for the writer and the one it writes, each a
    /// sixteenth of the capacity, 64 KiB to 8 MiB: four batches in all,
    /// at most a quarter of the capacity).
    pub fn l1_capacity(mut self, bytes: u64) -> Self {
        self.l1_capacity = bytes;
        self
    }

    /// L2 memory (block cache plus memtables) in bytes, for this store alone
    /// (default 128 MiB). Use [`StoreBuilder::l2_budget`] to share one budget.
    pub fn l2_memory(mut self, bytes: usize) -> Self {
        self.l2_memory = bytes;
        self
    }

    /// Shares an L2 memory budget with other stores of the process.
    pub fn l2_budget(mut self, budget: L2Budget) -> Self {
        self.budget = Some(budget);
        self
    }

    /// Declares a state. Names must be unique.
    pub fn state(mut self, desc: StateDescriptor) -> Self {
        self.states.push(desc);
        self
    }

    /// Number of key groups (default 128, at most 32768).
    pub fn max_parallelism(mut self, n: u32) -> Self {
        self.max_parallelism = n;
        self
    }

    /// Shares a clock (watermark) with the caller; by default the store has its own.
    pub fn clock(mut self, clock: Arc<Clock>) -> Self {
        self.clock = Some(clock);
        self
    }

    /// The most bytes one key's list may hold (encoded; default 256 MiB, at
    /// most 3 GiB — RocksDB's limit per value is 4 GiB). An append to a
    /// list in L1 that would pass it, and a read of a list found larger
    /// (grown by blind appends to L2), fail with
    /// [`StateError::ListTooLarge`] naming the key.
    pub fn max_list_bytes(mut self, bytes: u64) -> Self {
        self.max_list_bytes = bytes;
        self
    }

    /// Whether dropping the last handle flushes dirty L1 entries to L2
    /// (default true; a failure is printed). A store whose L2 is never read
    /// again — the strata runtime's live stores, restored from checkpoints
    /// only — turns it off.
    pub fn flush_on_drop(mut self, flush: bool) -> Self {
        self.flush_on_drop = flush;
        self
    }

    /// Adds a cold tier (L3): read on L2 misses, written by cold eviction.
    pub fn cold_tier(mut self, cold: Arc<dyn ColdTier>) -> Self {
        self.cold = Some(cold);
        self
    }

    /// L2 capacity in bytes on disk (live SST and blob files plus
    /// memtables). With a cold tier, the coldest keys beyond it are picked
    /// at each checkpoint and moved to L3 once that checkpoint completed.
    /// Without one, or unset, L2 grows with the state.
    pub fn l2_capacity(mut self, bytes: u64) -> Self {
        self.l2_capacity = Some(bytes);
        self
    }

    fn validate(&self) -> Result<()> {
        if !(1..=crate::key_group::MAX_KEY_GROUPS).contains(&self.max_parallelism) {
            return Err(StateError::Config(format!(
                "max parallelism {} is outside 1..={}",
                self.max_parallelism,
                crate::key_group::MAX_KEY_GROUPS
            )));
        }
        let chunk_logs: Vec<String> = self
            .states
            .iter()
            .filter(|s| s.kind == StateKind::List)
            .map(|s| chunk_cf_name(&s.name))
            .collect();
        for (i, s) in self.states.iter().enumerate() {
            if s.name.is_empty() || s.name == "default" || chunk_logs.contains(&s.name) {
                return Err(StateError::Config(format!(
                    "invalid state name '{}'{}",
                    s.name,
                    if chunk_logs.contains(&s.name) {
                        " (a list state's chunk log has that name)"
                    } else {
                        ""
                    }
                )));
            }
            if self.states[..i].iter().any(|o| o.name == s.name) {
                return Err(StateError::Config(format!(
                    "state '{}' declared twice",
                    s.name
                )));
            }
        }
        if self.states.len() >= usize::from(u16::MAX) {
            return Err(StateError::Config("too many states".into()));
        }
        if !(1..=MAX_LIST_BYTES_LIMIT).contains(&self.max_list_bytes) {
            return Err(StateError::Config(format!(
                "max list bytes {} is outside 1..={MAX_LIST_BYTES_LIMIT}",
                self.max_list_bytes
            )));
        }
        Ok(())
    }

    /// Opens L2 at the builder's path (creating it if absent) and builds L1.
    ///
    /// Errors: [`StateError::Config`] for invalid settings, [`StateError::L2`]
    /// if RocksDB cannot open the directory.
    pub fn open(self) -> Result<StateStore> {
        self.validate()?;
        let Some(checkpoint) = self.from_checkpoint.clone() else {
            return self.open_tiers();
        };
        let path = self.path.clone();
        crate::snapshot::copy_checkpoint(&checkpoint, &path)?;
        // A refused copy is removed, so that a second try can use the path.
        self.open_tiers().inspect_err(|_| {
            let _ = std::fs::remove_dir_all(&path);
        })
    }

    fn open_tiers(self) -> Result<StateStore> {
        let clock = self.clock.unwrap_or_default();
        let budget = self.budget.unwrap_or_else(|| L2Budget::new(self.l2_memory));
        std::fs::create_dir_all(&self.path).map_err(|source| StateError::SnapshotIo {
            path: self.path.clone(),
            source,
        })?;
        let l2 = L2::open(&self.path, &self.states, &budget, &clock)?;
        let batch_bytes = (self.l1_capacity / 16).clamp(64 << 10, 8 << 20);
        // At most a quarter: batches are 64 KiB at least, and a tiny L1
        // must keep room for moka's entries.
        let in_flight = (BATCHES_IN_FLIGHT * batch_bytes).min(self.l1_capacity / 4);
        let l1 = L1::new(self.l1_capacity, self.states.len(), in_flight);
        let eviction = self
            .l2_capacity
            .filter(|_| self.cold.is_some())
            .map(|c| Arc::new(ColdEviction::new(c)));
        let tiers = Tiers::new(
            l1,
            l2,
            self.cold,
            self.states.into_iter().map(StateMeta::new).collect(),
            AccessBits::new(eviction.is_some()),
            Settings {
                path: self.path,
                max_parallelism: self.max_parallelism,
                max_list_bytes: self.max_list_bytes,
                flush_on_drop: self.flush_on_drop,
                batch_bytes: batch_bytes as usize,
            },
        )?;
        let store = StateStore {
            tiers: Arc::new(tiers),
            eviction,
        };
        store.check_fixed_properties()?;
        if let Some(e) = &store.eviction {
            e.load_pending(&store.tiers.l2)?;
        }
        Ok(store)
    }
}
