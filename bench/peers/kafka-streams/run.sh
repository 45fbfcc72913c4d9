#!/usr/bin/env bash
# Kafka Streams peer of strata's route-history job: fetch the jars (Maven Central),
# compile RouteHistory.java, run it bounded from <input-topic> to <output-topic>.
#
#   bench/peers/kafka-streams/run.sh <input-topic> <output-topic>
#
# Needs: JDK 17 (java + javac), mvn (first run only), a Kafka broker.
#
# Environment knobs (defaults in brackets):
#   STRATA_KAFKA_BROKERS [127.0.0.1:9092]
#   WORK [$HOME/.cache/kstreamspeer]   Maven repository, classes and state dirs live here
#   KS_VERSION [4.4.0]                 org.apache.kafka:kafka-streams version
#   APP_ID [ks-route-history-<epoch s>] application.id (consumer group, internal topic prefix)
#   COMMIT_MS [2000]                   commit.interval.ms (strata's checkpoint.interval=2s)
#   THREADS [2]                        num.stream.threads
#   CACHE_MB [10]                      statestore.cache.max.bytes, MiB (Kafka's default)
#   XMX [1g]                           JVM max heap
#   KEEP_STATE [0]                     1: keep $WORK/state/<APP_ID> after the run
#   THROTTLE [0]                       output records per second over all threads (0: unthrottled)
#   RECORDS                            a live input: stop after this many records (default: the
#                                      input's size at start)
#
# Prints the job's summary line (`kstreams: done. ...`) and then `kstreams: peak_rss_mib=N`
# on stderr. Exits non-zero if the job failed.
set -euo pipefail

if [ $# -ne 2 ]; then
  echo "usage: $0 <input-topic> <output-topic>" >&2
  exit 2
fi
INPUT="$1"
OUTPUT="$2"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
WORK="${WORK:-$HOME/.cache/kstreamspeer}"
KS_VERSION="${KS_VERSION:-4.4.0}"
export STRATA_KAFKA_BROKERS="${STRATA_KAFKA_BROKERS:-127.0.0.1:9092}"
export APP_ID="${APP_ID:-ks-route-history-$(date +%s)}"
export COMMIT_MS="${COMMIT_MS:-2000}"
export THREADS="${THREADS:-2}"
export CACHE_MB="${CACHE_MB:-10}"
XMX="${XMX:-1g}"
KEEP_STATE="${KEEP_STATE:-0}"
export STATE_DIR="$WORK/state"

mkdir -p "$WORK/build-$KS_VERSION" "$STATE_DIR"
BUILD="$WORK/build-$KS_VERSION"

# 1. Jars: kafka-streams and its runtime dependencies, plus an SLF4J 1.7 binding.
if [ ! -s "$BUILD/classpath.txt" ]; then
  cat > "$BUILD/pom.xml" <<EOF
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>local</groupId><artifactId>kstreams-peer</artifactId><version>1</version>
  <dependencies>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka-streams</artifactId><version>$KS_VERSION</version></dependency>
    <dependency><groupId>org.slf4j</groupId><artifactId>slf4j-simple</artifactId><version>1.7.36</version></dependency>
  </dependencies>
</project>
EOF
  if ! mvn -B -q -Dstyle.color=never -f "$BUILD/pom.xml" -Dmaven.repo.local="$WORK/m2" \
      dependency:build-classpath -Dmdep.includeScope=runtime \
      -Dmdep.outputFile="$BUILD/classpath.tmp" > "$BUILD/mvn.log" 2>&1; then
    tail -20 "$BUILD/mvn.log" >&2
    echo "mvn could not resolve kafka-streams $KS_VERSION (see $BUILD/mvn.log)" >&2
    exit 1
  fi
  mv "$BUILD/classpath.tmp" "$BUILD/classpath.txt"
fi
CP="$(cat "$BUILD/classpath.txt")"

# 2. Compile.
rm -rf "$BUILD/classes" && mkdir -p "$BUILD/classes"
javac -cp "$CP" -d "$BUILD/classes" "$HERE/RouteHistory.java"

# 3. Run, polling the JVM's peak RSS (VmHWM). Log: WARN and above, except StreamsConfig's
# warning (on every config object, internal ones too) that the global-thread exception
# handler flag is unset; the job has no global store.
java "-Xmx$XMX" -Dorg.slf4j.simpleLogger.defaultLogLevel=warn \
  -Dorg.slf4j.simpleLogger.log.org.apache.kafka.streams.StreamsConfig=error \
  -cp "$BUILD/classes:$CP" RouteHistory "$INPUT" "$OUTPUT" &
pid=$!
trap 'kill "$pid" 2>/dev/null || true' INT TERM
hwm=0
while kill -0 "$pid" 2>/dev/null; do
  h="$(awk '/VmHWM/{print $2}' "/proc/$pid/status" 2>/dev/null || true)"
  [ -n "$h" ] && hwm="$h"
  sleep 0.5
done
rc=0
wait "$pid" || rc=$?
echo "kstreams: peak_rss_mib=$((hwm / 1024))" >&2
if [ "$KEEP_STATE" != 1 ]; then
  rm -rf "${STATE_DIR:?}/$APP_ID"
fi
exit "$rc"
