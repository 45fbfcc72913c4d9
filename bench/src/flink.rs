//! The `flink` mode: the same workload as a job of Apache Flink 2.3 with
//! its RocksDB state backend (the peer in `bench/peers/flink/`, its
//! `run.sh` documents how it is installed and run), run from this
//! invocation so that the report compares strata and Flink measured on
//! one machine, one after the other.
//!
//! The peer generates its own events (the same users, count, payload size
//! and key distribution — uniform or Zipf 1.0 — from a different random
//! sequence), keeps a `ListState` and a count (form `list-add`, Flink's "A")
//! or a `ValueState<List>` of the last 100 events (form `naive`, "B"),
//! checkpoints incrementally every 10 s, and discards its output. Its state
//! is not read back, so its row in the report is marked as not verified
//! by this harness; its per-event latency is not measured. Its timeline
//! (events applied about once a second, resident set, and each
//! checkpoint's start and completion) comes from the file the job writes
//! when `BENCH_FLINK_TIMELINE` names one, so the plots draw it beside
//! strata's modes.
//!
//! Without `java` and `javac` 17 or later on the `PATH`, the mode is
//! skipped with a notice on stderr and in the report (never silently).

use crate::backends::BenchError;
use crate::checkpointing::CheckpointFigures;
use crate::runner::{Latency, ModeReport};
use crate::timeline::Sample;
use crate::workload::{Form, Workload};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The peer's directory: `given` (`--flink-peer`), else
/// `bench/peers/flink` of the first checkout found from the current
/// directory upwards, else of `$STRATA_ROOT`. Never a path fixed at build
/// time: the binary may have been built in another clone.
///
/// Errors: no such directory holds a `run.sh`.
pub(crate) fn peer_dir(given: Option<&Path>) -> Result<PathBuf, BenchError> {
    let has_script = |d: &Path| d.join("run.sh").is_file();
    if let Some(d) = given {
        return if has_script(d) {
            Ok(d.to_owned())
        } else {
            Err(format!("--flink-peer {}: no run.sh there", d.display()).into())
        };
    }
    let cwd = std::env::current_dir()?;
    let root = std::env::var_os("STRATA_ROOT").map(PathBuf::from);
    cwd.ancestors()
        .chain(root.as_deref())
        .map(|d| d.join("bench/peers/flink"))
        .find(|d| has_script(d))
        .ok_or_else(|| {
            format!(
                "no Flink peer (bench/peers/flink/run.sh) above {}: run from a strata checkout or pass --flink-peer DIR",
                cwd.display()
            )
            .into()
        })
}

/// How the peer's RocksDB is configured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Tuning {
    /// Flink's defaults (mode `flink`).
    Defaults,
    /// The options strata's L2 and `rocksdb-raw` use that do not depend on
    /// strata's layout (mode `flink-tuned`), as Flink configuration keys.
    Mirrored,
}

impl Tuning {
    /// The tuning of a Flink mode; `None` for strata's modes.
    pub(crate) fn of(mode: crate::runner::Mode) -> Option<Self> {
        match mode {
            crate::runner::Mode::Flink => Some(Tuning::Defaults),
            crate::runner::Mode::FlinkTuned => Some(Tuning::Mirrored),
            _ => None,
        }
    }

    /// Flink configuration (`key=value`, comma-separated) the peer adds to
    /// its own: [`strata_cache::l2_cf_options`] and
    /// [`strata_cache::l2_db_options`] in Flink's terms.
    fn conf(self) -> &'static str {
        match self {
            Tuning::Defaults => "",
            Tuning::Mirrored => concat!(
                "state.backend.rocksdb.compression.per.level=",
                "NO_COMPRESSION;NO_COMPRESSION;LZ4_COMPRESSION;LZ4_COMPRESSION;",
                "LZ4_COMPRESSION;LZ4_COMPRESSION;LZ4_COMPRESSION,",
                "state.backend.rocksdb.use-bloom-filter=true,",
                "state.backend.rocksdb.bloom-filter.bits-per-key=10,",
                "state.backend.rocksdb.thread.num=2"
            ),
        }
    }
}

