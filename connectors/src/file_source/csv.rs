//! CSV input (with a header line), on the `csv` crate.
//!
//! A stray quote is the CSV fault that loses data silently: a quote that
//! opens a field and is never closed (or is closed by another stray quote
//! lines later) makes the reader take every line up to the closing quote —
//! or to the end of the file — as one field. So a record one of whose
//! quoted fields holds a line break is, by default, a bad record: its
//! first line is reported as what it is (`malformed CSV: line N opens a
//! quoted field that runs across line breaks`), and reading goes on at
//! the next line, which is read as a record again. Inputs whose quoted
//! fields do hold line breaks set `source.csv.multiline-fields`; then only
//! a quote never closed (it runs to the end of the file) is a bad record.
//! Line ends may be LF, CRLF or CR.

use super::rows::{corrupt, missing, too_long, typed_row, RowReader, RowResult};
use crate::error::{RecordError, Result};
use crate::row::{parse_text, Schema};
use crate::{ConnectorError, Position, SourceOptions};
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

/// The file under the CSV reader: a read fails with [`LineTooLong`] once
/// a line runs past `max` bytes, which the `csv` crate would otherwise
/// gather whole into its record (`source.max-record-bytes`).
struct LineLimit {
    file: File,
    max: u64,
    /// Bytes since the last line end.
    run: u64,
}

#[derive(Debug)]
struct LineTooLong;

impl std::fmt::Display for LineTooLong {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a line longer than source.max-record-bytes")
    }
}

impl std::error::Error for LineTooLong {}

impl Read for LineLimit {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.file.read(buf)?;
        match buf[..n].iter().rposition(|b| is_line_end(*b)) {
            // Records before the line end may still be unparsed: the line
            // after it is judged by the next reads.
            Some(i) => self.run = (n - i - 1) as u64,
            None => {
                // The reader parsed all it had: the record it is in has run
                // through this whole piece.
                self.run += n as u64;
                if self.run > self.max {
                    return Err(std::io::Error::other(LineTooLong));
                }
            }
        }
        Ok(n)
    }
}

impl Seek for LineLimit {
    fn seek(&mut self, to: SeekFrom) -> std::io::Result<u64> {
        self.run = 0;
        self.file.seek(to)
    }
}

fn is_too_long(e: &csv::Error) -> bool {
    matches!(e.kind(), csv::ErrorKind::Io(io) if io.get_ref().is_some_and(|r| r.is::<LineTooLong>()))
}

pub(crate) struct CsvRows {
    path: PathBuf,
    line: u64,
    reader: csv::Reader<LineLimit>,
    /// A second handle on the file, to look at the raw bytes of a suspect
    /// record.
    raw: File,
    schema: Schema,
    columns: Vec<usize>,
    record: csv::StringRecord,
    number: u64,
    offset: u64,
    multiline_fields: bool,
    max_line: u64,
}

fn is_line_end(b: u8) -> bool {
    b == b'\n' || b == b'\r'
}

fn odd_quotes(raw: &[u8]) -> bool {
    raw.iter().filter(|b| **b == b'"').count() % 2 == 1
}

impl CsvRows {
    /// Reads on from byte `byte` of the file, which starts line `line`
    /// (1-based) and record `record` of the reader's count.
    fn resume_at(&mut self, byte: u64, line: u64, record: u64) -> Result<()> {
        let mut resume = csv::Position::new();
        resume.set_byte(byte).set_line(line).set_record(record);
        self.reader
            .seek(resume.clone())
            .map_err(|e| corrupt(&self.path, "CSV", e))?;
        self.offset = resume.byte();
        self.line = resume.line();
        Ok(())
    }

