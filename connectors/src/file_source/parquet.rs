//! Parquet rows: record batches of the job's columns (cast to the
//! schema's types), resumed at a row number.

use super::rows::{corrupt, missing, too_long, RowReader, RowResult};
use super::Position;
use crate::error::{ConnectorError, RecordError, Result};
use crate::row::{FieldType, Row, Schema, Value};
use arrow::array::{Array, ArrayRef, AsArray};
use arrow::datatypes::{DataType, Float64Type, Int64Type, TimeUnit, TimestampMillisecondType};
use parquet::arrow::arrow_reader::{ParquetRecordBatchReader, ParquetRecordBatchReaderBuilder};
use std::fs::File;
use std::path::{Path, PathBuf};

pub(super) struct ParquetRows {
    path: PathBuf,
    batches: ParquetRecordBatchReader,
    schema: Schema,
    columns: Vec<ArrayRef>,
    row_in_batch: usize,
    batch_len: usize,
    number: u64,
    pub(super) total: u64,
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
    pub(super) fn open(
        path: &Path,
        schema: &Schema,
        start: Position,
        max_record_bytes: u64,
    ) -> Result<Self> {
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
