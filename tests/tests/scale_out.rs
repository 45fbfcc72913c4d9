//! One job run by several `strata` processes through a Kafka consumer
//! group (`--input kafka://…/topic?group=G`), against the real Kafka and
//! the real S3 server: the committed output equals the batch computation
//! while partitions move (a process joins, one is SIGKILLed), a process
//! stopped past its session (SIGSTOP) is fenced when it wakes (with cold
//! state in the real Cassandra, one table per shard), and a moved shard
//! downloads only its own checkpoint.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use strata_tests::cassandra::{contact_point, unique_keyspace, Cql};
use strata_tests::kafka::*;
use strata_tests::query;
use strata_tests::s3::*;
use strata_tests::secure;
use strata_tests::wait;
use strata_tests::*;

/// One process of the group, its stderr in a file.
struct Member {
    child: Child,
    log: PathBuf,
    /// Its query address (`--query-addr`), when the job serves queries.
    query: Option<String>,
}

/// What every member of a test's group shares.
struct Job<'a> {
    input: String,
    output: String,
    group: String,
    prefix: &'a Prefix,
    dir: &'a Path,
    /// Records per second per shard (so partitions move mid-run).
    rate: u32,
    /// More `-D` settings.
    extra: Vec<String>,
    /// Members serve queries (`--query-addr` on a free port).
    queries: bool,
    /// A shared local checkpoint directory instead of the S3 prefix.
    shared_dir: Option<PathBuf>,
    /// Members reach Kafka over the SASL_SSL listener as the test user
    /// (`kafka.*` settings, the password in `STRATA_KAFKA_PASSWORD`).
    sasl: bool,
}

impl Job<'_> {
    /// `kafka://…/<topic>` on the listener the members use.
    fn uri(&self, topic: &str) -> String {
        if self.sasl {
            format!("kafka://{}/{topic}", secure::kafka_brokers())
        } else {
            uri(topic)
        }
    }

    /// The `kafka.*` settings (as `-D` arguments) and environment of the
    /// members and of `strata jobs status`.
    fn security(&self, cmd: &mut Command) {
        if self.sasl {
            let settings = secure::kafka_settings(secure::KAFKA_USER, "SCRAM-SHA-512");
            cmd.args(secure::defines(&settings))
                .env("STRATA_KAFKA_PASSWORD", secure::kafka_password());
        }
    }
}

/// The group session of a member that stays: a minute without a heartbeat
/// before the group gives its partitions away, so that a loaded machine
/// (a member or the broker starved of CPU for seconds) never costs it its
/// partitions where that is not what a test is about.
const SESSION: &str = "60000";

/// The group session of a member a test kills or stops: 6 s, the broker's
/// least, so that its partitions move soon after.
const SHORT_SESSION: &str = "6000";

impl Job<'_> {
    /// Starts member `name`, one that stays to the end.
    fn start(&self, name: &str) -> Member {
        self.start_with_session(name, SESSION)
    }

    /// Starts member `name`, one the test kills or stops ([`SHORT_SESSION`]).
    fn start_to_lose(&self, name: &str) -> Member {
        self.start_with_session(name, SHORT_SESSION)
    }

    fn start_with_session(&self, name: &str, session_ms: &str) -> Member {
        let log = self.dir.join(format!("{name}.log"));
        let mut cmd = Command::new(strata_bin());
        with_s3_env(&mut cmd)
            .args(["run", "route-history", "--input"])
            .arg(format!("{}?group={}", self.uri(&self.input), self.group))
            .args([
                "--output",
                &self.uri(&self.output),
                "--checkpoint-dir",
                &self
                    .shared_dir
                    .as_ref()
                    .map_or(self.prefix.url.clone(), |d| d.display().to_string()),
            ])
            .arg("-D")
            .arg(format!(
                "checkpoint.local-copy={}",
                self.dir.join(name).display()
            ))
            .args(["-D", "source.kafka.bounded=true"])
            .args(["-D", "checkpoint.interval=1s"])
            .args(["-D", "checkpoint.retained=100"])
            .arg("-D")
            .arg(format!("source.kafka.session.timeout.ms={session_ms}"))
            .arg("-D")
            .arg(format!("source.max-records-per-second={}", self.rate))
            .args(self.extra.iter().flat_map(|d| ["-D", d.as_str()]))
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap());
        self.security(&mut cmd);
        let query = self
            .queries
            .then(|| format!("127.0.0.1:{}", strata_tests::query::free_port()));
        if let Some(addr) = &query {
            cmd.args(["--query-addr", addr]);
        }
        Member {
            child: cmd.spawn().unwrap(),
            log,
            query,
        }
    }
}

