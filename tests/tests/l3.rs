//! route-history with the Cassandra cold tier (L3), against the real
//! Cassandra that `scripts/cassandra.sh` starts: exact output with a tiny
//! L1 and L2, crashes at the moments cold eviction is most fragile, a
//! zombie run fenced off, and a clear error when Cassandra is unreachable.
//!
//! The runs read the first 200,000 flights (three months, so the 60-day
//! TTL matters): route-history reads every route's whole window on every
//! flight, so with L1 and L2 far below the state nearly every record needs
//! a Cassandra read, and the whole file would take many minutes here.

use scylla::value::CqlValue;
use std::collections::HashSet;
use std::process::Command;
use std::time::{Duration, Instant};
use strata_runtime::jobs::route_history::FlightEvent;
use strata_tests::cassandra::{contact_point, unique_keyspace, Cql};
use strata_tests::wait;
use strata_tests::*;

/// `-D` arguments that turn L3 on in `keyspace`, with 1 MB of L1 and
/// `l2` of L2 per instance.
fn l3_args(keyspace: &str, l2: &str) -> Vec<String> {
    [
        // A paced source, so that many checkpoints move keys to L3 and the
        // run reads them back.
        "checkpoint.interval=1s".to_string(),
        "source.max-records-per-second=20000".into(),
        "state.l1.capacity=1MB".into(),
        format!("state.l2.capacity={l2}"),
        format!("state.l3.contact-points={}", contact_point()),
        format!("state.l3.keyspace={keyspace}"),
    ]
    .into_iter()
    .flat_map(|d| ["-D".to_string(), d])
    .collect()
}

/// The head of the flights file the runs read.
fn input() -> std::path::PathBuf {
    flights_head(200_000)
}

fn run(out: &std::path::Path, chk: &std::path::Path, extra: &[String]) -> std::process::Output {
    let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
    strata(&route_history_args(&input(), out, Some(chk), &extra))
}

fn routes(lines: &[Line]) -> usize {
    lines
        .iter()
        .map(|l| (l.origin.as_str(), l.destination.as_str()))
        .collect::<HashSet<_>>()
        .len()
}

fn assert_equals_batch(out: &std::path::Path, what: &str) {
    let got = read_output(out);
    let want = reference_route_history(&input());
    if let Some(diff) = first_difference(&got, &want) {
        panic!("{what}: the output differs from the batch computation: {diff}");
    }
}

#[test]
fn tiny_l1_and_l2_give_the_batch_output_l3_holds_most_routes_state_get_reads_them_and_a_zombie_is_fenced(
) {
    let cql = Cql::connect();
    let ks = unique_keyspace("exact");
    let dir = tempfile::tempdir().unwrap();
    let (out, chk) = (dir.path().join("out"), dir.path().join("chk"));
    let mut args = l3_args(&ks, "1MB");
    args.extend(["-D".into(), "checkpoint.retained=100".into()]);
    let o = run(&out, &chk, &args);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let s = summary(&o.stderr);
    eprintln!(
        "{}",
        String::from_utf8_lossy(&o.stderr).lines().last().unwrap()
    );
    assert_equals_batch(&out, "L1 1MB, L2 1MB, L3 on");
    let total = routes(&read_output(&out));
    let in_l3 = cql.keys_of(&ks, "history");
    assert!(
        2 * in_l3 > total,
        "L3 should hold most of the {total} routes, holds {in_l3} (summary {s:?})"
    );
    assert!(
        s["l3_hits"].parse::<u64>().unwrap() > 0,
        "nothing was read back from L3"
    );
    state_get_reads_cold_routes_through_l3(dir.path(), &chk, &ks, &cql);

    // A zombie: the same job restored from an older checkpoint while a
    // newer run has moved later checkpoints to L3. It must not write.
    let before = cql.fingerprint(&ks);
    let zombie = dir.path().join("zombie");
    copy_dir(&chk, &zombie.join("chk"));
    let ids = checkpoint_ids(&zombie.join("chk"));
    for id in &ids[ids.len() / 2..] {
        std::fs::remove_dir_all(zombie.join("chk").join(format!("chk-{id}"))).unwrap();
    }
    let mut zargs = args.clone();
    zargs.extend(["--restore".into(), "latest".into()]);
    let z = run(&zombie.join("out"), &zombie.join("chk"), &zargs);
    let err = String::from_utf8_lossy(&z.stderr);
    assert!(!z.status.success(), "the zombie ran to completion: {err}");
    assert!(err.contains("fenced"), "the zombie failed otherwise: {err}");
    assert_eq!(cql.fingerprint(&ks), before, "the zombie changed L3");
}

