//! A transactional JSON-lines file sink: exactly-once output across crashes.
//!
//! The two-phase commit of Flink's `FileSink`: records go to a hidden
//! in-progress part file (`.{prefix}-{subtask}-{seq}.jsonl.inprogress`). At a
//! checkpoint barrier, [`FileSink::pre_commit`] closes that file and records
//! it as pending for the checkpoint; the returned [`SinkState`] goes into the
//! checkpoint. When the checkpoint completes, [`FileSink::commit`] renames
//! every pending file of that checkpoint or an earlier one to its visible
//! name (`{prefix}-{subtask}-{seq}.jsonl`). On restore,
//! [`FileSink::open`] first commits what the restored checkpoint had pending
//! (its completion notice may have been lost in the crash), then deletes
//! every other hidden file of the subtask: output no completed checkpoint
//! covers is aborted, and the replay writes it again.
//!
//! Durability: a pre-commit fsyncs the part file and the directory (its
//! name), a commit fsyncs the directory after its renames, so a committed
//! file neither vanishes nor reappears hidden after a power loss.

use crate::error::{ConnectorError, Result};
use std::fs::{self, File};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

/// Makes the directory entries of `dir` durable (after creating or
/// renaming a file in it).
fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(ConnectorError::io(dir))
}

/// The hidden name of in-progress part file `seq` of `subtask`.
fn hidden_path(dir: &Path, prefix: &str, subtask: u32, seq: u64) -> PathBuf {
    dir.join(format!(".{prefix}-{subtask}-{seq:06}.jsonl.inprogress"))
}

/// The committed (visible) part files in `dir` of sinks named `prefix` —
/// of instance `subtask` only, if given — numbered `from` or above, by
/// name. A missing directory holds none.
///
/// Errors: the directory cannot be read.
pub fn committed_parts(
    dir: &Path,
    prefix: &str,
    subtask: Option<u32>,
    from: u64,
) -> Result<Vec<String>> {
    let entries = match fs::read_dir(dir) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        other => other.map_err(ConnectorError::io(dir))?,
    };
    let mut found = Vec::new();
    for entry in entries {
        let name = entry
            .map_err(ConnectorError::io(dir))?
            .file_name()
            .to_string_lossy()
            .into_owned();
        let Some((task, seq)) = name
            .strip_prefix(prefix)
            .and_then(|rest| rest.strip_prefix('-'))
            .and_then(|rest| rest.strip_suffix(".jsonl"))
            .and_then(|rest| rest.split_once('-'))
            .and_then(|(t, n)| Some((t.parse::<u32>().ok()?, n.parse::<u64>().ok()?)))
        else {
            continue;
        };
        if subtask.is_none_or(|s| s == task) && seq >= from {
            found.push(name);
        }
    }
    found.sort();
    Ok(found)
}

/// The refusal of a fresh run into a directory holding committed output.
pub fn already_holds(dir: &Path, name: &str) -> ConnectorError {
    ConnectorError::Io {
        path: dir.to_owned(),
        source: std::io::Error::new(
            std::io::ErrorKind::AlreadyExists,
            format!("output directory already holds {name}: use an empty directory, or --restore latest to continue a run"),
        ),
    }
}

/// A part file waiting for its checkpoint to complete.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PendingFile {
    /// The checkpoint whose completion makes it visible.
    pub checkpoint: u64,
    /// Its sequence number (names derive from it).
    pub seq: u64,
}

/// The sink's part of a checkpoint.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SinkState {
    /// The next part file's sequence number.
    pub next_seq: u64,
    /// Closed part files not yet visible.
    pub pending: Vec<PendingFile>,
}

struct InProgress {
    seq: u64,
    writer: BufWriter<File>,
}

/// A transactional part-file writer for one subtask.
pub struct FileSink {
    dir: PathBuf,
    prefix: String,
    subtask: u32,
    state: SinkState,
    current: Option<InProgress>,
    records: u64,
}

impl FileSink {
    /// Opens the sink for `subtask` in `dir` (created if absent). With a
    /// restored `state`, commits its pending files; without one, refuses a
    /// directory that already holds this sink's committed part files. Either
    /// way it then deletes the subtask's hidden files that no completed
    /// checkpoint covers (the output of a crashed run). The caller must hold
    /// the output directory for itself (the runtime locks it).
    pub fn open(
        dir: &Path,
        prefix: &str,
        subtask: u32,
        restored: Option<SinkState>,
    ) -> Result<Self> {
        fs::create_dir_all(dir).map_err(ConnectorError::io(dir))?;
        let mut sink = Self {
            dir: dir.to_owned(),
            prefix: prefix.to_owned(),
            subtask,
            state: SinkState::default(),
            current: None,
            records: 0,
        };
        match restored {
            Some(state) => {
                sink.state = state;
                sink.refuse_unknown_output()?;
                sink.commit(u64::MAX)?;
            }
            None => sink.refuse_existing_output()?,
        }
        sink.abort_uncommitted()?;
        Ok(sink)
    }

    fn visible(&self, seq: u64) -> PathBuf {
        self.dir
            .join(format!("{}-{}-{seq:06}.jsonl", self.prefix, self.subtask))
    }