impl Member {
    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Waits up to `limit` for `cond` on the log so far.
    fn wait_for(&self, what: &str, limit: Duration, cond: impl Fn(&str) -> bool) {
        let start = Instant::now();
        while start.elapsed() < limit {
            if cond(&self.log()) {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("{what} did not happen within {limit:?}:\n{}", self.log());
    }

    /// Waits (up to 60 s) until the group gave it a partition.
    fn wait_assigned(&self, what: &str) {
        self.wait_for(what, Duration::from_secs(60), |_| self.assignments() > 0);
    }

    /// Waits (up to 60 s) until every shard the group gave it so far has
    /// read its first record (and so opened its sink, which fences the
    /// partition's earlier owner).
    fn wait_running(&self, what: &str) {
        self.wait_for(what, Duration::from_secs(60), |log| {
            let count = |needle: &str| log.lines().filter(|l| l.contains(needle)).count();
            let assigned: usize = log
                .lines()
                .filter_map(|l| l.split_once("assigned partitions [")?.1.split_once(']'))
                .map(|(list, _)| list.split(',').filter(|p| !p.trim().is_empty()).count())
                .sum();
            assigned > 0 && count(": first record ") >= assigned
        });
    }

    /// SIGKILLs it and reaps it.
    fn kill(&mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }

    /// Partitions assignments in the log that gave it at least one.
    fn assignments(&self) -> usize {
        self.log()
            .lines()
            .filter(|l| l.contains("assigned partitions [") && !l.ends_with("[]"))
            .count()
    }

    fn signal(&self, signal: &str) {
        let ok = Command::new("kill")
            .args([signal, &self.child.id().to_string()])
            .status()
            .unwrap()
            .success();
        assert!(ok, "kill {signal}");
    }

    /// Waits for the process to end (up to `limit`), which must fail; its log.
    fn finish_failing(self, limit: Duration) -> String {
        let (ok, log) = self.wait(limit);
        assert!(!ok, "it succeeded:\n{log}");
        log
    }

    /// Waits for the process to end (up to `limit`), which must succeed; its log.
    fn finish(self, limit: Duration) -> String {
        let (ok, log) = self.wait(limit);
        assert!(ok, "{log}");
        log
    }

    /// Waits for the process to end (up to `limit`): whether it succeeded, its log.
    fn wait(mut self, limit: Duration) -> (bool, String) {
        let start = Instant::now();
        while self.child.try_wait().unwrap().is_none() {
            if start.elapsed() > limit {
                let _ = self.child.kill();
                panic!("still running after {limit:?}:\n{}", self.log());
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        let status = self.child.wait().unwrap();
        (status.success(), format!("{status}:\n{}", self.log()))
    }
}

/// Waits (up to 60 s) until each of the `partitions` shards has a
/// completed checkpoint in the job's object store prefix (a shard that
/// moves then is restored from there).
fn wait_every_shard_checkpointed(job: &Job, partitions: u32) {
    wait::until(
        "a checkpoint of every shard in the store",
        Duration::from_secs(60),
        || {
            let objects = job.prefix.objects();
            (0..partitions).all(|p| {
                let shard = format!("p-{p}/chk-");
                objects
                    .iter()
                    .any(|o| o.starts_with(&shard) && o.ends_with("/_metadata"))
            })
        },
    );
}

/// The partition lines of `strata jobs status` for the job's group.
fn status(job: &Job) -> Vec<String> {
    let mut cmd = Command::new(strata_bin());
    cmd.args(["jobs", "status", "--brokers"]);
    cmd.arg(if job.sasl {
        secure::kafka_brokers()
    } else {
        brokers()
    });
    cmd.args(["--group", &job.group, "--topic", &job.input]);
    job.security(&mut cmd);
    let o = cmd.output().unwrap();
    assert!(o.status.success(), "jobs status: {}", error_line(&o));
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .skip(2)
        .map(String::from)
        .collect()
}

/// The end-of-run figures of a member's log.
fn group_summary(log: &str) -> std::collections::HashMap<String, String> {
    summary_of(log, "strata: left the group.")
}

fn check_exact(topic: &str, want: &[Line], what: &str) {
    let got = read_route_history(topic);
    if let Some(diff) = first_difference(&got, want) {
        panic!("{what}: the committed output differs: {diff}");
    }
}

fn job<'a>(tag: &str, prefix: &'a Prefix, dir: &'a Path, rate: u32) -> Job<'a> {
    Job {
        input: unique_topic(&format!("{tag}-in")),
        output: unique_topic(&format!("{tag}-out")),
        group: unique_topic(&format!("{tag}-group")),
        prefix,
        dir,
        rate,
        extra: Vec::new(),
        queries: false,
        shared_dir: None,
        sasl: false,
    }
}

#[test]
fn two_processes_a_join_and_a_sigkill_give_the_exact_output() {
    require_kafka();
    require_s3();
    let head = flights_head(600_000);
    let (prefix, dir) = (Prefix::unique("group"), tempfile::tempdir().unwrap());
    let job = job("g", &prefix, dir.path(), 2_000);
    load_flights(&head, &job.input, 8);
    let a = job.start("a");
    let b = job.start_to_lose("b");
    for m in [&a, &b] {
        m.wait_assigned("an assignment");
    }
    // A third process joins once every shard has a checkpoint in the
    // store: some partitions move to it, restored from there.
    wait_every_shard_checkpointed(&job, 8);
    let c = job.start("c");
    c.wait_assigned("the joiner's assignment");
    // `strata jobs status` shows every partition owned, by several processes.
    let start = Instant::now();
    loop {
        let lines = status(&job);
        let owners: std::collections::HashSet<&str> = lines
            .iter()
            .map(|l| l.split_whitespace().nth(1).unwrap())
            .collect();
        if lines.len() == 8 && !owners.contains("(none)") && owners.len() >= 2 {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "jobs status never showed 8 owned partitions:\n{}",
            lines.join("\n")
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    // One of the first two dies, once the joiner runs what it was given:
    // its partitions move again.
    c.wait_running("the joiner's shards");
    let mut b = b;
    b.kill();
    let limit = Duration::from_secs(300);
    let (a_log, c_log) = (a.finish(limit), c.finish(limit));
    check_exact(
        &job.output,
        &reference_route_history(&head),
        "a join and a SIGKILL",
    );
    // Every shard ended at its partition's end: no lag left.
    for line in status(&job) {
        assert!(
            line.contains("(ended)") && line.ends_with(" 0"),
            "not ended: {line}"
        );
    }
    let (sa, sc) = (group_summary(&a_log), group_summary(&c_log));
    assert!(sc["shards"] != "0", "the joiner ran no shard:\n{c_log}");
    assert_eq!(
        (sa["lost"].as_str(), sc["lost"].as_str()),
        ("0", "0"),
        "{a_log}\n{c_log}"
    );
    let released: u32 = sa["released"].parse::<u32>().unwrap();
    assert!(
        released > 0 || b.log().contains("released"),
        "the join moved no partition:\n{a_log}\n{}",
        b.log()
    );
    // Moved shards were restored from S3, each from its own files.
    check_downloads(&prefix, &a_log, false);
    let joiner = check_downloads(&prefix, &c_log, true);
    assert!(
        joiner > 0,
        "the joiner restored no shard from the store:\n{c_log}"
    );
}

#[test]
fn a_group_on_a_shared_local_directory_survives_a_join_and_a_sigkill() {
    require_kafka();
    // 300,000 flights in 4 partitions, 4,000 records/s per shard: a shard
    // runs ~20 s, long enough for a join and a SIGKILL mid-run.
    let head = flights_head(300_000);
    let (prefix, dir) = (Prefix::unique("unused"), tempfile::tempdir().unwrap());
    let mut job = job("local", &prefix, dir.path(), 4_000);
    // Not created beforehand: the shards' directories appear with their
    // first checkpoints.
    job.shared_dir = Some(dir.path().join("shared"));
    load_flights(&head, &job.input, 4);
    let a = job.start("a");
    let b = job.start_to_lose("b");
    for m in [&a, &b] {
        m.wait_assigned("an assignment");
    }
    let c = job.start("c");
    c.wait_assigned("the joiner's assignment");
    let mut b = b;
    b.kill();
    let limit = Duration::from_secs(300);
    let (a_log, c_log) = (a.finish(limit), c.finish(limit));
    check_exact(
        &job.output,
        &reference_route_history(&head),
        "a group on a shared local directory, a join and a SIGKILL",
    );
    for line in status(&job) {
        assert!(
            line.contains("(ended)"),
            "not ended: {line}\n{a_log}\n{c_log}"
        );
    }
}

#[test]
fn a_group_of_two_over_sasl_ssl_gives_the_exact_output() {
    require_kafka();
    secure::require(&secure::kafka_brokers(), "scripts/kafka.sh start");
    require_s3();
    // 200,000 flights in 4 partitions: two members, two shards each.
    let head = flights_head(200_000);
    let (prefix, dir) = (Prefix::unique("sasl"), tempfile::tempdir().unwrap());
    let mut job = job("sasl", &prefix, dir.path(), 20_000);
    job.sasl = true;
    load_flights(&head, &job.input, 4);
    let a = job.start("a");
    let b = job.start("b");
    for m in [&a, &b] {
        m.wait_assigned("an assignment");
    }
    let lines = status(&job);
    assert_eq!(
        lines.len(),
        4,
        "jobs status over SASL_SSL:\n{}",
        lines.join("\n")
    );
    let limit = Duration::from_secs(300);
    let (a_log, b_log) = (a.finish(limit), b.finish(limit));
    check_exact(
        &job.output,
        &reference_route_history(&head),
        "a group of two over SASL_SSL",
    );
    let shards: u32 = [&a_log, &b_log]
        .iter()
        .map(|l| group_summary(l)["shards"].parse::<u32>().unwrap())
        .sum();
    assert!(
        shards >= 4,
        "every partition ran as a shard:\n{a_log}\n{b_log}"
    );
    // Neither the members' logs nor their local checkpoint copies hold the
    // password.
    let password = secure::kafka_password();
    let status_lines = lines.join("\n");
    let found = secure::leaks(
        &[dir.path()],
        &[("jobs status", &status_lines)],
        &[&password],
    );
    assert!(found.is_empty(), "the password leaked: {found:?}");
}

/// Every download of a shard's checkpoint fetched that checkpoint's files
/// and no other checkpoint's or shard's: besides the staged output and
/// markers (`_*`, named in the line), at most the state bytes the
/// checkpoint lists plus its private files; for a process that never held
/// the shard (`fresh`), at least the state bytes. Returns the downloads.
fn check_downloads(prefix: &Prefix, log: &str, fresh: bool) -> usize {
    let sizes = prefix.sizes();
    let total: u64 = sizes.iter().map(|(_, s)| s).sum();
    let mut seen = std::collections::HashSet::new();
    for line in log.lines() {
        let Some(rest) = line.strip_prefix("strata: fetched checkpoint ") else {
            continue;
        };
        // "<id> from <url>/p-<n>: <files> files, <bytes> bytes (<other> of them …"
        let words: Vec<&str> = rest.split_whitespace().collect();
        let id: u64 = words[0].parse().unwrap();
        let shard = words[2].trim_end_matches(':').rsplit('/').next().unwrap();
        let bytes: u64 = words[5].parse().unwrap();
        let other: u64 = words[7].trim_start_matches('(').parse().unwrap();
        let listed = checkpoints(&format!("{}/{shard}", prefix.url));
        let state = listed
            .iter()
            .find(|c| c.id == id)
            .unwrap_or_else(|| panic!("{shard} lacks checkpoint {id}: {listed:?}"))
            .state;
        let private: u64 = sizes
            .iter()
            .filter(|(name, _)| name.starts_with(&format!("{shard}/chk-{id}/")))
            .map(|(_, s)| s)
            .sum();
        let own = bytes - other;
        assert!(
            own <= state + private,
            "{line}: {own} bytes besides staged output, but checkpoint {id} of {shard} lists {state} (+ {private} private): it fetched other files"
        );
        if fresh && seen.insert(shard.to_owned()) {
            assert!(
                own >= state,
                "{line}: less than the {state} state bytes it lists"
            );
        }
        assert!(
            bytes < total / 2,
            "{line}: {bytes} of the store's {total} bytes"
        );
    }
    seen.len()
}

#[test]
fn a_process_stopped_past_its_session_is_fenced_when_it_wakes() {
    require_kafka();
    require_s3();
    let cql = Cql::connect();
    let head = flights_head(400_000);
    let (prefix, dir) = (Prefix::unique("zombie"), tempfile::tempdir().unwrap());
    let keyspace = unique_keyspace("zombie");
    let mut job = job("z", &prefix, dir.path(), 2_000);
    // Cold state in L3: 1 MB of L1 and L2 per shard, so most routes live in
    // Cassandra and a moved shard reads them from there on first use.
    job.extra = vec![
        "state.l1.capacity=1MB".into(),
        "state.l2.capacity=1MB".into(),
        format!("state.l3.contact-points={}", contact_point()),
        format!("state.l3.keyspace={keyspace}"),
    ];
    load_flights(&head, &job.input, 4);
    let a = job.start_to_lose("a");
    a.wait_assigned("an assignment");
    let b = job.start("b");
    b.wait_assigned("an assignment");
    wait_every_shard_checkpointed(&job, 4);
    // A stops past its session: the group gives its partitions to B,
    // which restores them from A's checkpoints and fences A's producers.
    a.signal("-STOP");
    let before = b.assignments();
    b.wait_for("the takeover", Duration::from_secs(60), |_| {
        b.assignments() > before
    });
    b.wait_running("the taken-over shards");
    a.signal("-CONT");
    let limit = Duration::from_secs(300);
    let (a_log, b_log) = (a.finish(limit), b.finish(limit));
    assert!(
        a_log.contains("lost (this process was out of the group)")
            || a_log.contains("was given to another process"),
        "the woken process did not notice it lost its shards:\n{a_log}"
    );
    check_exact(
        &job.output,
        &reference_route_history(&head),
        "a zombie woke up",
    );
    assert_eq!(group_summary(&b_log)["lost"], "0", "{b_log}");
    // Each shard keeps its cold keys in its own table.
    for p in 0..4 {
        let keys = cql
            .query(&format!(
                "SELECT DISTINCT state, key FROM {keyspace}.state_p{p}"
            ))
            .len();
        assert!(keys > 0, "shard {p} moved no key to L3");
    }
}

#[test]
fn a_group_refuses_a_directory_output_and_a_restore() {
    let o = strata(&[
        "run",
        "route-history",
        "--input",
        &format!("{}?group=g", uri("flights")),
        "--output",
        "out-dir",
        "--checkpoint-dir",
        "chk",
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", error_line(&o));
    assert!(
        error_line(&o).contains("writes to a Kafka topic"),
        "{}",
        error_line(&o)
    );
    let o = strata(&[
        "run",
        "route-history",
        "--input",
        &format!("{}?group=g", uri("flights")),
        "--output",
        &uri("out"),
        "--checkpoint-dir",
        "chk",
        "--restore",
        "latest",
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", error_line(&o));
    assert!(
        error_line(&o).contains("--restore does not apply"),
        "{}",
        error_line(&o)
    );
}

#[test]
fn a_member_fails_clearly_on_a_topic_not_keyed_by_the_job_or_an_unreachable_store() {
    require_kafka();
    require_s3();
    let (prefix, dir) = (Prefix::unique("badkey"), tempfile::tempdir().unwrap());
    let job = job("k", &prefix, dir.path(), 100_000);
    // Keyed by origin only: a route's flights are spread over partitions.
    let o = strata(&[
        "topic",
        "load",
        &flights_head(2_000).display().to_string(),
        "--brokers",
        &brokers(),
        "--topic",
        &job.input,
        "--key",
        "origin",
        "--partitions",
        "2",
    ]);
    assert!(o.status.success(), "{}", error_line(&o));
    let log = job.start("a").finish_failing(Duration::from_secs(120));
    assert!(
        log.contains("is not the record's key") && log.contains("reload the topic"),
        "{log}"
    );
    assert!(
        !log.contains("require-key=false"),
        "a group cannot turn the check off: {log}"
    );
    // Without the store's settings, nothing joins the group.
    let o = Command::new(strata_bin())
        .args(["run", "route-history", "--input"])
        .arg(format!("{}?group={}", uri(&job.input), job.group))
        .args([
            "--output",
            &uri(&job.output),
            "--checkpoint-dir",
            &prefix.url,
        ])
        .args([
            "-D",
            &format!("checkpoint.local-copy={}", dir.path().join("b").display()),
        ])
        .env("AWS_ENDPOINT", "http://127.0.0.1:9")
        .env("AWS_ALLOW_HTTP", "true")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && err.contains("AWS_ENDPOINT"), "{err}");
    assert!(
        !err.contains("joined consumer group"),
        "it joined first: {err}"
    );
}

/// Queries sent to members of a group for random routes, each answer
/// checked against the flights of the route's partition before the offset
/// it reports.
struct GroupQueries {
    routes: query::RouteFlights,
    names: Vec<query::Route>,
    partition: std::collections::HashMap<query::Route, i64>,
    seed: u64,
    answered: usize,
    forwarded: usize,
    /// 503s (moving partitions) and refused connections (a killed member).
    unavailable: usize,
}

impl GroupQueries {
    /// `flights` as `strata topic load` wrote them to `partitions`
    /// partitions: by librdkafka's default partitioner (CRC-32 of the
    /// message key, the route's composite key), offsets from 0 in file order.
    fn new(flights: &[Flight], partitions: u32) -> Self {
        let key =
            |f: &Flight| strata_cache::composite_key::encode(&[f.2.as_bytes(), f.3.as_bytes()]);
        let part = |f: &Flight| (crc32fast::hash(&key(f)) % partitions) as usize;
        let mut next = vec![0u64; partitions as usize];
        let routes = query::route_positions(flights, |_, f| {
            let p = part(f);
            next[p] += 1;
            next[p] - 1
        });
        let partition = flights
            .iter()
            .map(|f| ((f.2.clone(), f.3.clone()), part(f) as i64))
            .collect();
        let mut names: Vec<_> = routes.keys().cloned().collect();
        names.sort();
        Self {
            routes,
            names,
            partition,
            seed: 11,
            answered: 0,
            forwarded: 0,
            unavailable: 0,
        }
    }

    /// Asks `member` for a random route; checks the answer unless it is a
    /// 503 (the route's partition is moving) or the member is gone.
    fn ask(&mut self, member: &Member) {
        let addr = member.query.as_deref().expect("a query address");
        self.seed = self
            .seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let route = &self.names[(self.seed >> 33) as usize % self.names.len()];
        let (status, body) = query::get(addr, &query::history_path(route), None);
        if status == 503 || status == 0 {
            self.unavailable += 1;
            return;
        }
        assert_eq!(
            body["partition"].as_i64(),
            Some(self.partition[route]),
            "{route:?}: answered for another partition: {body}"
        );
        // A shard reads one partition: its only split.
        query::check_history_answer(route, &self.routes[route], 0, status, &body);
        self.answered += 1;
        if body["answered_by"].as_str() != Some(addr) {
            self.forwarded += 1;
        }
    }

    /// Asks the members in turn for `time`.
    fn ask_for(&mut self, members: &[&Member], time: Duration) {
        let start = Instant::now();
        while start.elapsed() < time {
            for m in members {
                self.ask(m);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

#[test]
fn queries_to_any_member_are_answered_by_the_owner_across_a_join_and_a_sigkill() {
    require_kafka();
    require_s3();
    let head = flights_head(300_000);
    let (prefix, dir) = (Prefix::unique("gquery"), tempfile::tempdir().unwrap());
    let mut job = job("gq", &prefix, dir.path(), 2_000);
    job.queries = true;
    load_flights(&head, &job.input, 8);
    let mut queries = GroupQueries::new(&parquet_flights(&head), 8);
    let a = job.start("a");
    let b = job.start_to_lose("b");
    for m in [&a, &b] {
        m.wait_assigned("an assignment");
    }
    queries.ask_for(&[&a, &b], Duration::from_secs(4));
    let c = job.start("c");
    c.wait_assigned("the joiner's assignment");
    queries.ask_for(&[&a, &b, &c], Duration::from_secs(4));
    let mut b = b;
    b.kill();
    queries.ask_for(&[&a, &c], Duration::from_secs(6));
    assert!(
        queries.answered >= 50 && queries.forwarded >= 10,
        "{} answers, {} forwarded, {} unavailable",
        queries.answered,
        queries.forwarded,
        queries.unavailable
    );
    let limit = Duration::from_secs(300);
    a.finish(limit);
    c.finish(limit);
    check_exact(
        &job.output,
        &reference_route_history(&head),
        "queries, a join and a SIGKILL",
    );
}
