//! A replayable file source for Parquet, CSV and JSON lines.
//!
//! The source reads [`Row`]s typed by the job's [`Schema`]. Its
//! [`Position`] (records read, and the byte offset for text formats) is
//! what a checkpoint records; [`FileSource::open`] at a position resumes
//! right after the last record that position covers.
//!
//! Whole-file problems (missing file, empty file, missing column, wrong
//! column type, truncated Parquet) are a [`ConnectorError`] at open time;
//! problems with one record (a wrong value, a truncated last line) are a
//! [`RecordError`] for that record, and reading goes on after it.

mod csv;
mod json;
mod parquet;
mod rows;

pub use csv::csv_value_row;
pub use json::json_row;
pub(crate) use rows::corrupt;
pub use rows::RowResult;

use crate::error::{ConnectorError, Result};
use crate::identity::{parquet_identity, InputIdentity, PrefixDigest};
use crate::row::Schema;
use csv::CsvRows;
use json::JsonRows;
use parquet::ParquetRows;
use rows::RowReader;
use std::fs::File;
use std::io::{Seek, SeekFrom};
use std::path::{Path, PathBuf};

/// An input file format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// Apache Parquet.
    Parquet,
    /// Comma-separated values with a header line.
    Csv,
    /// One JSON object per line.
    JsonLines,
}

impl Format {
    /// The format a file name implies (`.parquet`, `.csv`, `.jsonl`/`.ndjson`/`.json`).
    pub fn from_path(path: &Path) -> Result<Self> {
        match path
            .extension()
            .and_then(|e| e.to_str())
            .map(str::to_ascii_lowercase)
            .as_deref()
        {
            Some("parquet") => Ok(Format::Parquet),
            Some("csv") => Ok(Format::Csv),
            Some("jsonl" | "ndjson" | "json") => Ok(Format::JsonLines),
            _ => Err(ConnectorError::UnknownFormat(path.to_owned())),
        }
    }
}

/// How a source reads its input (`source.*` configuration keys).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SourceOptions {
    /// CSV: whether a quoted field may hold line breaks
    /// (`source.csv.multiline-fields`, default false). When it may not, a
    /// record whose quoted field runs across a line break is a bad record
    /// (a stray quote, which would otherwise swallow the lines up to the
    /// next quote) and reading goes on at the next line.
    pub csv_multiline_fields: bool,
    /// The longest line of a text file (CSV, JSON lines), and the longest
    /// text value of a Parquet row, in bytes (`source.max-record-bytes`,
    /// default [`DEFAULT_MAX_RECORD_BYTES`]). A longer one is a bad record,
    /// read past without being held whole, so one huge line never costs
    /// more memory than this.
    pub max_record_bytes: u64,
}

/// The default of [`SourceOptions::max_record_bytes`]: 1 MiB, as Kafka's
/// default largest message.
pub const DEFAULT_MAX_RECORD_BYTES: u64 = 1 << 20;

impl Default for SourceOptions {
    fn default() -> Self {
        Self {
            csv_multiline_fields: false,
            max_record_bytes: DEFAULT_MAX_RECORD_BYTES,
        }
    }
}

/// How far a source has read: the replay point a checkpoint records.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Position {
    /// Records read so far (good and bad).
    pub records: u64,
    /// Byte offset just after the last record read (text formats; 0 for Parquet).
    pub byte_offset: u64,
    /// Line number of the next record (CSV; for error messages).
    #[serde(default)]
    pub line: u64,
}

/// How a source knows its input again (see [`crate::identity`]).
enum Identity {
    /// Parquet: footer and samples, fixed at open.
    Fixed(InputIdentity),
    /// Text: the digest of the bytes consumed so far.
    Prefix(Box<PrefixDigest>),
}

/// A file source of typed rows.
pub struct FileSource {
    path: PathBuf,
    format: Format,
    schema: Schema,
    max_record_bytes: u64,
    identity: Identity,
    reader: Box<dyn RowReader>,
    records: u64,
    total_records: Option<u64>,
    total_bytes: u64,
}

