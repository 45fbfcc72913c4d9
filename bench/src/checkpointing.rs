//! Checkpoints of the tiered modes, taken the way the runtime takes them:
//! a RocksDB checkpoint of L2 (after flushing L1) moved into checkpoint
//! storage by an [`IncrementalUploader`] (shared SSTs stored once), then the
//! completion notice (which moves cold keys to L3 in the `l3` mode).
//!
//! Each worker's storage holds only its latest checkpoint: `latest.json`
//! (id, events applied, manifest), `chk-<id>/` and the SSTs in `shared/`
//! it references. [`restore`] lays it out again as an L2 directory, as a
//! restart after a crash does.

use crate::backends::BenchError;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;
use strata_cache::l3::CassandraTier;
use strata_cache::snapshot::{self, IncrementalUploader, SnapshotManifest};
use strata_cache::StateStore;

/// What `latest.json` records of a worker's latest checkpoint.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct Latest {
    /// Checkpoint id.
    pub id: u64,
    /// Events the worker had applied when it was taken.
    pub events: u64,
    /// The files of the L2 snapshot.
    pub manifest: SnapshotManifest,
    /// The version of its L3 writes (`l3` mode; see
    /// `CassandraTier::pin_version`), pinned again after a restore.
    #[serde(default)]
    pub l3_version: Option<i64>,
}

/// Checkpoint figures of a mode (all workers together).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct CheckpointFigures {
    /// Checkpoints taken, per worker summed.
    pub count: u64,
    /// Mean duration (L1 flush + L2 snapshot + upload), milliseconds.
    pub mean_ms: f64,
    /// Longest duration, milliseconds.
    pub max_ms: f64,
    /// Full size of the last checkpoint of every worker, bytes.
    pub last_bytes: u64,
    /// Mean bytes a checkpoint newly stored (its incremental size).
    pub mean_new_bytes: f64,
    /// Events/s while a checkpoint ran divided by events/s between
    /// checkpoints (the final checkpoint, after the last event, left out;
    /// `None` when no checkpoint ran during the input).
    #[serde(default)]
    pub during_ratio: Option<f64>,
    /// When each checkpoint ran: (start, completion) in seconds since the
    /// run started (for the embedded modes, since the worker's store was
    /// opened, within milliseconds of it). Plotted as shaded spans.
    #[serde(default)]
    pub windows: Vec<(f64, f64)>,
}

impl CheckpointFigures {
    /// Adds another worker's figures.
    pub(crate) fn merge(&mut self, o: &CheckpointFigures) {
        let count = self.count + o.count;
        let mean =
            |a: f64, b: f64| (a * self.count as f64 + b * o.count as f64) / count.max(1) as f64;
        self.mean_ms = mean(self.mean_ms, o.mean_ms);
        self.mean_new_bytes = mean(self.mean_new_bytes, o.mean_new_bytes);
        self.count = count;
        self.max_ms = self.max_ms.max(o.max_ms);
        self.last_bytes += o.last_bytes;
        self.windows.extend_from_slice(&o.windows);
    }
}

/// One worker's checkpoints.
pub(crate) struct Checkpointing {
    root: PathBuf,
    /// When the store was opened: checkpoint windows count from it.
    opened: Instant,
    uploader: IncrementalUploader,
    id: u64,
    last_events: Option<u64>,
    figures: CheckpointFigures,
    /// The cold tier whose write versions each checkpoint records.
    cold: Option<Arc<CassandraTier>>,
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> BenchError + '_ {
    move |e| format!("{}: {e}", path.display()).into()
}

impl Checkpointing {
    /// Checkpoint storage in `root` (created); with `cold`, each checkpoint
    /// records the version of its L3 writes, as the runtime's metadata does.
    pub(crate) fn new(root: PathBuf, cold: Option<Arc<CassandraTier>>) -> Result<Self, BenchError> {
        std::fs::create_dir_all(&root).map_err(io(&root))?;
        Ok(Self {
            uploader: IncrementalUploader::new(&root, "bench"),
            root,
            opened: Instant::now(),
            id: 0,
            last_events: None,
            figures: CheckpointFigures::default(),
            cold,
        })
    }

    /// Takes checkpoint `id + 1` of `store`, `events` applied so far, and
    /// tells the store it completed.
    pub(crate) fn take(&mut self, store: &StateStore, events: u64) -> Result<(), BenchError> {
        let started = Instant::now();
        self.id += 1;
        let local = self.root.join("local");
        let private = format!("chk-{}", self.id);
        store.checkpoint(&local, self.id)?;
        let upload = self.uploader.upload(&local, &private)?;
        std::fs::remove_dir_all(&local).map_err(io(&local))?;
        let latest = Latest {
            id: self.id,
            events,
            manifest: upload.manifest,
            l3_version: self.cold.as_ref().map(|c| c.version_of(self.id)),
        };
        let path = self.root.join("latest.json");
        std::fs::write(&path, serde_json::to_vec(&latest)?).map_err(io(&path))?;
        self.drop_older(&latest)?;
        let ms = started.elapsed().as_secs_f64() * 1000.0;
        let last_bytes = latest.manifest.total_bytes();
        let since_open = |t: Instant| t.duration_since(self.opened).as_secs_f64();
        let window = (since_open(started), since_open(Instant::now()));
        self.figures.merge(&CheckpointFigures {
            count: 1,
            mean_ms: ms,
            max_ms: ms,
            last_bytes: 0,
            mean_new_bytes: upload.new_bytes as f64,
            during_ratio: None,
            windows: vec![window],
        });
        self.figures.last_bytes = last_bytes;
        self.last_events = Some(events);
        store.checkpoint_completed(self.id)?;
        Ok(())
    }

    /// Removes what only older checkpoints referenced.
    fn drop_older(&self, latest: &Latest) -> Result<(), BenchError> {
        let live: std::collections::HashSet<&str> = latest
            .manifest
            .files
            .iter()
            .map(|f| f.object.as_str())
            .collect();
        let shared = self.root.join("shared");
        for entry in std::fs::read_dir(&shared).map_err(io(&shared))? {
            let name = format!("shared/{}", entry?.file_name().to_string_lossy());
            if !live.contains(name.as_str()) {
                std::fs::remove_file(self.root.join(&name)).map_err(io(&self.root))?;
            }
        }
        let older = self.root.join(format!("chk-{}", latest.id - 1));
        if older.exists() {
            std::fs::remove_dir_all(&older).map_err(io(&older))?;
        }
        Ok(())
    }

    /// Events the last checkpoint holds, if one was taken.
    pub(crate) fn events(&self) -> Option<u64> {
        self.last_events
    }

    /// The figures so far.
    pub(crate) fn figures(&self) -> CheckpointFigures {
        self.figures.clone()
    }
}

/// Lays out the latest checkpoint in storage `root` as an L2 directory at
/// `target`; returns what `latest.json` records.
pub(crate) fn restore(root: &Path, target: &Path) -> Result<Latest, BenchError> {
    let path = root.join("latest.json");
    let latest: Latest = serde_json::from_slice(&std::fs::read(&path).map_err(io(&path))?)?;
    snapshot::restore(root, &latest.manifest, target)?;
    Ok(latest)
}