/// Why the peer cannot run this workload, if it cannot.
pub(crate) fn unavailable(w: &Workload) -> Option<String> {
    if let Err(e) = java_17() {
        return Some(format!("no Java 17 to run Flink with: {e}"));
    }
    if w.zipf != 0.0 && w.zipf != 1.0 {
        return Some(format!(
            "the Flink peer draws users uniformly or with Zipf 1.0, not Zipf {}",
            w.zipf
        ));
    }
    if w.payload != 100 {
        return Some(format!(
            "the Flink peer's payload is 100 bytes, not {}",
            w.payload
        ));
    }
    None
}

/// Checks that `java` and `javac` of version 17 or later are on the `PATH`.
fn java_17() -> Result<(), BenchError> {
    for tool in ["java", "javac"] {
        let out = Command::new(tool)
            .arg("-version")
            .output()
            .map_err(|e| format!("{tool}: {e}"))?;
        let text = String::from_utf8_lossy(&out.stderr).to_string()
            + &String::from_utf8_lossy(&out.stdout);
        let major = text
            .split(|c: char| !c.is_ascii_digit())
            .find(|s| !s.is_empty())
            .and_then(|s| s.parse::<u32>().ok())
            .unwrap_or(0);
        if major < 17 {
            return Err(format!("{tool} -version says '{}'", text.trim()).into());
        }
    }
    Ok(())
}

/// Runs the peer in `peer` on `w` with `tuning` (results in `out`) and
/// reads its figures.
///
/// Errors: the peer's run failing or printing no result.
pub(crate) fn run(
    w: &Workload,
    out: &Path,
    peer: &Path,
    tuning: Tuning,
) -> Result<ModeReport, BenchError> {
    let (results, progress) = match tuning {
        Tuning::Defaults => ("flink-results.tsv", "flink-timeline.txt"),
        Tuning::Mirrored => ("flink-tuned-results.tsv", "flink-tuned-timeline.txt"),
    };
    let (results, progress) = (out.join(results), out.join(progress));
    for stale in [&results, &progress] {
        if stale.exists() {
            std::fs::remove_file(stale)?;
        }
    }
    let form = match w.form {
        Form::ListAdd => "A",
        Form::Naive => "B",
    };
    let dist = if w.zipf == 0.0 { "uniform" } else { "zipf" };
    let script = peer.join("run.sh");
    eprintln!(
        "strata-bench: flink: running {} (installs Flink from PyPI on first use)",
        script.display()
    );
    let status = Command::new("bash")
        .arg(&script)
        .env("U", w.users.to_string())
        .env("N", w.events.to_string())
        .env("P", w.threads.to_string())
        .env("REPS", "1")
        .env("RUNS", format!("rocksdb:{form}:{dist}"))
        .env("RESULTS", &results)
        .env("BENCH_FLINK_CONF", tuning.conf())
        .env("BENCH_FLINK_TIMELINE", &progress)
        .stdout(std::process::Stdio::inherit())
        .status()?;
    if !status.success() {
        return Err(format!("the Flink peer failed ({status})").into());
    }
    let mut report = parse(&std::fs::read_to_string(&results)?, w)?;
    // A peer from before the timeline writes none: its totals still count.
    if let Ok(text) = std::fs::read_to_string(&progress) {
        let (timeline, windows) = parse_timeline(&text)?;
        report.timeline = timeline;
        report.checkpoints = Some(checkpoint_figures(windows));
    }
    if tuning == Tuning::Mirrored {
        report.external = report
            .external
            .map(|e| format!("{e}; RocksDB options mirrored from strata's L2"));
    }
    Ok(report)
}

/// The report of the peer's results file (a header and one row).
fn parse(tsv: &str, w: &Workload) -> Result<ModeReport, BenchError> {
    let mut lines = tsv.lines();
    let header: Vec<&str> = lines
        .next()
        .ok_or("empty Flink results")?
        .split('\t')
        .collect();
    let row: Vec<&str> = lines
        .last()
        .ok_or("the Flink peer printed no result")?
        .split('\t')
        .collect();
    let field = |name: &str| -> Result<f64, BenchError> {
        let i = header
            .iter()
            .position(|h| *h == name)
            .ok_or_else(|| format!("no column {name} in the Flink results"))?;
        Ok(row
            .get(i)
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| format!("column {name} of the Flink results is not a number"))?)
    };
    Ok(ModeReport {
        events: w.events,
        events_per_sec: field("events_per_s_wall")?,
        latency_us: Latency::unmeasured(),
        peak_rss_bytes: field("peak_rss_mib")? as u64 * (1 << 20),
        verified: false,
        external: Some(format!(
            "Flink {} job, RocksDB state backend, {} checkpoints; state not read back",
            row.first().copied().unwrap_or("?"),
            field("checkpoints")?
        )),
        ..ModeReport::default()
    })
}

