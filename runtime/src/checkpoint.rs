//! Checkpoints: storage layout, metadata, and the coordinator.
//!
//! ## Protocol (asynchronous barrier snapshots)
//! Every `checkpoint.interval`, the coordinator asks the source to start
//! checkpoint N. The source records its position and emits barrier N on all
//! its edges. A keyed operator, once barrier N has arrived on all its inputs,
//! flushes L1's dirty entries to L2, takes a RocksDB checkpoint (hard
//! links), forwards the barrier at once, and moves the new SST files to
//! storage off the processing path. A sink closes its part file as pending.
//! Each task acknowledges with its [`TaskSnapshot`]. When all have, the
//! coordinator writes `chk-N/_metadata` atomically (temporary file, fsync,
//! rename) — only then does checkpoint N exist — and publishes "N completed"
//! on a watch channel, so a task that misses a notice sees the later one,
//! which subsumes it. Sinks commit then. At most one checkpoint is in flight.
//!
//! ## Layout of a checkpoint directory
//! ```text
//! <dir>/chk-<N>/_metadata        JSON CheckpointMetadata (present = completed)
//! <dir>/chk-<N>/op-<i>/...       private RocksDB files of operator instance i
//! <dir>/shared/<run>-<n>.sst     SST files, shared by successive checkpoints
//! <dir>/_work/                   live RocksDB directories (never restored from)
//! ```
//! Retention keeps the last `checkpoint.retained` completed checkpoints and
//! deletes the files only dropped ones used.

use crate::error::{Result, RuntimeError};
use serde::{Deserialize, Serialize};
use std::collections::HashSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;
use strata_cache::key_group::KeyGroupRange;
use strata_cache::l3::CassandraTier;
use strata_cache::snapshot::SnapshotManifest;
use strata_connectors::{Position, SinkState};
use tokio::sync::{mpsc, watch};

/// The source's part of a checkpoint.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SourceSnapshot {
    /// Where to resume reading.
    pub position: Position,
    /// The dead-letter output's pending files.
    pub dead_letter: SinkState,
    /// Bad records routed to the dead-letter output so far.
    pub dead_letters: u64,
    /// The input file's size in bytes: a restore refuses a different file.
    pub input_bytes: u64,
    /// The newest record timestamp read (ms): lateness after a restore is
    /// judged as it would have been without the crash.
    #[serde(default = "min_timestamp")]
    pub max_timestamp: i64,
}

/// One keyed operator instance's part of a checkpoint.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OperatorSnapshot {
    /// The instance's index.
    pub index: u32,
    /// The key groups it owns.
    pub key_groups: KeyGroupRange,
    /// Its watermark at the barrier (ms).
    pub watermark: i64,
    /// Its L2 files.
    pub manifest: SnapshotManifest,
    /// Bytes this checkpoint newly stored for it.
    pub new_bytes: u64,
}

/// What a task acknowledges a checkpoint with.
#[derive(Debug, Clone)]
pub(crate) enum TaskSnapshot {
    Source(SourceSnapshot),
    Operator(OperatorSnapshot),
    Sink(u32, SinkState),
}

/// The coordinator's request to the source: start checkpoint `id`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Trigger {
    pub(crate) id: u64,
    /// The last checkpoint: the source has read all its input.
    pub(crate) is_final: bool,
}

/// Messages to the coordinator.
#[derive(Debug)]
pub(crate) enum Ack {
    /// Task part of checkpoint `id`.
    Snapshot(u64, TaskSnapshot),
    /// The source read all its input: take the final checkpoint now.
    SourceFinished,
}

/// `chk-N/_metadata`: a completed checkpoint.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CheckpointMetadata {
    /// Checkpoint id (grows across restores).
    pub id: u64,
    /// The job's name.
    pub job: String,
    /// Wall-clock completion time, ms since the epoch.
    pub completed_at_ms: i64,
    /// Key groups.
    pub max_parallelism: u32,
    /// Keyed operator instances.
    pub parallelism: u32,
    /// The source's position.
    pub source: SourceSnapshot,
    /// Keyed operator instances, by index.
    pub operators: Vec<OperatorSnapshot>,
    /// Sink instances' states, by index.
    pub sinks: Vec<SinkState>,
    /// Trigger to completion, ms.
    pub duration_ms: u64,
    /// Total bytes of the state files the checkpoint references.
    pub state_bytes: u64,
    /// Bytes this checkpoint newly stored (incremental size).
    pub new_bytes: u64,
    /// Whether this is the final checkpoint of a finished input.
    pub is_final: bool,
    /// The job's identity in L3 (fixed at its first start; L3's fence row
    /// is kept per lineage). `None` for a job without L3.
    #[serde(default)]
    pub l3_lineage: Option<i64>,
    /// The version (CQL write timestamp, µs) of the L3 writes of the keys
    /// this checkpoint picked for eviction: the wall clock at completion,
    /// or two above the previous checkpoint's if that is later, so versions
    /// grow across checkpoints and restores.
    #[serde(default)]
    pub l3_version: Option<i64>,
}

