//! Running strata jobs and checking what they did: the binaries, the
//! flights data and slices of it, the command lines, the output and the
//! summary line, and an independent batch computation of route-history.

use crate::repo_root;
use arrow::array::{Array, AsArray};
use arrow::datatypes::{Int64Type, TimestampMicrosecondType};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// A binary of the workspace (`strata`, `strata-bench`) built in the same
/// profile as this test. `scripts/test.sh` builds them before the tests.
pub fn workspace_bin(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    // Tests run from target/<profile>/deps, tools (crash-soak) from target/<profile>.
    let dir = exe.parent().expect("target/<profile>");
    let dir = if dir.ends_with("deps") {
        dir.parent().expect("target/<profile>")
    } else {
        dir
    };
    let bin = dir.join(name);
    assert!(
        bin.is_file(),
        "{} is missing: build it first (scripts/test.sh does)",
        bin.display()
    );
    bin
}

/// The `strata` binary.
pub fn strata_bin() -> PathBuf {
    workspace_bin("strata")
}

/// The real flights file (`scripts/fetch-data.sh` downloads it). Its absence
/// fails the test: nothing is skipped.
pub fn flights_path() -> PathBuf {
    let path = std::env::var_os("STRATA_FLIGHTS")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join("data/flights-3m.parquet"));
    assert!(
        path.is_file(),
        "{} is missing: run scripts/fetch-data.sh",
        path.display()
    );
    path
}

/// Runs one of the repo's server scripts, `scripts/<script> <args>`
/// (`cassandra.sh stop`, `s3.sh start`, …); panics if it fails.
pub fn server_script(script: &str, args: &[&str]) {
    let o = Command::new(repo_root().join("scripts").join(script))
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("scripts/{script}: {e}"));
    assert!(
        o.status.success(),
        "scripts/{script} {}: {}{}",
        args.join(" "),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
}

/// The first `rows` flights of the flights file as a Parquet file of the
/// same schema, written once per test process (for runs that must be short).
pub fn flights_head(rows: usize) -> PathBuf {
    static DIR: std::sync::OnceLock<tempfile::TempDir> = std::sync::OnceLock::new();
    static MADE: std::sync::Mutex<Vec<usize>> = std::sync::Mutex::new(Vec::new());
    let dir = DIR
        .get_or_init(|| tempfile::tempdir().expect("temp dir"))
        .path();
    let mut made = MADE.lock().unwrap_or_else(|p| p.into_inner());
    if !made.contains(&rows) {
        write_flights_head(rows, dir);
        made.push(rows);
    }
    dir.join(format!("flights-{rows}.parquet"))
}

/// Writes the first `rows` flights of the flights file to
/// `<dir>/flights-<rows>.parquet`.
pub fn write_flights_head(rows: usize, dir: &Path) {
    let file = std::fs::File::open(flights_path()).expect("flights file");
    let reader = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(file)
        .expect("parquet")
        .build()
        .expect("reader");
    let path = dir.join(format!("flights-{rows}.parquet"));
    let out = std::fs::File::create(&path).expect("create the head file");
    let mut writer = None;
    let mut left = rows;
    for batch in reader {
        let batch = batch.expect("batch");
        let batch = batch.slice(0, left.min(batch.num_rows()));
        left -= batch.num_rows();
        writer
            .get_or_insert_with(|| {
                parquet::arrow::ArrowWriter::try_new(out.try_clone().unwrap(), batch.schema(), None)
                    .expect("parquet writer")
            })
            .write(&batch)
            .expect("write rows");
        if left == 0 {
            break;
        }
    }
    writer.expect("rows").close().expect("close the head file");
}

/// Runs `strata` with `args` to completion.
pub fn strata<S: AsRef<std::ffi::OsStr>>(args: &[S]) -> Output {
    Command::new(strata_bin())
        .args(args)
        .output()
        .expect("strata runs")
}

