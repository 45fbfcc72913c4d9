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

#[test]
fn a_csv_with_an_unterminated_quote_resumes_exactly_after_every_record() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("in.csv");
    let mut text = String::from("user,n\n");
    for i in 0..12 {
        let quote = if i == 4 { "\"" } else { "" };
        text.push_str(&format!("{quote}u{i},{i}\n"));
    }
    std::fs::write(&path, text).unwrap();
    let all = read_all(&path, Format::Csv, Position::default());
    assert_eq!(all.len(), 12, "one record per line, the bad one included");
    assert!(all[4]
        .0
        .as_ref()
        .unwrap_err()
        .reason
        .contains("never closed"));
    assert!(all
        .iter()
        .enumerate()
        .all(|(i, (r, _))| (i == 4) == r.is_err()));
    assert_resumable(&path, Format::Csv);
}

#[test]
fn a_file_that_changes_while_it_is_read_ends_reading_with_an_error_not_silently() {
    use std::io::Write;
    let dir = tempfile::tempdir().unwrap();
    for (name, format, line) in [
        ("in.csv", Format::Csv, "u,1\n"),
        ("in.jsonl", Format::JsonLines, "{\"user\":\"u\",\"n\":1}\n"),
    ] {
        let path = dir.path().join(name);
        let header = if format == Format::Csv {
            "user,n\n"
        } else {
            ""
        };
        std::fs::write(&path, format!("{header}{line}{line}")).unwrap();
        let mut src = FileSource::open(&path, format, &schema(), Position::default()).unwrap();
        assert!(src.next_row().unwrap().unwrap().is_ok());
        // The file grows after it was opened: what was read no longer
        // matches the size the source started with.
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap();
        f.write_all(line.repeat(5000).as_bytes()).unwrap();
        let err = loop {
            match src.next_row() {
                Ok(Some(_)) => continue,
                Ok(None) => panic!("{name}: the end was reported without a word"),
                Err(e) => break e.to_string(),
            }
        };
        assert!(
            err.contains("reading ended after record") && err.contains("bytes"),
            "{err}"
        );
    }
}

/// The rows of a CSV text, good ones as their `user` cell, bad ones as "!".
fn cells(text: &str, options: strata_connectors::SourceOptions) -> Vec<String> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("in.csv");
    std::fs::write(&path, text).unwrap();
    let mut src =
        FileSource::open_with(&path, Format::Csv, &schema(), Position::default(), &options)
            .unwrap();
    let mut out = Vec::new();
    while let Some(row) = src.next_row().unwrap() {
        out.push(match row {
            Ok(r) => match &r.values[0] {
                strata_connectors::Value::String(s) => s.clone(),
                other => format!("{other:?}"),
            },
            Err(_) => "!".into(),
        });
    }
    out
}

#[test]
fn stray_quotes_never_swallow_lines_whatever_the_line_ends() {
    let strict = strata_connectors::SourceOptions::default();
    for end in ["\n", "\r\n", "\r"] {
        // Two unclosed quotes that would pair up across the lines between.
        let text = ["user,n", "a,1", "\"b,2", "c,3", "d,4", "\"e,5", "f,6", ""].join(end);
        assert_eq!(
            cells(&text, strict),
            ["a", "!", "c", "d", "!", "f"],
            "line ends {end:?}"
        );
        // A stray quote closed by another, lines later: the opening line is
        // bad, the others are records again (a quote inside a cell is text).
        let text = ["user,n", "a,1", "\"b,2", "c,3", "d\",4", "e,5", ""].join(end);
        assert_eq!(
            cells(&text, strict),
            ["a", "!", "c", "d\"", "e"],
            "line ends {end:?}"
        );
    }
}

#[test]
fn quoted_line_breaks_are_read_when_allowed_and_an_unclosed_quote_still_is_not() {
    let allowed = strata_connectors::SourceOptions {
        csv_multiline_fields: true,
        ..Default::default()
    };
    let text = "user,n\na,1\n\"two\nlines\",2\nc,3\n";
    assert_eq!(cells(text, allowed), ["a", "two\nlines", "c"]);
    assert_eq!(cells(text, Default::default()), ["a", "!", "lines\"", "c"]);
    let unclosed = "user,n\na,1\n\"b,2\nc,3\nd,4\n";
    assert_eq!(cells(unclosed, allowed), ["a", "!", "c", "d"]);
}