    pub(crate) fn open(
        path: &Path,
        schema: &Schema,
        start: Position,
        options: &SourceOptions,
    ) -> Result<Self> {
        let file = LineLimit {
            file: File::open(path).map_err(ConnectorError::io(path))?,
            max: options.max_record_bytes,
            run: 0,
        };
        let mut reader = csv::ReaderBuilder::new().flexible(true).from_reader(file);
        let headers: Vec<String> = reader
            .headers()
            .map_err(|e| corrupt(path, "CSV", e))?
            .iter()
            .map(str::to_owned)
            .collect();
        let columns = schema
            .fields
            .iter()
            .map(|(name, _)| {
                headers
                    .iter()
                    .position(|h| h == name)
                    .ok_or_else(|| missing(path, name, &headers))
            })
            .collect::<Result<_>>()?;
        let mut offset = reader.position().byte();
        if start.records > 0 {
            let mut pos = csv::Position::new();
            pos.set_byte(start.byte_offset)
                .set_record(start.records + 1)
                .set_line(start.line.max(2));
            reader.seek(pos).map_err(|e| corrupt(path, "CSV", e))?;
            offset = start.byte_offset;
        }
        Ok(Self {
            path: path.to_owned(),
            line: start.line,
            reader,
            raw: File::open(path).map_err(ConnectorError::io(path))?,
            schema: schema.clone(),
            columns,
            record: csv::StringRecord::new(),
            number: start.records,
            offset,
            multiline_fields: options.csv_multiline_fields,
            max_line: options.max_record_bytes,
        })
    }

    /// The raw bytes of the file between two positions.
    fn raw_bytes(&mut self, from: u64, to: u64) -> Result<Vec<u8>> {
        let mut bytes = vec![0; to.saturating_sub(from) as usize];
        self.raw
            .seek(SeekFrom::Start(from))
            .and_then(|_| self.raw.read_exact(&mut bytes))
            .map_err(ConnectorError::io(&self.path))?;
        Ok(bytes)
    }

    /// Whether a field of the record just read holds a line break.
    fn spans_lines(&self) -> bool {
        self.record
            .as_byte_record()
            .as_slice()
            .iter()
            .any(|b| is_line_end(*b))
    }

    /// The record read from `start` holds a quoted field across line
    /// breaks that is not allowed (see the module docs): reports its first
    /// line as the bad record and goes on at the next line.
    fn resync(
        &mut self,
        start: &csv::Position,
        raw: &[u8],
        never_closed: bool,
    ) -> Result<RecordError> {
        // The record may begin with the end of the previous line (CRLF).
        let content = raw
            .iter()
            .position(|b| !is_line_end(*b))
            .unwrap_or(raw.len());
        let line = start.line() + raw[..content].iter().filter(|b| **b == b'\n').count() as u64;
        let mut next = raw[content..]
            .iter()
            .position(|b| is_line_end(*b))
            .map_or(raw.len(), |i| content + i + 1);
        if raw.get(next - 1) == Some(&b'\r') && raw.get(next) == Some(&b'\n') {
            next += 1;
        }
        self.resume_at(start.byte() + next as u64, line + 1, start.record() + 1)?;
        let what = if never_closed {
            "that is never closed"
        } else {
            "that runs across line breaks (a stray quote? set source.csv.multiline-fields=true if quoted fields may hold line breaks)"
        };
        Ok(RecordError {
            record: self.number,
            field: None,
            reason: format!(
                "malformed CSV: line {line} opens a quoted field ('\"') {what}; that line is this bad record, and the next line is read as a record again"
            ),
            ..Default::default()
        })
    }