/// The arguments of `strata run route-history` from `input` into `out`,
/// with checkpoints in `checkpoints` when given, then `extra`.
pub fn route_history_args(
    input: &Path,
    out: &Path,
    checkpoints: Option<&Path>,
    extra: &[&str],
) -> Vec<String> {
    let mut args: Vec<String> = ["run", "route-history", "--input"].map(String::from).into();
    args.push(input.display().to_string());
    args.push("--output".into());
    args.push(out.display().to_string());
    if let Some(dir) = checkpoints {
        args.push("--checkpoint-dir".into());
        args.push(dir.display().to_string());
    }
    args.extend(extra.iter().map(|s| s.to_string()));
    args
}

/// `key=value` pairs of the end-of-run summary line on stderr.
pub fn summary(stderr: &[u8]) -> HashMap<String, String> {
    summary_of(&String::from_utf8_lossy(stderr), "strata: done.")
}

/// The `key=value` fields of the last line of `text` that starts with
/// `start` (an end-of-run line).
pub fn summary_of(text: &str, start: &str) -> HashMap<String, String> {
    let line = text
        .lines()
        .rev()
        .find(|l| l.starts_with(start))
        .unwrap_or_else(|| panic!("no summary line in:\n{text}"));
    line.split_whitespace()
        .filter_map(|w| w.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

/// One output line of route-history, in a comparable form.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Line {
    /// The flight's origin airport.
    pub origin: String,
    /// Its destination airport.
    pub destination: String,
    /// Its departure, as the job prints it.
    pub date: String,
    /// Its delay, minutes.
    pub delay: i64,
    /// Flights of its route in the 60 days up to it, itself included.
    pub flights_60d: u64,
    /// `avg_delay_60d` as f64 bits (exact comparison).
    pub avg_bits: u64,
}

impl Line {
    /// An output record of route-history, as JSON.
    pub fn from_json(v: &serde_json::Value) -> Self {
        Line {
            origin: v["origin"].as_str().expect("origin").to_owned(),
            destination: v["destination"].as_str().expect("destination").to_owned(),
            date: v["date"].as_str().expect("date").to_owned(),
            delay: v["delay"].as_i64().expect("delay"),
            flights_60d: v["flights_60d"].as_u64().expect("flights_60d"),
            avg_bits: v["avg_delay_60d"].as_f64().expect("avg").to_bits(),
        }
    }
}

/// Reads every committed part file of `dir`, sorted (a multiset as a sorted list).
pub fn read_output(dir: &Path) -> Vec<Line> {
    let mut lines = Vec::new();
    for entry in std::fs::read_dir(dir).expect("output dir") {
        let path = entry.expect("dir entry").path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if !(name.starts_with("part-") && name.ends_with(".jsonl")) {
            continue;
        }
        for l in std::fs::read_to_string(&path).expect("part file").lines() {
            let v: serde_json::Value =
                serde_json::from_str(l).unwrap_or_else(|e| panic!("{name}: bad line {l}: {e}"));
            lines.push(Line::from_json(&v));
        }
    }
    lines.sort();
    lines
}

/// One flight as the reference computation reads it: (date ms, delay,
/// origin, destination), in input order.
pub type Flight = (i64, i64, String, String);

/// The flights of a Parquet flights file, in file order (checked sorted by date).
pub fn parquet_flights(parquet: &Path) -> Vec<Flight> {
    let file = std::fs::File::open(parquet).expect("flights file");
    let reader = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(file)
        .expect("parquet")
        .build()
        .expect("reader");
    let mut flights = Vec::new();
    for batch in reader {
        let batch = batch.expect("batch");
        let date = batch
            .column_by_name("date")
            .unwrap()
            .as_primitive::<TimestampMicrosecondType>()
            .clone();
        let delay = batch
            .column_by_name("delay")
            .unwrap()
            .as_primitive::<Int64Type>()
            .clone();
        let origin = batch
            .column_by_name("origin")
            .unwrap()
            .as_string::<i64>()
            .clone();
        let dest = batch
            .column_by_name("destination")
            .unwrap()
            .as_string::<i64>()
            .clone();
        for i in 0..batch.num_rows() {
            assert!(!date.is_null(i) && !delay.is_null(i));
            flights.push((
                date.value(i) / 1000,
                delay.value(i),
                origin.value(i).to_owned(),
                dest.value(i).to_owned(),
            ));
        }
    }
    flights
}

/// The flights of a simple CSV flights file (header
/// `date,delay,distance,origin,destination`, no quoted cells, dates as
/// `YYYY-MM-DDTHH:MM:SS`), in file order.
pub fn csv_flights(csv: &Path) -> Vec<Flight> {
    let text = std::fs::read_to_string(csv).expect("csv file");
    text.lines()
        .skip(1)
        .filter(|l| !l.is_empty())
        .map(|l| {
            let cells: Vec<&str> = l.split(',').collect();
            let date = chrono::NaiveDateTime::parse_from_str(cells[0], "%Y-%m-%dT%H:%M:%S")
                .expect("date")
                .and_utc()
                .timestamp_millis();
            (
                date,
                cells[1].parse().expect("delay"),
                cells[3].to_owned(),
                cells[4].to_owned(),
            )
        })
        .collect()
}

/// Route-history computed as a batch, independently of strata: flights
/// grouped by route (the pair of fields, never a joined string) in input
/// order, then a two-pointer scan over each route's dates (valid because
/// the input is sorted by date, which this checks).
pub fn reference_from_flights(flights: &[Flight]) -> Vec<Line> {
    let mut routes: HashMap<(String, String), Vec<(i64, i64)>> = HashMap::new();
    let mut last_date = i64::MIN;
    for (d, delay, origin, dest) in flights {
        assert!(*d >= last_date, "the flights are not sorted by date");
        last_date = *d;
        routes
            .entry((origin.clone(), dest.clone()))
            .or_default()
            .push((*d, *delay));
    }
    const WINDOW: i64 = 60 * 24 * 3600 * 1000;
    let mut out = Vec::new();
    for ((origin, destination), flights) in routes {
        let (mut left, mut sum) = (0usize, 0i64);
        for (right, &(d, delay)) in flights.iter().enumerate() {
            sum += delay;
            while flights[left].0 <= d - WINDOW {
                sum -= flights[left].1;
                left += 1;
            }
            let n = (right - left + 1) as u64;
            out.push(Line {
                origin: origin.clone(),
                destination: destination.clone(),
                date: chrono::DateTime::from_timestamp_millis(d)
                    .unwrap()
                    .naive_utc()
                    .format("%Y-%m-%dT%H:%M:%S")
                    .to_string(),
                delay,
                flights_60d: n,
                avg_bits: (sum as f64 / n as f64).to_bits(),
            });
        }
    }
    out.sort();
    out
}

/// [`reference_from_flights`] of a Parquet flights file.
pub fn reference_route_history(parquet: &Path) -> Vec<Line> {
    reference_from_flights(&parquet_flights(parquet))
}

/// The first difference between two sorted outputs, for a readable failure.
pub fn first_difference(got: &[Line], want: &[Line]) -> Option<String> {
    if got == want {
        return None;
    }
    let i = got
        .iter()
        .zip(want)
        .position(|(a, b)| a != b)
        .unwrap_or(got.len().min(want.len()));
    Some(format!(
        "{} lines vs {} expected; first difference at {i}: got {:?}, want {:?}",
        got.len(),
        want.len(),
        got.get(i),
        want.get(i)
    ))
}

/// A small input of `tests/cases/` (inputs that failed when strata was
/// tried as its users would; each is a test now).
pub fn case(name: &str) -> PathBuf {
    let path = repo_root().join("tests/cases").join(name);
    assert!(path.is_file(), "{} is missing", path.display());
    path
}

/// The Prometheus text a running strata serves at `addr` (`--metrics-addr`).
pub fn scrape(addr: &str) -> std::io::Result<String> {
    use std::io::{Read, Write};
    let mut conn = std::net::TcpStream::connect(addr)?;
    conn.set_read_timeout(Some(std::time::Duration::from_secs(5)))?;
    write!(
        conn,
        "GET /metrics HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )?;
    let mut body = String::new();
    conn.read_to_string(&mut body)?;
    Ok(body)
}

/// One metric's value in scraped text, summed over the series whose labels
/// contain `label` (all of them if `None`); `None` if it has no series.
pub fn metric_value(body: &str, name: &str, label: Option<&str>) -> Option<f64> {
    let values: Vec<f64> = body
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter(|l| {
            l.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with(' ') || rest.starts_with('{'))
        })
        .filter(|l| label.is_none_or(|lab| l.contains(lab)))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .collect();
    (!values.is_empty()).then(|| values.iter().sum())
}

/// The JSON lines of the files in `dir` whose names start with `prefix`
/// (`part-`, `dead-letter-`), in file-name order.
pub fn json_lines_of(dir: &Path, prefix: &str) -> Vec<serde_json::Value> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.file_name().unwrap().to_string_lossy().starts_with(prefix))
        .collect();
    files.sort();
    files
        .iter()
        .flat_map(|p| {
            let text = std::fs::read_to_string(p).unwrap();
            let lines = text.lines().map(|l| serde_json::from_str(l).unwrap());
            lines.collect::<Vec<_>>()
        })
        .collect()
}

