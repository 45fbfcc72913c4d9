#!/usr/bin/env bash
# route-history on the 3,000,000 flights, back to back on this machine:
# file → strata → file against Kafka → strata → Kafka (bounded, exactly
# once), then Kafka → Kafka with the sink throttled (backpressure). Prints
# records/s, their ratio, mean checkpoint durations and peak RSS (VmHWM).
# Needs a running Kafka (scripts/kafka.sh start) and a release build.
set -euo pipefail
source "$(dirname "$0")/env.sh"
cd "$STRATA_ROOT"
brokers="${STRATA_KAFKA_BROKERS:-127.0.0.1:9092}"
data=data/flights-3m.parquet
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
tag="$(date +%s)"
"$STRATA_BIN" topic load "$data" --brokers "$brokers" --topic "bench-flights-$tag" \
  --key origin,destination --partitions 4

# Runs strata with "$@", prints "<summary line>|<peak RSS MB>".
run() {
  "$STRATA_BIN" run route-history "$@" 2> "$work/err" &
  local pid=$! hwm=0
  while kill -0 "$pid" 2>/dev/null; do
    local v
    v=$(awk '/VmHWM/ {print $2}' "/proc/$pid/status" 2>/dev/null || true)
    [ -n "$v" ] && hwm=$v
    sleep 0.5
  done
  wait "$pid"
  echo "$(grep '^strata: done' "$work/err")|$((hwm / 1024))"
}
field() { tr ' ' '\n' <<<"$1" | awk -F= -v k="$2" '$1 == k {print $2}'; }

file=$(run --input "$data" --output "$work/out" --checkpoint-dir "$work/chk1" -D checkpoint.interval=2s)
kafka=$(run --input "kafka://$brokers/bench-flights-$tag" --output "kafka://$brokers/bench-rh-$tag" \
  --checkpoint-dir "$work/chk2" -D source.kafka.bounded=true -D checkpoint.interval=2s)
slow=$(run --input "kafka://$brokers/bench-flights-$tag" --output "kafka://$brokers/bench-rh-slow-$tag" \
  --checkpoint-dir "$work/chk3" -D source.kafka.bounded=true -D checkpoint.interval=2s \
  -D sink.max-records-per-second=50000)
for name in file kafka slow; do
  line="${!name}"
  summary="${line%|*}"
  printf '%-6s records/s %8s  checkpoints %3s, mean %5s ms  peak RSS %4s MB\n' "$name" \
    "$(field "$summary" records_per_s)" "$(field "$summary" checkpoints)" \
    "$(field "$summary" checkpoint_mean_ms)" "${line##*|}"
done
awk -v k="$(field "${kafka%|*}" records_per_s)" -v f="$(field "${file%|*}" records_per_s)" \
  'BEGIN { printf "kafka/file throughput ratio: %.2f\n", k / f }'
