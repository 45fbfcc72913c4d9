//! Bad input gets a clear one-line error naming what is wrong (or, under the
//! dead-letter policy, a count and a dead-letter record), never a panic.

use arrow::array::{ArrayRef, Int64Array, StringArray, TimestampMicrosecondArray};
use arrow::record_batch::RecordBatch;
use std::path::Path;
use std::sync::Arc;
use strata_tests::*;

fn run(input: &Path, out: &Path, extra: &[&str]) -> std::process::Output {
    strata(&route_history_args(input, out, None, extra))
}

/// Runs the job on `input` and returns its one-line error.
fn one_line_error(input: &Path) -> String {
    let out = tempfile::tempdir().unwrap();
    let o = run(input, &out.path().join("out"), &[]);
    let stderr = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(!o.status.success(), "bad input must fail the job: {stderr}");
    assert!(
        !stderr.contains("panicked"),
        "a panic is not an error message: {stderr}"
    );
    let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "expected one line, got: {stderr}");
    assert!(lines[0].starts_with("strata: error: "), "{stderr}");
    lines[0].to_owned()
}

fn write_parquet(path: &Path, columns: Vec<(&str, ArrayRef)>) {
    let batch = RecordBatch::try_from_iter(columns).unwrap();
    let mut w = parquet::arrow::ArrowWriter::try_new(
        std::fs::File::create(path).unwrap(),
        batch.schema(),
        None,
    )
    .unwrap();
    w.write(&batch).unwrap();
    w.close().unwrap();
}

fn date() -> ArrayRef {
    Arc::new(TimestampMicrosecondArray::from(vec![978_307_260_000_000]))
}
fn strings(v: &str) -> ArrayRef {
    Arc::new(StringArray::from(vec![v]))
}
fn ints(v: i64) -> ArrayRef {
    Arc::new(Int64Array::from(vec![v]))
}

#[test]
fn a_missing_parquet_column_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("f.parquet");
    write_parquet(
        &path,
        vec![
            ("date", date()),
            ("distance", ints(1)),
            ("origin", strings("LAS")),
            ("destination", strings("PHL")),
        ],
    );
    let e = one_line_error(&path);
    assert!(e.contains("missing column 'delay'"), "{e}");
}

#[test]
fn a_parquet_column_of_the_wrong_type_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("f.parquet");
    write_parquet(
        &path,
        vec![
            ("date", date()),
            ("delay", strings("late")),
            ("distance", ints(1)),
            ("origin", strings("LAS")),
            ("destination", strings("PHL")),
        ],
    );
    let e = one_line_error(&path);
    assert!(
        e.contains("column 'delay'") && e.contains("expected integer"),
        "{e}"
    );
}

#[test]
fn a_truncated_parquet_file_is_not_readable() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("half.parquet");
    let bytes = std::fs::read(flights_path()).unwrap();
    std::fs::write(&path, &bytes[..bytes.len() / 2]).unwrap();
    let e = one_line_error(&path);
    assert!(e.contains("not a readable Parquet file"), "{e}");
}

#[test]
fn an_empty_file_and_a_missing_file_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("empty.csv");
    std::fs::write(&empty, "").unwrap();
    assert!(one_line_error(&empty).contains("is empty"));
    let e = one_line_error(&dir.path().join("nope.parquet"));
    assert!(e.contains("does not exist"), "{e}");
}

const CSV: &str = "date,delay,distance,origin,destination\n2001-01-01 00:01,33,2176,LAS,PHL\n2001-01-01 00:02,abc,215,ATL,SAV\n2001-01-01 00:03,-5,215,LAS,PHL\n";

#[test]
fn a_wrong_value_fails_the_job_naming_record_and_field() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("f.csv");
    std::fs::write(&path, CSV).unwrap();
    let e = one_line_error(&path);
    assert!(
        e.contains("record 2")
            && e.contains("field 'delay'")
            && e.contains("'abc' is not an integer"),
        "{e}"
    );
    let no_header = dir.path().join("g.csv");
    std::fs::write(
        &no_header,
        "date,distance,origin,destination\n2001-01-01 00:01,1,LAS,PHL\n",
    )
    .unwrap();
    assert!(one_line_error(&no_header).contains("missing column 'delay'"));
}