/// Starts `n` processes of `command` at once (the members of one consumer
/// group, say) and waits for each to exit successfully, showing the stderr
/// of one that did not.
pub fn run_together(n: usize, command: impl Fn() -> Command) {
    let members: Vec<_> = (0..n)
        .map(|_| {
            command()
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for member in members {
        let o = member.wait_with_output().unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    }
}

/// The `strata: error: …` line of a run that must have failed (not by a panic).
pub fn error_line(o: &Output) -> String {
    let stderr = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(!o.status.success(), "expected a failure: {stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    stderr
        .lines()
        .find(|l| l.starts_with("strata: error: "))
        .unwrap_or_else(|| panic!("no error line: {stderr}"))
        .to_owned()
}

/// A non-empty file of checkpoint metadata `newest` (a `_metadata` as JSON)
/// that no checkpoint of `older` lists, as its name in checkpoint storage: a
/// shared SST file if there is one, else one of its private files. Empty
/// files (a fresh WAL) are passed over: there is no byte in them to corrupt.
pub fn file_only_in(newest: &serde_json::Value, older: &[serde_json::Value]) -> String {
    let files = |meta: &serde_json::Value| -> Vec<(String, u64)> {
        meta["operators"]
            .as_array()
            .expect("operators")
            .iter()
            .flat_map(|o| o["manifest"]["files"].as_array().expect("files").clone())
            .map(|f| {
                let object = f["object"].as_str().expect("object").to_owned();
                (object, f["bytes"].as_u64().expect("bytes"))
            })
            .collect()
    };
    let elsewhere: std::collections::HashSet<String> =
        older.iter().flat_map(files).map(|(f, _)| f).collect();
    let mut own: Vec<String> = files(newest)
        .into_iter()
        .filter(|(f, bytes)| *bytes > 0 && !elsewhere.contains(f))
        .map(|(f, _)| f)
        .collect();
    own.sort_by_key(|f| !f.starts_with("shared/"));
    own.into_iter()
        .next()
        .expect("the newest checkpoint lists a non-empty file of its own")
}

/// `bytes` with the byte in the middle flipped (a file's size kept).
pub fn flipped(mut bytes: Vec<u8>) -> Vec<u8> {
    assert!(!bytes.is_empty(), "an empty file has no byte to flip");
    let i = bytes.len() / 2;
    bytes[i] ^= 0xff;
    bytes
}
