//! What the three row readers (Parquet, CSV, JSON lines) share: the
//! [`RowReader`] interface, typing a record's text fields by the schema,
//! and the errors a file or a record gets.

use crate::error::{ConnectorError, RecordError, Result};
use crate::row::{Row, Schema, Value};
use std::path::Path;

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

/// The reason of a record over `source.max-record-bytes`.
pub(crate) fn too_long(what: &str, bytes: u64, max: u64) -> String {
    format!("{what} {bytes} bytes, more than source.max-record-bytes ({max})")
}
