//! A source reopened at the position it reported after any record reads
//! exactly the records an uninterrupted read returns after it — good and
//! bad ones alike, in every format (the replay contract checkpoints rely on).

use std::path::Path;
use strata_connectors::{FieldType, FileSource, Format, Position, RowResult, Schema};

fn schema() -> Schema {
    Schema::new(&[("user", FieldType::String), ("n", FieldType::Int64)])
}

fn read_all(path: &Path, format: Format, from: Position) -> Vec<(RowResult, Position)> {
    let mut src = FileSource::open(path, format, &schema(), from).unwrap();
    let mut out = Vec::new();
    while let Some(row) = src.next_row().unwrap() {
        out.push((row, src.position()));
    }
    out
}

fn assert_resumable(path: &Path, format: Format) {
    let all = read_all(path, format, Position::default());
    assert!(
        all.len() >= 8,
        "the fixture must have records: {}",
        all.len()
    );
    for k in 0..all.len() {
        let rest = read_all(path, format, all[k].1);
        let want: Vec<_> = all[k + 1..].iter().map(|(r, _)| r.clone()).collect();
        let got: Vec<_> = rest.into_iter().map(|(r, _)| r).collect();
        assert_eq!(got, want, "{format:?} resumed after record {}", k + 1);
    }
}

#[test]
fn json_lines_with_invalid_utf8_blank_and_truncated_lines_resume_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("in.jsonl");
    let mut bytes = Vec::new();
    for i in 0..10 {
        bytes.extend_from_slice(format!("{{\"user\":\"u{i}\",\"n\":{i}}}\n").as_bytes());
        if i % 3 == 0 {
            bytes.extend_from_slice(b"{\"user\":\"\xff\xfe\",\"n\":1}\n\n");
        }
    }
    bytes.extend_from_slice(b"{\"user\":\"cut");
    std::fs::write(&path, bytes).unwrap();
    assert_resumable(&path, Format::JsonLines);
}

#[test]
fn csv_with_bad_values_and_invalid_utf8_resumes_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("in.csv");
    let mut bytes = b"user,n\r\n".to_vec();
    for i in 0..10 {
        bytes.extend_from_slice(format!("\"u,{i}\",{i}\r\n").as_bytes());
        if i % 4 == 0 {
            bytes.extend_from_slice(b"x\xff,1\r\nbad,abc\r\n");
        }
    }
    std::fs::write(&path, bytes).unwrap();
    assert_resumable(&path, Format::Csv);
}

#[test]
fn parquet_resumes_exactly_across_batches() {
    use arrow::array::{Int64Array, StringArray};
    use std::sync::Arc;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("in.parquet");
    let n = 20_000;
    let users: Vec<String> = (0..n).map(|i| format!("u{i}")).collect();
    let batch = arrow::record_batch::RecordBatch::try_from_iter([
        (
            "user",
            Arc::new(StringArray::from(users)) as arrow::array::ArrayRef,
        ),
        (
            "n",
            Arc::new(Int64Array::from((0..n as i64).collect::<Vec<_>>())),
        ),
    ])
    .unwrap();
    let mut w = parquet::arrow::ArrowWriter::try_new(
        std::fs::File::create(&path).unwrap(),
        batch.schema(),
        None,
    )
    .unwrap();
    w.write(&batch).unwrap();
    w.close().unwrap();
    for k in [0u64, 1, 8191, 8192, 8193, 19_999] {
        let rest = read_all(
            &path,
            Format::Parquet,
            Position {
                records: k,
                ..Position::default()
            },
        );
        assert_eq!(rest.len() as u64, n as u64 - k);
        let first = rest
            .first()
            .map(|(r, _)| r.as_ref().unwrap().values[1].clone());
        assert_eq!(
            first,
            (k < n as u64).then_some(strata_connectors::Value::Int64(k as i64))
        );
    }
}
