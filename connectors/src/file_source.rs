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

use crate::csv_rows::CsvRows;
use crate::error::{ConnectorError, RecordError, Result};
use crate::identity::{parquet_identity, InputIdentity, PrefixDigest};
use crate::json_object::json_fields;
use crate::row::{parse_text, FieldType, Row, Schema, Value};
use arrow::array::{Array, ArrayRef, AsArray};
use arrow::datatypes::{DataType, Float64Type, Int64Type, TimeUnit, TimestampMillisecondType};
use parquet::arrow::arrow_reader::{ParquetRecordBatchReader, ParquetRecordBatchReaderBuilder};
use std::fs::File;
use std::io::{BufRead, BufReader, Seek, SeekFrom};
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

/// One record: a row, or what is wrong with it.
pub type RowResult = std::result::Result<Row, RecordError>;

pub(crate) trait RowReader: Send {
    /// The next record, `None` at the end, or an error that ends reading
    /// (I/O, a corrupt Parquet page).
    fn next_row(&mut self) -> Result<Option<RowResult>>;
    fn byte_offset(&self) -> u64;
    fn line(&self) -> u64 {
        0
    }
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

pub(crate) fn corrupt(path: &Path, format: &'static str, reason: impl ToString) -> ConnectorError {
    ConnectorError::Corrupt {
        path: path.to_owned(),
        format,
        reason: reason.to_string(),
    }
}

pub(crate) fn missing(path: &Path, column: &str, found: &[String]) -> ConnectorError {
    // A header taken over by a stray quote can hold the whole file.
    let mut listed = found
        .iter()
        .take(50)
        .cloned()
        .collect::<Vec<_>>()
        .join(", ");
    if listed.len() > 300 || found.len() > 50 {
        listed = format!(
            "{}… ({} columns)",
            listed.chars().take(300).collect::<String>(),
            found.len()
        );
    }
    ConnectorError::MissingColumn {
        path: path.to_owned(),
        column: column.to_owned(),
        found: listed,
    }
}

struct ParquetRows {
    path: PathBuf,
    batches: ParquetRecordBatchReader,
    schema: Schema,
    columns: Vec<ArrayRef>,
    row_in_batch: usize,
    batch_len: usize,
    number: u64,
    total: u64,
    max_record_bytes: u64,
}

/// The arrow type a field is cast to, if the column's type can be read as it.
fn arrow_target(ty: FieldType, found: &DataType) -> Option<DataType> {
    let ok = match ty {
        FieldType::String => matches!(
            found,
            DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View
        ),
        FieldType::Int64 => found.is_integer(),
        FieldType::Float64 => found.is_numeric(),
        FieldType::Timestamp => matches!(
            found,
            DataType::Timestamp(..) | DataType::Date32 | DataType::Date64
        ),
        FieldType::Bytes => matches!(
            found,
            DataType::Binary
                | DataType::LargeBinary
                | DataType::BinaryView
                | DataType::Utf8
                | DataType::LargeUtf8
                | DataType::Utf8View
        ),
    };
    ok.then_some(match ty {
        FieldType::String => DataType::Utf8,
        FieldType::Int64 => DataType::Int64,
        FieldType::Float64 => DataType::Float64,
        FieldType::Timestamp => DataType::Timestamp(TimeUnit::Millisecond, None),
        FieldType::Bytes => DataType::Binary,
    })
}

impl ParquetRows {
    fn open(path: &Path, schema: &Schema, start: Position, max_record_bytes: u64) -> Result<Self> {
        let file = File::open(path).map_err(ConnectorError::io(path))?;
        let builder = ParquetRecordBatchReaderBuilder::try_new(file)
            .map_err(|e| corrupt(path, "Parquet", e))?;
        let total = builder.metadata().file_metadata().num_rows().max(0) as u64;
        let arrow_schema = builder.schema().clone();
        let names: Vec<String> = arrow_schema
            .fields()
            .iter()
            .map(|f| f.name().clone())
            .collect();
        let mut indices = Vec::new();
        for (name, ty) in &schema.fields {
            let (i, field) = arrow_schema
                .column_with_name(name)
                .ok_or_else(|| missing(path, name, &names))?;
            arrow_target(*ty, field.data_type()).ok_or_else(|| ConnectorError::WrongType {
                path: path.to_owned(),
                column: name.clone(),
                expected: ty.label(),
                found: field.data_type().to_string(),
            })?;
            indices.push(i);
        }
        let mask = parquet::arrow::ProjectionMask::roots(builder.parquet_schema(), indices);
        let batches = builder
            .with_projection(mask)
            .with_offset(start.records as usize)
            .with_batch_size(8192)
            .build()
            .map_err(|e| corrupt(path, "Parquet", e))?;
        Ok(Self {
            path: path.to_owned(),
            batches,
            schema: schema.clone(),
            columns: Vec::new(),
            row_in_batch: 0,
            batch_len: 0,
            number: start.records,
            total,
            max_record_bytes,
        })
    }

