//! The identity of an input file, so that a restore resumes the input it
//! checkpointed and no other.
//!
//! A checkpoint records an [`InputIdentity`]: the file's size and an XXH3-64
//! digest. For text formats (CSV, JSON lines) the digest covers every byte
//! the source has consumed so far — the part of the input whose records are
//! already in the state and the output, so any difference there (a file
//! replaced by another of the same size) is caught. It is kept up to date
//! incrementally at each checkpoint through a second file handle, reading
//! each byte once more in total. For Parquet, whose reader does not read
//! front to back, the digest covers the footer (schema, row-group sizes,
//! offsets and statistics) and 16 samples of 64 KiB spread over the file.

use crate::error::{ConnectorError, Result};
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use xxhash_rust::xxh3::Xxh3;

/// What a checkpoint records of its input file.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InputIdentity {
    /// The file's size in bytes.
    pub bytes: u64,
    /// XXH3-64 of what the identity covers, as 16 hex digits.
    pub digest: String,
    /// Text formats: the first `covers` bytes are hashed. Parquet: 0 (the
    /// footer and samples are).
    pub covers: u64,
}

const SAMPLES: u64 = 16;
const SAMPLE_BYTES: u64 = 64 << 10;

/// Keeps the digest of a file's first bytes as a source consumes it.
pub(crate) struct PrefixDigest {
    path: PathBuf,
    file: File,
    hasher: Xxh3,
    hashed: u64,
    bytes: u64,
}

impl PrefixDigest {
    pub(crate) fn open(path: &Path, bytes: u64) -> Result<Self> {
        Ok(Self {
            path: path.to_owned(),
            file: File::open(path).map_err(ConnectorError::io(path))?,
            hasher: Xxh3::new(),
            hashed: 0,
            bytes,
        })
    }

    /// The identity of the file's first `upto` bytes (which must not be
    /// fewer than the last call's).
    pub(crate) fn identity(&mut self, upto: u64) -> Result<InputIdentity> {
        let mut left = upto.saturating_sub(self.hashed);
        let mut buf = vec![0u8; 1 << 16];
        self.file
            .seek(SeekFrom::Start(self.hashed))
            .map_err(ConnectorError::io(&self.path))?;
        while left > 0 {
            let want = left.min(buf.len() as u64) as usize;
            let n = self
                .file
                .read(&mut buf[..want])
                .map_err(ConnectorError::io(&self.path))?;
            if n == 0 {
                break;
            }
            self.hasher.update(&buf[..n]);
            self.hashed += n as u64;
            left -= n as u64;
        }
        Ok(InputIdentity {
            bytes: self.bytes,
            digest: format!("{:016x}", self.hasher.digest()),
            covers: self.hashed,
        })
    }
}

/// Reads `len` bytes of `file` at `offset` into `hasher`.
fn hash_range(
    file: &mut File,
    path: &Path,
    offset: u64,
    len: u64,
    hasher: &mut Xxh3,
) -> Result<()> {
    let mut buf = vec![0u8; len as usize];
    file.seek(SeekFrom::Start(offset))
        .and_then(|_| file.read_exact(&mut buf))
        .map_err(ConnectorError::io(path))?;
    hasher.update(&buf);
    Ok(())
}

/// The identity of a Parquet file: its footer and 16 spread samples.
pub(crate) fn parquet_identity(path: &Path, bytes: u64) -> Result<InputIdentity> {
    let mut file = File::open(path).map_err(ConnectorError::io(path))?;
    let mut hasher = Xxh3::new();
    // The footer: its length sits in the 4 bytes before the trailing magic.
    let mut len_bytes = [0u8; 4];
    file.seek(SeekFrom::Start(bytes.saturating_sub(8)))
        .and_then(|_| file.read_exact(&mut len_bytes))
        .map_err(ConnectorError::io(path))?;
    let footer = u64::from(u32::from_le_bytes(len_bytes)).min(bytes.saturating_sub(8));
    let data = bytes.saturating_sub(8 + footer);
    hash_range(&mut file, path, data, bytes - data, &mut hasher)?;
    for i in 0..SAMPLES {
        let at = data * i / SAMPLES;
        hash_range(
            &mut file,
            path,
            at,
            SAMPLE_BYTES.min(data - at),
            &mut hasher,
        )?;
    }
    Ok(InputIdentity {
        bytes,
        digest: format!("{:016x}", hasher.digest()),
        covers: 0,
    })
}
