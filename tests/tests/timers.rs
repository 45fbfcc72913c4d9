//! A keyed process function embedded through the library API: per-key
//! ValueState plus event-time timers that fire as the watermark passes them,
//! and all remaining ones at the end of a bounded input.

use serde::Serialize;
use strata_cache::{StateDescriptor, StateStore, ValueState};
use strata_connectors::{FieldType, RecordError, Row, Schema};
use strata_runtime::{Context, FunctionError, JobConfig, KeyedProcessFunction, Pipeline};

#[derive(Default)]
struct CountThenReport {
    count: Option<ValueState<u64>>,
}

#[derive(Serialize)]
struct Report {
    key: String,
    timer: i64,
    count: u64,
}

impl KeyedProcessFunction for CountThenReport {
    type In = (String, i64);
    type Out = Report;

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
        (_, ts): (String, i64),
        ctx: &mut Context<'_, Report>,
    ) -> Result<(), FunctionError> {
        let count = self.count.as_ref().unwrap();
        count.update(key, count.get(key)?.unwrap_or(0) + 1)?;
        ctx.register_event_time_timer(ts + 10_000);
        Ok(())
    }

    fn on_timer(
        &mut self,
        key: &[u8],
        timestamp: i64,
        ctx: &mut Context<'_, Report>,
    ) -> Result<(), FunctionError> {
        let count = self.count.as_ref().unwrap().get(key)?.unwrap_or(0);
        ctx.emit(Report {
            key: String::from_utf8_lossy(key).into_owned(),
            timer: timestamp,
            count,
        });
        Ok(())
    }
}

fn parse(mut row: Row, schema: &Schema) -> Result<(String, i64), RecordError> {
    Ok((row.take_string(schema, 1)?, row.timestamp(schema, 0)?))
}

#[test]
fn event_time_timers_fire_once_each_as_the_watermark_passes_them() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("events.csv");
    std::fs::write(&input, "ts,user\n0,a\n1000,b\n5000,a\n30000,a\n").unwrap();
    let config = JobConfig {
        batch_size: 1,
        parallelism: 2,
        ..JobConfig::default()
    };
    let schema = Schema::new(&[("ts", FieldType::Timestamp), ("user", FieldType::String)]);
    let out = dir.path().join("out");
    let report = Pipeline::new("timers", config, CountThenReport::default)
        .file_source(&input, schema, parse)
        .key_by(|(user, _)| user.as_bytes().to_vec())
        .timestamps(|(_, ts)| *ts)
        .jsonl_sink(&out)
        .run()
        .unwrap();
    assert_eq!(report.records_in, 4);
    let mut fired: Vec<(String, i64, u64)> = std::fs::read_dir(&out)
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("part-"))
        .flat_map(|e| {
            std::fs::read_to_string(e.path())
                .unwrap()
                .lines()
                .map(str::to_owned)
                .collect::<Vec<_>>()
        })
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(&l).unwrap();
            (
                v["key"].as_str().unwrap().to_owned(),
                v["timer"].as_i64().unwrap(),
                v["count"].as_u64().unwrap(),
            )
        })
        .collect();
    fired.sort_by_key(|f| f.1);
    // a@10s and b@11s fire on the watermark after the 30 s record (a has 3
    // events by then); a@15s too; a@40s only at the end of input.
    assert_eq!(
        fired,
        vec![
            ("a".into(), 10_000, 3),
            ("b".into(), 11_000, 1),
            ("a".into(), 15_000, 3),
            ("a".into(), 40_000, 3)
        ]
    );
}

/// Registers a timer 10 s after each event of its key and reports the
/// timer when it fires; fails once at record `fail_at` (a crash) if asked.
struct Remind {
    fail_at: Option<(i64, std::sync::Arc<std::sync::atomic::AtomicBool>)>,
}

#[derive(Serialize)]
struct Reminder {
    key: String,
    timer: i64,
}

impl KeyedProcessFunction for Remind {
    type In = (String, i64);
    type Out = Reminder;

    fn states(&self) -> Vec<StateDescriptor> {
        Vec::new()
    }

    fn open(&mut self, _store: &StateStore) -> Result<(), FunctionError> {
        Ok(())
    }

    fn process(
        &mut self,
        _key: &[u8],
        (_, ts): (String, i64),
        ctx: &mut Context<'_, Reminder>,
    ) -> Result<(), FunctionError> {
        if let Some((at, failed)) = &self.fail_at {
            if ts == *at && !failed.swap(true, std::sync::atomic::Ordering::SeqCst) {
                return Err("a crash in the middle of the input".into());
            }
        }
        ctx.register_event_time_timer(ts + 10_000);
        Ok(())
    }