    /// Loads the next batch, cast to the schema's types; `false` at the end.
    fn load_batch(&mut self) -> Result<bool> {
        let Some(batch) = self.batches.next() else {
            return Ok(false);
        };
        let batch = batch.map_err(|e| self.batch_error(e))?;
        let mut columns = Vec::with_capacity(self.schema.fields.len());
        for (name, ty) in &self.schema.fields {
            let col = batch
                .column_by_name(name)
                .ok_or_else(|| self.batch_error(format!("column '{name}' vanished")))?;
            let target = arrow_target(*ty, col.data_type()).unwrap_or(DataType::Null);
            columns.push(arrow::compute::cast(col, &target).map_err(|e| self.batch_error(e))?);
        }
        self.columns = columns;
        self.row_in_batch = 0;
        self.batch_len = batch.num_rows();
        Ok(true)
    }

    fn batch_error(&self, reason: impl ToString) -> ConnectorError {
        corrupt(
            &self.path,
            "Parquet",
            format!("after record {}: {}", self.number, reason.to_string()),
        )
    }

    fn value(&self, col: usize, ty: FieldType) -> Value {
        let array = &self.columns[col];
        let i = self.row_in_batch;
        if array.is_null(i) {
            return Value::Null;
        }
        match ty {
            FieldType::String => Value::String(array.as_string::<i32>().value(i).to_owned()),
            FieldType::Int64 => Value::Int64(array.as_primitive::<Int64Type>().value(i)),
            FieldType::Float64 => Value::Float64(array.as_primitive::<Float64Type>().value(i)),
            FieldType::Timestamp => {
                Value::Timestamp(array.as_primitive::<TimestampMillisecondType>().value(i))
            }
            FieldType::Bytes => Value::Bytes(array.as_binary::<i32>().value(i).to_vec()),
        }
    }
}

impl RowReader for ParquetRows {
    fn next_row(&mut self) -> Result<Option<RowResult>> {
        while self.row_in_batch >= self.batch_len {
            if !self.load_batch()? {
                return Ok(None);
            }
        }
        self.number += 1;
        let values = (0..self.schema.fields.len())
            .map(|c| self.value(c, self.schema.fields[c].1))
            .collect();
        self.row_in_batch += 1;
        let row = Row {
            number: self.number,
            values,
        };
        let bytes = row.text_bytes();
        if bytes > self.max_record_bytes {
            return Ok(Some(Err(RecordError {
                record: self.number,
                field: None,
                reason: too_long("the row's text values are", bytes, self.max_record_bytes),
                ..Default::default()
            })));
        }
        Ok(Some(Ok(row)))
    }

    fn byte_offset(&self) -> u64 {
        0
    }
}

/// Parses the text fields of one record (CSV cells or JSON strings).
pub(crate) fn typed_row(
    number: u64,
    schema: &Schema,
    mut text: impl FnMut(usize) -> std::result::Result<Value, String>,
) -> std::result::Result<Row, RecordError> {
    let mut values = Vec::with_capacity(schema.fields.len());
    for (i, (name, _)) in schema.fields.iter().enumerate() {
        let value = text(i).map_err(|reason| RecordError {
            record: number,
            field: Some(name.clone()),
            reason,
            ..Default::default()
        })?;
        values.push(value);
    }
    Ok(Row { number, values })
}

struct JsonRows {
    path: PathBuf,
    lines: BufReader<File>,
    schema: Schema,
    line: Vec<u8>,
    number: u64,
    offset: u64,
    max_line: u64,
}

/// The reason of a record over `source.max-record-bytes`.
pub(crate) fn too_long(what: &str, bytes: u64, max: u64) -> String {
    format!("{what} {bytes} bytes, more than source.max-record-bytes ({max})")
}

/// Reads one line, through its `\n`, into `line`, holding at most `max`
/// bytes of it (line end excluded): the bytes consumed (0 at the end) and,
/// for a longer line, its length (then `line` is left empty).
fn read_line_bounded(
    r: &mut impl BufRead,
    line: &mut Vec<u8>,
    max: u64,
) -> std::io::Result<(u64, Option<u64>)> {
    let (mut consumed, mut long) = (0u64, None::<u64>);
    loop {
        let buf = r.fill_buf()?;
        if buf.is_empty() {
            return Ok((consumed, long));
        }
        let newline = buf.iter().position(|b| *b == b'\n');
        let take = newline.map_or(buf.len(), |i| i + 1);
        let content = (take - usize::from(newline.is_some())) as u64;
        match &mut long {
            Some(len) => *len += content,
            None if line.len() as u64 + content > max => {
                long = Some(line.len() as u64 + content);
                line.clear();
                line.shrink_to(1 << 16);
            }
            None => line.extend_from_slice(&buf[..take]),
        }
        r.consume(take);
        consumed += take as u64;
        if newline.is_some() {
            return Ok((consumed, long));
        }
    }
}

impl JsonRows {
    fn open(path: &Path, schema: &Schema, start: Position, max_line: u64) -> Result<Self> {
        let mut file = File::open(path).map_err(ConnectorError::io(path))?;
        file.seek(SeekFrom::Start(start.byte_offset))
            .map_err(ConnectorError::io(path))?;
        Ok(Self {
            path: path.to_owned(),
            lines: BufReader::with_capacity(1 << 16, file),
            schema: schema.clone(),
            line: Vec::new(),
            number: start.records,
            offset: start.byte_offset,
            max_line,
        })
    }

