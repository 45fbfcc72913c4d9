//! Runs every mode in a child process, kills the tiered ones after their
//! run and times their restore, and writes `report.json`, `report.md` and
//! the plots, with each mode's ratio to `rocksdb-raw` and to
//! `cassandra-per-record`.

use crate::backends::BenchError;
use crate::recovery::Recovery;
use crate::runner::{Mode, ModeReport};
use crate::workload::Workload;
use serde::Serialize;
use std::collections::BTreeMap;
use std::io::BufRead;
use std::path::Path;
use std::process::{Child, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

/// What one invocation runs.
pub(crate) struct Plan<'a> {
    /// Modes, in order.
    pub modes: &'a [Mode],
    /// The report directory.
    pub out: &'a Path,
    /// The workload.
    pub workload: &'a Workload,
    /// The memory budgets of all workers together.
    pub memory: crate::backends::Budget,
    /// Whether to kill the tiered modes after their run and time the restore.
    pub recovery: bool,
    /// The Cassandra node of the modes that need one.
    pub cassandra: &'a str,
    /// `--flink-peer`, if given.
    pub flink_peer: Option<&'a Path>,
}

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
    ratio_to_flink: Option<f64>,
}

/// The mode's name on the command line.
pub(crate) fn mode_name(mode: Mode) -> String {
    serde_json::to_value(mode)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default()
}

/// A child process of this binary and the lines it prints.
struct Process {
    child: Child,
    lines: std::io::Lines<std::io::BufReader<ChildStdout>>,
    what: String,
}

impl Process {
    fn spawn(args: &[String], extra: &[String], what: String) -> Result<Self, BenchError> {
        let exe = std::env::current_exe()?;
        let mut child = Command::new(&exe)
            .args(args)
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| {
                // A rebuilt binary leaves "<path> (deleted)" behind.
                format!("cannot start {what} as {}: {e}", exe.display())
            })?;
        let stdout = child
            .stdout
            .take()
            .ok_or("no stdout of the child process")?;
        Ok(Self {
            child,
            lines: std::io::BufReader::new(stdout).lines(),
            what,
        })
    }

    /// The next line it prints; an error naming how it ended if none.
    fn line(&mut self) -> Result<String, BenchError> {
        match self.lines.next() {
            Some(line) => Ok(line?),
            None => Err(format!("{} failed ({})", self.what, self.child.wait()?).into()),
        }
    }

    fn wait(&mut self) -> Result<(), BenchError> {
        let status = self.child.wait()?;
        if !status.success() {
            return Err(format!("{} failed ({status})", self.what).into());
        }
        Ok(())
    }
}

