//! `strata run … --input kafka://…/topic?group=G`: one process of a job
//! whose shards a consumer group divides (see [`crate::group`]). Checks the
//! command line, then runs each shard it is given as a pipeline of the
//! job with the shard's own checkpoint location, `transactional.id` and
//! share of the memory budgets.

use super::args::RunArgs;
use crate::checkpoint::remote;
use crate::config::JobConfig;
use crate::error::{Result, RuntimeError};
use crate::function::KeyedProcessFunction;
use crate::group::{GroupReport, GroupSettings, RunShard};
use crate::job_spec::{JobSpec, PipelineRun};
use crate::pipeline::{JobReport, Pipeline, RestoreFrom};
use crate::query::{advertise, GroupRoute, QueryService};
use crate::shard::Shard;
use std::path::PathBuf;
use std::sync::Arc;
use strata_connectors::kafka::{GroupOptions, KafkaEndpoint};

/// The consumer group `--input` names (`?group=G`), if any.
///
/// Errors: a malformed `kafka://` address.
pub(crate) fn group_of(input: &std::ffi::OsStr) -> Result<Option<String>> {
    let Some(uri) = input.to_str().filter(|t| KafkaEndpoint::is_kafka(t)) else {
        return Ok(None);
    };
    Ok(KafkaEndpoint::parse(uri)?.param("group").map(String::from))
}

/// Runs this process's part of the job in group `group`.
///
/// Errors: a command line a group cannot run (a directory output, no
/// checkpoint location, `--restore`, several topics); then as
/// [`crate::group::run`].
pub(crate) fn run<J: JobSpec>(job: J, group: String, args: RunArgs) -> Result<GroupReport> {
    let config = JobConfig::load(args.config.as_deref(), &args.overrides)?;
    let input = args.input.to_string_lossy().into_owned();
    let endpoint = KafkaEndpoint::parse(&input)?;
    let [topic] = &endpoint.topics[..] else {
        return Err(RuntimeError::Usage(format!(
            "--input {input}: a consumer group (group={group}) divides the partitions of one topic; name one"
        )));
    };
    let output = args.output.to_string_lossy().into_owned();
    if !KafkaEndpoint::is_kafka(&output) {
        return Err(RuntimeError::Usage(format!(
            "--output {output}: a job run by a consumer group writes to a Kafka topic (each shard through its own transactional producer); a directory cannot be shared by its processes"
        )));
    }
    if args.restore.is_some() {
        return Err(RuntimeError::Usage(
            "--restore does not apply to a consumer group: each shard continues from its own latest checkpoint when this process is given its partition".into(),
        ));
    }
    let Some(checkpoint_dir) = args.checkpoint_dir.clone() else {
        return Err(RuntimeError::Usage(
            "a consumer group needs --checkpoint-dir: an object store (s3://bucket/prefix) every process reaches, or a directory they share".into(),
        ));
    };
    if remote::is_remote(&checkpoint_dir) && config.checkpoint_local_copy.is_none() {
        return Err(RuntimeError::Usage(
            "checkpoints in an object store need a local copy: set -D checkpoint.local-copy=<dir> (one per process on a machine)".into(),
        ));
    }
    if remote::is_remote(&checkpoint_dir) {
        // Reach the store before joining: a process that cannot would take
        // partitions from the others only to fail on them.
        remote::Remote::connect(&checkpoint_dir.to_string_lossy(), config.storage_retry_for)?
            .list()?;
    }
    if let Some(addr) = args.metrics_addr {
        serve_metrics(addr)?;
    }
    let security =
        crate::kafka_contact::reach_blocking(&config.kafka.security, &[&endpoint.brokers])?;
    let partitions =
        strata_connectors::kafka::partition_count(&endpoint.brokers, &security, topic)?;
    let queries = match &args.query_addr {
        Some(addr) => Some(QueryService::start_in(
            crate::query::client::parse_addr(addr)?,
            crate::query::client::token(),
            job.name(),
            job.queryable_states(),
            Some(GroupRoute::new(
                &endpoint.brokers,
                &security,
                &group,
                topic,
                partitions,
                config.query_partitioner,
            )),
        )?),
        None => None,
    };
    let settings = GroupSettings {
        options: GroupOptions {
            brokers: endpoint.brokers.clone(),
            security: security.clone(),
            topic: topic.clone(),
            group,
            properties: config.kafka.source_properties.clone(),
            client_id_suffix: queries
                .as_ref()
                .map(|q| advertise(q.local_addr()))
                .unwrap_or_default(),
        },
        bounded: config.kafka.bounded,
    };
    let template = ShardTemplate {
        job,
        input: args.input,
        output: args.output,
        checkpoint_dir,
        config: shard_config(config, job.name(), &output, partitions)?,
        queries,
    };
    let run_shard: RunShard = Arc::new(move |shard| template.run(shard));
    crate::group::run(&settings, run_shard)
}