    fn hidden(&self, seq: u64) -> PathBuf {
        hidden_path(&self.dir, &self.prefix, self.subtask, seq)
    }

    fn own_files(&self) -> Result<Vec<(String, PathBuf)>> {
        let mine = format!("{}-{}-", self.prefix, self.subtask);
        let mut out = Vec::new();
        for entry in fs::read_dir(&self.dir).map_err(ConnectorError::io(&self.dir))? {
            let path = entry.map_err(ConnectorError::io(&self.dir))?.path();
            let name = path
                .file_name()
                .unwrap_or_default()
                .to_string_lossy()
                .into_owned();
            if name.trim_start_matches('.').starts_with(&mine) {
                out.push((name, path));
            }
        }
        Ok(out)
    }

    fn refuse_existing_output(&self) -> Result<()> {
        let found = committed_parts(&self.dir, &self.prefix, Some(self.subtask), 0)?;
        match found.first() {
            None => Ok(()),
            Some(name) => Err(already_holds(&self.dir, name)),
        }
    }

    /// A committed part file numbered at or past the restored state's next
    /// sequence number was not written under this state (a newer
    /// checkpoint's, or another output's): writing on would replace it.
    fn refuse_unknown_output(&self) -> Result<()> {
        let next = self.state.next_seq;
        let found = committed_parts(&self.dir, &self.prefix, Some(self.subtask), next)?;
        match found.first() {
            None => Ok(()),
            Some(name) => Err(ConnectorError::Io {
                path: self.dir.clone(),
                source: std::io::Error::new(
                    std::io::ErrorKind::AlreadyExists,
                    format!(
                        "output directory holds {name}, written after the restored checkpoint (whose next part file of {}-{} is number {next}): restore the newest checkpoint, or move the newer part files out of the directory",
                        self.prefix, self.subtask
                    ),
                ),
            }),
        }
    }

    fn abort_uncommitted(&self) -> Result<()> {
        for (name, path) in self.own_files()? {
            if name.starts_with('.') {
                fs::remove_file(&path).map_err(ConnectorError::io(&path))?;
            }
        }
        Ok(())
    }

    /// Appends one line (a newline is added).
    pub fn write_line(&mut self, line: &[u8]) -> Result<()> {
        if self.current.is_none() {
            let seq = self.state.next_seq;
            self.state.next_seq += 1;
            let path = self.hidden(seq);
            let file = File::create(&path).map_err(ConnectorError::io(&path))?;
            self.current = Some(InProgress {
                seq,
                writer: BufWriter::with_capacity(1 << 16, file),
            });
        }
        let Some(current) = self.current.as_mut() else {
            unreachable!("a part file was just opened")
        };
        let path = hidden_path(&self.dir, &self.prefix, self.subtask, current.seq);
        let io = |e| ConnectorError::Io {
            path: path.clone(),
            source: e,
        };
        current.writer.write_all(line).map_err(io)?;
        current.writer.write_all(b"\n").map_err(io)?;
        self.records += 1;
        Ok(())
    }

    /// Closes the in-progress file as pending for `checkpoint` and returns
    /// the state to store in that checkpoint.
    pub fn pre_commit(&mut self, checkpoint: u64) -> Result<SinkState> {
        if let Some(mut current) = self.current.take() {
            let path = self.hidden(current.seq);
            current.writer.flush().map_err(ConnectorError::io(&path))?;
            let file = current
                .writer
                .into_inner()
                .map_err(|e| ConnectorError::Io {
                    path: path.clone(),
                    source: e.into_error(),
                })?;
            file.sync_data().map_err(ConnectorError::io(&path))?;
            // The file's name must survive a power loss too: the
            // checkpoint will say it exists.
            sync_dir(&self.dir)?;
            self.state.pending.push(PendingFile {
                checkpoint,
                seq: current.seq,
            });
        }
        Ok(self.state.clone())
    }

    /// Makes visible every pending file of checkpoint `completed` or earlier
    /// (a later completion subsumes a lost earlier notice). Idempotent.
    pub fn commit(&mut self, completed: u64) -> Result<()> {
        let (ready, waiting): (Vec<_>, Vec<_>) = std::mem::take(&mut self.state.pending)
            .into_iter()
            .partition(|p| p.checkpoint <= completed);
        self.state.pending = waiting;
        let renamed = !ready.is_empty();
        for p in ready {
            let (hidden, visible) = (self.hidden(p.seq), self.visible(p.seq));
            if hidden.exists() {
                fs::rename(&hidden, &visible).map_err(ConnectorError::io(&hidden))?;
            } else if !visible.exists() {
                return Err(ConnectorError::Io {
                    path: hidden,
                    source: std::io::Error::new(
                        std::io::ErrorKind::NotFound,
                        "a pending part file of a completed checkpoint is gone",
                    ),
                });
            }
        }
        if renamed {
            sync_dir(&self.dir)?;
        }
        Ok(())
    }

    /// Lines written since the sink was opened.
    pub fn records(&self) -> u64 {
        self.records
    }
}
