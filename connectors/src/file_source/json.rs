//! JSON-lines rows: one object per line, read with a bound on the line's
//! length, resumed at a byte offset.

use super::rows::{too_long, typed_row, RowReader, RowResult};
use super::Position;
use crate::error::{ConnectorError, RecordError, Result};
use crate::json_object::json_fields;
use crate::row::{parse_text, FieldType, Schema, Value};
use std::fs::File;
use std::io::{BufRead, BufReader, Seek, SeekFrom};
use std::path::{Path, PathBuf};

pub(super) struct JsonRows {
    path: PathBuf,
    lines: BufReader<File>,
    schema: Schema,
    line: Vec<u8>,
    number: u64,
    offset: u64,
    max_line: u64,
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
    pub(super) fn open(
        path: &Path,
        schema: &Schema,
        start: Position,
        max_line: u64,
    ) -> Result<Self> {
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
