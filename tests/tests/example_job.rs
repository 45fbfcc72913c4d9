//! The example of a job of its own, `examples/click-sessions`, built as
//! the workspace builds it and run as its README says: from a Kafka topic
//! of 2 partitions keyed by user, once by one process into a directory and
//! once by a consumer group of two processes into a topic. Every session
//! (user, start, end, every page in order) equals one computed here.

use std::collections::BTreeMap;
use std::process::Command;
use strata_tests::kafka::{read_records, require_kafka, unique_topic, uri};
use strata_tests::*;

const GAP_MS: i64 = 30 * 60 * 1000;
const USERS: u64 = 12;
const CLICKS: usize = 3_000;

/// (user, time ms, page), in time order: a click every 20 s to 3 min
/// (never a whole second: no click lies exactly a gap after another),
/// users and pages from a fixed xorshift sequence.
fn clicks() -> Vec<(String, i64, String)> {
    let mut x = 0x2545_F491_4F6C_DD1Du64;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let mut time = 1_700_000_000_000i64;
    (0..CLICKS)
        .map(|_| {
            time += 20_000 + (next() % 160_000) as i64 + 7;
            let user = format!("user-{}", next() % USERS);
            let page = format!("/page/{}", next() % 40);
            (user, time, page)
        })
        .collect()
}

/// (user, start, end, pages) of every session: a user's clicks split
/// where two follow each other more than the gap apart.
fn sessions(clicks: &[(String, i64, String)]) -> Vec<(String, i64, i64, Vec<String>)> {
    let mut by_user: BTreeMap<&str, Vec<(i64, &str)>> = BTreeMap::new();
    for (u, t, p) in clicks {
        by_user.entry(u).or_default().push((*t, p));
    }
    let mut out = Vec::new();
    for (user, list) in by_user {
        let mut open: Vec<(i64, &str)> = Vec::new();
        for (t, p) in list {
            if open.last().is_some_and(|(last, _)| t > last + GAP_MS) {
                out.push(session(user, &open));
                open.clear();
            }
            open.push((t, p));
        }
        out.push(session(user, &open));
    }
    out.sort();
    out
}

fn session(user: &str, clicks: &[(i64, &str)]) -> (String, i64, i64, Vec<String>) {
    (
        user.to_owned(),
        clicks[0].0,
        clicks[clicks.len() - 1].0,
        clicks.iter().map(|(_, p)| p.to_string()).collect(),
    )
}

/// A session line as the job writes it, its times back in ms.
fn parsed(v: &serde_json::Value) -> (String, i64, i64, Vec<String>) {
    let ms = |f: &str| {
        chrono::DateTime::parse_from_rfc3339(v[f].as_str().unwrap())
            .unwrap()
            .timestamp_millis()
    };
    let pages: Vec<String> = v["pages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p.as_str().unwrap().to_owned())
        .collect();
    assert_eq!(v["clicks"].as_u64(), Some(pages.len() as u64), "{v}");
    (
        v["user_id"].as_str().unwrap().to_owned(),
        ms("start"),
        ms("end"),
        pages,
    )
}

fn assert_sessions(
    mut got: Vec<(String, i64, i64, Vec<String>)>,
    want: &[(String, i64, i64, Vec<String>)],
) {
    got.sort();
    assert_eq!(got.len(), want.len(), "sessions");
    let diff = got.iter().zip(want).position(|(g, w)| g != w);
    assert!(
        diff.is_none(),
        "first difference (got, want): {:?}",
        diff.map(|i| (&got[i], &want[i]))
    );
}

/// The clicks in a new topic of 2 partitions keyed by user.
fn clicks_topic(dir: &std::path::Path, clicks: &[(String, i64, String)]) -> String {
    let file = dir.join("clicks.jsonl");
    let lines: Vec<String> = clicks
        .iter()
        .map(|(u, t, p)| serde_json::json!({"user_id": u, "time": t, "page": p}).to_string())
        .collect();
    std::fs::write(&file, lines.join("\n")).unwrap();
    let topic = unique_topic("clicks");
    let load = strata(&[
        "topic",
        "load",
        file.to_str().unwrap(),
        "--brokers",
        &require_kafka(),
        "--topic",
        &topic,
        "--key",
        "user_id",
        "--partitions",
        "2",
    ]);
    assert!(load.status.success(), "{}", error_line(&load));
    topic
}

fn example(args: &[&str]) -> Command {
    let mut cmd = Command::new(workspace_bin("click-sessions"));
    cmd.args([
        "run",
        "-D",
        "source.kafka.bounded=true",
        "-D",
        "checkpoint.interval=1s",
    ])
    .args(args);
    cmd
}

#[test]
fn the_example_job_runs_with_strata_s_command_line_alone_and_in_a_group() {
    let all = clicks();
    let want = sessions(&all);
    let dir = tempfile::tempdir().unwrap();
    let topic = clicks_topic(dir.path(), &all);

    // One process, into a directory.
    let out = dir.path().join("out");
    let o = example(&["--input", &uri(&topic), "--output", out.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let mut lines = Vec::new();
    for entry in std::fs::read_dir(&out).unwrap().flatten() {
        if entry.file_name().to_string_lossy().starts_with("part-") {
            let text = std::fs::read_to_string(entry.path()).unwrap();
            lines.extend(text.lines().map(|l| serde_json::from_str(l).unwrap()));
        }
    }
    assert_sessions(lines.iter().map(parsed).collect(), &want);
    let listed = strata(&[
        "checkpoints",
        "list",
        out.join("_checkpoints").to_str().unwrap(),
    ]);
    assert!(
        String::from_utf8_lossy(&listed.stdout).contains("job=click-sessions"),
        "{}",
        error_line(&listed)
    );

    // A consumer group of two processes, into a topic.
    let sessions_topic = unique_topic("sessions");
    let input = format!("{}?group={topic}", uri(&topic));
    let chk = dir.path().join("group-chk");
    run_together(2, || {
        let mut member = example(&["--input", &input, "--output", &uri(&sessions_topic)]);
        member.arg("--checkpoint-dir").arg(&chk);
        member
    });
    let records = read_records(&sessions_topic, true);
    assert_sessions(records.iter().map(|r| parsed(&r["value"])).collect(), &want);

    // A wrong invocation is refused as strata refuses it: one line, exit 2.
    let fresh = dir.path().join("fresh");
    let o = example(&[
        "--input",
        "no-such.jsonl",
        "--output",
        fresh.to_str().unwrap(),
    ])
    .output()
    .unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", error_line(&o));
    assert!(
        error_line(&o).contains("does not exist"),
        "{}",
        error_line(&o)
    );
}