    fn on_timer(
        &mut self,
        key: &[u8],
        timestamp: i64,
        ctx: &mut Context<'_, Reminder>,
    ) -> Result<(), FunctionError> {
        ctx.emit(Reminder {
            key: String::from_utf8_lossy(key).into_owned(),
            timer: timestamp,
        });
        Ok(())
    }
}

fn reminders(out: &std::path::Path) -> Vec<(String, i64)> {
    let mut got: Vec<(String, i64)> = std::fs::read_dir(out)
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("part-"))
        .flat_map(|e| {
            std::fs::read_to_string(e.path())
                .unwrap()
                .lines()
                .map(|l| {
                    let v: serde_json::Value = serde_json::from_str(l).unwrap();
                    (
                        v["key"].as_str().unwrap().to_owned(),
                        v["timer"].as_i64().unwrap(),
                    )
                })
                .collect::<Vec<_>>()
        })
        .collect();
    got.sort();
    got
}

#[test]
fn timers_survive_a_restore_exactly_once_and_live_in_their_keys_key_groups() {
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("events.csv");
    let mut csv = String::from("ts,user\n");
    for i in 0..400i64 {
        csv.push_str(&format!("{},u{}\n", i * 1000, i % 23));
    }
    std::fs::write(&input, csv).unwrap();
    let schema = Schema::new(&[("ts", FieldType::Timestamp), ("user", FieldType::String)]);
    let (out, chk) = (dir.path().join("out"), dir.path().join("chk"));
    let config = JobConfig::load(
        None,
        &[
            "parallelism=2",
            "checkpoint.interval=100ms",
            "checkpoint.retained=100",
            "source.max-records-per-second=400",
        ]
        .map(String::from),
    )
    .unwrap();
    let failed = Arc::new(AtomicBool::new(false));
    let run = |restore: bool| {
        let failed = failed.clone();
        Pipeline::new("reminders", config.clone(), move || Remind {
            fail_at: Some((250_000, failed.clone())),
        })
        .file_source(&input, schema.clone(), parse)
        .key_by(|(user, _)| user.as_bytes().to_vec())
        .timestamps(|(_, ts)| *ts)
        .jsonl_sink(&out)
        .checkpoint_dir(&chk)
        .restore_latest(restore)
        .run()
    };
    let e = run(false).expect_err("the first run crashes").to_string();
    assert!(e.contains("a crash in the middle"), "{e}");
    let report = run(true).unwrap();
    assert!(report.restored_from.is_some(), "restored from a checkpoint");
    // Every (key, event time + 10 s) fires once: none lost, none doubled.
    let mut want: Vec<(String, i64)> = (0..400i64)
        .map(|i| (format!("u{}", i % 23), i * 1000 + 10_000))
        .collect();
    want.sort();
    want.dedup();
    assert_eq!(reminders(&out), want);

    // In every checkpoint, each stored timer entry sits in its key's key
    // group, inside the range of the instance that stored it.
    let mut checked = 0;
    for entry in std::fs::read_dir(&chk).unwrap().flatten() {
        let Ok(text) = std::fs::read_to_string(entry.path().join("_metadata")) else {
            continue;
        };
        let meta = strata_runtime::checkpoint::CheckpointMetadata::decode(&text).unwrap();
        for op in &meta.operators {
            let restored = dir.path().join(format!("inspect-{}-{}", meta.id, op.index));
            strata_cache::snapshot::restore(&chk, &op.manifest, &restored).unwrap();
            let db = rocksdb::DB::open_cf_for_read_only(
                &rocksdb::Options::default(),
                &restored,
                ["default", "__timers"],
                false,
            )
            .unwrap();
            let cf = db.cf_handle("__timers").unwrap();
            for item in db.iterator_cf(&cf, rocksdb::IteratorMode::Start) {
                let (stored, _) = item.unwrap();
                let (kg, key, _) = strata_cache::codec::split_stored_key(&stored).unwrap();
                assert_eq!(
                    kg,
                    strata_cache::key_group::key_group_of(key, meta.max_parallelism)
                );
                assert!(
                    op.key_groups.contains(kg),
                    "timer of key group {kg} in instance {}",
                    op.index
                );
                checked += 1;
            }
        }
    }
    assert!(checked > 0, "no timer was checkpointed");
}
