#!/usr/bin/env bash
# route-history over Kafka run by a consumer group (--input …?group=G), the
# 3,000,000 flights in 8 partitions, checkpoints in S3, on this machine:
#   1. one process, then two processes started together: records/s of the
#      group (3,000,000 / wall time until every process left);
#   2. a join: process A runs alone at a fixed rate per shard, B joins after
#      20 s; prints, for the partitions A keeps, their records per second
#      around the join (a pause shows as a drop), and for each shard B takes
#      over, its download (bytes, seconds) and the time from its assignment
#      to its first record.
# Needs Kafka and the S3 server running (scripts/kafka.sh start,
# scripts/s3.sh start) and a release build. `scripts/bench-group.sh join`
# runs only the join, `throughput` only the first part.
set -euo pipefail
source "$(dirname "$0")/env.sh"
cd "$STRATA_ROOT"
eval "$("$STRATA_ROOT/scripts/s3.sh" env)"
brokers="${STRATA_KAFKA_BROKERS:-127.0.0.1:9092}"
data=data/flights-3m.parquet
work="$(mktemp -d)"
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$work"' EXIT
tag="$(date +%s)"
input="bench-group-in-$tag"
"$STRATA_BIN" topic load "$data" --brokers "$brokers" --topic "$input" \
  --key origin,destination --partitions 8 >/dev/null

# Starts process $2 of group $1 with extra settings "${@:3}"; its log is $work/$1-$2.log.
member() {
  local group=$1 name=$2
  shift 2
  "$STRATA_BIN" run route-history --input "kafka://$brokers/$input?group=$group-$tag" \
    --output "kafka://$brokers/bench-group-out-$group-$tag" \
    --checkpoint-dir "s3://strata/bench-group-$group-$tag" \
    -D "checkpoint.local-copy=$work/$group-$name" -D checkpoint.interval=10s \
    -D source.kafka.bounded=true "$@" 2> "$work/$group-$name.log" &
}

# Runs $1 processes of a group to the end; prints the group's records/s.
throughput() {
  local n=$1 start end
  start=$(date +%s.%N)
  for i in $(seq "$n"); do member "p$n" "m$i"; done
  wait
  end=$(date +%s.%N)
  awk -v s="$start" -v e="$end" -v n="$n" \
    'BEGIN { printf "%d process(es): 3000000 records in %.1f s = %.0f records/s\n", n, e - s, 3000000 / (e - s) }'
}

what="${1:-all}"
if [ "$what" != join ]; then
  throughput 1
  throughput 2
fi
[ "$what" = throughput ] && exit 0

# The join.
rate=4000
member join a --metrics-addr 127.0.0.1:9261 -D "source.max-records-per-second=$rate"
a=$!
sample() { # per-partition records read by A, one line per second: "t p0 p1 …"
  for t in $(seq 0 59); do
    body=$(curl -s 127.0.0.1:9261/metrics || true)
    printf '%s' "$t"
    for p in $(seq 0 7); do
      v=$(grep "^strata_shard_records_in_total{partition=\"$p\"}" <<<"$body" | awk '{print $2}' || true)
      printf ' %s' "${v:-0}"
    done
    echo
    sleep 1
  done > "$work/samples"
}
sample &
sampler=$!
sleep 20
member join b -D "source.max-records-per-second=$rate"
b=$!
wait "$sampler"
kill -TERM "$a" "$b" 2>/dev/null || true
wait "$a" "$b" 2>/dev/null || true
kept=$(grep -h 'revoked' "$work/join-a.log" | head -1 | sed 's/.*partitions \[\(.*\)\].*/\1/' | tr -d ' ' || true)
echo "join at t=20 s; A's partitions revoked for B: [$kept]; A keeps the others"
echo "records/s of each partition A keeps, per second (rate limit $rate):"
awk -v kept="$kept" 'BEGIN { n = split(kept, k, ","); for (i = 1; i <= n; i++) moved[k[i]] = 1 }
  NR > 1 { line = sprintf("t=%2d s", $1); for (p = 0; p < 8; p++) if (!(p in moved))
             line = line sprintf("  p%d %5d", p, $(p + 2) - prev[p]); print line }
  { for (p = 0; p < 8; p++) prev[p] = $(p + 2) }' "$work/samples" | sed -n '15,32p'
echo "shards B took over:"
grep -h 'fetched checkpoint\|first record' "$work/join-b.log" || true
