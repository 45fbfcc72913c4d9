//! L2: the embedded RocksDB tier.
//!
//! One RocksDB instance per store (per operator instance). Per declared
//! state, a column family of per-key entries (`[key group][key]` → value,
//! map entry or list); per list state also a column family for its chunk
//! log ([`chunks`]). The WAL is off: durability comes from checkpoints,
//! never from the live directory. Block cache and memtables draw on one
//! [`L2Budget`].
//!
//! The store writes L2 only through [`Batch`]es handed to the [`writer`]
//! thread; reads ([`L2::value`], [`L2::list`]) look in the store's open
//! batch, then in the batches handed over and not yet written, then in
//! RocksDB, so nothing written is ever invisible.

pub(crate) mod access;
pub(crate) mod batch;
pub(crate) mod chunks;
pub(crate) mod options;
pub(crate) mod report;
pub(crate) mod writer;

use crate::descriptor::{StateDescriptor, StateKind};
use crate::error::{Result, StateError};
use crate::hash::KeyBytes;
use crate::sync::lock;
use crate::ttl::Clock;
use batch::{Batch, Op};
use chunks::{ChunkBuilder, Directory};
pub use options::{l2_cf_options, l2_db_options, list_read_options, L2Budget};
use rocksdb::{ColumnFamilyDescriptor, Options, WriteBatch, WriteOptions, DB};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use writer::{Job, Pending, Task, Work};

/// What L2 holds of a list (see [`L2::list`]).
pub(crate) struct ListInL2 {
    /// The list's bytes.
    pub(crate) bytes: Vec<u8>,
    /// Whether L2 held any of it before the open batch's blind appends:
    /// RocksDB, a batch on its way, or a list L1 wrote into the open batch.
    pub(crate) held: bool,
}

/// See the module docs.
pub(crate) struct L2 {
    pub(crate) db: DB,
    pub(crate) states: Vec<StateDescriptor>,
    pub(crate) path: PathBuf,
    pub(crate) write_opts: WriteOptions,
    pub(crate) clock: Arc<Clock>,
    directory: Mutex<Directory>,
    pub(crate) pending: Pending,
    failure: Mutex<Option<String>>,
    failed: AtomicBool,
    /// Bytes the store handed to L2, per state (for write amplification).
    pub(crate) user_bytes: Vec<AtomicU64>,
    /// The options the database was opened with (they hold its statistics).
    db_opts: Options,
}

impl L2 {
    /// Opens (or creates) the RocksDB instance at `path` with the column
    /// families of `states`. Column families on disk that no declared state
    /// owns are an error (a restored store never drops state silently).
    pub(crate) fn open(
        path: &Path,
        states: &[StateDescriptor],
        budget: &L2Budget,
        clock: &Arc<Clock>,
    ) -> Result<Self> {
        let mut db_opts = l2_db_options(budget);
        db_opts.create_if_missing(true);
        db_opts.create_missing_column_families(true);
        let mut cfs: Vec<ColumnFamilyDescriptor> = Vec::new();
        for s in states {
            cfs.push(ColumnFamilyDescriptor::new(
                &s.name,
                options::cf_options(s, budget, clock),
            ));
            if s.kind == StateKind::List {
                cfs.push(ColumnFamilyDescriptor::new(
                    options::chunk_cf_name(&s.name),
                    options::chunk_cf_options(budget),
                ));
            }
        }
        let existing = DB::list_cf(&db_opts, path).unwrap_or_default();
        for name in existing {
            if name != "default" && !cfs.iter().any(|c| c.name() == name) {
                return Err(StateError::Config(format!(
                    "the restored state has a state '{name}' that this job does not declare (or declares as another kind)"
                )));
            }
        }
        cfs.push(ColumnFamilyDescriptor::new("default", Options::default()));
        let db = DB::open_cf_descriptors(&db_opts, path, cfs).map_err(|e| {
            if e.to_string().contains("LOCK") {
                StateError::InUse(path.to_owned())
            } else {
                StateError::L2(e)
            }
        })?;
        let mut write_opts = WriteOptions::default();
        write_opts.disable_wal(true);
        let directory = Mutex::new(Directory::load(&db)?);
        Ok(Self {
            db,
            states: states.to_vec(),
            path: path.to_owned(),
            write_opts,
            clock: clock.clone(),
            directory,
            pending: Pending::default(),
            failure: Mutex::new(None),
            failed: AtomicBool::new(false),
            user_bytes: states.iter().map(|_| AtomicU64::new(0)).collect(),
            db_opts,
        })
    }

