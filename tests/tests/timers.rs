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