/// Creates `dir` if needed and takes an exclusive lock on its `_lock` file
/// for as long as the returned file lives: one job per directory.
pub(crate) fn lock_dir(dir: &Path, what: &str) -> Result<fs::File> {
    fs::create_dir_all(dir).map_err(RuntimeError::io(dir))?;
    let path = dir.join("_lock");
    let file = fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(RuntimeError::io(&path))?;
    file.try_lock().map_err(|_| {
        RuntimeError::Usage(format!(
            "{what} {} is in use by another strata job",
            dir.display()
        ))
    })?;
    Ok(file)
}

fn min_timestamp() -> i64 {
    i64::MIN
}

fn read_metadata(path: &Path) -> Result<CheckpointMetadata> {
    let text = fs::read_to_string(path).map_err(RuntimeError::io(path))?;
    serde_json::from_str(&text)
        .map_err(|e| RuntimeError::checkpoint(path, format!("unreadable metadata: {e}")))
}

impl CheckpointMetadata {
    /// Checks that the metadata describes a runnable job: instance counts,
    /// key-group ranges and ids agree with each other and with `config`.
    pub(crate) fn validate(&self, config: &crate::JobConfig) -> std::result::Result<(), String> {
        let (par, max) = (self.parallelism, self.max_parallelism);
        if par == 0 || par > max || max > strata_cache::key_group::MAX_KEY_GROUPS {
            return Err(format!(
                "parallelism {par} and max-parallelism {max} do not fit"
            ));
        }
        if max != config.max_parallelism {
            return Err(format!(
                "it was written with max-parallelism {max}; restore with -D max-parallelism={max}"
            ));
        }
        if self.operators.len() != par as usize {
            return Err(format!(
                "{} operator snapshots for parallelism {par}",
                self.operators.len()
            ));
        }
        for (i, op) in self.operators.iter().enumerate() {
            if op.index as usize != i
                || op.key_groups != KeyGroupRange::for_operator(max, par, i as u32)
            {
                return Err(format!(
                    "operator snapshot {i} has index {} and key groups {:?}",
                    op.index, op.key_groups
                ));
            }
        }
        if self.sinks.is_empty() || self.sinks.len() > par as usize {
            return Err(format!(
                "{} sink states for parallelism {par}",
                self.sinks.len()
            ));
        }
        if self.id == u64::MAX {
            return Err("its id is at the end of the id range".into());
        }
        Ok(())
    }
}

/// A checkpoint directory.
#[derive(Debug, Clone)]
pub struct CheckpointStorage {
    root: PathBuf,
    /// Held (locked) by the one job that writes here.
    _lock: Option<std::sync::Arc<fs::File>>,
}

impl CheckpointStorage {
    /// Storage rooted at `root` (created if absent), locked for this process:
    /// a second job on the same directory is refused.
    pub fn open(root: &Path) -> Result<Self> {
        Ok(Self {
            root: root.to_owned(),
            _lock: Some(std::sync::Arc::new(lock_dir(root, "checkpoint directory")?)),
        })
    }

    /// Opens existing storage for reading; a missing directory is an error.
    pub fn existing(root: &Path) -> Result<Self> {
        if !root.is_dir() {
            return Err(RuntimeError::checkpoint(
                root,
                "no such checkpoint directory",
            ));
        }
        Ok(Self {
            root: root.to_owned(),
            _lock: None,
        })
    }

