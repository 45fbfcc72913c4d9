#!/usr/bin/env bash
# What TLS and a login cost (issue 27), measured back to back on this
# machine with the same job, input and settings:
#   L3:    route-history on the first $L3_FLIGHTS flights with 1 MB of L1
#          and L2 and a checkpoint a second (so cold routes move to
#          Cassandra early and most records read theirs back from it),
#          against the plain node (127.0.0.1:9042) and the node that
#          requires a password over TLS (scripts/cassandra.sh start --secure,
#          127.0.0.1:9142); each on a fresh keyspace.
#   Kafka: route-history Kafka -> strata -> Kafka, exactly once, on one
#          topic of $STRATA_FLIGHTS loaded once, through the broker's
#          PLAINTEXT listener (9092) and its SASL_SSL listener (9094,
#          SCRAM-SHA-512); every output checked by route-check.
# Runs alternate (plain, TLS, plain, TLS: $ROUNDS rounds) so that drift of
# the machine hits both; prints one line per run and the ratio of the
# medians. Needs the three servers (scripts/kafka.sh start, scripts/cassandra.sh
# start, scripts/cassandra.sh start --secure) and a release build of the
# workspace's binaries. The two Cassandra nodes differ in heap (1 GB plain,
# 768 MB secured; neither is near it in these runs).
set -euo pipefail
source "$(dirname "$0")/env.sh"
cd "$STRATA_ROOT"
data="${STRATA_FLIGHTS:-data/flights-3m.parquet}"
l3_flights="${L3_FLIGHTS:-100000}"
rounds="${ROUNDS:-2}"
bin="$CARGO_TARGET_DIR/release"
ca="$STRATA_ROOT/.tls/ca.pem"
export STRATA_L3_PASSWORD="${STRATA_CASSANDRA_SECURE_PASSWORD:-strata-cassandra-secret-9Vb3}"
export STRATA_KAFKA_PASSWORD="${STRATA_KAFKA_SCRAM_PASSWORD:-strata-kafka-secret-6Q2x}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
tag="$(date +%s)"

field() { tr ' ' '\n' <<<"$1" | awk -F= -v k="$2" '$1 == k {print $2}'; }
summary() { grep '^strata: done\.' "$1" | tail -1; }
median() { sort -n | awk '{v[NR]=$1} END {print (NR % 2) ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2}'; }

l3_settings() {
  case "$1" in
    plain) echo "-D state.l3.contact-points=127.0.0.1:9042" ;;
    tls) echo "-D state.l3.contact-points=127.0.0.1:9142 -D state.l3.username=strata -D state.l3.tls=true -D state.l3.tls.ca=$ca" ;;
  esac
}

kafka_settings() {
  case "$1" in
    plain) echo "" ;;
    tls) echo "-D kafka.security.protocol=sasl_ssl -D kafka.sasl.mechanism=SCRAM-SHA-512 -D kafka.sasl.username=strata -D kafka.ssl.ca=$ca" ;;
  esac
}

brokers_of() { [ "$1" = plain ] && echo 127.0.0.1:9092 || echo 127.0.0.1:9094; }

"$bin/flights-head" "$l3_flights" "$work" >/dev/null
slice="$work/flights-$l3_flights.parquet"
input="bench-tls-flights-$tag"
"$bin/strata" topic load "$data" --brokers 127.0.0.1:9092 --topic "$input" \
  --key origin,destination --partitions 4 2>&1 | tail -1

for round in $(seq "$rounds"); do
  for mode in plain tls; do
    run="l3-$mode-$round"
    # shellcheck disable=SC2046
    "$bin/strata" run route-history --input "$slice" --output "$work/$run" \
      -D state.l1.capacity=1MB -D state.l2.capacity=1MB -D checkpoint.interval=1s \
      -D "state.l3.keyspace=bench_tls_${tag}_${mode}_$round" \
      $(l3_settings "$mode") 2>"$work/$run.log" || { tail -3 "$work/$run.log"; exit 1; }
    s=$(summary "$work/$run.log")
    echo "L3    $mode round $round: $(field "$s" records_per_s) records/s, l3_hits=$(field "$s" l3_hits)"
    field "$s" records_per_s >>"$work/l3-$mode"
    b=$(brokers_of "$mode")
    run="kafka-$mode-$round"
    output="bench-tls-out-$tag-$mode-$round"
    # shellcheck disable=SC2046
    "$bin/strata" run route-history --input "kafka://$b/$input" --output "kafka://$b/$output" \
      --checkpoint-dir "$work/$run-chk" -D source.kafka.bounded=true \
      $(kafka_settings "$mode") 2>"$work/$run.log" || { tail -3 "$work/$run.log"; exit 1; }
    s=$(summary "$work/$run.log")
    check=$({ "$bin/route-check" "$data" "$output" 2>&1 || true; } | tail -1 | awk '{print $1}' | tr -d :)
    echo "Kafka $mode round $round: $(field "$s" records_per_s) records/s, output $check"
    field "$s" records_per_s >>"$work/kafka-$mode"
  done
done

for what in l3 kafka; do
  p=$(median <"$work/$what-plain")
  t=$(median <"$work/$what-tls")
  awk -v w="$what" -v p="$p" -v t="$t" 'BEGIN { printf "%-5s median records/s: plaintext %.0f, TLS+login %.0f, ratio %.2f\n", w, p, t, t / p }'
done