impl FileSource {
    /// Opens `path` in `format` for the columns of `schema`, resuming after
    /// `start`.
    ///
    /// Errors: [`ConnectorError::NotFound`], [`ConnectorError::Empty`],
    /// [`ConnectorError::MissingColumn`], [`ConnectorError::WrongType`],
    /// [`ConnectorError::Corrupt`].
    pub fn open(path: &Path, format: Format, schema: &Schema, start: Position) -> Result<Self> {
        Self::open_with(path, format, schema, start, &SourceOptions::default())
    }

    /// [`FileSource::open`] with [`SourceOptions`].
    pub fn open_with(
        path: &Path,
        format: Format,
        schema: &Schema,
        start: Position,
        options: &SourceOptions,
    ) -> Result<Self> {
        let meta = std::fs::metadata(path).map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => ConnectorError::NotFound(path.to_owned()),
            _ => ConnectorError::Io {
                path: path.to_owned(),
                source: e,
            },
        })?;
        if meta.len() == 0 {
            return Err(ConnectorError::Empty(path.to_owned()));
        }
        let identity = match format {
            Format::Parquet => Identity::Fixed(parquet_identity(path, meta.len())?),
            _ => Identity::Prefix(Box::new(PrefixDigest::open(path, meta.len())?)),
        };
        let (reader, total_records): (Box<dyn RowReader>, _) = match format {
            Format::Parquet => {
                let r = ParquetRows::open(path, schema, start, options.max_record_bytes)?;
                let total = r.total;
                (Box::new(r), Some(total))
            }
            Format::Csv => (Box::new(CsvRows::open(path, schema, start, options)?), None),
            Format::JsonLines => (
                Box::new(JsonRows::open(
                    path,
                    schema,
                    start,
                    options.max_record_bytes,
                )?),
                None,
            ),
        };
        Ok(Self {
            path: path.to_owned(),
            format,
            schema: schema.clone(),
            max_record_bytes: options.max_record_bytes,
            identity,
            reader,
            records: start.records,
            total_records,
            total_bytes: meta.len(),
        })
    }

    /// The next row, a bad record, or `None` at the end of the file.
    ///
    /// Errors: [`ConnectorError::Io`] or [`ConnectorError::Corrupt`] when the
    /// file cannot be read on (reading must not go on past lost records).
    ///
    /// At the end it checks that the whole file was read: every row the
    /// Parquet footer counts, every byte of a text file. A difference is a
    /// [`ConnectorError::Incomplete`] naming the last record read.
    pub fn next_row(&mut self) -> Result<Option<RowResult>> {
        let row = self.reader.next_row()?;
        self.records += u64::from(row.is_some());
        if row.is_none() {
            self.check_complete()?;
        }
        Ok(row)
    }

    fn check_complete(&self) -> Result<()> {
        let (read, holds, unit) = match self.total_records {
            Some(total) => (self.records, total, "rows (its footer's count)"),
            None => (self.reader.byte_offset(), self.total_bytes, "bytes"),
        };
        if read == holds {
            return Ok(());
        }
        Err(ConnectorError::Incomplete {
            path: self.path.clone(),
            read,
            holds,
            unit,
            last_record: self.records,
        })
    }

    /// The current replay position.
    pub fn position(&self) -> Position {
        Position {
            records: self.records,
            byte_offset: self.reader.byte_offset(),
            line: self.reader.line(),
        }
    }

    /// The size of the input file in bytes.
    pub fn input_bytes(&self) -> u64 {
        self.total_bytes
    }

    /// The identity of the input up to `at` (a position this source
    /// reported), for a checkpoint taken there (see [`InputIdentity`]).
    /// Reads the bytes consumed since the last call once more (text
    /// formats); `at` must not be before the last call's.
    pub fn identity(&mut self, at: Position) -> Result<InputIdentity> {
        match &mut self.identity {
            Identity::Fixed(id) => Ok(id.clone()),
            Identity::Prefix(digest) => digest.identity(at.byte_offset),
        }
    }

    /// Checks, before reading on from a restored position, that this is the
    /// input a checkpoint recorded as `recorded`.
    ///
    /// Errors: a one-line reason naming both sizes or digests.
    pub fn verify(&mut self, recorded: &InputIdentity) -> std::result::Result<(), String> {
        let path = self.path.display();
        if recorded.bytes != self.total_bytes {
            return Err(format!(
                "the checkpoint was taken reading a {}-byte input, but {path} has {} bytes",
                recorded.bytes, self.total_bytes
            ));
        }
        let now = match &mut self.identity {
            Identity::Fixed(id) => id.clone(),
            Identity::Prefix(digest) => digest
                .identity(recorded.covers)
                .map_err(|e| e.to_string())?,
        };
        if now.digest != recorded.digest || now.covers != recorded.covers {
            return Err(format!(
                "{path} has the same size but other content than the input the checkpoint read (XXH3 of its first {} bytes: {}, recorded: {})",
                recorded.covers, now.digest, recorded.digest
            ));
        }
        Ok(())
    }

    /// The text of the record that ends at `after` (a position this
    /// source reported) and starts at byte `start` (the position before
    /// it), read from the file again: a CSV record or a JSON line without
    /// its line ends (and a leading byte-order mark), bytes that are not
    /// UTF-8 as U+FFFD; for Parquet the row as a JSON object of the job's
    /// columns. For dead letters, which must hold the record itself.
    /// `None` for a record longer than `source.max-record-bytes` (its
    /// dead letter says where it starts and how long it is instead).
    ///
    /// Errors: the file can no longer be read.
    pub fn record_text(&self, start: u64, after: &Position) -> Result<Option<String>> {
        if self.format == Format::Parquet {
            let before = Position {
                records: after.records.saturating_sub(1),
                ..Position::default()
            };
            let row = ParquetRows::open(&self.path, &self.schema, before, u64::MAX)?.next_row()?;
            return Ok(match row {
                Some(Ok(row)) if row.text_bytes() <= self.max_record_bytes => {
                    Some(row.to_json(&self.schema).to_string())
                }
                _ => None,
            });
        }
        use std::io::Read;
        let len = after.byte_offset.saturating_sub(start);
        // The line and up to two line ends before and after it.
        if len > self.max_record_bytes + 4 {
            return Ok(None);
        }
        let mut bytes = Vec::with_capacity(len as usize);
        let mut file = File::open(&self.path).map_err(ConnectorError::io(&self.path))?;
        file.seek(SeekFrom::Start(start))
            .and_then(|_| file.take(len).read_to_end(&mut bytes))
            .map_err(ConnectorError::io(&self.path))?;
        let text = String::from_utf8_lossy(&bytes);
        let text = text.strip_prefix('\u{feff}').unwrap_or(&text);
        Ok(Some(text.trim_matches(['\r', '\n']).to_owned()))
    }

    /// Where the record whose position before it was `start` begins in a
    /// text file: past the line end of the record before (`\r\n` leaves
    /// its `\n` after the position) and the byte-order mark.
    ///
    /// Errors: the file can no longer be read.
    pub fn record_start(&self, start: u64) -> Result<u64> {
        use std::io::Read;
        let mut head = [0u8; 8];
        let mut file = File::open(&self.path).map_err(ConnectorError::io(&self.path))?;
        let n = file
            .seek(SeekFrom::Start(start))
            .and_then(|_| file.read(&mut head))
            .map_err(ConnectorError::io(&self.path))?;
        let head = &head[..n];
        let bom = usize::from(start == 0 && head.starts_with(b"\xEF\xBB\xBF")) * 3;
        let ends = head[bom..]
            .iter()
            .take_while(|b| matches!(b, b'\r' | b'\n'))
            .count();
        Ok(start + (bom + ends) as u64)
    }

    /// Progress as (done, total) in records (Parquet) or bytes (text).
    pub fn progress(&self) -> (u64, u64) {
        match self.total_records {
            Some(total) => (self.records, total),
            None => (self.reader.byte_offset(), self.total_bytes),
        }
    }
}
