//! Migration mode against the real Cassandra: an "old job" that
//! read-modify-writes `user_events` on every record processes the first half
//! of an event stream; strata's `user-history`, pointed at that table,
//! processes the next third. Its results continue exactly where the old job
//! stopped, and what it moves to L3 lands in the old table's schema. Then
//! the way back: `strata migration write-back` hands strata's state to the
//! table, and the old job processes the rest, continuing exactly.

use scylla::value::{CqlTimestamp, CqlValue};
use std::collections::HashMap;
use std::io::Write;
use strata_tests::cassandra::{contact_point, unique_keyspace, Cql};
use strata_tests::secure;
use strata_tests::*;

const WINDOW_MS: i64 = 60 * 24 * 3600 * 1000;
const USERS: u64 = 300;
const EVENTS: usize = 12_000;

/// One event: (user, time ms, payload).
type Event = (String, i64, String);

/// Events 10 minutes apart (83 days in all, so the 60-day window slides),
/// users and payload sizes from a fixed xorshift sequence.
fn events() -> Vec<Event> {
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    (0..EVENTS)
        .map(|i| {
            let user = format!("user-{}", next() % USERS);
            let len = 200 + (next() % 200) as usize;
            let payload: String = (0..len)
                .map(|j| (b'a' + ((i + j) % 26) as u8) as char)
                .collect();
            (user, 1_000_000_000_000 + i as i64 * 600_000, payload)
        })
        .collect()
}

/// (user, time, events in window, payload bytes in window) for every event,
/// computed in memory.
fn reference(events: &[Event]) -> Vec<(String, i64, u64, u64)> {
    let mut seen: HashMap<&str, Vec<(i64, usize)>> = HashMap::new();
    events
        .iter()
        .map(|(u, t, p)| {
            let history = seen.entry(u).or_default();
            history.push((*t, p.len()));
            let live = history.iter().filter(|(ts, _)| *ts > t - WINDOW_MS);
            let (n, bytes) = live.fold((0, 0), |(n, b), (_, len)| (n + 1, b + *len as u64));
            (u.clone(), *t, n, bytes)
        })
        .collect()
}

/// The old job: per event, read the user's rows, compute, write a row.
fn old_job(cql: &Cql, table: &str, events: &[Event]) -> Vec<(String, i64, u64, u64)> {
    let select = format!("SELECT event_time, payload FROM {table} WHERE user_id = ?");
    let insert = format!("INSERT INTO {table} (user_id, event_time, payload) VALUES (?, ?, ?)");
    events
        .iter()
        .map(|(u, t, p)| {
            let rows = cql.query_with(&select, vec![CqlValue::Text(u.clone())]);
            let (mut n, mut bytes) = (1u64, p.len() as u64);
            for r in rows {
                if let (Some(Some(CqlValue::Timestamp(ts))), Some(Some(CqlValue::Blob(b)))) =
                    (r.columns.first(), r.columns.get(1))
                {
                    if ts.0 > t - WINDOW_MS {
                        n += 1;
                        bytes += b.len() as u64;
                    }
                }
            }
            let row = vec![
                CqlValue::Text(u.clone()),
                CqlValue::Timestamp(CqlTimestamp(*t)),
                CqlValue::Blob(p.clone().into_bytes()),
            ];
            cql.query_with(&insert, row);
            (u.clone(), *t, n, bytes)
        })
        .collect()
}

