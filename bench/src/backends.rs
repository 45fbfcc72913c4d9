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
pub(crate) type BenchError = Box<dyn std::error::Error + Send + Sync>;

/// Keeps the workload's per-user state.
pub(crate) trait Backend: Send {
    /// Applies one event of `user`.
    fn apply(&mut self, user: u64, event: Event) -> Result<(), BenchError>;
    /// Reads ahead what applying events of `users` will need from a cold
    /// tier, as the runtime does before each batch of records.
    fn prefetch(&mut self, _users: &[u64]) -> Result<(), BenchError> {
        Ok(())
    }
    /// The user's event count (for verification).
    fn count(&mut self, user: u64) -> Result<u64, BenchError>;
    /// The user's history as stored, oldest first (for verification);
    /// `None` from a backend that does not read histories back.
    fn history(&mut self, _user: u64) -> Result<Option<Vec<Event>>, BenchError> {
        Ok(None)
    }
    /// Told, after a restore, that the restored checkpoint completed (as
    /// the runtime tells its keyed tasks): keys it picked for L3 finish
    /// their move, which the killed run may have begun, with the L3
    /// version it recorded, so that repeated writes are identical.
    fn restored(&mut self, _latest: &crate::checkpointing::Latest) -> Result<(), BenchError> {
        Ok(())
    }
    /// Tier figures, where the backend has tiers.
    fn tiers(&self) -> Option<TierStats> {
        None
    }
    /// Requests sent to L3 so far (reads and write batches), with one.
    fn l3_requests(&self) -> Option<u64> {
        None
    }
    /// What RocksDB did, where the backend uses RocksDB.
    fn l2_report(&self) -> Option<strata_cache::L2Report> {
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
pub(crate) struct Budget {
    /// L1 bytes per worker.
    pub l1_bytes: u64,
    /// RocksDB block cache + memtables per worker.
    pub l2_bytes: usize,
    /// L2 bytes on disk per worker beyond which cold keys go to L3 (`l3` mode).
    pub l2_capacity: u64,
}

/// Events the `naive` form keeps per user.
pub(crate) const KEEP_NAIVE: usize = 100;

/// The history state of the update form: a list appended to, or the
/// naive form's whole list as one value.
enum History {
    Add(ListState<Event>),
    Naive(ValueState<Vec<Event>>),
}

/// The workload's per-user state in a strata store: the history, as the
/// update form keeps it, and the count. `embedded` and `pipeline` share it.
pub(crate) struct UserState {
    history: History,
    count: ValueState<u64>,
}

impl UserState {
    /// The states the form uses (only those: read-ahead asks L3 for each).
    pub(crate) fn descriptors(w: &Workload) -> Vec<StateDescriptor> {
        let ttl = Ttl::event_time(Duration::from_millis(w.history_days * DAY_MS as u64));
        let history = match w.form {
            Form::ListAdd => StateDescriptor::list("history"),
            Form::Naive => StateDescriptor::value("history"),
        };
        vec![history.with_ttl(ttl), StateDescriptor::value("count")]
    }

    /// The handles of a store declared with [`UserState::descriptors`].
    pub(crate) fn open(store: &StateStore, form: Form) -> Result<Self, BenchError> {
        Ok(Self {
            history: match form {
                Form::ListAdd => History::Add(store.list_state("history")?),
                Form::Naive => History::Naive(store.value_state("history")?),
            },
            count: store.value_state("count")?,
        })
    }

    /// Applies one event of the user keyed `key`.
    pub(crate) fn apply(&self, key: &[u8], event: Event) -> Result<(), BenchError> {
        match &self.history {
            History::Add(list) => list.add(key, event)?,
            History::Naive(recent) => recent.modify(key, |events| {
                events.push(event);
                if events.len() > KEEP_NAIVE {
                    events.remove(0);
                }
            })?,
        }
        self.count.modify(key, |n| *n += 1)?;
        Ok(())
    }

    /// The user's count.
    pub(crate) fn count(&self, key: &[u8]) -> Result<u64, BenchError> {
        Ok(self.count.get(key)?.unwrap_or(0))
    }

    /// The user's history, oldest first.
    pub(crate) fn history(&self, key: &[u8]) -> Result<Vec<Event>, BenchError> {
        Ok(match &self.history {
            History::Add(list) => list.get(key)?.iter().cloned().collect(),
            History::Naive(recent) => recent.get(key)?.unwrap_or_default(),
        })
    }
}

/// strata's tiered store.
pub(crate) struct Embedded {
    store: StateStore,
    state: UserState,
    seen: u64,
    /// Checkpoints every `w.checkpoint_every` events, until [`Backend::finish`].
    checkpoints: Option<Checkpointing>,
    checkpoint_every: u64,
    /// The cold tier (`l3` mode).
    cold: Option<Arc<CassandraTier>>,
}

impl Embedded {
    /// A store in `dir` (L2 in `dir/l2`, checkpoint storage in
    /// `dir/checkpoints`) with the workload's states, checkpointing every
    /// `w.checkpoint_every` events; with `cold`, also an L3 and an L2
    /// capacity (each completed checkpoint moves cold keys to L3).
    pub(crate) fn open(
        dir: &Path,
        w: &Workload,
        budget: Budget,
        cold: Option<Arc<CassandraTier>>,
    ) -> Result<Self, BenchError> {
        let mut builder = StateStore::builder(dir.join("l2"));
        if let Some(cold) = cold.clone() {
            builder = builder.cold_tier(cold).l2_capacity(budget.l2_capacity);
        }
        for desc in UserState::descriptors(w) {
            builder = builder.state(desc);
        }
        let store = builder
            .l1_capacity(budget.l1_bytes)
            .l2_memory(budget.l2_bytes)
            .open()?;
        Ok(Self {
            state: UserState::open(&store, w.form)?,
            store,
            seen: 0,
            checkpoints: Some(Checkpointing::new(dir.join("checkpoints"), cold.clone())?),
            cold,
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
        self.state.apply(&key, event)?;
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
        self.state.count(&user.to_be_bytes())
    }

    fn history(&mut self, user: u64) -> Result<Option<Vec<Event>>, BenchError> {
        self.state.history(&user.to_be_bytes()).map(Some)
    }

    fn restored(&mut self, latest: &crate::checkpointing::Latest) -> Result<(), BenchError> {
        if let (Some(cold), Some(version)) = (&self.cold, latest.l3_version) {
            cold.pin_version(latest.id, version);
        }
        self.store.checkpoint_completed(latest.id)?;
        Ok(())
    }

    fn tiers(&self) -> Option<TierStats> {
        Some(self.store.stats())
    }

    fn l3_requests(&self) -> Option<u64> {
        let stats = self.cold.as_ref()?.stats();
        Some(stats.reads + stats.writes)
    }

    fn l2_report(&self) -> Option<strata_cache::L2Report> {
        Some(self.store.l2_report())
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

/// The same updates straight into RocksDB: a column family per state, the
/// options of strata's L2 (see [`strata_cache::l2_cf_options`]), and
/// L1's memory added to the block cache, so it has the memory strata has.
/// Its lists are not trimmed by TTL (strata's are), which spares it work.
pub(crate) struct RocksDbRaw {
    db: rocksdb::DB,
    /// The options it was opened with (they hold its statistics).
    opts: rocksdb::Options,
    write: rocksdb::WriteOptions,
    form: Form,
    /// Bytes handed to RocksDB per column family (history, count).
    user_bytes: [u64; 2],
}

fn concat(_: &[u8], existing: Option<&[u8]>, ops: &rocksdb::MergeOperands) -> Option<Vec<u8>> {
    let mut out = existing.map(<[u8]>::to_vec).unwrap_or_default();
    for op in ops {
        out.extend_from_slice(op);
    }
    Some(out)
}

impl RocksDbRaw {
    /// A database in `dir` with strata's L2 options and memory.
    pub(crate) fn open(dir: &Path, w: &Workload, budget: Budget) -> Result<Self, BenchError> {
        let l2 = strata_cache::L2Budget::new(budget.l2_bytes + budget.l1_bytes as usize);
        let cf = |name: &str| {
            let mut opts = strata_cache::l2_cf_options(&l2);
            opts.set_merge_operator_associative("concat", concat);
            rocksdb::ColumnFamilyDescriptor::new(name, opts)
        };
        let mut opts = strata_cache::l2_db_options(&l2);
        opts.create_if_missing(true);
        opts.create_missing_column_families(true);
        let mut write = rocksdb::WriteOptions::default();
        write.disable_wal(true);
        Ok(Self {
            db: rocksdb::DB::open_cf_descriptors(&opts, dir, [cf("history"), cf("count")])?,
            opts,
            write,
            form: w.form,
            user_bytes: [0; 2],
        })
    }

    fn cf(&self, name: &str) -> Result<Arc<rocksdb::BoundColumnFamily<'_>>, BenchError> {
        Ok(self.db.cf_handle(name).ok_or("column family missing")?)
    }
}

impl Backend for RocksDbRaw {
    fn apply(&mut self, user: u64, event: Event) -> Result<(), BenchError> {
        let key = user.to_be_bytes();
        let history = self.cf("history")?;
        let written = match self.form {
            Form::ListAdd => {
                let body = postcard::to_stdvec(&event)?;
                let mut element = Vec::with_capacity(body.len() + 12);
                element.extend_from_slice(&event.ts.to_be_bytes());
                element.extend_from_slice(&(body.len() as u32).to_be_bytes());
                element.extend_from_slice(&body);
                let n = element.len();
                self.db.merge_cf_opt(&history, key, element, &self.write)?;
                n
            }
            Form::Naive => {
                let mut recent: Vec<Event> = match self.db.get_pinned_cf(&history, key)? {
                    Some(bytes) => postcard::from_bytes(&bytes)?,
                    None => Vec::new(),
                };
                recent.push(event);
                if recent.len() > KEEP_NAIVE {
                    recent.remove(0);
                }
                let bytes = postcard::to_stdvec(&recent)?;
                let n = bytes.len();
                self.db.put_cf_opt(&history, key, bytes, &self.write)?;
                n
            }
        };
        drop(history);
        self.user_bytes[0] += written as u64;
        self.user_bytes[1] += 8;
        let n = self.count(user)?;
        let count = self.cf("count")?;
        Ok(self
            .db
            .put_cf_opt(&count, key, (n + 1).to_be_bytes(), &self.write)?)
    }

    fn count(&mut self, user: u64) -> Result<u64, BenchError> {
        Ok(
            match self
                .db
                .get_pinned_cf(&self.cf("count")?, user.to_be_bytes())?
            {
                Some(b) => u64::from_be_bytes(b.as_ref().try_into()?),
                None => 0,
            },
        )
    }

    fn l2_report(&self) -> Option<strata_cache::L2Report> {
        let columns = |name: &'static str, user_bytes| strata_cache::StateColumns {
            name,
            column_families: vec![name.to_owned()],
            user_bytes,
        };
        Some(strata_cache::L2Report::of_rocksdb(
            &self.db,
            &self.opts,
            &[
                columns("history", self.user_bytes[0]),
                columns("count", self.user_bytes[1]),
            ],
        ))
    }

    fn history(&mut self, user: u64) -> Result<Option<Vec<Event>>, BenchError> {
        let Some(bytes) = self
            .db
            .get_pinned_cf(&self.cf("history")?, user.to_be_bytes())?
        else {
            return Ok(Some(Vec::new()));
        };
        if self.form == Form::Naive {
            return Ok(Some(postcard::from_bytes(&bytes)?));
        }
        // Elements as `apply` writes them: [ts: 8][length: 4][postcard body].
        let mut events = Vec::new();
        let mut rest: &[u8] = &bytes;
        while !rest.is_empty() {
            let len = rest
                .get(8..12)
                .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]) as usize)
                .ok_or("a truncated list element in rocksdb-raw")?;
            let body = rest
                .get(12..12 + len)
                .ok_or("a truncated list element in rocksdb-raw")?;
            events.push(postcard::from_bytes(body)?);
            rest = &rest[12 + len..];
        }
        Ok(Some(events))
    }
}

/// A plain hash map: no tiers, no serialisation; history trimmed by the
/// same event-time TTL.
pub(crate) struct Memory {
    users: HashMap<u64, (VecDeque<Event>, u64)>,
    form: Form,
    ttl_ms: i64,
}

impl Memory {
    /// An empty map for `w`'s form.
    pub(crate) fn new(w: &Workload) -> Self {
        Self {
            users: HashMap::new(),
            form: w.form,
            ttl_ms: w.history_days as i64 * DAY_MS,
        }
    }
}

#[cfg(test)]
impl Memory {
    /// Changes a user's history behind the backend's back (to test the
    /// verification).
    pub(crate) fn tamper(&mut self, user: u64, f: impl FnOnce(&mut VecDeque<Event>)) {
        if let Some((history, _)) = self.users.get_mut(&user) {
            f(history);
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

    fn history(&mut self, user: u64) -> Result<Option<Vec<Event>>, BenchError> {
        Ok(Some(
            self.users
                .get(&user)
                .map_or_else(Vec::new, |(h, _)| h.iter().cloned().collect()),
        ))
    }
}
