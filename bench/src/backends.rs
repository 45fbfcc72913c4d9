//! The ways the workload's state can be kept, all behind one trait so that
//! every mode sees the same events:
//!
//! * `embedded` — strata's tiered store, L1 (moka) + L2 (RocksDB); with a
//!   cold tier and checkpoints, the `l3` mode (see [`crate::cassandra`]);
//! * `rocksdb-raw` — the same updates straight into RocksDB through the
//!   `rocksdb` crate with the same options (WAL off, bloom filters, one
//!   memory budget): the ceiling for L2;
//! * `memory` — a plain `HashMap`, no tiers, no serialisation: the ceiling
//!   for memory.

use crate::checkpointing::{CheckpointFigures, Checkpointing};
use crate::workload::{Event, Form, Workload, DAY_MS};
use std::collections::{HashMap, VecDeque};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use strata_cache::l3::CassandraTier;
use strata_cache::{ListState, StateDescriptor, StateStore, TierStats, Ttl, ValueState};

/// Errors of a backend, as text (a benchmark run stops at the first).
pub type BenchError = Box<dyn std::error::Error + Send + Sync>;

/// Keeps the workload's per-user state.
pub trait Backend: Send {
    /// Applies one event of `user`.
    fn apply(&mut self, user: u64, event: Event) -> Result<(), BenchError>;
    /// Reads ahead what applying events of `users` will need from a cold
    /// tier, as the runtime does before each batch of records.
    fn prefetch(&mut self, _users: &[u64]) -> Result<(), BenchError> {
        Ok(())
    }
    /// The user's event count (for verification).
    fn count(&mut self, user: u64) -> Result<u64, BenchError>;
    /// Tier figures, where the backend has tiers.
    fn tiers(&self) -> Option<TierStats> {
        None
    }
    /// Called after the last event: a backend that checkpoints takes a last
    /// checkpoint, stops checkpointing and returns its checkpoint figures.
    fn finish(&mut self) -> Result<Option<CheckpointFigures>, BenchError> {
        Ok(None)
    }
}

/// Memory settings shared by the tiered modes.
#[derive(Debug, Clone, Copy)]
pub struct Budget {
    /// L1 bytes per worker.
    pub l1_bytes: u64,
    /// RocksDB block cache + memtables per worker.
    pub l2_bytes: usize,
    /// L2 bytes on disk per worker beyond which cold keys go to L3 (`l3` mode).
    pub l2_capacity: u64,
}

const KEEP_NAIVE: usize = 100;

/// The history state of the update form: a list appended to, or the
/// naive form's whole list as one value.
enum History {
    Add(ListState<Event>),
    Naive(ValueState<Vec<Event>>),
}

/// strata's tiered store.
pub struct Embedded {
    store: StateStore,
    history: History,
    count: ValueState<u64>,
    seen: u64,
    /// Checkpoints every `w.checkpoint_every` events, until [`Backend::finish`].
    checkpoints: Option<Checkpointing>,
    checkpoint_every: u64,
}

impl Embedded {
    /// A store in `dir` (L2 in `dir/l2`, checkpoint storage in
    /// `dir/checkpoints`) with the workload's states, checkpointing every
    /// `w.checkpoint_every` events; with `cold`, also an L3 and an L2
    /// capacity (each completed checkpoint moves cold keys to L3).
    pub fn open(
        dir: &Path,
        w: &Workload,
        budget: Budget,
        cold: Option<Arc<CassandraTier>>,
    ) -> Result<Self, BenchError> {
        let ttl = Ttl::event_time(Duration::from_millis(w.history_days * DAY_MS as u64));
        let mut builder = StateStore::builder(dir.join("l2"));
        if let Some(cold) = cold {
            builder = builder.cold_tier(cold).l2_capacity(budget.l2_capacity);
        }
        // Only the states the form uses: read-ahead asks L3 for each.
        let history = match w.form {
            Form::ListAdd => StateDescriptor::list("history"),
            Form::Naive => StateDescriptor::value("history"),
        };
        let store = builder
            .l1_capacity(budget.l1_bytes)
            .l2_memory(budget.l2_bytes)
            .state(history.with_ttl(ttl))
            .state(StateDescriptor::value("count"))
            .open()?;
        Ok(Self {
            history: match w.form {
                Form::ListAdd => History::Add(store.list_state("history")?),
                Form::Naive => History::Naive(store.value_state("history")?),
            },
            count: store.value_state("count")?,
            store,
            seen: 0,
            checkpoints: Some(Checkpointing::new(dir.join("checkpoints"))?),
            checkpoint_every: w.checkpoint_every,
        })
    }
}

impl Backend for Embedded {
    fn apply(&mut self, user: u64, event: Event) -> Result<(), BenchError> {
        let key = user.to_be_bytes();
        self.store.set_record_timestamp(event.ts);
        self.seen += 1;
        if self.seen.is_multiple_of(1024) {
            self.store.clock().advance_watermark(event.ts);
        }
        match &self.history {
            History::Add(list) => list.add(&key, event)?,
            History::Naive(recent) => {
                let mut events = recent.get(&key)?.unwrap_or_default();
                events.push(event);
                if events.len() > KEEP_NAIVE {
                    events.remove(0);
                }
                recent.update(&key, events)?;
            }
        }
        let n = self.count.get(&key)?.unwrap_or(0);
        self.count.update(&key, n + 1)?;
        if self.checkpoint_every > 0 && self.seen.is_multiple_of(self.checkpoint_every) {
            if let Some(c) = &mut self.checkpoints {
                c.take(&self.store, self.seen)?;
            }
        }
        Ok(())
    }

