//! Running a job from the command line: alone, or as this process's
//! shards of a consumer group; the `main` of a program that runs a job of
//! its own; the end-of-run summary line.

use super::args::{restore_arg, RunArgs};
use crate::config::JobConfig;
use crate::error::Result;
use crate::function::KeyedProcessFunction;
use crate::job_spec::{JobSpec, PipelineRun};
use crate::pipeline::{JobReport, Pipeline};
use clap::{Parser, Subcommand};

/// Runs `job` as `args` say: alone, or as this process's shards of the
/// consumer group `--input` names; prints the summary line.
///
/// Errors: a wrong command line or configuration
/// ([`crate::RuntimeError::is_usage`]), a failed or interrupted run.
pub fn run_job<J: JobSpec>(job: J, args: RunArgs) -> Result<()> {
    if let Some(group) = super::group::group_of(&args.input)? {
        let report = super::group::run(job, group, args)?;
        eprintln!("{}", crate::group::summary(&report));
        return Ok(());
    }
    let config = JobConfig::load(args.config.as_deref(), &args.overrides)?;
    let input = args.input.clone();
    let report = job.pipeline(config, &input, Finish(job, args))?;
    eprintln!("{}", summary(&report));
    Ok(())
}

/// The command line of a program that runs a job of its own ([`main_for`]):
/// `<program> run --input … --output … [the flags of strata run]`.
#[derive(Debug, Parser)]
#[command(version, about)]
pub struct JobCli {
    #[command(subcommand)]
    command: JobCommand,
}

#[derive(Debug, Subcommand)]
enum JobCommand {
    /// Run the job to the end of its input (the flags of `strata run`).
    Run(RunArgs),
}

/// The `main` of a program that runs `job`, a job of its own, with the
/// command line, configuration, checkpoints, metrics, queries and
/// consumer groups of `strata run`: parses the arguments, runs, prints
/// `strata: error: …` and exits 2 for a wrong invocation, 1 for a failed
/// job, as `strata` does. `strata checkpoints list` reads its checkpoints.
pub fn main_for<J: JobSpec>(job: J) -> std::process::ExitCode {
    let cli = JobCli::parse();
    let JobCommand::Run(args) = cli.command;
    super::exit_code(run_job(job, args))
}

/// A plain run of a job: the rest of the command line's settings, then run.
struct Finish<J>(J, RunArgs);

impl<J: JobSpec> PipelineRun for Finish<J> {
    fn run<F>(self, pipeline: Pipeline<F>) -> Result<JobReport>
    where
        F: KeyedProcessFunction,
        F::Out: serde::Serialize,
    {
        finish(pipeline, self.0, self.1)
    }
}

/// Adds the sink, checkpoint and metrics settings of `args` and runs.
fn finish<F>(pipeline: Pipeline<F>, job: impl JobSpec, args: RunArgs) -> Result<JobReport>
where
    F: KeyedProcessFunction,
    F::Out: serde::Serialize,
{
    let (restore, checkpoint_dir) = match &args.restore {
        None => (None, args.checkpoint_dir),
        Some(arg) => restore_arg(arg, args.checkpoint_dir)?,
    };
    let queries = match &args.query_addr {
        Some(addr) => Some(crate::query::QueryService::start(
            crate::query::client::parse_addr(addr)?,
            crate::query::client::token(),
            job.name(),
            job.queryable_states(),
        )?),
        None => None,
    };
    let mut pipeline = pipeline
        .jsonl_sink(&args.output)
        .restore(restore)
        .metrics_addr(args.metrics_addr)
        .query_service(queries);
    if let Some(dir) = checkpoint_dir {
        pipeline = pipeline.checkpoint_dir(dir);
    }
    pipeline.run()
}

/// The end-of-run summary printed to stderr (also parsed by tests and benchmarks).
pub fn summary(r: &JobReport) -> String {
    let secs = r.elapsed.as_secs_f64().max(1e-9);
    let last = r.checkpoints.last();
    let mean_ms = if r.checkpoints.is_empty() {
        0
    } else {
        r.checkpoints.iter().map(|c| c.duration_ms).sum::<u64>() / r.checkpoints.len() as u64
    };
    let l3 = r.l3.unwrap_or_default();
    let object_store = r.object_store.map_or(String::new(), |t| {
        format!(
            " object_store_bytes_up={} object_store_files_up={} object_store_bytes_down={} object_store_files_down={}",
            t.bytes_up, t.files_up, t.bytes_down, t.files_down
        )
    });
    format!(
        "strata: done. records_in={} records_out={} dead_letters={} elapsed_s={:.2} records_per_s={:.0} \
         restored_from={} restore_ms={} checkpoints={} checkpoints_failed={} checkpoint_mean_ms={} checkpoint_last_state_bytes={} \
         l1_hits={} l1_misses={} l1_hit_ratio={:.4} l2_hits={} l2_misses={} l2_hit_ratio={:.4} l1_spills={} l2_wait_ms={} \
         l3_hits={} l3_misses={} l3_evictions={} l3_evicted_bytes={} l3_reads={} l3_writes={} l3_retries={} l3_errors={}{object_store}",
        r.records_in,
        r.records_out,
        r.dead_letters,
        secs,
        r.records_in as f64 / secs,
        r.restored_from.map_or("none".into(), |id| id.to_string()),
        r.restore_time.as_millis(),
        r.checkpoints.len(),
        r.checkpoints_failed,
        mean_ms,
        last.map_or(0, |c| c.state_bytes),
        r.tiers.l1_hits,
        r.tiers.l1_misses,
        r.tiers.l1_hit_ratio(),
        r.tiers.l2_hits,
        r.tiers.l2_misses,
        r.tiers.l2_hit_ratio(),
        r.tiers.l1_spills,
        r.tiers.lower_wait_ms,
        r.tiers.l3_hits,
        r.tiers.l3_misses,
        r.tiers.l3_evictions,
        r.tiers.l3_evicted_bytes,
        l3.reads,
        l3.writes,
        l3.retries,
        l3.errors,
    )
}
