//! The built-in jobs (`strata run route-history|user-history`) as a
//! [`JobSpec`], and what `strata state get` knows of their states.

use crate::config::JobConfig;
use crate::error::Result;
use crate::function::KeyedProcessFunction;
use crate::job_spec::{JobSpec, PipelineRun};
use crate::jobs::route_history::{self, RouteHistory};
use crate::jobs::user_history::{self, UserHistory};
use crate::pipeline::{JobReport, Pipeline};
use clap::ValueEnum;

#[derive(Debug, Clone, Copy, ValueEnum)]
pub(crate) enum Job {
    /// Per flight: count and mean delay of its route's flights in the last 60 days.
    RouteHistory,
    /// Per user event: the user's events and payload bytes in the last 60
    /// days (input columns user_id, event_time, payload).
    UserHistory,
}

impl Job {
    /// The built-in job of this name (as checkpoints record it).
    pub(super) fn named(name: &str) -> Option<Job> {
        [Job::RouteHistory, Job::UserHistory]
            .into_iter()
            .find(|j| j.name() == name)
    }

    /// The stored key of a key given field by field.
    pub(super) fn key_of_fields(self, fields: &[String]) -> Result<Vec<u8>> {
        match self {
            Job::RouteHistory => route_history::key_of_fields(fields),
            Job::UserHistory => user_history::key_of_fields(fields),
        }
    }
}

impl JobSpec for Job {
    fn name(self) -> &'static str {
        match self {
            Job::RouteHistory => "route-history",
            Job::UserHistory => "user-history",
        }
    }

    fn states(self) -> Vec<strata_cache::StateDescriptor> {
        match self {
            Job::RouteHistory => RouteHistory::default().states(),
            Job::UserHistory => UserHistory::default().states(),
        }
    }

    fn queryable_states(self) -> crate::query::QueryableStates {
        match self {
            Job::RouteHistory => RouteHistory::default().queryable_states(),
            Job::UserHistory => UserHistory::default().queryable_states(),
        }
    }

    fn pipeline(
        self,
        config: JobConfig,
        input: &std::ffi::OsStr,
        then: impl PipelineRun,
    ) -> Result<JobReport> {
        match self {
            Job::RouteHistory => then.run(
                Pipeline::new("route-history", config, RouteHistory::default)
                    .file_source(input, route_history::schema(), route_history::parse)
                    .key_by(route_history::key)
                    .timestamps(|f| f.date),
            ),
            Job::UserHistory => then.run(
                Pipeline::new("user-history", config, UserHistory::default)
                    .file_source(input, user_history::schema(), user_history::parse)
                    .key_by(user_history::key)
                    .timestamps(|e| e.event_time),
            ),
        }
    }
}

/// The built-in jobs' states, as `strata state get --help` lists them.
pub(super) fn states_help() -> String {
    let mut text = String::from("States of the built-in jobs:\n");
    for job in [Job::RouteHistory, Job::UserHistory] {
        let spec = job.queryable_states();
        for name in spec.names() {
            text.push_str(&format!(
                "  {:<14} {name} ({}), key: {}\n",
                job.name(),
                spec.kind_of(name).unwrap_or("?"),
                spec.key_fields().join(" ").to_uppercase()
            ));
        }
    }
    text
}