/// The configuration every shard runs with: one keyed instance and one
/// sink (the shards are the parallelism), keys checked against the
/// message keys, and the memory budgets divided by the topic's partitions
/// (so a process that owns them all stays within them). Each shard then
/// gets its own local copy, `transactional.id` and L3 table
/// (`<state.l3.table>_p<N>`).
fn shard_config(
    mut config: JobConfig,
    job: &str,
    output: &str,
    partitions: usize,
) -> Result<JobConfig> {
    let n = partitions.max(1) as u64;
    config.parallelism = 1;
    config.sink_parallelism = Some(1);
    config.kafka.require_key = true;
    config.l1_capacity = (config.l1_capacity / n).max(1 << 20);
    config.l2_memory = (config.l2_memory / n).max(8 << 20);
    if config.kafka.transactional_id_prefix.is_none() {
        let out = KafkaEndpoint::parse(output)?;
        config.kafka.transactional_id_prefix = Some(format!("strata-{job}-{}", out.topics[0]));
    }
    Ok(config)
}

/// What every shard's pipeline shares; [`ShardTemplate::run`] makes one
/// shard's.
struct ShardTemplate<J> {
    job: J,
    input: std::ffi::OsString,
    output: std::ffi::OsString,
    checkpoint_dir: PathBuf,
    config: JobConfig,
    queries: Option<Arc<QueryService>>,
}

impl<J: JobSpec> ShardTemplate<J> {
    fn run(&self, shard: Shard) -> Result<JobReport> {
        let p = shard.partition;
        let mut config = self.config.clone();
        let name = format!("p-{p}");
        config.checkpoint_local_copy = config.checkpoint_local_copy.map(|d| d.join(&name));
        config.local_dir = config.local_dir.map(|d| d.join(&name));
        config.kafka.transactional_id_prefix = config
            .kafka
            .transactional_id_prefix
            .map(|prefix| format!("{prefix}-p{p}"));
        config.l3.for_shard(p);
        let run = ShardRun {
            output: self.output.clone(),
            checkpoint_dir: crate::checkpoint::shard_location(&self.checkpoint_dir, &name),
            shard,
            queries: self.queries.clone(),
        };
        self.job.pipeline(config, &self.input, run)
    }
}

/// One shard's run: its sink, checkpoint location and restore policy.
struct ShardRun {
    output: std::ffi::OsString,
    checkpoint_dir: PathBuf,
    shard: Shard,
    queries: Option<Arc<QueryService>>,
}

impl PipelineRun for ShardRun {
    fn run<F>(self, pipeline: Pipeline<F>) -> Result<JobReport>
    where
        F: KeyedProcessFunction,
        F::Out: serde::Serialize,
    {
        pipeline
            .jsonl_sink(&self.output)
            .checkpoint_dir(self.checkpoint_dir)
            .restore(Some(RestoreFrom::LatestIfAny))
            .shard(self.shard)
            .query_service(self.queries)
            .run()
    }
}

/// Serves Prometheus metrics for the whole process (its shards' and the
/// group's), on the process's runtime.
fn serve_metrics(addr: std::net::SocketAddr) -> Result<()> {
    let _entered = crate::executor::handle()?.enter();
    crate::metrics::serve(addr)
}
