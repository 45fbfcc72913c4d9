//! `strata state get <checkpoint-dir> <state> <key>…`: one key's state
//! as the latest checkpoint holds it.

use super::builtin::Job;
use crate::config::JobConfig;
use crate::error::{Result, RuntimeError};
use crate::inspect::KeyState;
use crate::job_spec::JobSpec;

/// `strata state get <dir> <state> <key>…`: one key's state in the latest
/// checkpoint: live (with its value), expired, or no such key.
pub(super) fn state_from_checkpoint(
    args: &[String],
    config: &JobConfig,
) -> Result<serde_json::Value> {
    let [dir, state, key @ ..] = args else {
        return Err(RuntimeError::Usage(
            "strata state get <checkpoint-dir> <state> <key>… (or --job <url> <state> <key>…)"
                .into(),
        ));
    };
    if key.is_empty() {
        return Err(RuntimeError::Usage(format!(
            "strata state get {dir} {state}: give the key's fields too"
        )));
    }
    let (dir, _copy) = crate::inspect::local_view(std::path::Path::new(dir))?;
    let name = crate::inspect::latest(&dir)?.job;
    let Some(job) = Job::named(&name) else {
        return Err(RuntimeError::Usage(format!(
            "{} holds checkpoints of job '{name}', whose state `strata state get` cannot print (read it through strata_runtime::inspect::read_key_state)",
            dir.display()
        )));
    };
    let states = job.states();
    let spec = job.queryable_states();
    if !spec.names().contains(&state.as_str()) {
        return Err(RuntimeError::Usage(format!(
            "{name} has no state '{state}' (it has: {})",
            spec.names().join(", ")
        )));
    }
    let stored_key = job.key_of_fields(key)?;
    let read = |store: &strata_cache::StateStore| spec.read(store, state, &stored_key);
    let (meta, found) = crate::inspect::read_key_state(&dir, &states, &stored_key, config, read)?;
    let mut answer = serde_json::json!({"checkpoint": meta.id, "state": state, "key": key});
    answer["status"] = match found {
        KeyState::Live(value) => {
            answer["value"] = value;
            "live".into()
        }
        KeyState::Expired => "expired".into(),
        KeyState::Absent => "no such key".into(),
    };
    Ok(answer)
}