    fn json_value(
        v: Option<serde_json::Value>,
        ty: FieldType,
    ) -> std::result::Result<Value, String> {
        use serde_json::Value as J;
        match (v, ty) {
            (None, _) => Err("missing".to_owned()),
            (Some(J::Null), _) => Ok(Value::Null),
            (Some(J::String(s)), FieldType::String) => Ok(Value::String(s)),
            (Some(v), FieldType::Bytes) => crate::row::bytes_of_json(v).map(Value::Bytes),
            (Some(J::String(s)), _) => parse_text(&s, ty),
            (Some(J::Number(n)), FieldType::Int64 | FieldType::Timestamp) => n
                .as_i64()
                .or_else(|| n.as_f64().filter(|f| *f == 0.0).map(|_| 0))
                .map(|i| {
                    if ty == FieldType::Int64 {
                        Value::Int64(i)
                    } else {
                        Value::Timestamp(i)
                    }
                })
                .ok_or_else(|| format!("{n} is not an integer")),
            (Some(J::Number(n)), FieldType::Float64) => {
                n.as_f64().map(Value::Float64).ok_or_else(|| n.to_string())
            }
            (Some(other), _) => Err(format!("expected {}, got {other}", ty.label())),
        }
    }
}

/// Decodes one JSON object (a JSON line, a Kafka message's value) into a
/// row of `schema`; `number` names the record in errors.
pub fn json_row(number: u64, bytes: &[u8], schema: &Schema) -> RowResult {
    let bad = |reason: String| RecordError {
        record: number,
        field: None,
        reason,
        ..Default::default()
    };
    let text =
        std::str::from_utf8(bytes).map_err(|_| bad("the value is not valid UTF-8".into()))?;
    let mut fields =
        json_fields(text, schema).map_err(|e| bad(format!("not a JSON object: {e}")))?;
    typed_row(number, schema, |i| {
        JsonRows::json_value(fields[i].take(), schema.fields[i].1)
    })
}

impl JsonRows {
    fn bad(&self, reason: String) -> Result<Option<RowResult>> {
        Ok(Some(Err(RecordError {
            record: self.number,
            field: None,
            reason,
            ..Default::default()
        })))
    }
}

impl RowReader for JsonRows {
    fn next_row(&mut self) -> Result<Option<RowResult>> {
        loop {
            self.line.clear();
            let (n, long) = read_line_bounded(&mut self.lines, &mut self.line, self.max_line)
                .map_err(ConnectorError::io(&self.path))?;
            if n == 0 {
                return Ok(None);
            }
            let at_start = self.offset == 0;
            self.offset += n;
            if let Some(len) = long {
                self.number += 1;
                return self.bad(too_long("the line is", len, self.max_line));
            }
            // A UTF-8 byte-order mark opens the file, not the first record
            // (as the CSV reader treats it).
            let line = match self.line.strip_prefix(b"\xEF\xBB\xBF") {
                Some(rest) if at_start => rest,
                _ => &self.line[..],
            };
            let Ok(text) = std::str::from_utf8(line) else {
                self.number += 1;
                return self.bad("the line is not valid UTF-8".into());
            };
            if text.trim().is_empty() {
                continue;
            }
            self.number += 1;
            let mut fields = match json_fields(text, &self.schema) {
                Ok(f) => f,
                Err(e) => return self.bad(format!("not a JSON object: {e}")),
            };
            let schema = &self.schema;
            return Ok(Some(typed_row(self.number, schema, |i| {
                Self::json_value(fields[i].take(), schema.fields[i].1)
            })));
        }
    }

    fn byte_offset(&self) -> u64 {
        self.offset
    }
}