fn format_ms(t: i64) -> String {
    chrono::DateTime::from_timestamp_millis(t)
        .unwrap()
        .to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

#[test]
fn strata_picks_up_the_old_jobs_table_and_continues_its_results_exactly() {
    let ks = unique_keyspace("migration");
    let connection = [
        format!("state.l3.contact-points={}", contact_point()),
        format!("state.l3.keyspace={ks}"),
    ];
    round_trip(&Cql::connect(), &ks, &connection);
}

#[test]
fn migration_works_the_same_on_a_cluster_with_a_password_and_tls() {
    let cql = Cql::connect_secure();
    let ks = unique_keyspace("migration_secure");
    // The password from a file this time (the other secured tests use
    // STRATA_L3_PASSWORD).
    let secret = tempfile::tempdir().unwrap();
    let password_file = secret.path().join("l3-password");
    std::fs::write(
        &password_file,
        format!("{}\n", secure::cassandra_password()),
    )
    .unwrap();
    let mut connection = secure::l3_settings(&ks);
    connection.push(format!(
        "state.l3.password-file={}",
        password_file.display()
    ));
    round_trip(&cql, &ks, &connection);
}

/// The old job, then strata on its table with the L3 `connection`
/// settings (`key=value`), then the way back; every result checked.
fn round_trip(cql: &Cql, ks: &str, connection: &[String]) {
    let table = create_old_table(cql, ks);
    let all = events();
    let want = reference(&all);
    let (first, rest) = all.split_at(EVENTS / 2);
    let (second, third) = rest.split_at(EVENTS / 3);
    let third_start = EVENTS - third.len();
    assert_eq!(
        old_job(cql, &table, first),
        want[..EVENTS / 2],
        "the old job itself"
    );

    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("second-half.jsonl");
    write_events(&input, second);
    let out = dir.path().join("out");
    let defines = migration_settings(&table, connection);
    let mut args = vec!["run".to_string(), "user-history".into(), "--input".into()];
    args.push(input.display().to_string());
    args.extend(["--output".into(), out.display().to_string()]);
    args.extend(defines.iter().flat_map(|d| ["-D".to_string(), d.clone()]));
    let o = strata(&args);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    let s = summary(&o.stderr);
    assert!(
        s["l3_hits"].parse::<u64>().unwrap() > 0,
        "nothing read from the old table: {s:?}"
    );

    let mut got: Vec<serde_json::Value> = Vec::new();
    for entry in std::fs::read_dir(&out).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if name.starts_with("part-") && name.ends_with(".jsonl") {
            for l in std::fs::read_to_string(&path).unwrap().lines() {
                got.push(serde_json::from_str(l).unwrap());
            }
        }
    }
    assert_results(&got, &want[EVENTS / 2..third_start]);
    assert_moved_to_old_table(cql, &table, second);

    // The way back: strata's warm state goes to the table, and the old job
    // continues from it exactly.
    let chk = out.join("_checkpoints");
    let mut back = vec![
        "migration".to_string(),
        "write-back".into(),
        "user-history".into(),
        "--checkpoint-dir".into(),
        chk.display().to_string(),
    ];
    back.extend(defines.iter().flat_map(|d| ["-D".to_string(), d.clone()]));
    // Killed half-way (aborted as a SIGKILL would stop it, between its
    // first and its second batch of L3 writes), then run again: it
    // completes, and the table holds exactly the job's state (below).
    let o = std::process::Command::new(strata_bin())
        .args(&back)
        .env("STRATA_CRASH_AT", "before-l3-write:2")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && err.contains("reached: aborting"),
        "the write-back did not stop half-way: {err}"
    );
    assert!(!chk.join("_written_back").exists());
    let o = strata(&back);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(err.contains("keys of checkpoint"), "{err}");
    assert!(
        err.contains(&table.to_lowercase()),
        "names the old table: {err}"
    );
    // A write-back stopped after its moves, before marking the directory
    // (a crash), runs again: the fence it moved does not refuse it.
    std::fs::remove_file(chk.join("_written_back")).unwrap();
    let o = strata(&back);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_old_job_continues(cql, &table, third, &want[third_start..]);
    // strata cannot continue from the checkpoint it handed back.
    args.extend(["--restore".into(), "latest".into()]);
    let again = error_line(&strata(&args));
    assert!(again.contains("written back to L3"), "{again}");
    let twice = error_line(&strata(&back));
    assert!(twice.contains("written back to L3"), "{twice}");
}

/// The old job's keyspace `ks` and its `user_events` table; returns the
/// table as `keyspace.table`.
fn create_old_table(cql: &Cql, ks: &str) -> String {
    cql.query(&format!(
        "CREATE KEYSPACE {ks} WITH replication = {{'class': 'SimpleStrategy', 'replication_factor': 1}}"
    ));
    let table = format!("{ks}.user_events");
    cql.query(&format!(
        "CREATE TABLE {table} (user_id text, event_time timestamp, payload blob, PRIMARY KEY (user_id, event_time))"
    ));
    table
}

fn write_events(path: &std::path::Path, events: &[Event]) {
    let mut f = std::fs::File::create(path).unwrap();
    for (u, t, p) in events {
        let line = serde_json::json!({"user_id": u, "event_time": t, "payload": p});
        writeln!(f, "{line}").unwrap();
    }
}