    /// The per-key column family of `state`.
    pub(crate) fn cf(&self, state: u16) -> Result<Arc<rocksdb::BoundColumnFamily<'_>>> {
        let name = &self.states[usize::from(state)].name;
        self.db
            .cf_handle(name)
            .ok_or_else(|| StateError::UnknownState(name.clone()))
    }

    /// The chunk-log column family of list state `state`.
    fn chunk_cf(&self, state: u16) -> Result<Arc<rocksdb::BoundColumnFamily<'_>>> {
        let name = options::chunk_cf_name(&self.states[usize::from(state)].name);
        self.db
            .cf_handle(&name)
            .ok_or(StateError::UnknownState(name))
    }

    /// Fails every later operation of the store with `e`: a write that the
    /// store took out of L1 did not reach L2.
    pub(crate) fn record_failure(&self, e: &StateError) {
        lock(&self.failure).get_or_insert_with(|| e.to_string());
        self.failed.store(true, Ordering::Release);
    }

    /// The store's earlier failure, if any.
    pub(crate) fn check(&self) -> Result<()> {
        if !self.failed.load(Ordering::Acquire) {
            return Ok(());
        }
        Err(StateError::Failed {
            path: self.path.clone(),
            reason: lock(&self.failure).clone().unwrap_or_default(),
        })
    }

    /// Hands a batch to the writer.
    pub(crate) fn hand_over(&self, batch: Batch) {
        if batch.is_empty() {
            return;
        }
        for (state, bytes) in batch.user_bytes().iter().enumerate() {
            if let Some(total) = self.user_bytes.get(state) {
                total.fetch_add(*bytes, Ordering::Relaxed);
            }
        }
        self.pending.push(Job::Batch(Arc::new(batch)));
    }

    /// Queues `work` for the writer, after everything handed over so far.
    pub(crate) fn queue(&self, work: Work) -> Arc<Task> {
        let task = Task::new(work);
        self.pending.push(Job::Run(task.clone()));
        task
    }

    /// Waits until the writer wrote everything handed over so far.
    pub(crate) fn wait_idle(&self) -> Result<()> {
        self.queue(Box::new(|_| Ok(()))).wait(&self.path)?;
        self.check()
    }

    /// A value or map entry's bytes (`None`: none, or deleted).
    pub(crate) fn value(&self, key: &KeyBytes, open: &Batch) -> Result<Option<Vec<u8>>> {
        if let Some(v) = open.value(key) {
            return v;
        }
        let queued = self.pending.with_batches(|batches| {
            let mut found = None;
            for b in batches {
                found = b.value(key).or(found);
            }
            found
        });
        match queued {
            Some(v) => v,
            None => Ok(self.db.get_cf(&self.cf(key.state())?, key.stored())?),
        }
    }

    /// A list's bytes (a complete one starts with the base marker):
    /// RocksDB's value (its key group's chunks folded into it first), then
    /// the operations of the batches on their way, then those of the open
    /// batch — all of which L2 will hold. `None` if none holds any.
    /// [`ListInL2::held`] tells a read L2 answered (a hit) from one that
    /// found only the open batch's blind appends (a miss: the key's first
    /// records, never in L1 or L2 before).
    pub(crate) fn list(&self, key: &KeyBytes, open: &Batch) -> Result<Option<ListInL2>> {
        let state = key.state();
        let mut dir = lock(&self.directory);
        let queued: Vec<(Op, Vec<u8>)> = self.pending.with_batches(|batches| {
            let mut ops = Vec::new();
            for b in batches {
                let mut of_b = Vec::new();
                b.list_ops(key, &mut of_b);
                ops.extend(of_b.into_iter().map(|(op, d)| (op, d.to_vec())));
            }
            ops
        });
        if !dir.of(state, key.key_group()).is_empty() {
            self.fold(&mut dir, state, key.key_group())?;
        }
        let base = self.db.get_cf(&self.cf(state)?, key.stored())?;
        drop(dir);
        let mut found = base.is_some();
        let mut bytes = base.unwrap_or_default();
        for (op, data) in &queued {
            apply_op(&mut bytes, *op, data);
            found = true;
        }
        let mut own = Vec::new();
        open.list_ops(key, &mut own);
        // Blind appends of the open batch alone (a first-seen key's first
        // records) were never in L2 or L1 before it: not a hit.
        let held = found || own.iter().any(|(op, _)| *op != Op::Append);
        for (op, data) in own {
            apply_op(&mut bytes, op, data);
            found = true;
        }
        Ok(found.then_some(ListInL2 { bytes, held }))
    }

    /// Folds the chunks of (`state`, `key_group`) into the per-key lists:
    /// one merge operand per key, in one `WriteBatch` with the chunks'
    /// deletion and the directory's update. The caller holds the
    /// directory's lock.
    fn fold(&self, dir: &mut Directory, state: u16, key_group: u16) -> Result<()> {
        let metas = dir.of(state, key_group).to_vec();
        if metas.is_empty() {
            return Ok(());
        }
        let chunk_cf = self.chunk_cf(state)?;
        let mut chunks = Vec::with_capacity(metas.len());
        for m in &metas {
            let key = chunks::chunk_key(key_group, m.seq);
            let bytes = self
                .db
                .get_cf(&chunk_cf, key)?
                .ok_or_else(|| StateError::Corrupt {
                    state: self.states[usize::from(state)].name.clone(),
                    reason: format!("chunk {} of key group {key_group} is missing", m.seq),
                })?;
            chunks.push(bytes);
        }
        let mut by_key: std::collections::BTreeMap<&[u8], Vec<(Op, &[u8])>> = Default::default();
        for chunk in &chunks {
            for record in chunks::records(chunk) {
                let (key, op, data) = record?;
                by_key.entry(key).or_default().push((op, data));
            }
        }
        let cutoff = self.cutoff(state);
        let cf = self.cf(state)?;
        let mut batch = WriteBatch::default();
        let mut joined = Vec::new();
        for (key, ops) in by_key {
            joined.clear();
            let op = chunks::records_of_key(ops.into_iter(), &mut joined);
            batch.merge_cf(&cf, key, chunks::operand(op, &joined, cutoff));
        }
        for m in &metas {
            batch.delete_cf(&chunk_cf, chunks::chunk_key(key_group, m.seq));
        }
        dir.chunks.remove(&(state, key_group));
        dir.persist(&mut batch, state, key_group)?;
        self.db.write_opt(batch, &self.write_opts)?;
        Ok(())
    }

    /// The report of this store (see [`report::L2Report`]).
    pub(crate) fn stats_report(&self) -> report::L2Report {
        self.report(&self.db_opts)
    }

    /// The expiry cutoff of `state` now (`None`: nothing expires).
    pub(crate) fn cutoff(&self, state: u16) -> Option<i64> {
        let ttl = self.states[usize::from(state)].ttl?;
        let now = self.clock.now(ttl.domain);
        (now != i64::MIN).then(|| now.saturating_sub(ttl.millis))
    }

    /// Writes a batch (the writer): values and map entries as puts and
    /// deletes, list operations as one chunk per state and key group, all
    /// in one `WriteBatch` with the directory; then removes it from the
    /// queue, under the directory's lock (see [`chunks`]).
    fn apply(&self, batch: &Batch) -> Result<()> {
        self.check()?;
        let writes = batch.sorted();
        let mut wb = WriteBatch::default();
        let mut built: Vec<(u16, u16, Vec<u8>, chunks::ChunkMeta)> = Vec::new();
        let mut seq = lock(&self.directory).next_seq;
        let mut i = 0;
        while i < writes.len() {
            let (state, kg) = (writes[i].key.state(), writes[i].key.key_group());
            let mut end = i;
            while end < writes.len()
                && writes[end].key.state() == state
                && writes[end].key.key_group() == kg
            {
                end += 1;
            }
            if self.states[usize::from(state)].kind == StateKind::List {
                if let Some(chunk) = self.chunk_of(&writes[i..end], seq)? {
                    built.push((state, kg, chunk.0, chunk.1));
                    seq += 1;
                }
            } else {
                let cf = self.cf(state)?;
                for w in &writes[i..end] {
                    match w.op {
                        Op::Delete => wb.delete_cf(&cf, w.key.stored()),
                        _ => wb.put_cf(&cf, w.key.stored(), w.data),
                    }
                }
            }
            i = end;
        }
        let ingested = self.table_writes(batch, &mut wb)?;
        for (state, kg, bytes, meta) in &built {
            wb.put_cf(
                &self.chunk_cf(*state)?,
                chunks::chunk_key(*kg, meta.seq),
                bytes,
            );
        }
        let mut dir = lock(&self.directory);
        for (state, kg, _, meta) in &built {
            dir.chunks.entry((*state, *kg)).or_default().push(*meta);
            dir.persist(&mut wb, *state, *kg)?;
        }
        dir.next_seq = seq;
        wb.put(chunks::SEQ_KEY, crate::codec::encode("(chunk log)", &seq)?);
        self.db.write_opt(wb, &self.write_opts)?;
        self.ingest(ingested)?;
        self.pending.pop();
        Ok(())
    }

    /// Adds the dirty entries of the batch's compact-table copies to `wb`,
    /// in key order (after the batch's other writes: they are newer).
    fn table_writes(&self, batch: &Batch, wb: &mut WriteBatch) -> Result<Vec<(u16, PathBuf)>> {
        let mut files = Vec::new();
        for (state, table) in batch.tables() {
            let mut entries = crate::l1::table::SortedEntries::default();
            table.write_dirty(&mut entries)?;
            if let Some(total) = self.user_bytes.get(usize::from(*state)) {
                total.fetch_add(entries.value_bytes(), Ordering::Relaxed);
            }
            if entries.len() >= INGEST_AT {
                files.push((*state, self.sst_of(*state, &mut entries)?));
                continue;
            }
            let cf = self.cf(*state)?;
            for (key, value) in entries.sorted() {
                wb.put_cf(&cf, key, value);
            }
        }
        Ok(files)
    }

    /// Writes `entries` (sorted) into an SST file in L2's directory, for
    /// ingestion: a checkpoint's hundreds of thousands of small values
    /// skip the memtable and its flush (RocksDB's bulk load).
    fn sst_of(&self, state: u16, entries: &mut crate::l1::table::SortedEntries) -> Result<PathBuf> {
        let mut opts = Options::default();
        opts.set_compression_type(rocksdb::DBCompressionType::None);
        let path = self.path.join(format!("strata-ingest-{state}.sst"));
        let mut writer = rocksdb::SstFileWriter::create(&opts);
        writer.open(&path)?;
        for (key, value) in entries.sorted() {
            writer.put(key, value)?;
        }
        writer.finish()?;
        Ok(path)
    }

    /// Ingests the files of [`L2::table_writes`] (after the batch's other
    /// writes: they are newer), moving them into RocksDB.
    fn ingest(&self, files: Vec<(u16, PathBuf)>) -> Result<()> {
        let mut opts = rocksdb::IngestExternalFileOptions::default();
        opts.set_move_files(true);
        for (state, path) in files {
            self.db
                .ingest_external_file_cf_opts(&self.cf(state)?, &opts, vec![&path])?;
        }
        Ok(())
    }

    /// The chunk of one key group's list writes (in key order), if any.
    fn chunk_of(
        &self,
        writes: &[batch::Write<'_>],
        seq: u64,
    ) -> Result<Option<(Vec<u8>, chunks::ChunkMeta)>> {
        let mut builder = ChunkBuilder::new();
        let mut joined = Vec::new();
        let mut i = 0;
        while i < writes.len() {
            let key = writes[i].key;
            let mut end = i;
            while end < writes.len() && writes[end].key.bytes() == key.bytes() {
                end += 1;
            }
            joined.clear();
            let op =
                chunks::records_of_key(writes[i..end].iter().map(|w| (w.op, w.data)), &mut joined);
            builder.add(key.stored(), op, &joined)?;
            i = end;
        }
        Ok((!builder.is_empty()).then(|| builder.finish(seq)))
    }

    /// After a batch (the writer): deletes the chunks whose newest element
    /// has expired (unless they replace a list: an older value would come
    /// back), and folds key groups holding [`chunks::FOLD_AT`] chunks.
    fn maintain(&self) -> Result<()> {
        let mut dir = lock(&self.directory);
        let mut wb = WriteBatch::default();
        let mut full = Vec::new();
        let groups: Vec<(u16, u16)> = dir.chunks.keys().copied().collect();
        for (state, kg) in groups {
            if let Some(cutoff) = self.cutoff(state) {
                let metas = dir.chunks.entry((state, kg)).or_default();
                let before = metas.len();
                let cf = self.chunk_cf(state)?;
                metas.retain(|m| {
                    let expired = m.newest <= cutoff && !m.replaces;
                    if expired {
                        wb.delete_cf(&cf, chunks::chunk_key(kg, m.seq));
                    }
                    !expired
                });
                if metas.len() != before {
                    dir.persist(&mut wb, state, kg)?;
                }
            }
            if dir.of(state, kg).len() >= chunks::FOLD_AT {
                full.push((state, kg));
            }
        }
        if !wb.is_empty() {
            self.db.write_opt(wb, &self.write_opts)?;
        }
        for (state, kg) in full {
            self.fold(&mut dir, state, kg)?;
        }
        Ok(())
    }

    /// Compacts `state`'s chunk log: its SST files hold only blob
    /// references (cheap to compact), and blob files whose chunks are all
    /// deleted go once compactions dropped their references (RocksDB's
    /// own compactions do so in time; [`crate::StateStore::compact`] at once).
    pub(crate) fn compact_chunks(&self, state: u16) -> Result<()> {
        if self.states[usize::from(state)].kind == StateKind::List {
            self.db
                .compact_range_cf(&self.chunk_cf(state)?, None::<&[u8]>, None::<&[u8]>);
        }
        Ok(())
    }

    /// Creates a RocksDB checkpoint of L2 in `target` (the writer, so no
    /// batch is written meanwhile). It holds the directory's lock: with the
    /// WAL off, RocksDB flushes each column family's memtable in turn, and
    /// a fold by a reader between two of those flushes (chunks deleted in
    /// one column family, the directory changed in another) would leave a
    /// checkpoint whose directory names chunks it does not hold.
    pub(crate) fn create_checkpoint(&self, target: &Path) -> Result<()> {
        let _directory = lock(&self.directory);
        rocksdb::checkpoint::Checkpoint::new(&self.db)?.create_checkpoint(target)?;
        Ok(())
    }

    /// Folds every chunk of `state` (before a sweep reads its lists whole).
    pub(crate) fn fold_all(&self, state: u16) -> Result<()> {
        let mut dir = lock(&self.directory);
        let groups: Vec<u16> = dir
            .chunks
            .keys()
            .filter(|(s, _)| *s == state)
            .map(|(_, kg)| *kg)
            .collect();
        for kg in groups {
            self.fold(&mut dir, state, kg)?;
        }
        Ok(())
    }

    /// Calls `f(suffix, value)` for each RocksDB entry of `state` whose
    /// stored key starts with `prefix`, in key order. Only what RocksDB
    /// holds: the caller makes sure no batch is on its way.
    pub(crate) fn scan(
        &self,
        state: u16,
        prefix: &[u8],
        mut f: impl FnMut(&[u8], &[u8]) -> Result<()>,
    ) -> Result<()> {
        let cf = self.cf(state)?;
        let mut it = self.db.raw_iterator_cf(&cf);
        it.seek(prefix);
        while let (Some(k), Some(v)) = (it.key(), it.value()) {
            if !k.starts_with(prefix) {
                break;
            }
            f(&k[prefix.len()..], v)?;
            it.next();
        }
        Ok(it.status()?)
    }

    /// Bytes RocksDB holds for `state`: live SST and blob files plus
    /// memtables, of its column families.
    pub(crate) fn bytes_of(&self, state: u16) -> u64 {
        let desc = &self.states[usize::from(state)];
        let mut names = vec![desc.name.clone()];
        if desc.kind == StateKind::List {
            names.push(options::chunk_cf_name(&desc.name));
        }
        names
            .iter()
            .filter_map(|n| self.db.cf_handle(n))
            .map(|cf| {
                let prop = |p: &str| {
                    self.db
                        .property_int_value_cf(&cf, p)
                        .ok()
                        .flatten()
                        .unwrap_or(0)
                };
                prop("rocksdb.live-sst-files-size")
                    + prop("rocksdb.cur-size-all-mem-tables")
                    + prop("rocksdb.live-blob-file-size")
            })
            .sum()
    }
}

/// Compact-table entries at a checkpoint from which they are bulk-loaded
/// as an SST file instead of written through the memtable.
const INGEST_AT: usize = 10_000;

/// Applies one list operation to a list's bytes.
fn apply_op(list: &mut Vec<u8>, op: Op, data: &[u8]) {
    if op == Op::Replace {
        list.clear();
    }
    list.extend_from_slice(data);
}
