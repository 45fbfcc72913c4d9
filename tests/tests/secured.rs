//! strata against secured clusters, as real as the plain ones: a Cassandra
//! node that requires a password over TLS (`scripts/cassandra.sh start
//! --secure`) and the broker's SASL_SSL listener with SCRAM users
//! (`scripts/kafka.sh start`). Exact output over both, also after a
//! SIGKILL; each kind of refusal is one line within the connect timeout;
//! and no password appears in any log, error, checkpoint or output.
//!
//! The runs read a slice of the flights (stated per test): the full file
//! proves nothing more about security and costs minutes of CI.

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};
use strata_tests::cassandra::{unique_keyspace, Cql};
use strata_tests::kafka::{read_route_history, unique_topic};
use strata_tests::secure::*;
use strata_tests::wait;
use strata_tests::*;

/// The metrics `addr` serves, scraped once the run serves them.
fn scrape_while_running(addr: &str) -> String {
    let started = Instant::now();
    loop {
        if let Ok(body) = scrape(addr) {
            if body.contains("strata_records_in_total") {
                return body;
            }
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "no metrics on {addr}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A `strata` command with the test passwords in its environment (as a
/// user would give them) and nothing else secret on its command line.
fn strata_cmd(args: &[String]) -> Command {
    let mut cmd = Command::new(strata_bin());
    cmd.args(args)
        .env("STRATA_L3_PASSWORD", cassandra_password())
        .env("STRATA_KAFKA_PASSWORD", kafka_password());
    cmd
}

fn output_of(cmd: &mut Command) -> Output {
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    cmd.output().unwrap()
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Fails the test if a password shows up under `dirs` or in `texts`.
fn assert_no_leak(dirs: &[&Path], texts: &[(&str, &str)]) {
    let secrets = [cassandra_password(), kafka_password()];
    let secrets: Vec<&str> = secrets.iter().map(String::as_str).collect();
    let found = leaks(dirs, texts, &secrets);
    assert!(found.is_empty(), "secrets leaked:\n{}", found.join("\n"));
}

fn route_args(input: &str, output: &str, chk: &Path, defines: &[String]) -> Vec<String> {
    let mut a: Vec<String> = ["run", "route-history", "--input", input, "--output", output]
        .map(String::from)
        .into();
    a.extend(["--checkpoint-dir".into(), chk.display().to_string()]);
    a.extend(defines.iter().cloned());
    a
}

/// Environment variables a run gets on top of the test passwords.
type Env<'a> = Vec<(&'a str, &'a str)>;
/// A refused L3 connection: what, the settings, their environment, and
/// what the error line must say.
type L3Case<'a> = (&'a str, Vec<String>, Env<'a>, &'a str);
/// A refused Kafka connection: what, the brokers, the settings, their
/// environment, and what the error line must say.
type KafkaCase<'a> = (&'a str, &'a str, Vec<String>, Env<'a>, &'a str);

// ------------------------------------------------------------ Cassandra

#[test]
fn route_history_with_l3_on_a_password_tls_cassandra_is_exact_also_after_a_sigkill() {
    let cql = Cql::connect_secure();
    let ks = unique_keyspace("secure");
    // 150,000 flights (two months): with 1 MB of L1 and L2 most routes
    // live in L3, so nearly every record crosses the TLS connection.
    let head = flights_head(150_000);
    let dir = tempfile::tempdir().unwrap();
    let (out, chk) = (dir.path().join("out"), dir.path().join("chk"));
    let mut d = defines(&l3_settings(&ks));
    d.extend(defines(&[
        "checkpoint.interval=1s",
        "source.max-records-per-second=25000",
        "state.l1.capacity=1MB",
        "state.l2.capacity=1MB",
    ]));
    let args = route_args(
        &head.display().to_string(),
        &out.display().to_string(),
        &chk,
        &d,
    );
    let mut child = strata_cmd(&args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for_checkpoint(&chk, Duration::from_secs(60));
    assert!(child.try_wait().unwrap().is_none(), "ended before the kill");
    child.kill().unwrap();
    let killed = child.wait_with_output().unwrap();
    let mut restore = args.clone();
    restore.extend(["--restore".into(), "latest".into()]);
    let o = output_of(&mut strata_cmd(&restore));
    assert!(o.status.success(), "{}", text(&o));
    let s = summary(&o.stderr);
    assert_ne!(s["restored_from"], "none");
    assert!(
        s["l3_hits"].parse::<u64>().unwrap() > 0,
        "nothing read back from the secured L3: {s:?}"
    );
    assert!(cql.keys_of(&ks, "history") > 0, "nothing written to L3");
    let want = reference_route_history(&head);
    if let Some(diff) = first_difference(&read_output(&out), &want) {
        panic!("after a SIGKILL and restore over TLS: {diff}");
    }
    let killed_err = String::from_utf8_lossy(&killed.stderr).into_owned();
    assert_no_leak(
        &[&out, &chk],
        &[("killed run", &killed_err), ("restored run", &text(&o))],
    );
}

/// Waits until a checkpoint of `chk` completed (its `_metadata` exists).
fn wait_for_checkpoint(chk: &Path, limit: Duration) {
    let what = format!("a completed checkpoint in {}", chk.display());
    wait::until(&what, limit, || {
        !wait::completed_checkpoints(chk).is_empty()
    });
}

/// A run of route-history on 1,000 flights with L3 `l3` (`key=value`
/// settings) and a 5 s connect timeout; returns its error line and how
/// long it took.
fn failing_l3_run(l3: &[String], env: &[(&str, &str)]) -> (String, Duration) {
    let dir = tempfile::tempdir().unwrap();
    let d = defines(&with_setting(l3, "state.l3.connect-timeout", Some("5s")));
    let args = route_args(
        &flights_head(1_000).display().to_string(),
        &dir.path().join("out").display().to_string(),
        &dir.path().join("chk"),
        &d,
    );
    let (line, err, took) = failing_run(&args, env);
    assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
    (line, took)
}

/// Runs `args` with `env` on top of the test passwords; the run must fail
/// with exit 1 or 2 and an error line, before creating anything, and leak
/// no password. Returns the error line, all of stderr and how long it took.
fn failing_run(args: &[String], env: &[(&str, &str)]) -> (String, String, Duration) {
    let mut cmd = strata_cmd(args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let started = Instant::now();
    let o = output_of(&mut cmd);
    let took = started.elapsed();
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(
        matches!(o.status.code(), Some(1 | 2)),
        "exit {:?}: {err}",
        o.status
    );
    let line = error_line(&o);
    // Nothing was created (the run failed before): only the text to search.
    assert_no_leak(&[], &[("stderr", &err)]);
    (line, err, took)
}

#[test]
fn cassandra_refusals_are_one_line_naming_the_cause_within_the_timeout() {
    require(
        &cassandra_contact_point(),
        "scripts/cassandra.sh start --secure",
    );
    let node = cassandra_contact_point();
    let good = l3_settings(&unique_keyspace("refused"));
    let cases: Vec<L3Case> = vec![
        (
            "a wrong password",
            good.clone(),
            vec![("STRATA_L3_PASSWORD", "not-the-password")],
            "login was refused",
        ),
        (
            "a client without TLS against the TLS-only port",
            with_setting(
                &with_setting(&good, "state.l3.tls.ca", None),
                "state.l3.tls",
                None,
            ),
            vec![],
            "TLS",
        ),
        (
            "an untrusted CA",
            with_setting(
                &good,
                "state.l3.tls.ca",
                Some(&tls_file("other-ca.pem").display().to_string()),
            ),
            vec![],
            "untrusted certificate",
        ),
    ];
    for (what, d, env, says) in cases {
        let (line, took) = failing_l3_run(&d, &env);
        assert!(line.contains(&node), "{what}: names the node: {line}");
        assert!(line.contains(says), "{what}: says '{says}': {line}");
        assert!(took < Duration::from_secs(20), "{what}: took {took:?}");
    }
    // A password is never a configuration value.
    let (line, _) = failing_l3_run(&with_setting(&good, "state.l3.password", Some("x")), &[]);
    assert!(line.contains("STRATA_L3_PASSWORD"), "{line}");
}

// ---------------------------------------------------------------- Kafka

/// `strata topic load` over SASL_SSL.
fn load_secure(file: &Path, topic: &str, partitions: u32) {
    let mut a: Vec<String> = ["topic", "load"].map(String::from).into();
    a.push(file.display().to_string());
    a.extend([
        "--brokers".into(),
        kafka_brokers(),
        "--topic".into(),
        topic.into(),
    ]);
    a.extend(["--key".into(), "origin,destination".into()]);
    a.extend(["--partitions".into(), partitions.to_string()]);
    a.extend(defines(&kafka_settings(KAFKA_USER, "SCRAM-SHA-256")));
    let o = output_of(&mut strata_cmd(&a));
    assert!(o.status.success(), "topic load over SASL_SSL: {}", text(&o));
}

#[test]
fn kafka_to_kafka_over_sasl_ssl_is_exactly_once_and_exact_also_after_a_sigkill() {
    require(&kafka_brokers(), "scripts/kafka.sh start");
    // 200,000 flights in 4 partitions, loaded over SASL_SSL.
    let head = flights_head(200_000);
    let (input, output) = (unique_topic("sasl-in"), unique_topic("sasl-out"));
    load_secure(&head, &input, 4);
    // And one bad message, whose dead letter's headers must not leak.
    let raw = strata_tests::kafka::RawProducer::new();
    raw.send(&input, Some(b"no-route"), Some(b"{not json"));
    raw.flush();
    let dead_letters = unique_topic("sasl-dl");
    let dir = tempfile::tempdir().unwrap();
    let chk = dir.path().join("chk");
    let uri = |t: &str| format!("kafka://{}/{t}", kafka_brokers());
    let mut d = defines(&kafka_settings(KAFKA_USER, "SCRAM-SHA-512"));
    d.extend(defines(&[
        "source.kafka.bounded=true",
        "checkpoint.interval=1s",
        "source.max-records-per-second=40000",
        "bad-input.policy=dead-letter",
        &format!("bad-input.dead-letter-topic={dead_letters}"),
    ]));
    let args = route_args(&uri(&input), &uri(&output), &chk, &d);
    let mut child = strata_cmd(&args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for_checkpoint(&chk, Duration::from_secs(60));
    child.kill().unwrap();
    let killed = child.wait_with_output().unwrap();
    let mut restore = args.clone();
    let metrics = format!("127.0.0.1:{}", strata_tests::query::free_port());
    restore.extend(["--restore".into(), "latest".into()]);
    restore.extend(["--metrics-addr".into(), metrics.clone()]);
    let running = strata_cmd(&restore)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let scraped = scrape_while_running(&metrics);
    let o = running.wait_with_output().unwrap();
    assert!(o.status.success(), "{}", text(&o));
    assert_ne!(summary(&o.stderr)["restored_from"], "none");
    let letters = strata_tests::kafka::read_records(&dead_letters, true);
    assert_eq!(
        letters.len(),
        1,
        "the bad message's dead letter: {letters:?}"
    );
    let letters = serde_json::to_string(&letters).unwrap();
    // Read back over the plaintext listener of the same broker.
    let got = read_route_history(&output);
    if let Some(diff) = first_difference(&got, &reference_route_history(&head)) {
        panic!("Kafka over SASL_SSL after a SIGKILL: {diff}");
    }
    // `strata topic read` works over SASL_SSL too.
    let mut a: Vec<String> = ["topic", "read", "--brokers"].map(String::from).into();
    a.extend([
        kafka_brokers(),
        "--topic".into(),
        output.clone(),
        "--read-committed".into(),
    ]);
    a.extend(defines(&kafka_settings(KAFKA_USER, "PLAIN")));
    let read = output_of(&mut strata_cmd(&a));
    assert!(
        read.status.success(),
        "{}",
        String::from_utf8_lossy(&read.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&read.stdout).lines().count(),
        got.len(),
        "topic read over SASL_SSL sees every committed record"
    );
    let killed_err = String::from_utf8_lossy(&killed.stderr).into_owned();
    assert_no_leak(
        &[&chk],
        &[
            ("killed run", &killed_err),
            ("restored run", &text(&o)),
            ("topic read stderr", &String::from_utf8_lossy(&read.stderr)),
            ("metrics", &scraped),
            ("dead letters with their headers", &letters),
        ],
    );
}

/// A Kafka run from `brokers` with `settings` (`key=value`) that must
/// fail; its error line, all of stderr and how long it took.
fn failing_kafka_run(
    brokers: &str,
    settings: &[String],
    env: &[(&str, &str)],
) -> (String, String, Duration) {
    let dir = tempfile::tempdir().unwrap();
    let uri = |t: &str| format!("kafka://{brokers}/{t}");
    let mut d = defines(settings);
    d.extend(defines(&[
        "kafka.connect-timeout=8s",
        "source.kafka.bounded=true",
    ]));
    let args = route_args(&uri("flights"), &uri("out"), &dir.path().join("chk"), &d);
    failing_run(&args, env)
}

#[test]
fn kafka_refusals_are_one_line_naming_the_cause_within_the_timeout() {
    require(&kafka_brokers(), "scripts/kafka.sh start");
    let plain = strata_tests::kafka::require_kafka();
    let sasl = kafka_brokers();
    let good = kafka_settings(KAFKA_USER, "SCRAM-SHA-256");
    let other_ca = tls_file("other-ca.pem").display().to_string();
    let sasl_plaintext = with_setting(
        &with_setting(&good, "kafka.ssl.ca", None),
        "kafka.security.protocol",
        Some("sasl_plaintext"),
    );
    let cases: Vec<KafkaCase> = vec![
        (
            "a wrong password",
            &sasl,
            good.clone(),
            vec![("STRATA_KAFKA_PASSWORD", "wrong")],
            "login was refused",
        ),
        (
            "a plaintext client against SASL_SSL",
            &sasl,
            Vec::new(),
            vec![],
            "kafka.security.protocol",
        ),
        (
            "SASL_SSL against a plaintext listener",
            &plain,
            good.clone(),
            vec![],
            "kafka.security.protocol",
        ),
        (
            "SASL_PLAINTEXT against a plaintext listener",
            &plain,
            sasl_plaintext,
            vec![],
            "kafka.security.protocol",
        ),
        (
            "an untrusted CA",
            &sasl,
            with_setting(&good, "kafka.ssl.ca", Some(&other_ca)),
            vec![],
            "kafka.ssl.ca",
        ),
    ];
    for (what, brokers, d, env, says) in cases {
        let (line, err, took) = failing_kafka_run(brokers, &d, &env);
        assert!(line.contains(brokers), "{what}: names the brokers: {line}");
        assert!(line.contains(says), "{what}: points at {says}: {line}");
        assert!(
            took < Duration::from_secs(25),
            "{what}: took {took:?}: {err}"
        );
    }
    // A password is never a configuration value, nor a librdkafka property.
    for key in ["kafka.sasl.password", "source.kafka.sasl.password"] {
        let (line, _, _) = failing_kafka_run(&sasl, &with_setting(&good, key, Some("x")), &[]);
        assert!(line.contains("STRATA_KAFKA_PASSWORD"), "{line}");
    }
}

#[test]
fn a_revoked_scram_user_is_refused_in_one_line() {
    require(&kafka_brokers(), "scripts/kafka.sh start");
    let user = format!("revoked-{}", std::process::id());
    let script = repo_root().join("scripts/kafka.sh");
    let run = |args: &[&str]| {
        let o = Command::new(&script).args(args).output().unwrap();
        assert!(o.status.success(), "kafka.sh {args:?}: {}", text(&o));
    };
    run(&["user-add", &user, "its-own-secret-41"]);
    // The user works while it exists…
    let input = unique_topic("revoked");
    let mut a: Vec<String> = ["topic", "load"].map(String::from).into();
    a.push(flights_head(1_000).display().to_string());
    a.extend([
        "--brokers".into(),
        kafka_brokers(),
        "--topic".into(),
        input.clone(),
    ]);
    a.extend(["--key".into(), "origin,destination".into()]);
    a.extend(defines(&kafka_settings(&user, "SCRAM-SHA-256")));
    let o = output_of(strata_cmd(&a).env("STRATA_KAFKA_PASSWORD", "its-own-secret-41"));
    assert!(o.status.success(), "{}", text(&o));
    // …and is refused once revoked.
    run(&["user-delete", &user]);
    let (line, err, took) = failing_kafka_run(
        &kafka_brokers(),
        &kafka_settings(&user, "SCRAM-SHA-256"),
        &[("STRATA_KAFKA_PASSWORD", "its-own-secret-41")],
    );
    assert!(line.contains("login was refused"), "{line}");
    assert!(!err.contains("its-own-secret-41"), "{err}");
    assert!(took < Duration::from_secs(25), "took {took:?}");
}

#[test]
fn sigterm_while_waiting_for_brokers_stops_with_a_message() {
    // A "broker" that accepts connections and never answers (a hung
    // broker, or a firewall that swallows packets).
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let address = silent.local_addr().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let uri = |t: &str| format!("kafka://{address}/{t}");
    let d = defines(&with_setting(
        &kafka_settings(KAFKA_USER, "SCRAM-SHA-256"),
        "kafka.connect-timeout",
        Some("120s"),
    ));
    let args = route_args(&uri("flights"), &uri("out"), &dir.path().join("chk"), &d);
    let log = dir.path().join("stderr");
    let mut child = strata_cmd(&args)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let started = Instant::now();
    while !std::fs::read_to_string(&log)
        .unwrap()
        .contains("waiting for Kafka")
    {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "no waiting line"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let ok = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(ok.success());
    let signalled = Instant::now();
    let status = child.wait().unwrap();
    assert!(
        signalled.elapsed() < Duration::from_secs(10),
        "stopped {:?} after the signal, not at once",
        signalled.elapsed()
    );
    let err = std::fs::read_to_string(&log).unwrap();
    assert!(!status.success(), "{err}");
    assert!(
        err.contains("interrupted by SIGTERM while connecting to Kafka"),
        "{err}"
    );
}

#[test]
fn the_metrics_address_on_every_interface_is_warned_about() {
    let dir = tempfile::tempdir().unwrap();
    let port = strata_tests::query::free_port();
    let o = strata(&route_history_args(
        &flights_head(1_000),
        &dir.path().join("out"),
        None,
        &["--metrics-addr", &format!("0.0.0.0:{port}")],
    ));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(
        err.contains(&format!(
            "warning: --metrics-addr 0.0.0.0:{port} is not a loopback address"
        )),
        "{err}"
    );
    let port = strata_tests::query::free_port();
    let o = strata(&route_history_args(
        &flights_head(1_000),
        &dir.path().join("out2"),
        None,
        &["--metrics-addr", &format!("127.0.0.1:{port}")],
    ));
    assert!(!String::from_utf8_lossy(&o.stderr).contains("warning"));
}
