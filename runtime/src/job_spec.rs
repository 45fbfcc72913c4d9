//! What the command line needs of a job ([`JobSpec`]), so that a program of
//! its own runs its job as `strata run` runs the built-in ones: the same
//! flags, configuration, checkpoints, metrics, queries and consumer
//! groups (see [`crate::cli::main_for`] and `examples/click-sessions`).

use crate::config::JobConfig;
use crate::error::Result;
use crate::function::KeyedProcessFunction;
use crate::pipeline::{JobReport, Pipeline};
use crate::query::QueryableStates;
use strata_cache::StateDescriptor;

/// A job the command line can run: its name, its states, and its pipeline
/// up to the key and timestamps (source, parsing, `key_by`,
/// `timestamps`); the command line adds the sink, checkpoints, restore,
/// metrics and queries, or runs it as shards of a consumer group.
///
/// The idea is Kafka Streams' application main: the user's program is the
/// job, with the framework's runner around it.
pub trait JobSpec: Copy + Send + Sync + 'static {
    /// The job's name: checkpoints record it (a restore refuses another
    /// job's), and it names the default Kafka group and transactional ids.
    fn name(self) -> &'static str;

    /// The states the job declares (what `migration write-back` and
    /// `state get` open a checkpoint with).
    fn states(self) -> Vec<StateDescriptor>;

    /// The states queries (`--query-addr`, `state get`) may read, and how
    /// a key is given field by field.
    fn queryable_states(self) -> QueryableStates;

    /// Builds the job's pipeline reading `input` (a file or a
    /// `kafka://` address, as `--input` gives it) with `config`, and hands
    /// it to `then`, returning what `then` returns.
    ///
    /// ```ignore
    /// then.run(Pipeline::new(self.name(), config, MyFunction::default)
    ///     .file_source(input, schema(), parse)
    ///     .key_by(|e| e.user.as_bytes().to_vec())
    ///     .timestamps(|e| e.time))
    /// ```
    fn pipeline(
        self,
        config: JobConfig,
        input: &std::ffi::OsStr,
        then: impl PipelineRun,
    ) -> Result<JobReport>;
}

/// What the command line does with a job's pipeline, whatever the types
/// of its function: [`JobSpec::pipeline`] hands the pipeline to it.
pub trait PipelineRun {
    /// Completes `pipeline` (sink, checkpoints, …) and runs it to the end.
    fn run<F>(self, pipeline: Pipeline<F>) -> Result<JobReport>
    where
        F: KeyedProcessFunction,
        F::Out: serde::Serialize;
}