/// The `-D` settings of a paced migration-mode run on `table` whose tiny
/// L1 and L2 send users back to the table, plus `connection`.
fn migration_settings(table: &str, connection: &[String]) -> Vec<String> {
    let mut defines = vec![
        "checkpoint.interval=1s".to_string(),
        "source.max-records-per-second=2000".into(),
        "state.l1.capacity=64KB".into(),
        "state.l2.capacity=1MB".into(),
        "state.l3.migration.state=events".into(),
        format!("state.l3.migration.table={table}"),
    ];
    defines.extend(connection.iter().cloned());
    defines
}

/// user-history's output lines `got` are exactly the results `want`, in
/// any order.
fn assert_results(got: &[serde_json::Value], want: &[(String, i64, u64, u64)]) {
    let mut got: Vec<(String, String, u64, u64)> = got
        .iter()
        .map(|v| {
            (
                v["user_id"].as_str().unwrap().to_owned(),
                v["event_time"].as_str().unwrap().to_owned(),
                v["events_60d"].as_u64().unwrap(),
                v["payload_bytes_60d"].as_u64().unwrap(),
            )
        })
        .collect();
    let mut expected: Vec<(String, String, u64, u64)> = want
        .iter()
        .map(|(u, t, n, b)| (u.clone(), format_ms(*t), *n, *b))
        .collect();
    got.sort();
    expected.sort();
    assert_eq!(got.len(), expected.len());
    let first_diff = got.iter().zip(&expected).position(|(g, e)| g != e);
    assert!(
        first_diff.is_none(),
        "first difference: {:?}",
        first_diff.map(|i| (&got[i], &expected[i]))
    );
}

/// What strata moved to L3 is in the old table, in its schema.
fn assert_moved_to_old_table(cql: &Cql, table: &str, events: &[Event]) {
    let select = format!("SELECT payload FROM {table} WHERE user_id = ? AND event_time = ?");
    let mut moved = 0;
    for (u, t, p) in events.iter().step_by(10) {
        let key = vec![
            CqlValue::Text(u.clone()),
            CqlValue::Timestamp(CqlTimestamp(*t)),
        ];
        if let Some(row) = cql.query_with(&select, key).first() {
            assert_eq!(
                row.columns[0],
                Some(CqlValue::Blob(p.clone().into_bytes())),
                "the row of {u} at {t} holds another payload"
            );
            moved += 1;
        }
    }
    assert!(moved > 0, "no event strata processed reached the old table");
}

/// The old job, run on `events` after a write-back, gives exactly `want`.
fn assert_old_job_continues(
    cql: &Cql,
    table: &str,
    events: &[Event],
    want: &[(String, i64, u64, u64)],
) {
    let after = old_job(cql, table, events);
    let diff = after.iter().zip(want).position(|(g, e)| g != e);
    assert!(
        diff.is_none(),
        "the old job after the write-back, first difference (got, want): {:?}",
        diff.map(|i| (&after[i], &want[i]))
    );
}