#[test]
fn lines_over_the_record_limit_are_bad_records_and_reading_resumes_exactly_after_them() {
    let dir = tempfile::tempdir().unwrap();
    let long = "x".repeat(strata_connectors::DEFAULT_MAX_RECORD_BYTES as usize + 70_000);
    for end in ["\n", "\r\n", "\r"] {
        let csv = dir.path().join("in.csv");
        let mut lines = vec!["user,n".to_owned()];
        for i in 0..8 {
            lines.push(format!("u{i},{i}"));
            if i % 3 == 0 {
                lines.push(format!("{long},{i}"));
            }
        }
        std::fs::write(&csv, lines.join(end) + end).unwrap();
        let all = read_all(&csv, Format::Csv, Position::default());
        let bad: Vec<String> = all
            .iter()
            .filter_map(|(r, _)| r.as_ref().err().map(|e| e.reason.clone()))
            .collect();
        assert_eq!(bad.len(), 3, "{end:?}: {bad:?}");
        assert!(bad[0].contains("source.max-record-bytes"), "{}", bad[0]);
        assert_resumable(&csv, Format::Csv);
    }
    let json = dir.path().join("in.jsonl");
    let mut text = String::new();
    for i in 0..8 {
        text.push_str(&format!("{{\"user\":\"u{i}\",\"n\":{i}}}\n"));
        if i % 3 == 0 {
            text.push_str(&format!("{{\"user\":\"{long}\",\"n\":{i}}}\n"));
        }
    }
    std::fs::write(&json, text).unwrap();
    assert_resumable(&json, Format::JsonLines);
}

#[test]
fn a_record_limit_below_the_read_size_still_reads_the_short_records_before_a_long_line() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("in.csv");
    let long = "x".repeat(5_000);
    std::fs::write(&path, format!("user,n\na,1\nb,2\n{long},3\nc,4\n")).unwrap();
    let options = strata_connectors::SourceOptions {
        max_record_bytes: 1_000,
        ..Default::default()
    };
    let mut src =
        FileSource::open_with(&path, Format::Csv, &schema(), Position::default(), &options)
            .unwrap();
    let mut got = Vec::new();
    while let Some(row) = src.next_row().unwrap() {
        got.push(row.map_or_else(|e| e.reason, |r| format!("{:?}", r.values[0])));
    }
    assert_eq!(got.len(), 4, "{got:?}");
    assert!(
        got[0].contains("\"a\"") && got[1].contains("\"b\""),
        "{got:?}"
    );
    let line = format!("{long},3");
    assert!(
        got[2].contains(&format!("is {} bytes", line.len())),
        "{got:?}"
    );
    assert!(got[3].contains("\"c\""), "{got:?}");
}

#[test]
fn a_stray_quote_before_a_cell_that_is_not_utf8_swallows_no_line() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("in.csv");
    std::fs::write(
        &path,
        b"user,n\na,1\n\"b,2\nc,3\nd\xff,4\ne,5\nf,6\ng,7\nh,8\n",
    )
    .unwrap();
    let all = read_all(&path, Format::Csv, Position::default());
    let got: Vec<String> = all
        .iter()
        .map(|(r, _)| match r {
            Ok(row) => format!("{:?}", row.values[1]),
            Err(e) => format!("bad: {}", e.reason),
        })
        .collect();
    assert_eq!(got.len(), 8, "{got:?}");
    assert!(
        got[1].contains("quoted field") && got[1].contains("never closed"),
        "{got:?}"
    );
    assert_eq!(got[2], "Int64(3)", "{got:?}");
    assert!(
        got[3].starts_with("bad: ") && got[3].contains("UTF-8"),
        "{got:?}"
    );
    assert_eq!(got[4], "Int64(5)", "{got:?}");
    assert_resumable(&path, Format::Csv);
}
