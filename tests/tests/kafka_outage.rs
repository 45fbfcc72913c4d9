//! A broker stopped for 20 s mid-run: the job stalls, resumes when the
//! broker is back, and the committed output is exact. In a test binary of
//! its own: stopping the shared broker would disturb other Kafka tests.

use std::process::Stdio;
use std::time::Duration;
use strata_tests::kafka::*;
use strata_tests::wait;
use strata_tests::*;

#[test]
fn a_broker_stopped_for_20s_stalls_the_job_which_then_finishes_exactly() {
    require_kafka();
    let head = flights_head(300_000);
    let (input, output) = (unique_topic("flights-o"), unique_topic("rh-o"));
    load_flights(&head, &input, 4);
    let dir = tempfile::tempdir().unwrap();
    let chk = dir.path().join("chk");
    let mut child = run_command(
        &input,
        &output,
        &chk,
        &[
            "-D",
            "checkpoint.interval=1s",
            "-D",
            "source.max-records-per-second=30000",
        ],
    )
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    // Mid-run, once a checkpoint committed output and offsets.
    wait::until_while_running(
        &mut child,
        "the first checkpoint",
        Duration::from_secs(60),
        || !wait::completed_checkpoints(&chk).is_empty(),
    );
    server_script("kafka.sh", &["stop"]);
    std::thread::sleep(Duration::from_secs(20));
    assert!(
        child.try_wait().unwrap().is_none(),
        "the job ended while the broker was down"
    );
    server_script("kafka.sh", &["start"]);
    let o = child.wait_with_output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let got = read_route_history(&output);
    if let Some(diff) = first_difference(&got, &reference_route_history(&head)) {
        panic!("after a 20 s broker outage the output differs: {diff}");
    }
}