/// The migration guide's Kafka path: the events are in a topic of 2
/// partitions keyed by user, and the old job's group committed where it
/// stopped; a consumer group of two strata processes in migration mode
/// joins that group (`start=committed`) and continues from the old table
/// (exactly: a user's first counts include the old job's rows), each shard
/// reading through and moving back its own users; then `migration
/// write-back` on the group's checkpoint directory hands every shard's
/// state to the table, and the old job continues exactly.
#[test]
fn a_consumer_group_of_two_migrates_from_kafka_and_the_old_job_takes_over_again() {
    let brokers = kafka::require_kafka();
    let cql = Cql::connect();
    let ks = unique_keyspace("migration_group");
    let table = create_old_table(&cql, &ks);
    let all = events();
    let want = reference(&all);
    let (first, rest) = all.split_at(EVENTS / 2);
    let (second, third) = rest.split_at(EVENTS / 3);
    let third_start = EVENTS - third.len();
    assert_eq!(old_job(&cql, &table, first), want[..EVENTS / 2]);

    // The topic holds the old job's events and those after its stop; the
    // old job's group committed its position, the end of its half.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("events.jsonl");
    write_events(&file, &all[..third_start]);
    let (input, output) = (
        kafka::unique_topic("migration-in"),
        kafka::unique_topic("migration-out"),
    );
    let load = strata(&[
        "topic",
        "load",
        file.to_str().unwrap(),
        "--brokers",
        &brokers,
        "--topic",
        &input,
        "--key",
        "user_id",
        "--partitions",
        "2",
    ]);
    assert!(load.status.success(), "{}", error_line(&load));
    let old_group = format!("old-{input}");
    commit_old_jobs_position(&old_group, &input, first.len());
    let chk = dir.path().join("chk");
    let connection = [
        format!("state.l3.contact-points={}", contact_point()),
        format!("state.l3.keyspace={ks}"),
    ];
    let mut defines = migration_settings(&table, &connection);
    // Each shard reads about 2,000 events: paced over about 4 s, so that
    // several checkpoints move users back to the old table.
    defines.push("source.max-records-per-second=500".into());
    defines.push("source.kafka.bounded=true".into());
    let defines: Vec<String> = defines
        .iter()
        .flat_map(|d| ["-D".into(), d.clone()])
        .collect();
    run_together(2, || {
        let mut member = std::process::Command::new(strata_bin());
        member
            .args(["run", "user-history", "--input"])
            .arg(format!(
                "{}?group={old_group}&start=committed",
                kafka::uri(&input)
            ))
            .args(["--output", &kafka::uri(&output), "--checkpoint-dir"])
            .arg(&chk)
            .args(&defines);
        member
    });
    let got: Vec<serde_json::Value> = kafka::read_records(&output, true)
        .into_iter()
        .map(|r| r["value"].clone())
        .collect();
    assert_results(&got, &want[EVENTS / 2..third_start]);
    assert_moved_to_old_table(&cql, &table, second);
    let listed = strata(&["checkpoints", "list", chk.to_str().unwrap()]);
    let listed = String::from_utf8_lossy(&listed.stdout).into_owned();
    for shard in ["p-0 ", "p-1 "] {
        assert!(listed.contains(shard), "{shard} missing from: {listed}");
    }
    assert!(
        listed.contains("offsets=") && !listed.contains("records="),
        "{listed}"
    );
    // A key's state is read from its shard's checkpoints, through the old
    // table for a user the shard moved back there.
    let group_dir = strata(&["state", "get", chk.to_str().unwrap(), "events", "user-1"]);
    let e = error_line(&group_dir);
    assert!(!group_dir.status.success() && e.contains("p-0, p-1"), "{e}");
    let (user, time, payload) = second.last().unwrap();
    let last = serde_json::json!({"event_time": format_ms(*time), "payload": payload});
    let mut found = 0;
    for shard in ["p-0", "p-1"] {
        let mut args = vec!["state", "get"];
        let dir = chk.join(shard);
        args.extend([dir.to_str().unwrap(), "events", user.as_str()]);
        args.extend(defines.iter().map(String::as_str));
        let o = strata(&args);
        assert!(o.status.success(), "{}", error_line(&o));
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        let events = v["value"].as_array().cloned().unwrap_or_default();
        found += usize::from(events.last() == Some(&last));
    }
    // The shard that owns the user ends with its last event (the other
    // sees what the shared old table holds of it, which may be all).
    assert!(found >= 1, "{user}'s last event {last} in no shard");

    let mut back = vec![
        "migration",
        "write-back",
        "user-history",
        "--checkpoint-dir",
    ];
    back.push(chk.to_str().unwrap());
    back.extend(defines.iter().map(String::as_str));
    let o = strata(&back);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    for shard in ["p-0", "p-1"] {
        assert!(
            err.contains(&format!("{shard} can no longer be restored")),
            "{err}"
        );
    }
    assert_old_job_continues(&cql, &table, third, &want[third_start..]);
}

/// Commits, as the old job's consumer group `group`, the offset of each
/// partition of `topic` just past the first `done` events of the input
/// (`strata topic load` keeps the file's order within a partition).
fn commit_old_jobs_position(group: &str, topic: &str, done: usize) {
    use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
    use rdkafka::{ClientConfig, Offset, TopicPartitionList};
    let cutoff = events()[done].1;
    let mut position: std::collections::BTreeMap<i64, i64> = Default::default();
    for r in kafka::read_records(topic, false) {
        let partition = r["partition"].as_i64().unwrap();
        let next = position.entry(partition).or_default();
        if r["value"]["event_time"].as_i64().unwrap() < cutoff {
            *next = (*next).max(r["offset"].as_i64().unwrap() + 1);
        }
    }
    assert_eq!(
        position.len(),
        2,
        "both partitions hold events: {position:?}"
    );
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", kafka::brokers())
        .set("group.id", group)
        .set("enable.auto.commit", "false")
        .create()
        .unwrap();
    let mut offsets = TopicPartitionList::new();
    for (p, o) in position {
        offsets
            .add_partition_offset(topic, p as i32, Offset::Offset(o))
            .unwrap();
    }
    consumer.commit(&offsets, CommitMode::Sync).unwrap();
}
