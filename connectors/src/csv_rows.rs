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

use crate::error::{RecordError, Result};
use crate::file_source::{corrupt, missing, typed_row, RowReader, RowResult};
use crate::row::{parse_text, Schema};
use crate::{ConnectorError, Position};
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

pub(crate) struct CsvRows {
    path: PathBuf,
    line: u64,
    reader: csv::Reader<File>,
    /// A second handle on the file, to look at the raw bytes of a suspect
    /// record.
    raw: File,
    schema: Schema,
    columns: Vec<usize>,
    record: csv::StringRecord,
    number: u64,
    offset: u64,
    multiline_fields: bool,
}

fn is_line_end(b: u8) -> bool {
    b == b'\n' || b == b'\r'
}

fn odd_quotes(raw: &[u8]) -> bool {
    raw.iter().filter(|b| **b == b'"').count() % 2 == 1
}

impl CsvRows {
    pub(crate) fn open(
        path: &Path,
        schema: &Schema,
        start: Position,
        multiline_fields: bool,
    ) -> Result<Self> {
        let file = File::open(path).map_err(ConnectorError::io(path))?;
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
            multiline_fields,
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
        let mut resume = csv::Position::new();
        resume
            .set_byte(start.byte() + next as u64)
            .set_line(line + 1)
            .set_record(start.record() + 1);
        self.reader
            .seek(resume.clone())
            .map_err(|e| corrupt(&self.path, "CSV", e))?;
        self.offset = resume.byte();
        self.line = resume.line();
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
            Err(e) if e.is_io_error() => Err(corrupt(&self.path, "CSV", e)),
            Err(e) => Ok(Some(Err(RecordError {
                record: self.number,
                field: None,
                reason: format!("malformed CSV: {e}"),
                ..Default::default()
            }))),
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
