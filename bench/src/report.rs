//! Runs every mode in a child process and writes `report.json` and
//! `report.md`, with each mode's ratio to `rocksdb-raw` and to
//! `cassandra-per-record`.

use crate::backends::BenchError;
use crate::runner::{Mode, ModeReport};
use crate::workload::Workload;
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Stdio};

#[derive(Serialize)]
struct Report<'a> {
    workload: &'a Workload,
    machine: Machine,
    modes: BTreeMap<String, Entry>,
}

#[derive(Serialize)]
struct Machine {
    cores: usize,
    date: String,
}

#[derive(Serialize)]
struct Entry {
    #[serde(flatten)]
    report: ModeReport,
    ratio_to_rocksdb_raw: Option<f64>,
    ratio_to_cassandra_per_record: Option<f64>,
}

fn mode_name(mode: Mode) -> String {
    serde_json::to_value(mode)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default()
}

fn run_child(mode: Mode, args: &[String]) -> Result<ModeReport, BenchError> {
    let out = Command::new(std::env::current_exe()?)
        .args(args)
        .args(["--child", &mode_name(mode)])
        .stderr(Stdio::inherit())
        .output()?;
    if !out.status.success() {
        return Err(format!("mode {} failed ({})", mode_name(mode), out.status).into());
    }
    Ok(serde_json::from_slice(&out.stdout)?)
}

/// Runs `modes` (each in a child process given `args`) and writes the report into `out`.
pub fn run_all(
    modes: &[Mode],
    out: &Path,
    w: &Workload,
    args: Vec<String>,
) -> Result<(), BenchError> {
    std::fs::create_dir_all(out)?;
    let mut results = BTreeMap::new();
    for &mode in modes {
        let report = run_child(mode, &args)?;
        eprintln!(
            "{:>12}: {:.0} events/s, p99 {:.1} µs, peak RSS {} MB, verified {}",
            mode_name(mode),
            report.events_per_sec,
            report.latency_us.p99,
            report.peak_rss_bytes >> 20,
            report.verified
        );
        if !report.verified {
            return Err(format!(
                "mode {} lost events: the per-user counts do not add up",
                mode_name(mode)
            )
            .into());
        }
        results.insert(mode_name(mode), report);
    }
    let baseline = |mode: &str| results.get(mode).map(|r| r.events_per_sec);
    let (raw, per_record) = (baseline("rocksdb-raw"), baseline("cassandra-per-record"));
    let modes = results
        .into_iter()
        .map(|(name, report)| {
            let ratio = |b: Option<f64>| b.map(|b| report.events_per_sec / b);
            let entry = Entry {
                ratio_to_rocksdb_raw: ratio(raw),
                ratio_to_cassandra_per_record: ratio(per_record),
                report,
            };
            (name, entry)
        })
        .collect();
    let report = Report {
        workload: w,
        machine: Machine {
            cores: std::thread::available_parallelism().map_or(0, |n| n.get()),
            date: String::from_utf8_lossy(
                &Command::new("date")
                    .arg("-u")
                    .arg("+%Y-%m-%d")
                    .output()?
                    .stdout,
            )
            .trim()
            .to_owned(),
        },
        modes,
    };
    std::fs::write(out.join("report.json"), serde_json::to_vec_pretty(&report)?)?;
    std::fs::write(out.join("report.md"), markdown(&report))?;
    eprintln!("report: {}", out.join("report.md").display());
    Ok(())
}

fn markdown(r: &Report<'_>) -> String {
    let w = r.workload;
    let mut md = format!(
        "# strata-bench report\n\n{} users, {} events, form {:?}, Zipf {}, {} B payload, {}-day history over {} days of event time, {} workers; {} cores, {}.\n\n\
         | mode | events/s | ratio to rocksdb-raw | ratio to cassandra-per-record | p50 µs | p99 µs | p99.9 µs | peak RSS MB | L1 hit | L2 hit | L3 hit | L1 MB | L2 MB | moved to L3 |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n",
        w.users, w.events, w.form, w.zipf, w.payload, w.history_days, w.spread_days, w.threads, r.machine.cores, r.machine.date
    );
    let opt = |v: Option<f64>, f: fn(f64) -> String| v.map_or("–".to_owned(), f);
    for (name, e) in &r.modes {
        let m = &e.report;
        md += &format!(
            "| {name} | {:.0} | {} | {} | {:.1} | {:.1} | {:.1} | {} | {} | {} | {} | {} | {} | {} |\n",
            m.events_per_sec,
            opt(e.ratio_to_rocksdb_raw, |x| format!("{x:.2}")),
            opt(e.ratio_to_cassandra_per_record, |x| format!("{x:.1}")),
            m.latency_us.p50,
            m.latency_us.p99,
            m.latency_us.p999,
            m.peak_rss_bytes >> 20,
            opt(m.l1_hit_ratio, |x| format!("{:.1}%", x * 100.0)),
            opt(m.l2_hit_ratio, |x| format!("{:.1}%", x * 100.0)),
            opt(m.l3_hit_ratio, |x| format!("{:.1}%", x * 100.0)),
            opt(m.l1_bytes.map(|b| b as f64), |b| format!("{:.0}", b / 1e6)),
            opt(m.l2_bytes.map(|b| b as f64), |b| format!("{:.0}", b / 1e6)),
            opt(m.l3_evictions.map(|n| n as f64), |n| format!("{n:.0}")),
        );
    }
    md
}
