//! # strata-runtime: the dataflow runtime
//!
//! A job is a [`Pipeline`]: a file or Kafka source, a key-by, a
//! [`KeyedProcessFunction`] running with tiered keyed state
//! ([`strata_cache`]), and a transactional sink (JSON-lines part files or
//! a Kafka topic). Tasks are tokio
//! tasks joined by bounded channels ([`channel`]): backpressure travels from
//! the slowest task back to the source, which stops reading. Checkpoints are
//! asynchronous barrier snapshots ([`checkpoint`]); a run restored from the
//! latest completed checkpoint produces exactly the output of a run without a
//! crash.
//!
//! The `strata` binary (module [`cli`]) runs the built-in [`jobs`] and
//! inspects checkpoints.

pub mod channel;
pub mod checkpoint;
pub mod cli;
pub mod config;
mod dir_lock;
mod error;
mod executor;
mod fault;
mod fresh_dirs;
pub mod function;
pub mod group;
pub mod inspect;
pub mod job_spec;
pub mod jobs;
mod kafka_contact;
mod local_dir;
mod metrics;
mod pipeline;
pub mod progress;
pub mod query;
mod shard;
mod signals;
mod sync;
mod task;
pub mod write_back;

pub use config::{BadInputPolicy, JobConfig};
pub use error::{Result, RuntimeError};
pub use function::{Context, FunctionError, KeyedProcessFunction};
pub use job_spec::{JobSpec, PipelineRun};
pub use pipeline::{JobReport, Pipeline, RestoreFrom};