/// Routes (origin, destination) whose `history` L3 holds, at most `n`.
fn cold_routes(cql: &Cql, ks: &str, n: usize) -> Vec<(String, String)> {
    let rows = cql.query(&format!("SELECT DISTINCT state, key FROM {ks}.state"));
    let routes: Vec<(String, String)> = rows
        .iter()
        .filter_map(|r| {
            let Some(Some(CqlValue::Blob(stored))) = r.columns.get(1) else {
                return None;
            };
            let (_, key, _) = strata_cache::codec::split_stored_key(stored)?;
            let parts = strata_cache::composite_key::decode(key)?;
            let text = |b: &[u8]| String::from_utf8(b.to_vec()).ok();
            Some((text(parts.first()?)?, text(parts.get(1)?)?))
        })
        .take(n)
        .collect();
    assert!(!routes.is_empty(), "L3 holds no route");
    routes
}

/// `strata state get` on the final checkpoint of a run with L3: a route
/// L3 holds reads as a run without L3 (every element) reads it, given the
/// job's L3 settings, and is refused without them; a route that never
/// flew is "no such key".
fn state_get_reads_cold_routes_through_l3(
    dir: &std::path::Path,
    chk: &std::path::Path,
    ks: &str,
    cql: &Cql,
) {
    let (plain_out, plain_chk) = (dir.join("plain-out"), dir.join("plain-chk"));
    let plain = strata(&route_history_args(
        &input(),
        &plain_out,
        Some(&plain_chk),
        &[],
    ));
    assert!(plain.status.success(), "{}", error_line(&plain));
    let l3 = [
        "-D".to_string(),
        format!("state.l3.contact-points={}", contact_point()),
    ];
    let get = |chk: &std::path::Path, route: &(String, String), extra: &[String]| {
        let mut args = vec!["state", "get", chk.to_str().unwrap(), "history"];
        args.extend([route.0.as_str(), route.1.as_str()]);
        args.extend(extra.iter().map(String::as_str));
        let o = strata(&args);
        assert!(o.status.success(), "{route:?}: {}", error_line(&o));
        serde_json::from_slice::<serde_json::Value>(&o.stdout).unwrap()
    };
    let mut live = 0;
    for route in cold_routes(cql, ks, 20) {
        let (cold, want) = (get(chk, &route, &l3), get(&plain_chk, &route, &[]));
        if want["status"] == "live" {
            live += 1;
            assert_eq!(cold["status"], "live", "{route:?}: {cold}");
            assert_eq!(cold["value"], want["value"], "{route:?}");
        } else {
            assert_ne!(
                cold["status"], "live",
                "{route:?}: {cold}, without L3 {want}"
            );
        }
    }
    assert!(
        live > 0,
        "no route L3 holds is live at the final checkpoint"
    );
    let route = &cold_routes(cql, ks, 1)[0];
    let o = strata(&[
        "state",
        "get",
        chk.to_str().unwrap(),
        "history",
        &route.0,
        &route.1,
    ]);
    assert!(!o.status.success(), "read without the L3 settings");
    let e = error_line(&o);
    assert!(
        e.contains("L3 is off") && e.contains("state.l3.contact-points"),
        "{e}"
    );
    let never = get(chk, &("ZZZ".into(), "QQQ".into()), &l3);
    assert_eq!(never["status"], "no such key", "{never}");
    assert!(never.get("value").is_none(), "{never}");
}

/// Runs the job once per crash point (`STRATA_CRASH_AT`), each run after
/// the first restoring the latest checkpoint; checks that each run aborted
/// there, then calls `after_each`.
fn crash_at(
    out: &std::path::Path,
    chk: &std::path::Path,
    args: &[String],
    points: &[&str],
    after_each: impl Fn(),
) {
    for (i, point) in points.iter().enumerate() {
        let mut cmd = Command::new(strata_bin());
        let a: Vec<&str> = args.iter().map(String::as_str).collect();
        cmd.args(route_history_args(&input(), out, Some(chk), &a));
        if i > 0 {
            cmd.args(["--restore", "latest"]);
        }
        let o = cmd.env("STRATA_CRASH_AT", point).output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            !o.status.success() && err.contains("reached: aborting"),
            "run {i} did not crash at {point}: {err}"
        );
        after_each();
    }
}

