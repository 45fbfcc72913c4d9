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
//! by this harness; its per-event latency is not measured.
//!
//! Without `java` and `javac` 17 or later on the `PATH`, the mode is
//! skipped with a notice on stderr and in the report (never silently).

use crate::backends::BenchError;
use crate::runner::{Latency, ModeReport};
use crate::workload::{Form, Workload};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The peer's directory: `given` (`--flink-peer`), else
/// `bench/peers/flink` of the first checkout found from the current
/// directory upwards, else of `$STRATA_ROOT`. Never a path fixed at build
/// time: the binary may have been built in another clone.
///
/// Errors: no such directory holds a `run.sh`.
pub fn peer_dir(given: Option<&Path>) -> Result<PathBuf, BenchError> {
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
pub enum Tuning {
    /// Flink's defaults (mode `flink`).
    Defaults,
    /// The options strata's L2 and `rocksdb-raw` use that do not depend on
    /// strata's layout (mode `flink-tuned`), as Flink configuration keys.
    Mirrored,
}

impl Tuning {
    /// The tuning of a Flink mode; `None` for strata's modes.
    pub fn of(mode: crate::runner::Mode) -> Option<Self> {
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
pub fn unavailable(w: &Workload) -> Option<String> {
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
pub fn run(
    w: &Workload,
    out: &Path,
    peer: &Path,
    tuning: Tuning,
) -> Result<ModeReport, BenchError> {
    let results = out.join(match tuning {
        Tuning::Defaults => "flink-results.tsv",
        Tuning::Mirrored => "flink-tuned-results.tsv",
    });
    if results.exists() {
        std::fs::remove_file(&results)?;
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
        .stdout(std::process::Stdio::inherit())
        .status()?;
    if !status.success() {
        return Err(format!("the Flink peer failed ({status})").into());
    }
    let mut report = parse(&std::fs::read_to_string(&results)?, w)?;
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
}