    /// The line from `start` runs past `source.max-record-bytes`: finds its
    /// end in the raw file (64 KiB at a time, never holding it), goes on
    /// at the next line and reports the line as a bad record.
    fn skip_long_line(&mut self, start: &csv::Position) -> Result<RecordError> {
        let io = ConnectorError::io(&self.path);
        let mut buf = vec![0u8; 1 << 16];
        let mut at = start.byte();
        let (mut breaks_before, mut len, mut began) = (0u64, 0u64, false);
        let mut raw = &self.raw;
        let end = (|| loop {
            raw.seek(SeekFrom::Start(at))?;
            let n = raw.read(&mut buf)?;
            if n == 0 {
                return Ok::<_, std::io::Error>((at, false));
            }
            for (i, b) in buf[..n].iter().enumerate() {
                match (began, is_line_end(*b)) {
                    (false, true) => breaks_before += u64::from(*b == b'\n'),
                    (_, true) => return Ok((at + i as u64 + 1, *b == b'\r')),
                    (_, false) => {
                        began = true;
                        len += 1;
                    }
                }
            }
            at += n as u64;
        })()
        .map_err(io)?;
        // Just after the line end (at the end of the file without one).
        let (mut next, cr) = end;
        let mut after = [0u8; 1];
        if cr
            && raw.seek(SeekFrom::Start(next)).is_ok()
            && raw.read(&mut after).is_ok_and(|n| n == 1)
            && after[0] == b'\n'
        {
            next += 1;
        }
        let line = start.line() + breaks_before;
        self.resume_at(next, line + 1, start.record() + 1)?;
        Ok(RecordError {
            record: self.number,
            field: None,
            reason: too_long("the line is", len, self.max_line),
            ..Default::default()
        })
    }

    /// A record read whole (it fit in what the reader had buffered) whose
    /// line is longer than `source.max-record-bytes` after all: a bad
    /// record, as a longer one would be.
    fn too_long_read(&mut self, start: &csv::Position, end: &csv::Position) -> Result<RowResult> {
        let raw = self.raw_bytes(start.byte(), end.byte())?;
        let len = raw.iter().filter(|b| !is_line_end(**b)).count() as u64;
        if len <= self.max_line {
            return self.checked_row(start, end);
        }
        Ok(Err(RecordError {
            record: self.number,
            field: None,
            reason: too_long("the line is", len, self.max_line),
            ..Default::default()
        }))
    }

    /// The record from `start` to `end` the csv crate could not parse (a
    /// cell that is not UTF-8, …). One that runs across line breaks it may
    /// not (see the module docs) swallowed the lines after a stray quote:
    /// its first line is the bad record and reading goes on at the next,
    /// as for a record that parsed.
    fn malformed(
        &mut self,
        e: csv::Error,
        start: &csv::Position,
        end: &csv::Position,
    ) -> Result<RecordError> {
        let raw = self.raw_bytes(start.byte(), end.byte())?;
        let body = raw
            .iter()
            .position(|b| !is_line_end(*b))
            .map_or(&raw[..0], |i| &raw[i..]);
        let body = body
            .iter()
            .rposition(|b| !is_line_end(*b))
            .map_or(&body[..0], |i| &body[..=i]);
        let never_closed = odd_quotes(&raw);
        if body.iter().any(|b| is_line_end(*b)) && (!self.multiline_fields || never_closed) {
            return self.resync(start, &raw, never_closed);
        }
        Ok(RecordError {
            record: self.number,
            field: None,
            reason: format!("malformed CSV: {e}"),
            ..Default::default()
        })
    }

    /// The record just read, checked for stray quotes, as a typed row.
    fn checked_row(&mut self, start: &csv::Position, end: &csv::Position) -> Result<RowResult> {
        if self.spans_lines() {
            let raw = self.raw_bytes(start.byte(), end.byte())?;
            let never_closed = odd_quotes(&raw);
            if !self.multiline_fields || never_closed {
                return Ok(Err(self.resync(start, &raw, never_closed)?));
            }
        }
        let (record, columns) = (&self.record, &self.columns);
        let row = typed_row(self.number, &self.schema, |i| {
            let cell = record.get(columns[i]).ok_or_else(|| {
                format!(
                    "the record has {} cells, but this column is cell {} of the header",
                    record.len(),
                    columns[i] + 1
                )
            })?;
            parse_text(cell, self.schema.fields[i].1)
        });
        // A quote never closed on the last line takes no line break along.
        match row {
            Err(mut bad) if odd_quotes(&self.raw_bytes(start.byte(), end.byte())?) => {
                bad.reason = format!(
                    "{} (the line opens a quoted field that is never closed)",
                    bad.reason
                );
                Ok(Err(bad))
            }
            row => Ok(row),
        }
    }
}

