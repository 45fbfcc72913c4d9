#!/usr/bin/env bash
# The test command: checks what reviewers check (scripts/check.sh: fmt,
# module cycles, clippy), builds strata once (release, with the test hooks
# of the `fault-injection` feature), starts the single-node
# Cassandra the L3 tests need (scripts/cassandra.sh) and its secured twin
# (TLS + logins, scripts/cassandra.sh --secure, 127.0.0.1:9142), the
# single-node Kafka the Kafka tests need (scripts/kafka.sh; its SASL_SSL
# listener on 127.0.0.1:9094 comes with it) and the S3-compatible server
# the object-store tests need (scripts/s3.sh) — each stopped again at the
# end if this script started it — runs every test of the workspace (or of
# the packages -p picks) — unit,
# property-based and end-to-end on the real flights data, the real
# Cassandra, the real Kafka and the real S3 server, several test binaries
# at a time (scripts/run-tests.py) — then prints one closing line
# "tests: N passed, N failed".
set -euo pipefail
source "$(dirname "$0")/env.sh"
"$STRATA_ROOT/scripts/setup.sh"
cd "$STRATA_ROOT"
started_cassandra=false
if ! scripts/cassandra.sh status >/dev/null 2>&1; then
  started_cassandra=true
  scripts/cassandra.sh start > "${TMPDIR:-/tmp}/strata-cassandra-start.log" 2>&1 &
  cassandra_pid=$!
fi
started_cassandra_secure=false
if ! scripts/cassandra.sh status --secure >/dev/null 2>&1; then
  started_cassandra_secure=true
  scripts/cassandra.sh start --secure > "${TMPDIR:-/tmp}/strata-cassandra-secure-start.log" 2>&1 &
  cassandra_secure_pid=$!
fi
started_kafka=false
if ! scripts/kafka.sh status >/dev/null 2>&1; then
  started_kafka=true
  scripts/kafka.sh start > "${TMPDIR:-/tmp}/strata-kafka-start.log" 2>&1 &
  kafka_pid=$!
fi
started_s3=false
if ! scripts/s3.sh status >/dev/null 2>&1; then
  started_s3=true
  scripts/s3.sh start > "${TMPDIR:-/tmp}/strata-s3-start.log" 2>&1 &
  s3_pid=$!
fi
cleanup() {
  if $started_cassandra; then scripts/cassandra.sh stop || true; fi
  if $started_cassandra_secure; then scripts/cassandra.sh stop --secure || true; fi
  if $started_kafka; then scripts/kafka.sh stop || true; fi
  if $started_s3; then scripts/s3.sh stop || true; fi
}
trap cleanup EXIT
scripts/check.sh
# The test hooks (STRATA_CRASH_AT, STRATA_SLOW_CHECKPOINT_MS) the failure
# tests use; a user's build (route-history.sh, install.sh) has none.
features=(--features strata-runtime/fault-injection)
# The doc tests link the prebuilt RocksDB too: rustdoc needs the rpath
# that env.sh gives rustc, or they cannot load librocksdb.so.
if [ -n "${ROCKSDB_LIB_DIR:-}" ]; then
  export RUSTDOCFLAGS="${RUSTDOCFLAGS:+$RUSTDOCFLAGS }-C link-arg=-Wl,-rpath,$ROCKSDB_LIB_DIR"
fi
cargo build --release --workspace --bins "${features[@]}"
if $started_cassandra && ! wait "$cassandra_pid"; then
  cat "${TMPDIR:-/tmp}/strata-cassandra-start.log" >&2
  echo "tests: 0 passed, 1 failed (Cassandra did not start)" >&2
  exit 1
fi
if $started_cassandra_secure && ! wait "$cassandra_secure_pid"; then
  cat "${TMPDIR:-/tmp}/strata-cassandra-secure-start.log" >&2
  echo "tests: 0 passed, 1 failed (the secured Cassandra did not start)" >&2
  exit 1
fi
if $started_kafka && ! wait "$kafka_pid"; then
  cat "${TMPDIR:-/tmp}/strata-kafka-start.log" >&2
  echo "tests: 0 passed, 1 failed (Kafka did not start)" >&2
  exit 1
fi
if $started_s3 && ! wait "$s3_pid"; then
  cat "${TMPDIR:-/tmp}/strata-s3-start.log" >&2
  echo "tests: 0 passed, 1 failed (the S3 server did not start)" >&2
  exit 1
fi
# Several test binaries at a time, those that stop a server alone with
# it; prints the closing line and exits non-zero on any failure.
status=0
# The whole workspace, unless the arguments pick packages (-p NAME);
# then strata-runtime comes along, the package whose feature the test
# hooks are (cargo takes a package's features only when it is picked).
scope=(--workspace)
for arg in "$@"; do
  case "$arg" in -p | -p?* | --package | --package=*) scope=(-p strata-runtime) ;; --) break ;; esac
done
python3 scripts/run-tests.py --release "${scope[@]}" "${features[@]}" "$@" || status=$?
exit "$status"
