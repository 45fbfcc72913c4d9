#!/usr/bin/env bash
# route-history on the flights, on one topic loaded once (issue 25), back to
# back on this machine:
#   file -> strata -> file; Kafka -> strata -> Kafka; Kafka -> Kafka Streams
#   -> Kafka (bench/peers/kafka-streams); then both Kafka runs with the
#   output throttled to $THROTTLE records/s; then each engine's end-to-end
#   latency at half its own unthrottled rate: the input produced live at that
#   rate (strata topic load --rate), produce time to commit time as a reader
#   of the output topic sees it (kafka-latency).
# Prints one table: records/s (each run's own summary), peak RSS (VmHWM),
# mean checkpoint or commit duration, latency p50/p99, and whether the output
# equals the reference computation (route-check; a wrong output is reported,
# not timed).
# Needs: a running Kafka (scripts/kafka.sh start), a release build of the
# workspace's binaries (cargo build --release --workspace --bins), Java 17
# and Maven for the peer. Knobs: STRATA_FLIGHTS (the input file), THROTTLE
# [50000], LATENCY_RECORDS [600000], CHECKPOINT [2s] (strata's
# checkpoint.interval and the peer's commit.interval.ms), CACHE_MB [128]
# (both engines' state cache: strata's state.l1.capacity, Kafka Streams'
# statestore.cache.max.bytes; "default" leaves each its own default, 64
# and 10), EXTRA (more -D options for every strata run).
set -euo pipefail
source "$(dirname "$0")/env.sh"
cd "$STRATA_ROOT"
brokers="${STRATA_KAFKA_BROKERS:-127.0.0.1:9092}"
export STRATA_KAFKA_BROKERS="$brokers"
export STRATA_KAFKA_PORT="${brokers##*:}"
data="${STRATA_FLIGHTS:-data/flights-3m.parquet}"
throttle="${THROTTLE:-50000}"
latency_records="${LATENCY_RECORDS:-600000}"
interval="${CHECKPOINT:-2s}"
commit_ms=$(awk -v i="$interval" 'BEGIN { n = i + 0; print (i ~ /ms$/) ? n : n * 1000 }')
read -r -a extra <<<"${EXTRA:-}"
cache="${CACHE_MB:-128}"
if [ "$cache" != default ]; then
  extra+=(-D "state.l1.capacity=${cache}MB")
  export CACHE_MB="$cache"
else
  unset CACHE_MB
fi
bin="$CARGO_TARGET_DIR/release"
peer=bench/peers/kafka-streams/run.sh
work="$(mktemp -d)"
trap 'pkill -P $$ 2>/dev/null || true; rm -rf "$work"' EXIT
tag="$(date +%s)"
input="bench-flights-$tag"
"$bin/strata" topic load "$data" --brokers "$brokers" --topic "$input" \
  --key origin,destination --partitions 4
"$bin/flights-head" "$latency_records" "$work" >/dev/null
slice="$work/flights-$latency_records.parquet"

field() { tr ' ' '\n' <<<"$1" | awk -F= -v k="$2" '$1 == k {print $2}'; }

# Peak RSS (MB) of pid $1 while it runs.
peak_rss() {
  local hwm=0 v
  while kill -0 "$1" 2>/dev/null; do
    v=$(awk '/VmHWM/ {print $2}' "/proc/$1/status" 2>/dev/null || true)
    [ -n "$v" ] && hwm=$v
    sleep 0.2
  done
  echo $((hwm / 1024))
}

# exact or WRONG (route-check exits 1 on a wrong output: reported, not fatal).
check() {
  { "$bin/route-check" "$1" "$2" 2>&1 || true; } | tail -1 | awk '{print $1}' | tr -d :
}

# The run's summary line in $1, or a message and failure.
summary_of() {
  grep "^$2: done" "$1" || { echo "no summary line in $1:" >&2; tail -5 "$1" >&2; return 1; }
}

