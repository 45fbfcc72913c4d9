//! Every documented topology setting works: route-history, run through the
//! library over the whole documented range of `parallelism`,
//! `sink.parallelism`, `max-parallelism`, `channel.capacity` and
//! `channel.batch-size`, writes exactly the batch computation's output — on
//! ten flights and on an input with no records at all.

use proptest::prelude::*;
use strata_runtime::jobs::route_history::{self, RouteHistory};
use strata_runtime::{JobConfig, Pipeline};
use strata_tests::*;

/// One topology: the `-D` settings it stands for.
#[derive(Debug, Clone)]
struct Topology {
    parallelism: u32,
    sinks: u32,
    max_parallelism: u32,
    channel_capacity: u32,
    batch_size: u32,
}

impl Topology {
    fn config(&self) -> JobConfig {
        let overrides: Vec<String> = vec![
            format!("parallelism={}", self.parallelism),
            format!("sink.parallelism={}", self.sinks),
            format!("max-parallelism={}", self.max_parallelism),
            format!("channel.capacity={}", self.channel_capacity),
            format!("channel.batch-size={}", self.batch_size),
            "state.l1.capacity=64KB".into(),
            "state.l2.memory=8MB".into(),
        ];
        JobConfig::load(None, &overrides).expect("a documented configuration")
    }
}

/// Values across each documented range (1–256, 1–`parallelism`,
/// `parallelism`–32768, 1–65536, 1–65536), its ends included.
fn topology() -> impl Strategy<Value = Topology> {
    let parallelism = prop_oneof![1u32..=8, Just(13u32), Just(64u32), Just(256u32)];
    parallelism.prop_flat_map(|p| {
        (
            Just(p),
            prop_oneof![Just(1u32), 1u32..=p, Just(p)],
            prop_oneof![Just(p), p..=1024, Just(32768u32)],
            prop_oneof![Just(1u32), 1u32..=64, Just(65536u32)],
            prop_oneof![Just(1u32), 1u32..=16, Just(65536u32)],
        )
            .prop_map(
                |(parallelism, sinks, max_parallelism, channel_capacity, batch_size)| Topology {
                    parallelism,
                    sinks,
                    max_parallelism,
                    channel_capacity,
                    batch_size,
                },
            )
    })
}

fn run(topology: &Topology, input: &std::path::Path) -> Vec<Line> {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let report = Pipeline::new("route-history", topology.config(), RouteHistory::default)
        .file_source(input, route_history::schema(), route_history::parse)
        .key_by(route_history::key)
        .timestamps(|f| f.date)
        .jsonl_sink(&out)
        .run()
        .unwrap_or_else(|e| panic!("{topology:?} failed: {e}"));
    assert!(
        !report.checkpoints.is_empty(),
        "{topology:?}: no final checkpoint"
    );
    read_output(&out)
}

fn header_only() -> std::path::PathBuf {
    static DIR: std::sync::OnceLock<tempfile::TempDir> = std::sync::OnceLock::new();
    let dir = DIR.get_or_init(|| tempfile::tempdir().unwrap());
    let path = dir.path().join("no-records.csv");
    std::fs::write(&path, "date,delay,distance,origin,destination\n").unwrap();
    path
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 12, ..ProptestConfig::default() })]

    #[test]
    fn every_documented_topology_gives_the_exact_output(t in topology()) {
        let ten = case("ten-flights.csv");
        let got = run(&t, &ten);
        let want = reference_from_flights(&csv_flights(&ten));
        prop_assert_eq!(want.len(), 10);
        prop_assert!(first_difference(&got, &want).is_none(), "{:?}: {:?}", t, first_difference(&got, &want));
        prop_assert!(run(&t, &header_only()).is_empty(), "{:?} wrote output for no input", t);
    }
}

#[test]
fn fewer_sinks_than_keyed_instances_receive_every_instance_s_output() {
    // The cases of the report: 3/2, 4/2, 4/3 (a keyed instance's edge was
    // dropped while the sinks were wired).
    for (parallelism, sinks) in [(3, 2), (4, 2), (4, 3)] {
        let t = Topology {
            parallelism,
            sinks,
            max_parallelism: 128,
            channel_capacity: 16,
            batch_size: 512,
        };
        let ten = case("ten-flights.csv");
        let got = run(&t, &ten);
        let want = reference_from_flights(&csv_flights(&ten));
        assert!(first_difference(&got, &want).is_none(), "{t:?}");
    }
}
