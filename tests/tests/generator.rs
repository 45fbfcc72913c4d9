//! A generator source (Flink's `fromSequence` + map) through the real
//! runtime: a run that fails mid-way and is restored continues from the
//! checkpointed index, so the committed output equals a run without the
//! failure; a discarding sink writes nothing but the state is checkpointed.

use serde::Serialize;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use strata_cache::{StateDescriptor, StateStore, ValueState};
use strata_runtime::{Context, FunctionError, JobConfig, KeyedProcessFunction, Pipeline};

const TOTAL: u64 = 20_000;
const KEYS: u64 = 50;

/// Record `i`: its key, its index and its event time.
fn generate(i: u64) -> (String, u64, i64) {
    (format!("k{}", i * 7919 % KEYS), i, i as i64 * 10)
}

#[derive(Serialize, PartialEq, Eq, Hash, Debug, serde::Deserialize, Clone)]
struct Line {
    key: String,
    index: u64,
    count: u64,
}

/// Counts per key; fails at record `fail_at` while `armed` is set.
struct RunningCount {
    count: Option<ValueState<u64>>,
    fail_at: u64,
    armed: Arc<AtomicBool>,
}

impl KeyedProcessFunction for RunningCount {
    type In = (String, u64, i64);
    type Out = Line;

    fn states(&self) -> Vec<StateDescriptor> {
        vec![StateDescriptor::value("count")]
    }

    fn open(&mut self, store: &StateStore) -> Result<(), FunctionError> {
        self.count = Some(store.value_state("count")?);
        Ok(())
    }

    fn process(
        &mut self,
        key: &[u8],
        (name, index, _): Self::In,
        ctx: &mut Context<'_, Line>,
    ) -> Result<(), FunctionError> {
        if index == self.fail_at && self.armed.load(Ordering::SeqCst) {
            return Err(format!("failing on purpose at record {index}").into());
        }
        let state = self.count.as_ref().ok_or("used before open")?;
        let count = state.get(key)?.unwrap_or(0) + 1;
        state.update(key, count)?;
        ctx.emit(Line {
            key: name,
            index,
            count,
        });
        Ok(())
    }
}

fn config() -> JobConfig {
    JobConfig {
        parallelism: 2,
        batch_size: 64,
        checkpoint_interval: Duration::from_millis(100),
        source_rate: Some(40_000),
        ..JobConfig::default()
    }
}

fn pipeline(name: &str, fail_at: u64, armed: &Arc<AtomicBool>) -> Pipeline<RunningCount> {
    let armed = armed.clone();
    Pipeline::new("generated", config(), move || RunningCount {
        count: None,
        fail_at,
        armed: armed.clone(),
    })
    .generator_source(name, TOTAL, generate)
    .key_by(|r| r.0.clone().into_bytes())
    .timestamps(|r| r.2)
}

/// What a run without failure emits: every record with its key's count.
fn expected() -> Vec<Line> {
    let mut counts: HashMap<String, u64> = HashMap::new();
    let mut lines: Vec<Line> = (0..TOTAL)
        .map(|i| {
            let (key, index, _) = generate(i);
            let count = counts.entry(key.clone()).or_default();
            *count += 1;
            Line {
                key,
                index,
                count: *count,
            }
        })
        .collect();
    lines.sort_by_key(|l| l.index);
    lines
}

/// Every committed output line, sorted by index.
fn committed(out: &std::path::Path) -> Vec<Line> {
    let mut lines = Vec::new();
    for entry in std::fs::read_dir(out).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if name.starts_with("part-") && name.ends_with(".jsonl") {
            for line in std::fs::read_to_string(&path).unwrap().lines() {
                lines.push(serde_json::from_str::<Line>(line).unwrap());
            }
        }
    }
    lines.sort_by_key(|l| l.index);
    lines
}

#[test]
fn a_generator_run_that_fails_and_is_restored_commits_exactly_the_output_of_one_run() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let armed = Arc::new(AtomicBool::new(true));
    let failed = pipeline("seq", 15_000, &armed)
        .jsonl_sink(&out)
        .run()
        .expect_err("the first run fails at record 15000");
    assert!(
        failed
            .to_string()
            .contains("failing on purpose at record 15000"),
        "{failed}"
    );
    let before = committed(&out);
    assert!(
        !before.is_empty() && before.len() < 15_000,
        "the failed run committed {} records: expected some, not all",
        before.len()
    );
    let checkpointed = strata_runtime::inspect::latest(&out.join("_checkpoints"))
        .unwrap()
        .source
        .position
        .records;
    assert!(checkpointed > 0 && checkpointed < 15_000, "{checkpointed}");
    armed.store(false, Ordering::SeqCst);
    let report = pipeline("seq", 15_000, &armed)
        .jsonl_sink(&out)
        .restore_latest(true)
        .run()
        .unwrap();
    assert!(report.restored_from.is_some());
    assert_eq!(
        report.records_in,
        TOTAL - checkpointed,
        "the restored run starts at the checkpointed index"
    );
    assert_eq!(committed(&out), expected());
}

#[test]
fn a_discarding_sink_writes_nothing_and_the_state_is_checkpointed() {
    let dir = tempfile::tempdir().unwrap();
    let chk = dir.path().join("chk");
    let armed = Arc::new(AtomicBool::new(false));
    let report = pipeline("seq", u64::MAX, &armed)
        .discard_sink()
        .checkpoint_dir(&chk)
        .run()
        .unwrap();
    assert_eq!((report.records_in, report.records_out), (TOTAL, TOTAL));
    let last = expected();
    for k in 0..KEYS {
        let key = format!("k{k}");
        let want = last.iter().filter(|l| l.key == key).count() as u64;
        let got = strata_runtime::inspect::with_key_state(
            &chk,
            &[StateDescriptor::value("count")],
            key.as_bytes(),
            &strata_runtime::JobConfig::default(),
            |store, _| Ok(store.value_state::<u64>("count")?.get(key.as_bytes())?),
        )
        .unwrap();
        assert_eq!(got, Some(want), "key {key}");
    }
    let files: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(files, ["chk"], "a discarding sink writes no output");

    let other = pipeline("another", u64::MAX, &armed)
        .discard_sink()
        .checkpoint_dir(&chk)
        .restore_latest(true)
        .run()
        .expect_err("a restore refuses another generator");
    let text = other.to_string();
    assert!(
        text.contains("generator 'seq', not generator 'another'"),
        "{text}"
    );
}

#[test]
fn a_discarding_sink_without_a_checkpoint_directory_is_refused() {
    let armed = Arc::new(AtomicBool::new(false));
    let err = pipeline("seq", u64::MAX, &armed)
        .discard_sink()
        .run()
        .expect_err("no checkpoint directory");
    assert!(err.to_string().contains("checkpoint directory"), "{err}");
}