# strata NAME OUTPUT ARGS...: a bounded run; sets row NAME.
strata() {
  local name=$1 output=$2
  shift 2
  "$bin/strata" run route-history --output "$output" --checkpoint-dir "$work/chk-$name" \
    -D checkpoint.interval="$interval" "${extra[@]}" "$@" 2>"$work/$name.err" &
  local pid=$! rss
  rss=$(peak_rss "$pid")
  wait "$pid" || { tail -3 "$work/$name.err" >&2; return 1; }
  local s verdict="-" rate
  s=$(summary_of "$work/$name.err" strata)
  [[ $output == kafka://* ]] && verdict=$(check "$data" "${output##*/}")
  rate=$(field "$s" records_per_s)
  [ "$verdict" = WRONG ] && rate="(wrong output)"
  rows["$name"]="$rate|$rss|$(field "$s" checkpoint_mean_ms)|$verdict"
}

# kstreams NAME OUTPUT [ENV=VALUE...]: a bounded peer run; sets row NAME.
kstreams() {
  local name=$1 output=$2
  shift 2
  env "$@" COMMIT_MS="$commit_ms" "$peer" "$input" "$output" 2>"$work/$name.err" \
    || { tail -5 "$work/$name.err" >&2; return 1; }
  local s verdict rate
  s=$(summary_of "$work/$name.err" kstreams)
  verdict=$(check "$data" "$output")
  rate=$(field "$s" records_per_s)
  [ "$verdict" = exact ] || rate="(wrong output)"
  rows["$name"]="$rate|$(awk -F= '/peak_rss_mib/ {print $2}' "$work/$name.err")|$(field "$s" commit_mean_ms)|$verdict"
}

# latency NAME RATE COMMAND...: COMMAND runs the job on a fresh input topic
# ($lat_in) produced live at RATE records/s; prints "p50/p99".
latency() {
  local name=$1 rate=$2
  shift 2
  lat_in="bench-lat-$name-$tag"
  lat_out="bench-lat-out-$name-$tag"
  "$bin/strata" topic load "$slice" --brokers "$brokers" --topic "$lat_in" \
    --key origin,destination --partitions 4 --rate 1 >/dev/null 2>&1 &
  local first=$!
  sleep 2 && kill "$first" 2>/dev/null || true # creates the topic (and sends a record or two)
  wait "$first" 2>/dev/null || true
  "$bin/kafka-latency" "$lat_in" "$lat_out" "$latency_records" >"$work/$name.lat" &
  local reader=$!
  "$@" >"$work/$name.job" 2>&1 &
  local job=$!
  sleep 5
  "$bin/strata" topic load "$slice" --brokers "$brokers" --topic "$lat_in" \
    --key origin,destination --partitions 4 --rate "$rate" 2>/dev/null
  wait "$reader" || { tail -3 "$work/$name.job" >&2; }
  kill -TERM "$job" 2>/dev/null || true
  wait "$job" 2>/dev/null || true
  awk '{ for (i = 1; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] } } END { print v["p50"] "/" v["p99"] }' "$work/$name.lat"
}

declare -A rows
strata file "$work/out" --input "$data"
strata kafka "kafka://$brokers/bench-rh-$tag" --input "kafka://$brokers/$input" -D source.kafka.bounded=true
kstreams kstreams "bench-ks-$tag"
strata kafka-slow "kafka://$brokers/bench-rh-slow-$tag" --input "kafka://$brokers/$input" \
  -D source.kafka.bounded=true -D sink.max-records-per-second="$throttle"
kstreams kstreams-slow "bench-ks-slow-$tag" THROTTLE="$throttle"

half() { awk -v r="${rows[$1]%%|*}" 'BEGIN { printf "%d", r / 2 }'; }
rate_s=$(half kafka)
lat_s=$(latency strata "$rate_s" "$bin/strata" run route-history --input "kafka://$brokers/bench-lat-strata-$tag" \
  --output "kafka://$brokers/bench-lat-out-strata-$tag" --checkpoint-dir "$work/chk-lat" \
  -D checkpoint.interval="$interval" "${extra[@]}")
lat_k="-"
if [[ ${rows[kstreams]%%|*} =~ ^[0-9]+$ ]]; then
  rate_k=$(half kstreams)
  lat_k=$(latency kstreams "$rate_k" env RECORDS="$latency_records" COMMIT_MS="$commit_ms" \
    "$peer" "bench-lat-kstreams-$tag" "bench-lat-out-kstreams-$tag")
fi

printf '\n| run | records/s | peak RSS MB | checkpoint/commit mean ms | latency p50/p99 ms (at records/s) | output |\n|---|---|---|---|---|---|\n'
for name in file kafka kstreams kafka-slow kstreams-slow; do
  IFS='|' read -r rate rss ckpt verdict <<<"${rows[$name]}"
  lat="-"
  [ "$name" = kafka ] && lat="$lat_s ($rate_s)"
  [ "$name" = kstreams ] && lat="$lat_k (${rate_k:--})"
  printf '| %s | %s | %s | %s | %s | %s |\n' "$name" "$rate" "$rss" "${ckpt:--}" "$lat" "$verdict"
done
ratio() { awk -v a="${rows[$1]%%|*}" -v b="${rows[$2]%%|*}" 'BEGIN { if (b + 0 > 0) printf "%.2f", a / b; else print "-" }'; }
echo
echo "Kafka -> strata -> Kafka / file -> file: $(ratio kafka file)"
echo "strata / Kafka Streams, Kafka -> Kafka: $(ratio kafka kstreams)"
echo "throttled to $throttle/s: strata $(awk -v r="${rows[kafka-slow]%%|*}" -v t="$throttle" 'BEGIN { printf "%.1f%%", 100 * r / t }') of the throttle"