    fn prefetch(&mut self, users: &[u64]) -> Result<(), BenchError> {
        let keys: Vec<[u8; 8]> = users.iter().map(|u| u.to_be_bytes()).collect();
        Ok(self.store.prefetch(keys.iter().map(|k| k.as_slice()))?)
    }

    fn count(&mut self, user: u64) -> Result<u64, BenchError> {
        Ok(self.count.get(&user.to_be_bytes())?.unwrap_or(0))
    }

    fn tiers(&self) -> Option<TierStats> {
        Some(self.store.stats())
    }

    fn finish(&mut self) -> Result<Option<CheckpointFigures>, BenchError> {
        let Some(mut c) = self.checkpoints.take() else {
            return Ok(None);
        };
        if c.events() != Some(self.seen) {
            c.take(&self.store, self.seen)?;
        }
        Ok(Some(c.figures()))
    }
}

/// The same updates straight into RocksDB.
pub struct RocksDbRaw {
    db: rocksdb::DB,
    write: rocksdb::WriteOptions,
    form: Form,
}

fn concat(_: &[u8], existing: Option<&[u8]>, ops: &rocksdb::MergeOperands) -> Option<Vec<u8>> {
    let mut out = existing.map(<[u8]>::to_vec).unwrap_or_default();
    for op in ops {
        out.extend_from_slice(op);
    }
    Some(out)
}

impl RocksDbRaw {
    /// A database in `dir` with strata's L2 options.
    pub fn open(dir: &Path, w: &Workload, budget: Budget) -> Result<Self, BenchError> {
        let cache = rocksdb::Cache::new_lru_cache(budget.l2_bytes);
        let buffers = rocksdb::WriteBufferManager::new_write_buffer_manager_with_cache(
            budget.l2_bytes / 2,
            false,
            cache.clone(),
        );
        let mut table = rocksdb::BlockBasedOptions::default();
        table.set_block_cache(&cache);
        table.set_bloom_filter(10.0, false);
        table.set_cache_index_and_filter_blocks(true);
        let mut opts = rocksdb::Options::default();
        opts.create_if_missing(true);
        opts.set_block_based_table_factory(&table);
        opts.set_write_buffer_manager(&buffers);
        opts.set_compression_type(rocksdb::DBCompressionType::Lz4);
        opts.set_merge_operator_associative("concat", concat);
        let mut write = rocksdb::WriteOptions::default();
        write.disable_wal(true);
        Ok(Self {
            db: rocksdb::DB::open(&opts, dir)?,
            write,
            form: w.form,
        })
    }

    fn key(user: u64, tag: u8) -> [u8; 9] {
        let mut k = [tag; 9];
        k[1..].copy_from_slice(&user.to_be_bytes());
        k
    }
}

impl Backend for RocksDbRaw {
    fn apply(&mut self, user: u64, event: Event) -> Result<(), BenchError> {
        let list_key = Self::key(user, b'h');
        match self.form {
            Form::ListAdd => {
                let body = postcard::to_stdvec(&event)?;
                let mut element = Vec::with_capacity(body.len() + 12);
                element.extend_from_slice(&event.ts.to_be_bytes());
                element.extend_from_slice(&(body.len() as u32).to_be_bytes());
                element.extend_from_slice(&body);
                self.db.merge_opt(list_key, element, &self.write)?;
            }
            Form::Naive => {
                let mut recent: Vec<Event> = match self.db.get_pinned(list_key)? {
                    Some(bytes) => postcard::from_bytes(&bytes)?,
                    None => Vec::new(),
                };
                recent.push(event);
                if recent.len() > KEEP_NAIVE {
                    recent.remove(0);
                }
                self.db
                    .put_opt(list_key, postcard::to_stdvec(&recent)?, &self.write)?;
            }
        }
        let count_key = Self::key(user, b'c');
        let n = self.count(user)?;
        Ok(self
            .db
            .put_opt(count_key, (n + 1).to_be_bytes(), &self.write)?)
    }

    fn count(&mut self, user: u64) -> Result<u64, BenchError> {
        Ok(match self.db.get_pinned(Self::key(user, b'c'))? {
            Some(b) => u64::from_be_bytes(b.as_ref().try_into()?),
            None => 0,
        })
    }
}

/// A plain hash map: no tiers, no serialisation; history trimmed by the
/// same event-time TTL.
pub struct Memory {
    users: HashMap<u64, (VecDeque<Event>, u64)>,
    form: Form,
    ttl_ms: i64,
}

impl Memory {
    /// An empty map for `w`'s form.
    pub fn new(w: &Workload) -> Self {
        Self {
            users: HashMap::new(),
            form: w.form,
            ttl_ms: w.history_days as i64 * DAY_MS,
        }
    }
}

impl Backend for Memory {
    fn apply(&mut self, user: u64, event: Event) -> Result<(), BenchError> {
        let (history, count) = self.users.entry(user).or_default();
        let cutoff = event.ts - self.ttl_ms;
        while history.front().is_some_and(|e| e.ts <= cutoff) {
            history.pop_front();
        }
        history.push_back(event);
        if self.form == Form::Naive && history.len() > KEEP_NAIVE {
            history.pop_front();
        }
        *count += 1;
        Ok(())
    }

    fn count(&mut self, user: u64) -> Result<u64, BenchError> {
        Ok(self.users.get(&user).map_or(0, |(_, n)| *n))
    }
}