#[test]
fn under_the_dead_letter_policy_bad_records_are_counted_and_kept_and_the_rest_flows() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("f.jsonl");
    let good = r#"{"date":"2001-01-01T00:01:00","delay":33,"distance":2176,"origin":"LAS","destination":"PHL"}"#;
    let wrong = r#"{"date":"2001-01-01T00:02:00","delay":"x","distance":1,"origin":"LAS","destination":"PHL"}"#;
    let truncated = r#"{"date":"2001-01-01T00:03:00","del"#;
    std::fs::write(&path, format!("{good}\n{wrong}\n{good}\n{truncated}")).unwrap();
    let out = dir.path().join("out");
    let o = run(&path, &out, &["-D", "bad-input.policy=dead-letter"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(summary(&o.stderr)["dead_letters"], "2");
    assert_eq!(read_output(&out).len(), 2);
    let dead: String = std::fs::read_dir(&out)
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("dead-letter-"))
        .map(|e| std::fs::read_to_string(e.path()).unwrap())
        .collect();
    let records: Vec<serde_json::Value> = dead
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(records.len(), 2, "{dead}");
    assert_eq!(records[0]["record"], 2);
    assert_eq!(records[0]["field"], "delay");
    assert_eq!(records[1]["record"], 4);
    // Under the default policy, the truncated last line fails the job.
    std::fs::write(&path, format!("{good}\n{truncated}")).unwrap();
    assert!(one_line_error(&path).contains("record 2"));
}

#[test]
fn an_invalid_configuration_value_is_named_with_its_range() {
    let dir = tempfile::tempdir().unwrap();
    let o = run(
        &flights_path(),
        &dir.path().join("out"),
        &["-D", "state.l1.capacity=12XB"],
    );
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(
        o.status.code(),
        Some(2),
        "a wrong value is a wrong invocation"
    );
    assert!(
        !o.status.success()
            && stderr.contains("state.l1.capacity")
            && stderr.contains("not a size"),
        "{stderr}"
    );
}

/// The dead-letter records a run wrote into `out`, in order.
fn dead_letters(out: &Path) -> Vec<serde_json::Value> {
    json_lines_of(out, "dead-letter-")
}

/// `rows` flights a minute apart over a few routes, the origin of record
/// `bad` (1-based) opened with a quote that is never closed.
fn csv_with_stray_quote(path: &Path, rows: usize, bad: usize) {
    let mut text = String::from("date,delay,distance,origin,destination\n");
    let start = chrono::NaiveDate::from_ymd_opt(2001, 1, 1)
        .unwrap()
        .and_hms_opt(0, 0, 0)
        .unwrap();
    for i in 1..=rows {
        let date = start + chrono::Duration::minutes(i as i64);
        let quote = if i == bad { "\"" } else { "" };
        text.push_str(&format!(
            "{},{},100,{quote}O{},D\n",
            date.format("%Y-%m-%dT%H:%M:%S"),
            i % 50,
            i % 7
        ));
    }
    std::fs::write(path, text).unwrap();
}

