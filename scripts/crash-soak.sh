#!/usr/bin/env bash
# Crash soak: route-history on the real flights, SIGKILLed at random moments
# (a third of them while a checkpoint is in flight) and restored with
# --restore latest until at least --kills kills (default 100); each finished
# round's output is compared line by line with the batch computation.
#
#   scripts/crash-soak.sh [--kills N] [--seed N]            # L1/L2 only
#   scripts/crash-soak.sh --l3 127.0.0.1:9042 --rows 200000  # with L3 (Cassandra
#                                   running: scripts/cassandra.sh start); also
#                                   aborts at random cold moves
#   scripts/crash-soak.sh --s3      # checkpoints in S3 (scripts/s3.sh start);
#                                   every other restore on "another machine",
#                                   and the S3 server stopped for 1-4 s every
#                                   5-15 s
#   scripts/crash-soak.sh --group --rows 200000  # a consumer group of two
#                                   processes over Kafka (scripts/kafka.sh
#                                   start), either SIGKILLed every 1-6 s
#
# Prints one line per round and a summary; exits 1 if any output differs.
set -euo pipefail
source "$(dirname "$0")/env.sh"
cd "$STRATA_ROOT"
# The crash points (STRATA_CRASH_AT) are test hooks: built in here only.
cargo build --release --workspace --bins --features strata-runtime/fault-injection
exec "$CARGO_TARGET_DIR/release/crash-soak" "$@"
