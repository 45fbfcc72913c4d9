#!/usr/bin/env bash
# Live queries against route-history on the 3,000,000 flights at full
# speed, on this machine (issue 24). Prints one table:
#   1. the job's records/s without queries, and with 1,000 queries/s
#      (8 connections), with the queries' p50/p99 latency;
#   2. queries/s and p50/p99 as fast as 32 connections can ask, with every
#      route in L1 (default capacity), and with a 1 MB L1 (most reads from
#      L2);
#   3. the same with a 1 MB L1, 2 MB L2 and L3 on (cold routes read from
#      Cassandra), over the first 300,000 flights only: with L3 this small
#      the job itself runs at about a thousand records/s after the first
#      few hundred thousand flights (needs scripts/cassandra.sh start, else
#      these rows are skipped).
# Each row is one run of the job, back to back; the figures are the run's
# own summary (records/s) and query-load's (see tests/src/bin/query-load.rs).
set -euo pipefail
source "$(dirname "$0")/env.sh"
cd "$STRATA_ROOT"
cargo build --release -p strata-runtime -p strata-tests --bins >&2
data=data/flights-3m.parquet
load="$CARGO_TARGET_DIR/release/query-load"
work="$(mktemp -d)"
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$work"' EXIT
port=18181

# Runs the job over $data with "$@" as settings; with $QUERIES (rate) set, runs
# query-load against it. Prints "records/s<TAB>query-load JSON".
run() {
  local out="$work/out-$RANDOM" log="$work/job.log"
  "$STRATA_BIN" run route-history --input "$data" --output "$out" \
    --query-addr "127.0.0.1:$port" -D checkpoint.interval=10s "$@" 2> "$log" &
  local job=$!
  local answers='{}'
  if [[ -n "${QUERIES:-}" ]]; then
    until curl -sf "127.0.0.1:$port/jobs/current" | grep -q '"instances"'; do sleep 0.05; done
    answers="$("$load" "127.0.0.1:$port" "$data" "$QUERIES" "${CONNECTIONS:-8}")"
  fi
  wait "$job"
  local rps
  rps="$(grep -o 'records_per_s=[0-9]*' "$log" | cut -d= -f2)"
  rm -rf "$out"
  printf '%s\t%s\n' "$rps" "$answers"
}

row() {
  local label=$1 result=$2
  python3 - "$label" "$result" <<'PY'
import json, sys
label, result = sys.argv[1], sys.argv[2]
rps, answers = result.split("\t")
a = json.loads(answers)
q = lambda k, f: (f.format(a[k]) if k in a else "-")
print(f"| {label} | {int(rps):,} | {q('queries_per_s', '{:,.0f}')} | {q('p50_ms', '{:.2f}')} | {q('p99_ms', '{:.2f}')} | {q('unavailable', '{}')} |")
PY
}

# L3 settings, in a keyspace of its own for each run ($1).
l3() {
  echo -D state.l1.capacity=1MB -D state.l2.capacity=2MB -D state.l3.contact-points=127.0.0.1:9042 \
    -D "state.l3.keyspace=bench_query_$(date +%s)_$1"
}
echo "| run | job records/s | queries/s | p50 ms | p99 ms | 503s |"
echo "|---|---|---|---|---|---|"
row "no queries" "$(run)"
row "1,000 queries/s" "$(QUERIES=1000 run)"
row "as fast as possible, L1 (default capacity)" "$(QUERIES=0 CONNECTIONS=32 run)"
row "no queries, 1 MB L1" "$(run -D state.l1.capacity=1MB)"
row "as fast as possible, 1 MB L1 (L2 reads)" "$(QUERIES=0 CONNECTIONS=32 run -D state.l1.capacity=1MB)"
if scripts/cassandra.sh status >/dev/null 2>&1; then
  "$CARGO_TARGET_DIR/release/flights-head" 300000 "$work"
  data="$work/flights-300000.parquet"
  row "no queries, 300k flights, 1 MB L1, 2 MB L2, L3" "$(run $(l3 a))"
  row "as fast as possible, 300k flights, 1 MB L1, 2 MB L2, L3 (Cassandra reads)" "$(QUERIES=0 CONNECTIONS=32 run $(l3 b))"
else
  echo "(L3 rows skipped: Cassandra is not running; scripts/cassandra.sh start)" >&2
fi