fn copy_dir(from: &std::path::Path, to: &std::path::Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else if entry.file_name() != "_lock" {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

fn checkpoint_ids(chk: &std::path::Path) -> Vec<u64> {
    let mut ids: Vec<u64> = std::fs::read_dir(chk)
        .unwrap()
        .filter_map(|e| {
            let name = e.ok()?.file_name().into_string().ok()?;
            name.strip_prefix("chk-")?.parse().ok()
        })
        .collect();
    ids.sort();
    assert!(
        ids.len() >= 4,
        "too few checkpoints to pick an older one: {ids:?}"
    );
    ids
}

#[test]
fn crashes_around_cold_eviction_then_restore_give_the_batch_output() {
    Cql::connect();
    let ks = unique_keyspace("crash");
    let dir = tempfile::tempdir().unwrap();
    let (out, chk) = (dir.path().join("out"), dir.path().join("chk"));
    let args = l3_args(&ks, "1MB");
    // Abort right after a checkpoint completed, before its cold keys reach
    // L3; then after they reached L3 but before L2 forgot them; then a
    // SIGKILL mid-run; then run to the end.
    crash_at(
        &out,
        &chk,
        &args,
        &["before-l3-write:3", "before-l2-delete:2"],
        || {},
    );
    let mut cmd = Command::new(strata_bin());
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    cmd.args(route_history_args(&input(), &out, Some(&chk), &a));
    let restored = wait::completed_checkpoints(&chk).last().copied();
    let mut child = cmd.args(["--restore", "latest"]).spawn().unwrap();
    // Mid-run, once it completed a checkpoint of its own (and moved its
    // cold keys to L3).
    wait::until_while_running(
        &mut child,
        "a checkpoint of the restored run",
        Duration::from_secs(120),
        || wait::completed_checkpoints(&chk).last().copied() > restored,
    );
    assert!(
        child.try_wait().unwrap().is_none(),
        "the run ended before the kill"
    );
    child.kill().unwrap();
    child.wait().unwrap();
    let mut restore = args.clone();
    restore.extend(["--restore".into(), "latest".into()]);
    let o = run(&out, &chk, &restore);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_ne!(summary(&o.stderr)["restored_from"], "none");
    assert_equals_batch(&out, "after three crashes");
}

#[test]
fn unreachable_cassandra_is_a_clear_error_within_the_connect_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let started = Instant::now();
    let o = strata(&route_history_args(
        &flights_path(),
        &dir.path().join("out"),
        None,
        &[
            "-D",
            "state.l3.contact-points=127.0.0.1:9",
            "-D",
            "state.l3.connect-timeout=2s",
        ],
    ));
    let elapsed = started.elapsed();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert!(
        err.contains("127.0.0.1:9"),
        "the error names the node: {err}"
    );
    assert!(elapsed < Duration::from_secs(15), "took {elapsed:?}: {err}");
    assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
}

#[test]
fn a_second_job_on_an_l3_table_is_refused_even_when_both_start_at_once() {
    Cql::connect();
    let ks = unique_keyspace("owner");
    let dir = tempfile::tempdir().unwrap();
    let head = flights_head(20_000);
    let start = |name: &str| {
        let a = l3_args(&ks, "1MB");
        let a: Vec<&str> = a.iter().map(String::as_str).collect();
        let (out, chk) = (
            dir.path().join(name),
            dir.path().join(format!("{name}-chk")),
        );
        Command::new(strata_bin())
            .args(route_history_args(&head, &out, Some(&chk), &a))
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    };
    let (a, b) = (start("a"), start("b"));
    let (a, b) = (a.wait_with_output().unwrap(), b.wait_with_output().unwrap());
    let refused = |o: &std::process::Output| {
        !o.status.success()
            && String::from_utf8_lossy(&o.stderr).contains("holds the state of another job")
    };
    let (winner, loser) = if a.status.success() {
        ("a", &b)
    } else {
        ("b", &a)
    };
    assert!(
        refused(loser),
        "exactly one of two jobs may own the table: {} / {}",
        String::from_utf8_lossy(&a.stderr),
        String::from_utf8_lossy(&b.stderr)
    );
    let got = read_output(&dir.path().join(winner));
    assert!(first_difference(&got, &reference_route_history(&head)).is_none());
    // A fresh start of the same job later is another job too.
    let again = start("c").wait_with_output().unwrap();
    assert!(
        refused(&again),
        "{}",
        String::from_utf8_lossy(&again.stderr)
    );
}

/// Every row of route-history's history in L3 holds one whole element:
/// its time column is the date inside its value (a mix of two writes would
/// put one element's time beside another's value).
fn assert_rows_whole(cql: &Cql, ks: &str) -> usize {
    let rows = cql.query(&format!("SELECT ts, value FROM {ks}.state"));
    for row in &rows {
        let (Some(CqlValue::BigInt(ts)), Some(CqlValue::Blob(value))) =
            (&row.columns[0], &row.columns[1])
        else {
            panic!("unexpected row {row:?}");
        };
        let event: FlightEvent = postcard::from_bytes(value).expect("a FlightEvent");
        assert_eq!(*ts, event.date, "an L3 row mixes two elements: {event:?}");
    }
    rows.len()
}

#[test]
fn cold_moves_repeated_after_crashes_rewrite_the_same_rows_and_the_output_is_exact() {
    let cql = Cql::connect();
    let ks = unique_keyspace("rewrite");
    let dir = tempfile::tempdir().unwrap();
    let (out, chk) = (dir.path().join("out"), dir.path().join("chk"));
    let args = l3_args(&ks, "1MB");
    // Crash after a move reached L3 and before L2 forgot its keys, three
    // times at different moves; each restore repeats the move.
    crash_at(
        &out,
        &chk,
        &args,
        &[
            "before-l2-delete:3",
            "before-l2-delete:2",
            "before-l2-delete:4",
        ],
        || {
            assert_rows_whole(&cql, &ks);
        },
    );
    let mut restore = args.clone();
    restore.extend(["--restore".into(), "latest".into()]);
    let o = run(&out, &chk, &restore);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_equals_batch(&out, "after three crashes between L3 writes and L2 deletes");
    assert!(assert_rows_whole(&cql, &ks) > 0);
}

#[test]
fn a_run_killed_before_its_first_checkpoint_restores_with_l3_on() {
    Cql::connect();
    let ks = unique_keyspace("early");
    let dir = tempfile::tempdir().unwrap();
    let (out, chk) = (dir.path().join("out"), dir.path().join("chk"));
    let mut args = l3_args(&ks, "1MB");
    args.extend(["-D".into(), "checkpoint.interval=1h".into()]);
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut child = Command::new(strata_bin())
        .args(route_history_args(&input(), &out, Some(&chk), &a))
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // Once records reach the sink: the run has claimed L3 (it does before
    // its tasks start).
    wait::until_while_running(
        &mut child,
        "the first records at the sink",
        Duration::from_secs(60),
        || wait::writing_output(&out),
    );
    assert!(
        child.try_wait().unwrap().is_none(),
        "the run ended before the kill"
    );
    child.kill().unwrap();
    child.wait().unwrap();
    // What the README says to do: --restore latest. No checkpoint
    // completed, so it starts over — and takes over its own L3 claim.
    let mut restore = l3_args(&ks, "1MB");
    restore.extend(["--restore".into(), "latest".into()]);
    let o = run(&out, &chk, &restore);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_equals_batch(&out, "started over after a kill before any checkpoint");
}

#[test]
fn a_restore_refuses_another_l3_table_and_a_table_that_lost_its_claim() {
    let cql = Cql::connect();
    let ks = unique_keyspace("moved");
    let dir = tempfile::tempdir().unwrap();
    let head = flights_head(20_000);
    let (out, chk) = (dir.path().join("out"), dir.path().join("chk"));
    let args = l3_args(&ks, "1MB");
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    let o = strata(&route_history_args(&head, &out, Some(&chk), &a));
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let restore_in = |keyspace: &str| {
        let mut r = l3_args(keyspace, "1MB");
        r.extend(["--restore".into(), "latest".into()]);
        let r: Vec<&str> = r.iter().map(String::as_str).collect();
        let o = strata(&route_history_args(&head, &out, Some(&chk), &r));
        assert!(!o.status.success());
        String::from_utf8_lossy(&o.stderr).into_owned()
    };
    // With L3 off the keys moved there would simply be missing.
    let off = strata(&route_history_args(
        &head,
        &out,
        Some(&chk),
        &["--restore", "latest"],
    ));
    let e = error_line(&off);
    assert!(
        e.contains(&format!("L3 table {ks}.state, but L3 is off")),
        "{e}"
    );
    let e = restore_in(&unique_keyspace("elsewhere"));
    assert!(
        e.contains(&format!("keeps its cold state in L3 table {ks}.state")),
        "{e}"
    );
    cql.query(&format!("TRUNCATE {ks}.state"));
    cql.query(&format!("TRUNCATE {ks}.state_fence"));
    let e = restore_in(&ks);
    assert!(e.contains("holds no claim"), "{e}");
}

/// `strata state get` on a user-history checkpoint whose cold users L3
/// holds: a user whose events L3 still holds but are all past the 60-day
/// TTL at the checkpoint's watermark is "expired", a user with recent
/// events is "live" with every event, one that never wrote is "no such
/// key". The old users move to L3 while still live (a paced source and
/// checkpoints every 100 ms, a 1 MB L2), then the new users' events move
/// the watermark 70 days on; the L3 sweep deletes only some of their rows
/// by the end, and the one asked about is one whose rows L3 still holds.
#[test]
fn state_get_tells_an_expired_user_in_l3_from_a_live_and_an_unknown_one() {
    const DAY: i64 = 86_400_000;
    const USERS: usize = 6_000;
    let (cql, ks) = (Cql::connect(), unique_keyspace("expired"));
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("events.jsonl");
    let t0 = 1_000_000_000_000_i64;
    let payload = "p".repeat(400);
    let event = |user: String, time: i64| {
        serde_json::json!({"user_id": user, "event_time": time, "payload": payload}).to_string()
    };
    let old = (0..USERS).map(|u| event(format!("old-{u}"), t0 - 70 * DAY + u as i64));
    let new = (0..USERS).map(|u| event(format!("new-{u}"), t0 + u as i64));
    std::fs::write(&input, old.chain(new).collect::<Vec<_>>().join("\n")).unwrap();
    let (out, chk) = (dir.path().join("out"), dir.path().join("chk"));
    let settings = [
        "checkpoint.interval=100ms".to_string(),
        "source.max-records-per-second=6000".into(),
        "state.l1.capacity=64kB".into(),
        "state.l2.capacity=1MB".into(),
        format!("state.l3.contact-points={}", contact_point()),
        format!("state.l3.keyspace={ks}"),
    ];
    let defines: Vec<String> = settings
        .iter()
        .flat_map(|d| ["-D".into(), d.clone()])
        .collect();
    let mut args = vec!["run", "user-history", "--input", input.to_str().unwrap()];
    args.extend([
        "--output",
        out.to_str().unwrap(),
        "--checkpoint-dir",
        chk.to_str().unwrap(),
    ]);
    args.extend(defines.iter().map(String::as_str));
    let o = strata(&args);
    assert!(o.status.success(), "{}", error_line(&o));
    let held: Vec<String> = cql
        .query(&format!("SELECT DISTINCT state, key FROM {ks}.state"))
        .iter()
        .filter_map(|r| {
            let Some(Some(CqlValue::Blob(stored))) = r.columns.get(1) else {
                return None;
            };
            // user-history's key is the user id's bytes.
            let (_, key, _) = strata_cache::codec::split_stored_key(stored)?;
            String::from_utf8(key.to_vec()).ok()
        })
        .filter(|u| u.starts_with("old-"))
        .collect();
    assert!(!held.is_empty(), "L3 holds no old user's events");
    let get = |user: &str| {
        let mut a = vec!["state", "get", chk.to_str().unwrap(), "events", user];
        a.extend(defines.iter().map(String::as_str));
        let o = strata(&a);
        assert!(o.status.success(), "{user}: {}", error_line(&o));
        serde_json::from_slice::<serde_json::Value>(&o.stdout).unwrap()
    };
    let expired = get(&held[0]);
    assert_eq!(expired["status"], "expired", "{}: {expired}", held[0]);
    assert!(expired.get("value").is_none(), "{expired}");
    let live = get("new-17");
    assert_eq!(live["status"], "live", "{live}");
    let events = live["value"].as_array().unwrap();
    assert_eq!(events.len(), 1, "{live}");
    assert_eq!(events[0]["payload"], payload.as_str(), "{live}");
    assert_eq!(get("nobody")["status"], "no such key");
}