    /// The root directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    fn dir_of(&self, id: u64) -> PathBuf {
        self.root.join(format!("chk-{id}"))
    }

    /// Every completed checkpoint, oldest first. An unreadable `_metadata`
    /// of an older checkpoint is skipped (a newer one supersedes it); an
    /// unreadable newest one is an error, never silently passed over.
    pub fn list(&self) -> Result<Vec<CheckpointMetadata>> {
        let mut found: Vec<(u64, PathBuf)> = Vec::new();
        for entry in fs::read_dir(&self.root).map_err(RuntimeError::io(&self.root))? {
            let dir = entry.map_err(RuntimeError::io(&self.root))?.path();
            let id = dir
                .file_name()
                .and_then(|n| n.to_str())
                .and_then(|n| n.strip_prefix("chk-"))
                .and_then(|n| n.parse().ok());
            if let (Some(id), true) = (id, dir.join("_metadata").is_file()) {
                found.push((id, dir.join("_metadata")));
            }
        }
        found.sort();
        let newest = found.last().map(|(id, _)| *id);
        let mut out = Vec::new();
        for (id, path) in found {
            match read_metadata(&path) {
                Ok(meta) => out.push(meta),
                Err(e) if Some(id) == newest => return Err(e),
                Err(_) => {}
            }
        }
        Ok(out)
    }

    /// The newest completed checkpoint, if any.
    pub fn latest(&self) -> Result<Option<CheckpointMetadata>> {
        Ok(self.list()?.pop())
    }

    /// Writes `meta` atomically: after this returns, the checkpoint exists.
    pub(crate) fn commit(&self, meta: &CheckpointMetadata) -> Result<()> {
        let dir = self.dir_of(meta.id);
        fs::create_dir_all(&dir).map_err(RuntimeError::io(&dir))?;
        let tmp = dir.join("_metadata.tmp");
        let body =
            serde_json::to_vec_pretty(meta).map_err(|e| RuntimeError::checkpoint(&tmp, e))?;
        {
            use std::io::Write;
            let mut f = fs::File::create(&tmp).map_err(RuntimeError::io(&tmp))?;
            f.write_all(&body).map_err(RuntimeError::io(&tmp))?;
            f.sync_all().map_err(RuntimeError::io(&tmp))?;
        }
        fs::rename(&tmp, dir.join("_metadata")).map_err(RuntimeError::io(&tmp))?;
        fs::File::open(&dir)
            .and_then(|d| d.sync_all())
            .map_err(RuntimeError::io(&dir))
    }

    fn objects(meta: &CheckpointMetadata) -> impl Iterator<Item = &str> {
        meta.operators
            .iter()
            .flat_map(|o| o.manifest.files.iter().map(|f| f.object.as_str()))
    }

    /// Keeps the newest `keep` completed checkpoints; deletes the others and
    /// the shared files only they used.
    pub(crate) fn retain(&self, keep: usize) -> Result<()> {
        let all = self.list()?;
        if all.len() <= keep {
            return Ok(());
        }
        let (dropped, kept) = all.split_at(all.len() - keep);
        let live: HashSet<&str> = kept.iter().flat_map(Self::objects).collect();
        for meta in dropped {
            for object in
                Self::objects(meta).filter(|o| o.starts_with("shared/") && !live.contains(o))
            {
                let _ = fs::remove_file(self.root.join(object));
            }
            let dir = self.dir_of(meta.id);
            fs::remove_dir_all(&dir).map_err(RuntimeError::io(&dir))?;
        }
        Ok(())
    }

    /// Deletes what no completed checkpoint references: directories of
    /// checkpoints that never completed and shared files they alone stored.
    /// Call only while no checkpoint is in flight (at job start).
    pub(crate) fn sweep_incomplete(&self) -> Result<()> {
        let all = self.list()?;
        let live: HashSet<String> = all
            .iter()
            .flat_map(Self::objects)
            .map(str::to_owned)
            .collect();
        for entry in fs::read_dir(&self.root).map_err(RuntimeError::io(&self.root))? {
            let path = entry.map_err(RuntimeError::io(&self.root))?.path();
            let name = path
                .file_name()
                .unwrap_or_default()
                .to_string_lossy()
                .into_owned();
            if name.starts_with("chk-") && !path.join("_metadata").is_file() {
                fs::remove_dir_all(&path).map_err(RuntimeError::io(&path))?;
            }
        }
        let shared = self.root.join("shared");
        if let Ok(files) = fs::read_dir(&shared) {
            for f in files.flatten() {
                let object = format!("shared/{}", f.file_name().to_string_lossy());
                if !live.contains(&object) {
                    let _ = fs::remove_file(f.path());
                }
            }
        }
        Ok(())
    }
}

/// Figures of one completed checkpoint, for the run's report.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct CheckpointStats {
    /// Its id.
    pub id: u64,
    /// Trigger to completion, ms.
    pub duration_ms: u64,
    /// Total referenced state bytes.
    pub state_bytes: u64,
    /// Newly stored bytes.
    pub new_bytes: u64,
}

struct InFlight {
    id: u64,
    started: Instant,
    source: Option<SourceSnapshot>,
    operators: Vec<Option<OperatorSnapshot>>,
    sinks: Vec<Option<SinkState>>,
    is_final: bool,
}