impl RowReader for CsvRows {
    fn next_row(&mut self) -> Result<Option<RowResult>> {
        let start = self.reader.position().clone();
        let read = self.reader.read_record(&mut self.record);
        let end = self.reader.position().clone();
        self.offset = end.byte();
        self.line = end.line();
        self.number += 1;
        match read {
            Ok(false) => Ok(None),
            Err(e) if is_too_long(&e) => self.skip_long_line(&start).map(|bad| Some(Err(bad))),
            Err(e) if e.is_io_error() => Err(corrupt(&self.path, "CSV", e)),
            Err(e) => self.malformed(e, &start, &end).map(|bad| Some(Err(bad))),
            Ok(true) if end.byte() - start.byte() > self.max_line => {
                self.too_long_read(&start, &end).map(Some)
            }
            Ok(true) => self.checked_row(&start, &end).map(Some),
        }
    }

    fn byte_offset(&self) -> u64 {
        self.offset
    }

    fn line(&self) -> u64 {
        self.line
    }
}

/// Decodes one CSV record without a header (a Kafka message's value) into
/// a row of `schema`: field `i` of the schema is cell `columns[i]`.
/// `number` names the record in errors. A value that is not one CSV
/// record (a line break outside quotes, a quote never closed) or lacks a
/// cell is a bad record.
pub fn csv_value_row(number: u64, bytes: &[u8], schema: &Schema, columns: &[usize]) -> RowResult {
    let bad = |reason: String| RecordError {
        record: number,
        field: None,
        reason,
        ..Default::default()
    };
    let mut reader = csv::ReaderBuilder::new()
        .has_headers(false)
        .flexible(true)
        .from_reader(bytes);
    let mut record = csv::StringRecord::new();
    match reader.read_record(&mut record) {
        Ok(true) => {}
        Ok(false) => return Err(bad("the value is empty, not a CSV record".into())),
        Err(e) => return Err(bad(format!("not a CSV record: {e}"))),
    }
    let mut rest = csv::StringRecord::new();
    if !matches!(reader.read_record(&mut rest), Ok(false)) || odd_quotes(bytes) {
        return Err(bad(
            "the value is not one CSV record: a line break outside quotes, or an odd number of quotes (a cell holding a quote must be quoted, the quote doubled)"
                .into(),
        ));
    }
    typed_row(number, schema, |i| {
        let cell = record.get(columns[i]).ok_or_else(|| {
            format!(
                "the record has {} cells, but this column is cell {}",
                record.len(),
                columns[i] + 1
            )
        })?;
        parse_text(cell, schema.fields[i].1)
    })
}

#[cfg(test)]
mod value_tests {
    use super::*;
    use crate::row::Value;
    use crate::FieldType;

    #[test]
    fn a_csv_value_decodes_by_the_given_cell_order() {
        let schema = Schema::new(&[("n", FieldType::Int64), ("s", FieldType::String)]);
        let row = csv_value_row(7, b"\"a,b\",42", &schema, &[1, 0]).unwrap();
        assert_eq!(
            row.values,
            vec![Value::Int64(42), Value::String("a,b".into())]
        );
        for (value, says) in [
            (&b"x"[..], "cell 2"),
            (b"1,a\n2,b", "not one CSV record"),
            (b"\"1,a", "not one CSV record"),
            (b"", "empty"),
        ] {
            let e = csv_value_row(7, value, &schema, &[1, 0]).unwrap_err();
            assert!(e.reason.contains(says), "{value:?}: {}", e.reason);
            assert_eq!(e.record, 7);
        }
        let e = csv_value_row(7, b"a,b", &schema, &[1, 0]).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("n"), "{}", e.reason);
    }
}