/// A checkpoint's (start, completion), seconds since the job was submitted.
type Span = (f64, f64);

/// The samples and checkpoint spans of the peer's timeline file (see
/// `Timeline` in KeyedStateBench.java): `sample SECS EVENTS RSS_BYTES` and
/// `checkpoint ID START_SECS END_SECS` lines.
///
/// Errors: a line of neither shape, naming it.
fn parse_timeline(text: &str) -> Result<(Vec<Sample>, Vec<Span>), BenchError> {
    let (mut samples, mut windows) = (Vec::new(), Vec::new());
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let bad = || format!("the Flink peer's timeline has a line it cannot read: {line:?}");
        let fields: Vec<&str> = line.split_whitespace().collect();
        let num = |i: usize| -> Result<f64, BenchError> {
            Ok(fields.get(i).and_then(|v| v.parse().ok()).ok_or_else(bad)?)
        };
        match fields.first().copied() {
            Some("sample") if fields.len() == 4 => samples.push(Sample {
                secs: num(1)?,
                events: num(2)? as u64,
                rss_bytes: num(3)? as u64,
                ..Sample::default()
            }),
            Some("checkpoint") if fields.len() == 4 => windows.push((num(2)?, num(3)?)),
            _ => return Err(bad().into()),
        }
    }
    Ok((samples, windows))
}

/// What the spans of the peer's completed checkpoints tell.
fn checkpoint_figures(windows: Vec<Span>) -> CheckpointFigures {
    let ms: Vec<f64> = windows.iter().map(|(a, b)| (b - a) * 1000.0).collect();
    CheckpointFigures {
        count: windows.len() as u64,
        mean_ms: ms.iter().sum::<f64>() / ms.len().max(1) as f64,
        max_ms: ms.iter().copied().fold(0.0, f64::max),
        windows,
        ..CheckpointFigures::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_peers_results_file() {
        let tsv = "flink\tbackend\tform\tdist\tU\tN\tp\trep\txmx\twall_s\tnet_s\tevents_per_s_wall\tevents_per_s_net\tpeak_rss_mib\tcheckpoints\tlast_ckpt_bytes\n\
                   2.3.0\trocksdb\tA\tuniform\t1000\t20000\t2\t1\t4g\t3.10\t2.50\t6452\t8000\t812\t0\t0\n";
        let w = Workload {
            users: 1000,
            events: 20_000,
            zipf: 0.0,
            payload: 100,
            history_days: 60,
            spread_days: 120,
            form: Form::ListAdd,
            threads: 2,
            checkpoint_every: 0,
        };
        let r = parse(tsv, &w).unwrap();
        assert_eq!(r.events_per_sec, 6452.0);
        assert_eq!(r.peak_rss_bytes, 812 << 20);
        assert!(r.external.unwrap().starts_with("Flink 2.3.0 job"));
        assert!(parse("flink\n", &w).is_err());
    }

    #[test]
    fn reads_the_peers_timeline_and_checkpoint_spans() {
        let text = "sample 0.001 0 1048576\nsample 1.002 500 2097152\n\
                    checkpoint 1 10.000 10.250\nsample 2.003 1500 3145728\n";
        let (samples, windows) = parse_timeline(text).unwrap();
        let got: Vec<(f64, u64, u64)> = samples
            .iter()
            .map(|s| (s.secs, s.events, s.rss_bytes))
            .collect();
        assert_eq!(
            got,
            [
                (0.001, 0, 1 << 20),
                (1.002, 500, 2 << 20),
                (2.003, 1500, 3 << 20)
            ]
        );
        assert_eq!(windows, [(10.0, 10.25)]);
        let figures = checkpoint_figures(windows);
        assert_eq!(figures.count, 1);
        assert!(
            (figures.mean_ms - 250.0).abs() < 1e-6,
            "{}",
            figures.mean_ms
        );
        let err = parse_timeline("sample 1 two 3\n").unwrap_err().to_string();
        assert!(err.contains("\"sample 1 two 3\""), "{err}");
    }
}