/// Triggers checkpoints, collects acknowledgements, commits metadata and
/// notifies tasks.
pub(crate) struct Coordinator {
    pub(crate) storage: CheckpointStorage,
    pub(crate) job: String,
    pub(crate) interval: std::time::Duration,
    pub(crate) retained: usize,
    pub(crate) max_parallelism: u32,
    pub(crate) parallelism: u32,
    pub(crate) sinks: u32,
    pub(crate) next_id: u64,
    pub(crate) trigger: mpsc::Sender<Trigger>,
    pub(crate) acks: mpsc::Receiver<Ack>,
    pub(crate) completed: watch::Sender<u64>,
    /// L3 and the job's lineage there, if the job has L3.
    pub(crate) cold: Option<(Arc<CassandraTier>, i64)>,
    /// The version of the last completed checkpoint.
    pub(crate) l3_version: i64,
}

impl Coordinator {
    /// Runs until the final checkpoint completes; returns every checkpoint's figures.
    pub(crate) async fn run(mut self) -> Result<Vec<CheckpointStats>> {
        let mut ticker = tokio::time::interval(self.interval);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        ticker.tick().await;
        let mut in_flight: Option<InFlight> = None;
        let mut finish_requested = false;
        let mut stats = Vec::new();
        loop {
            tokio::select! {
                _ = ticker.tick(), if in_flight.is_none() && !finish_requested => {
                    in_flight = Some(self.start(false).await?);
                }
                ack = self.acks.recv() => {
                    match ack.ok_or(RuntimeError::Disconnected)? {
                        Ack::SourceFinished => finish_requested = true,
                        Ack::Snapshot(id, snap) => {
                            let Some(flight) = in_flight.as_mut().filter(|f| f.id == id) else { continue };
                            record(flight, snap);
                            if let Some(mut meta) = self.complete(flight) {
                                self.version(&mut meta);
                                self.storage.commit(&meta)?;
                                self.storage.retain(self.retained)?;
                                let _ = self.completed.send(meta.id);
                                let figures = CheckpointStats { id: meta.id, duration_ms: meta.duration_ms, state_bytes: meta.state_bytes, new_bytes: meta.new_bytes };
                                crate::metrics::publish_checkpoint(&figures);
                                stats.push(figures);
                                in_flight = None;
                                if meta.is_final {
                                    return Ok(stats);
                                }
                            }
                        }
                    }
                }
            }
            if finish_requested && in_flight.is_none() {
                in_flight = Some(self.start(true).await?);
            }
        }
    }

    /// Gives a completing checkpoint its L3 version and pins it in L3.
    fn version(&mut self, meta: &mut CheckpointMetadata) {
        if let Some((cold, lineage)) = &self.cold {
            self.l3_version = strata_cache::l3::next_version(self.l3_version);
            cold.pin_version(meta.id, self.l3_version);
            meta.l3_lineage = Some(*lineage);
            meta.l3_version = Some(self.l3_version);
        }
    }

    async fn start(&mut self, is_final: bool) -> Result<InFlight> {
        let id = self.next_id;
        self.next_id += 1;
        self.trigger
            .send(Trigger { id, is_final })
            .await
            .map_err(|_| RuntimeError::Disconnected)?;
        Ok(InFlight {
            id,
            started: Instant::now(),
            source: None,
            operators: vec![None; self.parallelism as usize],
            sinks: vec![None; self.sinks as usize],
            is_final,
        })
    }

    fn complete(&self, f: &InFlight) -> Option<CheckpointMetadata> {
        let source = f.source.clone()?;
        let operators: Vec<OperatorSnapshot> =
            f.operators.iter().cloned().collect::<Option<_>>()?;
        let sinks: Vec<SinkState> = f.sinks.iter().cloned().collect::<Option<_>>()?;
        Some(CheckpointMetadata {
            id: f.id,
            job: self.job.clone(),
            completed_at_ms: chrono::Utc::now().timestamp_millis(),
            max_parallelism: self.max_parallelism,
            parallelism: self.parallelism,
            state_bytes: operators.iter().map(|o| o.manifest.total_bytes()).sum(),
            new_bytes: operators.iter().map(|o| o.new_bytes).sum(),
            source,
            operators,
            sinks,
            duration_ms: f.started.elapsed().as_millis() as u64,
            is_final: f.is_final,
            l3_lineage: None,
            l3_version: None,
        })
    }
}

fn record(f: &mut InFlight, snap: TaskSnapshot) {
    match snap {
        TaskSnapshot::Source(s) => f.source = Some(s),
        TaskSnapshot::Operator(o) => {
            let i = o.index as usize;
            f.operators[i] = Some(o);
        }
        TaskSnapshot::Sink(i, s) => f.sinks[i as usize] = Some(s),
    }
}