#[test]
fn an_unterminated_csv_quote_is_one_bad_record_and_the_rest_of_the_file_is_read() {
    let dir = tempfile::tempdir().unwrap();
    // The reported file: ten flights, record 4 opens a quote it never closes.
    let input = case("csv-stray-quote.csv");
    let out = dir.path().join("out");
    let o = run(&input, &out, &["-D", "bad-input.policy=dead-letter"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let s = summary(&o.stderr);
    assert_eq!(
        (s["records_in"].as_str(), s["dead_letters"].as_str()),
        ("10", "1")
    );
    assert_eq!(read_output(&out).len(), 9);
    let dead = dead_letters(&out);
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0]["record"], 4);
    let reason = dead[0]["reason"].as_str().unwrap();
    assert!(
        reason.contains("never closed") && reason.contains("line 5"),
        "{reason}"
    );
    // Under the fail policy the message names the real cause.
    let e = one_line_error(&input);
    assert!(e.contains("record 4") && e.contains("quoted field"), "{e}");
    assert!(!e.contains("too few"), "{e}");

    // 20,000 records, the quote at record 100: nothing after it is lost.
    let big = dir.path().join("big.csv");
    csv_with_stray_quote(&big, 20_000, 100);
    let out = dir.path().join("out-big");
    let o = run(&big, &out, &["-D", "bad-input.policy=dead-letter"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(summary(&o.stderr)["dead_letters"], "1");
    assert_eq!(read_output(&out).len(), 19_999);
    assert_eq!(dead_letters(&out)[0]["record"], 100);
}

#[test]
fn a_byte_order_mark_opens_json_lines_as_it_opens_csv() {
    let dir = tempfile::tempdir().unwrap();
    let line = r#"{"date":"2001-01-01T00:01:00","delay":33,"distance":2176,"origin":"LAS","destination":"PHL"}"#;
    let json = dir.path().join("bom.jsonl");
    std::fs::write(&json, format!("\u{feff}{line}\n{line}\n")).unwrap();
    let csv = dir.path().join("bom.csv");
    std::fs::write(
        &csv,
        "\u{feff}date,delay,distance,origin,destination\n2001-01-01T00:01:00,33,2176,LAS,PHL\n",
    )
    .unwrap();
    for (input, rows) in [(&json, 2), (&csv, 1)] {
        let out = dir.path().join(format!("out-{rows}"));
        let o = run(input, &out, &[]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        assert_eq!(read_output(&out).len(), rows);
    }
}

#[test]
fn event_times_near_the_64_bit_limits_are_bad_records_not_wrapped_windows() {
    let input = case("timestamp-i64-limits.jsonl");
    let e = one_line_error(&input);
    assert!(
        e.contains("record 1")
            && e.contains("field 'date'")
            && e.contains("outside the supported range"),
        "{e}"
    );
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let o = run(&input, &out, &["-D", "bad-input.policy=dead-letter"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(read_output(&out).is_empty());
    let dead = dead_letters(&out);
    assert_eq!(dead.len(), 4);
    for (i, d) in dead.iter().enumerate() {
        assert_eq!(d["record"], i as u64 + 1);
        assert_eq!(d["field"], "date");
    }
}

#[test]
fn two_stray_quotes_never_swallow_the_lines_between_them() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("twoq.csv");
    std::fs::write(
        &input,
        "date,delay,distance,origin,destination\n2001-01-01T00:01:00,1,1,\"LAS,PHL\n2001-01-01T00:02:00,2,1,LAS,PHL\n2001-01-01T00:03:00,3,1,LAS,PHL\n2001-01-01T00:04:00,4,1,\"LAS,PHL\n2001-01-01T00:05:00,5,1,LAS,PHL\n",
    )
    .unwrap();
    // Under the default policy the first stray quote fails the job.
    let e = one_line_error(&input);
    assert!(e.contains("record 1") && e.contains("quoted field"), "{e}");
    let out = dir.path().join("out");
    let o = run(&input, &out, &["-D", "bad-input.policy=dead-letter"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let delays: Vec<i64> = read_output(&out).iter().map(|l| l.delay).collect();
    assert_eq!(delays, vec![2, 3, 5]);
    let dead: Vec<u64> = dead_letters(&out)
        .iter()
        .map(|d| d["record"].as_u64().unwrap())
        .collect();
    assert_eq!(dead, vec![1, 4]);
}

/// Checks that each dead letter holds its bad record's text, `want[i]`,
/// and where it starts in `input` (a text file).
fn assert_dead_letters_hold(out: &Path, input: &str, want: &[&str]) {
    let dead = dead_letters(out);
    let texts: Vec<&str> = dead.iter().map(|d| d["text"].as_str().unwrap()).collect();
    assert_eq!(texts, want);
    for d in &dead {
        let at = d["byte_offset"].as_u64().expect("byte_offset") as usize;
        assert!(input[at..].starts_with(d["text"].as_str().unwrap()), "{d}");
    }
}

#[test]
fn dead_letters_of_every_file_format_hold_the_record_as_read_and_where_it_starts() {
    let dir = tempfile::tempdir().unwrap();
    let dead_letter = ["-D", "bad-input.policy=dead-letter"];
    // A wrong value (the reader's), a record older than the one before it
    // (the source's, after decoding), a stray quote (CSV); CRLF line ends.
    let csv_bad = [
        "2001-01-01T00:03:00,x,100,LAS,PHL",
        "2001-01-01T00:01:00,4,100,LAS,PHL",
        "2001-01-01T00:05:00,5,1,\"LAS,PHL",
    ];
    let csv = format!(
        "date,delay,distance,origin,destination\r\n2001-01-01T00:02:00,1,100,LAS,PHL\r\n{}\r\n2001-01-01T00:04:00,3,100,LAS,PHL\r\n{}\r\n{}\r\n2001-01-01T00:06:00,6,100,LAS,PHL\r\n",
        csv_bad[0], csv_bad[1], csv_bad[2]
    );
    let line = |minute: u32, delay: &str| {
        format!(
            r#"{{"date":"2001-01-01T00:0{minute}:00","delay":{delay},"distance":100,"origin":"LAS","destination":"PHL"}}"#
        )
    };
    let json_bad = [line(3, "\"x\""), line(1, "4"), "{\"date\":".to_owned()];
    let json = format!(
        "{}\n{}\n{}\n\n{}\n{}\n",
        line(2, "1"),
        json_bad[0],
        line(4, "3"),
        json_bad[1],
        json_bad[2]
    );
    for (name, text, want, good) in [
        ("f.csv", csv, csv_bad.to_vec(), 3),
        (
            "f.jsonl",
            json,
            json_bad.iter().map(String::as_str).collect(),
            2,
        ),
    ] {
        let input = dir.path().join(name);
        std::fs::write(&input, &text).unwrap();
        let out = dir.path().join(format!("out-{name}"));
        let o = run(&input, &out, &dead_letter);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        assert_eq!(read_output(&out).len(), good, "{name}");
        assert_dead_letters_hold(&out, &text, &want);
    }

    // Parquet: the row as a JSON object of the job's columns.
    let input = dir.path().join("f.parquet");
    let minutes = [2i64, 1];
    let micros = minutes.map(|m| 978_307_200_000_000 + m * 60_000_000);
    write_parquet(
        &input,
        vec![
            (
                "date",
                Arc::new(TimestampMicrosecondArray::from(micros.to_vec())) as ArrayRef,
            ),
            ("delay", Arc::new(Int64Array::from(vec![1, 7])) as ArrayRef),
            (
                "distance",
                Arc::new(Int64Array::from(vec![100, 200])) as ArrayRef,
            ),
            (
                "origin",
                Arc::new(StringArray::from(vec!["LAS", "SFO"])) as ArrayRef,
            ),
            (
                "destination",
                Arc::new(StringArray::from(vec!["PHL", "JFK"])) as ArrayRef,
            ),
        ],
    );
    let out = dir.path().join("out-parquet");
    let o = run(&input, &out, &dead_letter);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let dead = dead_letters(&out);
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0]["record"], 2);
    let row: serde_json::Value = serde_json::from_str(dead[0]["text"].as_str().unwrap()).unwrap();
    let fields = ["date", "delay", "distance", "origin", "destination"];
    let got: Vec<String> = fields.iter().map(|f| row[f].to_string()).collect();
    assert_eq!(
        got,
        ["\"2001-01-01T00:01:00\"", "7", "200", "\"SFO\"", "\"JFK\""]
    );
    assert!(dead[0].get("byte_offset").is_none(), "{}", dead[0]);
}

/// Runs the job on `input` and returns how it ended with its peak
/// resident memory in bytes (VmHWM, read until it exits).
fn run_measuring_memory(input: &Path, out: &Path, extra: &[&str]) -> (std::process::Output, u64) {
    use std::process::{Command, Stdio};
    let mut child = Command::new(strata_bin())
        .args(route_history_args(input, out, None, extra))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let status = format!("/proc/{}/status", child.id());
    let mut peak = 0u64;
    while child.try_wait().unwrap().is_none() {
        let kb = std::fs::read_to_string(&status)
            .ok()
            .and_then(|s| {
                let line = s.lines().find(|l| l.starts_with("VmHWM:"))?.to_owned();
                line.split_whitespace().nth(1)?.parse::<u64>().ok()
            })
            .unwrap_or(0);
        peak = peak.max(kb * 1024);
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    (child.wait_with_output().unwrap(), peak)
}

#[test]
fn a_50_mb_line_is_a_bad_record_read_past_in_less_memory_than_the_line_and_deep_json_is_one_too() {
    const LINE: usize = 50_000_000;
    let dir = tempfile::tempdir().unwrap();
    let good = |minute: u32| {
        format!(
            r#"{{"date":"2001-01-01T00:0{minute}:00","delay":1,"distance":100,"origin":"LAS","destination":"PHL"}}"#
        )
    };
    let huge = format!(
        r#"{{"date":"2001-01-01T00:02:00","delay":2,"distance":100,"origin":"{}","destination":"PHL"}}"#,
        "A".repeat(LINE)
    );
    let deep = format!(
        r#"{{"date":"2001-01-01T00:04:00","delay":4,"distance":100,"origin":{}{},"destination":"PHL"}}"#,
        "[".repeat(100_000),
        "]".repeat(100_000)
    );
    let json = dir.path().join("f.jsonl");
    std::fs::write(
        &json,
        format!("{}\n{huge}\n{}\n{deep}\n{}\n", good(1), good(3), good(5)),
    )
    .unwrap();
    let csv = dir.path().join("f.csv");
    std::fs::write(
        &csv,
        format!(
            "date,delay,distance,origin,destination\n2001-01-01T00:01:00,1,100,LAS,PHL\r\n2001-01-01T00:02:00,2,100,{},PHL\r\n2001-01-01T00:03:00,3,100,LAS,PHL\n",
            "A".repeat(LINE)
        ),
    )
    .unwrap();
    for (input, bad, good_records) in [(&json, vec![2, 4], 3), (&csv, vec![2], 2)] {
        let out = dir.path().join(format!("out-{}", good_records));
        let (o, peak) = run_measuring_memory(input, &out, &["-D", "bad-input.policy=dead-letter"]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        assert!(
            peak < LINE as u64,
            "{}: peak RSS {peak} bytes, more than the line itself",
            input.display()
        );
        assert_eq!(read_output(&out).len(), good_records);
        let dead = dead_letters(&out);
        let records: Vec<u64> = dead.iter().map(|d| d["record"].as_u64().unwrap()).collect();
        assert_eq!(records, bad);
        let reason = dead[0]["reason"].as_str().unwrap();
        assert!(
            reason.contains("more than source.max-record-bytes (1048576)"),
            "{reason}"
        );
        assert!(
            dead[0].get("text").is_none(),
            "the huge line was held: {}",
            &reason
        );
        if dead.len() > 1 {
            assert!(
                dead[1]["reason"]
                    .as_str()
                    .unwrap()
                    .contains("recursion limit"),
                "{}",
                dead[1]
            );
            assert_eq!(dead[1]["text"].as_str().unwrap(), deep);
        }
    }
    // Under the fail policy: one line, naming the record and the key.
    let e = one_line_error(&csv);
    assert!(
        e.contains("record 2") && e.contains("source.max-record-bytes"),
        "{e}"
    );
}