impl Drop for Process {
    /// A child still running when the parent gives up on it is killed.
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Runs `mode` in a child process; for a tiered mode, then kills it with
/// SIGKILL and times a restore from its last checkpoint.
fn run_mode(
    mode: Mode,
    plan: &Plan<'_>,
    args: &[String],
    run_id: i64,
) -> Result<ModeReport, BenchError> {
    let name = mode_name(mode);
    let state = plan.out.join(format!("state-{name}"));
    if state.exists() {
        std::fs::remove_dir_all(&state)?;
    }
    let common = |role: &str| {
        vec![
            role.to_owned(),
            name.clone(),
            "--state-dir".into(),
            state.display().to_string(),
            "--run-id".into(),
            run_id.to_string(),
        ]
    };
    let mut run = Process::spawn(args, &common("--child"), format!("mode {name}"))?;
    let mut report: ModeReport = serde_json::from_str(&run.line()?)?;
    if mode.is_tiered() && plan.recovery {
        // Let it work on past its last checkpoint, then crash it.
        std::thread::sleep(Duration::from_secs(1));
        run.child.kill()?;
        let killed = Instant::now();
        run.child.wait()?;
        let mut restore = Process::spawn(
            args,
            &common("--recover"),
            format!("the restore of mode {name}"),
        )?;
        let ready = restore.line()?;
        let restore_ms = killed.elapsed().as_secs_f64() * 1000.0;
        if ready != "ready" {
            return Err(format!("the restore of mode {name} printed '{ready}'").into());
        }
        let recovery: Recovery = serde_json::from_str(&restore.line()?)?;
        restore.wait()?;
        if !recovery.verified {
            return Err(format!("mode {name}'s restored state is wrong: the restored per-user counts add up to {} of the {} events its checkpoints hold (of {} in the run); {}", recovery.counted, recovery.events, plan.workload.events, recovery.verification.mismatch.as_deref().unwrap_or("no history differed")).into());
        }
        report.recovery = Some(Recovery {
            restore_ms,
            ..recovery
        });
    } else {
        run.wait()?;
    }
    if state.exists() {
        std::fs::remove_dir_all(&state)?;
    }
    Ok(report)
}

/// Runs the plan's modes (each in a child process given `args`) and writes
/// the report into its `out`.
pub(crate) fn run_all(plan: &Plan<'_>, args: Vec<String>) -> Result<(), BenchError> {
    let _lock = prepare(plan)?;
    let run_id = crate::runner::now_micros();
    let results = run_modes(plan, &args, run_id);
    if plan.modes.iter().any(|m| m.needs_cassandra()) {
        let target = crate::cassandra::Target::for_run(plan.cassandra, run_id);
        if let Err(e) = target.drop_keyspace() {
            eprintln!(
                "strata-bench: could not drop keyspace {}: {e}",
                target.keyspace
            );
        }
    }
    write_report(plan, results?)
}

/// Runs every mode of the plan; stops at the first that fails or loses events.
fn run_modes(
    plan: &Plan<'_>,
    args: &[String],
    run_id: i64,
) -> Result<BTreeMap<String, ModeReport>, BenchError> {
    let mut results = BTreeMap::new();
    for &mode in plan.modes {
        let report = if let Some(tuning) = crate::flink::Tuning::of(mode) {
            if let Some(why) = crate::flink::unavailable(plan.workload) {
                eprintln!(
                    "strata-bench: notice: mode {} skipped: {why}",
                    mode_name(mode)
                );
                results.insert(mode_name(mode), skipped(why));
                continue;
            }
            let peer = crate::flink::peer_dir(plan.flink_peer)?;
            crate::flink::run(plan.workload, plan.out, &peer, tuning)?
        } else {
            run_mode(mode, plan, args, run_id)?
        };
        eprintln!(
            "{:>20}: {:.0} events/s, p99 {:.1} µs, peak RSS {} MB, verified {}{}",
            mode_name(mode),
            report.events_per_sec,
            report.latency_us.p99,
            report.peak_rss_bytes >> 20,
            report.verified,
            report.recovery.as_ref().map_or(String::new(), |r| format!(
                ", restored after SIGKILL in {:.0} ms",
                r.restore_ms
            ))
        );
        if !report.verified && report.external.is_none() {
            let v = report.verification.clone().unwrap_or_default();
            return Err(format!(
                "mode {}'s state is wrong: the per-user counts add up to {} of {} events; {}",
                mode_name(mode),
                v.counted,
                report.events,
                v.mismatch.as_deref().unwrap_or("no history differed")
            )
            .into());
        }
        results.insert(mode_name(mode), report);
    }
    Ok(results)
}

/// The report of a mode that could not run: no figures, and why.
fn skipped(why: String) -> ModeReport {
    ModeReport {
        events_per_sec: f64::NAN,
        external: Some(format!("skipped: {why}")),
        ..ModeReport::default()
    }
}

/// Writes report.json, report.md and the plots of `results` into the plan's `out`.
fn write_report(plan: &Plan<'_>, results: BTreeMap<String, ModeReport>) -> Result<(), BenchError> {
    let out = plan.out;
    let baseline = |mode: &str| results.get(mode).map(|r| r.events_per_sec);
    let (raw, per_record, flink) = (
        baseline("rocksdb-raw"),
        baseline("cassandra-per-record"),
        baseline("flink").filter(|f| f.is_finite()),
    );
    let modes = results
        .into_iter()
        .map(|(name, report)| {
            let ratio = |b: Option<f64>| b.map(|b| report.events_per_sec / b);
            let entry = Entry {
                ratio_to_rocksdb_raw: ratio(raw),
                ratio_to_cassandra_per_record: ratio(per_record),
                ratio_to_flink: ratio(flink),
                report,
            };
            (name, entry)
        })
        .collect();
    let report = Report {
        workload: plan.workload,
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
    let reports: BTreeMap<&str, &ModeReport> = report
        .modes
        .iter()
        .map(|(k, e)| (k.as_str(), &e.report))
        .collect();
    let plots = crate::plots::draw(out, &reports, &workload_line(plan))?;
    std::fs::write(out.join("report.md"), markdown(&report, &plots))?;
    eprintln!("report: {}", out.join("report.md").display());
    for png in plots {
        eprintln!("plot: {}", out.join(png.file).display());
    }
    Ok(())
}

/// What ran, in one line for the plots' titles: the workload and the
/// memory budgets (all workers together).
fn workload_line(plan: &Plan<'_>) -> String {
    let (w, m) = (plan.workload, &plan.memory);
    let si = |n: u64| crate::plots::si(&(n as f64));
    let keys = if w.zipf == 0.0 {
        "uniform".to_owned()
    } else {
        format!("Zipf {}", w.zipf)
    };
    let mut line = format!(
        "{} users, {} events, form {}, {keys}, {} B payload, {} workers; L1 {}B, L2 memory {}B",
        si(w.users),
        si(w.events),
        w.form,
        w.payload,
        w.threads,
        si(m.l1_bytes),
        si(m.l2_bytes as u64),
    );
    if plan.modes.contains(&Mode::L3) {
        line += &format!(", L2 on disk {}B before L3", si(m.l2_capacity));
    }
    line
}

/// The files a run writes into `--out`; those of an earlier run are
/// removed first, so that none is left stale.
const OUTPUTS: [&str; 5] = [
    "report.json",
    "report.md",
    "throughput.png",
    "latency_cdf.png",
    "tier_sizes.png",
];

/// Makes `out`, locks it against a second invocation, removes an earlier
/// run's outputs, and checks what the plan needs (a font for the plots, a
/// reachable Cassandra) before any mode runs.
fn prepare(plan: &Plan<'_>) -> Result<std::fs::File, BenchError> {
    let out = plan.out;
    let named = |e: std::io::Error| format!("--out {}: {e}", out.display());
    std::fs::create_dir_all(out).map_err(named)?;
    let lock = std::fs::File::create(out.join(".strata-bench.lock")).map_err(named)?;
    if lock.try_lock().is_err() {
        return Err(format!(
            "--out {}: another strata-bench is writing into it",
            out.display()
        )
        .into());
    }
    for file in OUTPUTS {
        let path = out.join(file);
        if path.exists() {
            std::fs::remove_file(&path).map_err(named)?;
        }
    }
    crate::plots::register_font()?;
    if plan.modes.iter().any(|m| m.needs_cassandra()) {
        crate::cassandra::Target::for_run(plan.cassandra, 0).check()?;
    }
    Ok(lock)
}

fn pct(v: Option<f64>) -> String {
    v.map_or("–".to_owned(), |x| format!("{:.1}%", x * 100.0))
}

fn mb(v: Option<u64>) -> String {
    v.map_or("–".to_owned(), |b| format!("{:.1}", b as f64 / 1e6))
}

fn num(v: Option<f64>, digits: usize) -> String {
    v.map_or("–".to_owned(), |x| format!("{x:.digits$}"))
}

/// The verification column: what was compared, or why nothing was.
fn verified(m: &ModeReport) -> String {
    if let Some(external) = &m.external {
        return external.clone();
    }
    let Some(v) = &m.verification else {
        return if m.verified { "yes" } else { "no" }.into();
    };
    let what = if v.elements > 0 {
        format!(
            "{} users' counts and {} history elements",
            v.users, v.elements
        )
    } else {
        format!("{} users' counts (histories not read back)", v.users)
    };
    format!("{} ({what})", if m.verified { "yes" } else { "NO" })
}

fn markdown(r: &Report<'_>, plots: &[crate::plots::Plot]) -> String {
    let w = r.workload;
    let mut md = format!(
        "# strata-bench report\n\n{} users, {} events, form {}, Zipf {}, {} B payload, {}-day history over {} days of event time, {} workers, a checkpoint every {} events per worker; {} cores, {}.\n\n\
         ## Throughput and latency\n\n\
         | mode | events/s | ratio to rocksdb-raw | ratio to cassandra-per-record | ratio to flink | p50 µs | p99 µs | p99.9 µs | peak RSS MB | state verified |\n|---|---|---|---|---|---|---|---|---|---|\n",
        w.users, w.events, w.form, w.zipf, w.payload, w.history_days, w.spread_days, w.threads, w.checkpoint_every, r.machine.cores, r.machine.date
    );
    for (name, e) in &r.modes {
        let m = &e.report;
        let finite = |x: f64| Some(x).filter(|x| x.is_finite());
        md += &format!(
            "| {name} | {} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
            num(finite(m.events_per_sec), 0),
            num(e.ratio_to_rocksdb_raw.and_then(finite), 2),
            num(e.ratio_to_cassandra_per_record.and_then(finite), 1),
            num(e.ratio_to_flink.and_then(finite), 2),
            num(finite(m.latency_us.p50), 1),
            num(finite(m.latency_us.p99), 1),
            num(finite(m.latency_us.p999), 1),
            if m.peak_rss_bytes > 0 {
                (m.peak_rss_bytes >> 20).to_string()
            } else {
                "–".into()
            },
            verified(m),
        );
    }
    md += "\n## Tiers, checkpoints and recovery\n\n\
           | mode | L1 hit | L2 hit | L3 hit | L1 MB | L2 MB | L3 MB moved | key moves to L3 | L3 requests/s | checkpoints (all workers) | checkpoint ms mean / max | last checkpoint MB (all workers) | new MB per checkpoint (mean, one worker) | events/s during ÷ between checkpoints | restore after SIGKILL ms |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n";
    for (name, e) in r.modes.iter().filter(|(_, e)| e.report.l1_bytes.is_some()) {
        let m = &e.report;
        let c = m.checkpoints.as_ref();
        md += &format!(
            "| {name} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} / {} | {} | {} | {} | {} |\n",
            pct(m.l1_hit_ratio),
            pct(m.l2_hit_ratio),
            pct(m.l3_hit_ratio),
            mb(m.l1_bytes),
            mb(m.l2_bytes),
            mb(m.l3_bytes),
            m.l3_evictions.map_or("–".to_owned(), |n| n.to_string()),
            num(m.l3_requests_per_sec, 0),
            c.map_or("–".to_owned(), |c| c.count.to_string()),
            num(c.map(|c| c.mean_ms), 0),
            num(c.map(|c| c.max_ms), 0),
            mb(c.map(|c| c.last_bytes)),
            num(c.map(|c| c.mean_new_bytes / 1e6), 1),
            num(c.and_then(|c| c.during_ratio), 2),
            num(m.recovery.as_ref().map(|r| r.restore_ms), 0),
        );
    }
    md += &rocksdb_table(r);
    if !plots.is_empty() {
        let list: Vec<String> = plots
            .iter()
            .map(|p| format!("`{}` ({})", p.file, p.title))
            .collect();
        md += &format!("\nPlots: {}.\n", list.join(", "));
    }
    md
}

/// RocksDB's figures per mode and state: bytes handed to it, bytes it
/// wrote (flushes, compactions, blob files) and their ratio (write
/// amplification), live SST bytes per level and blob bytes; then the
/// mode's compaction CPU and stall time.
fn rocksdb_table(r: &Report<'_>) -> String {
    let mut md = "\n## RocksDB\n\n\
        | mode | state | user MB | written MB | write amplification | SST MB per level (L0, L1, …) | blob MB | compaction CPU s | stall s |\n|---|---|---|---|---|---|---|---|---|\n"
        .to_owned();
    let mb = |b: u64| format!("{:.1}", b as f64 / 1e6);
    for (name, e) in &r.modes {
        let Some(l2) = &e.report.l2 else { continue };
        for s in &l2.states {
            let levels: Vec<String> = s.sst_bytes_per_level.iter().map(|&b| mb(b)).collect();
            md += &format!(
                "| {name} | {} | {} | {} | {:.2} | {} | {} | {:.1} | {:.1} |\n",
                s.name,
                mb(s.user_bytes),
                mb(s.written_bytes),
                s.write_amplification(),
                levels.join(", "),
                mb(s.blob_bytes),
                l2.compaction_cpu_s,
                l2.stall_s,
            );
        }
    }
    md
}
