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
        .naive_utc()
        .format("%Y-%m-%dT%H:%M:%S")
        .to_string()
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
    cql.query(&format!(
        "CREATE KEYSPACE {ks} WITH replication = {{'class': 'SimpleStrategy', 'replication_factor': 1}}"
    ));
    let table = format!("{ks}.user_events");
    cql.query(&format!(
        "CREATE TABLE {table} (user_id text, event_time timestamp, payload blob, PRIMARY KEY (user_id, event_time))"
    ));
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
    let mut f = std::fs::File::create(&input).unwrap();
    for (u, t, p) in second {
        let line = serde_json::json!({"user_id": u, "event_time": t, "payload": p});
        writeln!(f, "{line}").unwrap();
    }
    let out = dir.path().join("out");
    let mut defines = vec![
        "checkpoint.interval=1s".to_string(),
        "source.max-records-per-second=2000".into(),
        "state.l1.capacity=64KB".into(),
        "state.l2.capacity=1MB".into(),
        "state.l3.migration.state=events".into(),
        format!("state.l3.migration.table={table}"),
    ];
    defines.extend(connection.iter().cloned());
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

    let mut got: Vec<(String, String, u64, u64)> = Vec::new();
    for entry in std::fs::read_dir(&out).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if name.starts_with("part-") && name.ends_with(".jsonl") {
            for l in std::fs::read_to_string(&path).unwrap().lines() {
                let v: serde_json::Value = serde_json::from_str(l).unwrap();
                got.push((
                    v["user_id"].as_str().unwrap().to_owned(),
                    v["event_time"].as_str().unwrap().to_owned(),
                    v["events_60d"].as_u64().unwrap(),
                    v["payload_bytes_60d"].as_u64().unwrap(),
                ));
            }
        }
    }
    let mut expected: Vec<(String, String, u64, u64)> = want[EVENTS / 2..third_start]
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

    // What strata moved to L3 is in the old table, in its schema.
    let select = format!("SELECT payload FROM {table} WHERE user_id = ? AND event_time = ?");
    let mut moved = 0;
    for (u, t, p) in second.iter().step_by(10) {
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
    assert!(
        moved > 0,
        "no event of the second half reached the old table"
    );

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
    let after = old_job(cql, &table, third);
    let diff = after
        .iter()
        .zip(&want[third_start..])
        .position(|(g, e)| g != e);
    assert!(
        diff.is_none(),
        "the old job after the write-back, first difference (got, want): {:?}",
        diff.map(|i| (&after[i], &want[third_start + i]))
    );
    // strata cannot continue from the checkpoint it handed back.
    args.extend(["--restore".into(), "latest".into()]);
    let again = error_line(&strata(&args));
    assert!(again.contains("written back to L3"), "{again}");
    let twice = error_line(&strata(&back));
    assert!(twice.contains("written back to L3"), "{twice}");
}
