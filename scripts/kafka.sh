#!/usr/bin/env bash
# Runs a real single-node Apache Kafka 4.x on 127.0.0.1 for tests, in KRaft
# mode (one JVM is both broker and controller), built only from Maven
# Central jars (no Docker, no tarball download).
#
#   scripts/kafka.sh start    fetch the jars once, write the config, format
#                             the storage (first start only), start the node
#                             and wait until the broker answers requests
#   scripts/kafka.sh stop     SIGTERM (controlled shutdown), SIGKILL after
#                             STRATA_KAFKA_STOP_WAIT s
#   scripts/kafka.sh status   exit 0 if the broker answers, 3 otherwise
#   scripts/kafka.sh wipe     stop, then delete the data folder
#
# `start` resolves org.apache.kafka:kafka_2.13 (the broker), kafka-tools
# (the CLI classes, without Kafka Connect) and a log4j2 SLF4J binding with
# mvn into a cache kept outside the clone, so a second start downloads
# nothing. It needs Java 17 (found under /usr/lib/jvm), mvn (first start
# only) and python3 (for the Kafka protocol check: ApiVersions, then a
# Metadata request that must list this broker).
#
# The ':'-separated runtime classpath is kept in
# <jar cache>/<kafka version>/classpath.txt; the CLI tools run from it, e.g.
#   java -cp "$(cat .../classpath.txt)" org.apache.kafka.tools.TopicCommand \
#     --bootstrap-server 127.0.0.1:9092 --create --topic t --partitions 4
# (also org.apache.kafka.tools.ConsoleProducer and
# org.apache.kafka.tools.consumer.ConsoleConsumer; add
# -Dlog4j2.configurationFile=<data>/conf/tools-log4j2.xml for quiet logs).
#
# Test-node settings: replication factors and min ISR of the internal
# topics are 1, __consumer_offsets / __transaction_state /
# __share_group_state have 1 partition each (fast first use), the first
# group rebalance is not delayed and the log cleaner's dedupe buffer is
# 32 MiB instead of 128 MiB. Topics are auto-created (Kafka's default).
#
# Environment (all optional):
#   STRATA_KAFKA_HOME             jar cache (default /var/cache/strata-kafka,
#                                 else ~/.cache/strata-kafka)
#   STRATA_KAFKA_DATA             data, config, logs, pid (default <repo>/.kafka)
#   STRATA_KAFKA_PORT             client (PLAINTEXT) port (default 9092)
#   STRATA_KAFKA_CONTROLLER_PORT  KRaft controller port (default 9093)
#   STRATA_KAFKA_HEAP             max heap (default 512m; initial heap 256m or less)
#   STRATA_KAFKA_WAIT             seconds to wait for the broker on start (default 120)
#   STRATA_KAFKA_STOP_WAIT        seconds to wait after SIGTERM before SIGKILL (default 60)
#   STRATA_KAFKA_JAVA_HOME        a Java 17 to use instead of the one found
set -euo pipefail

KAFKA_VERSION=4.4.0              # newest 4.x on Maven Central when pinned
LOG4J_VERSION=2.25.5             # the log4j-core that kafka-server 4.4.0 brings

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DATA="${STRATA_KAFKA_DATA:-$ROOT/.kafka}"
PORT="${STRATA_KAFKA_PORT:-9092}"
CONTROLLER_PORT="${STRATA_KAFKA_CONTROLLER_PORT:-9093}"
HEAP="${STRATA_KAFKA_HEAP:-512m}"
WAIT="${STRATA_KAFKA_WAIT:-120}"
STOP_WAIT="${STRATA_KAFKA_STOP_WAIT:-60}"
CONF="$DATA/conf/server.properties"
PIDFILE="$DATA/kafka.pid"
CLUSTER_ID_FILE="$DATA/cluster.id"
LOG="$DATA/logs/server.log"
OUT="$DATA/logs/stdout.log"

NODE=kafka
NODE_TITLE="Kafka $KAFKA_VERSION"
NODE_VERSION=$KAFKA_VERSION
NODE_ARTIFACT="kafka_2.13 $KAFKA_VERSION"
NODE_HOME="${STRATA_KAFKA_HOME:-}"
NODE_JAVA="${STRATA_KAFKA_JAVA_HOME:-}"
NODE_MAIN=kafka.Kafka
NODE_CONF="$CONF"
# shellcheck source=lib/jvm-node.sh
source "$ROOT/scripts/lib/jvm-node.sh"

# ---------------------------------------------------------------- jars

# kafka-tools drags in Kafka Connect (Jetty, Jersey, ...) for its Connect
# tools only; the topic, producer and consumer tools do not need it.
pom_dependencies() {
  cat <<EOF
    <dependency>
      <groupId>org.apache.kafka</groupId>
      <artifactId>kafka_2.13</artifactId>
      <version>$KAFKA_VERSION</version>
    </dependency>
    <dependency>
      <groupId>org.apache.kafka</groupId>
      <artifactId>kafka-tools</artifactId>
      <version>$KAFKA_VERSION</version>
      <exclusions>
        <exclusion>
          <groupId>org.apache.kafka</groupId>
          <artifactId>connect-runtime</artifactId>
        </exclusion>
      </exclusions>
    </dependency>
    <!-- Kafka logs through SLF4J 1.7; this routes it into log4j2. -->
    <dependency>
      <groupId>org.apache.logging.log4j</groupId>
      <artifactId>log4j-slf4j-impl</artifactId>
      <version>$LOG4J_VERSION</version>
    </dependency>
    <dependency>
      <groupId>org.apache.logging.log4j</groupId>
      <artifactId>log4j-core</artifactId>
      <version>$LOG4J_VERSION</version>
    </dependency>
EOF
}

# ---------------------------------------------------------------- config

write_properties() {
  cat >"$CONF" <<EOF
# Written by scripts/kafka.sh on every start; edits are lost.
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:$CONTROLLER_PORT
listeners=PLAINTEXT://127.0.0.1:$PORT,CONTROLLER://127.0.0.1:$CONTROLLER_PORT
advertised.listeners=PLAINTEXT://127.0.0.1:$PORT,CONTROLLER://127.0.0.1:$CONTROLLER_PORT
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
inter.broker.listener.name=PLAINTEXT
controller.listener.names=CONTROLLER
log.dirs=$DATA/data
num.partitions=1
default.replication.factor=1
offsets.topic.replication.factor=1
offsets.topic.num.partitions=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
transaction.state.log.num.partitions=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
share.coordinator.state.topic.num.partitions=1
group.initial.rebalance.delay.ms=0
log.cleaner.dedupe.buffer.size=33554432
EOF
}

log4j2_config() {
  cat <<EOF
<?xml version="1.0" encoding="UTF-8"?>
<!-- Written by scripts/kafka.sh on every start; edits are lost. -->
<Configuration status="warn">
  <Appenders>
    <RollingFile name="FILE" fileName="$LOG" filePattern="$DATA/logs/server.log.%i.gz">
      <PatternLayout pattern="[%d] %p %m (%c)%n"/>
      <SizeBasedTriggeringPolicy size="20MB"/>
      <DefaultRolloverStrategy max="3"/>
    </RollingFile>
  </Appenders>
  <Loggers>
    <Root level="INFO"><AppenderRef ref="FILE"/></Root>
    <Logger name="kafka.request.logger" level="WARN"/>
    <Logger name="kafka.network.RequestChannel\$" level="WARN"/>
    <Logger name="org.apache.kafka.common.utils.AppInfoParser" level="WARN"/>
  </Loggers>
</Configuration>
EOF
}

# The CLI tools log warnings and errors to stderr only.
tools_log4j2_config() {
  cat <<EOF
<?xml version="1.0" encoding="UTF-8"?>
<!-- Written by scripts/kafka.sh on every start; edits are lost. -->
<Configuration status="warn">
  <Appenders>
    <Console name="STDERR" target="SYSTEM_ERR">
      <PatternLayout pattern="[%d] %p %m (%c)%n"/>
    </Console>
  </Appenders>
  <Loggers>
    <Root level="WARN"><AppenderRef ref="STDERR"/></Root>
  </Loggers>
</Configuration>
EOF
}

write_configs() {
  write_properties
  log4j2_config >"$DATA/conf/log4j2.xml"
  tools_log4j2_config >"$DATA/conf/tools-log4j2.xml"
}

# Kafka's base64url form of a random UUID (what `kafka-storage.sh
# random-uuid` prints), made once per data folder.
cluster_id() {
  if [ ! -s "$CLUSTER_ID_FILE" ]; then
    python3 -c '
import base64, uuid
while True:
    s = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
    if not s.startswith("-"):
        print(s); break' >"$CLUSTER_ID_FILE.tmp"
    mv "$CLUSTER_ID_FILE.tmp" "$CLUSTER_ID_FILE"
  fi
  cat "$CLUSTER_ID_FILE"
}

# Formats the log dir for KRaft (static voter set) unless already done.
format_storage() {
  local java="$1" cp="$2" id
  [ -f "$DATA/data/meta.properties" ] && return 0
  id="$(cluster_id)"
  say "formatting $DATA/data for cluster $id"
  if ! "$java" -Xmx256m "-Dlog4j2.configurationFile=$DATA/conf/tools-log4j2.xml" \
      -cp "$(cat "$cp")" kafka.tools.StorageTool format --ignore-formatted \
      --cluster-id "$id" --config "$CONF" >"$DATA/logs/format.log" 2>&1; then
    cat "$DATA/logs/format.log" >&2
    die "formatting the storage failed"
  fi
}

# Flags of Kafka's kafka-run-class.sh / kafka-server-start.sh, smaller heap.
jvm_opts() {
  local xms=256m
  case "$HEAP" in *[mM]) [ "${HEAP%[mM]}" -lt 256 ] && xms="$HEAP" ;; esac
  printf '%s\n' \
    "-Xms$xms" "-Xmx$HEAP" \
    -server -XX:+UseG1GC -XX:MaxGCPauseMillis=20 \
    -XX:InitiatingHeapOccupancyPercent=35 -XX:+ExplicitGCInvokesConcurrent \
    -XX:MaxInlineLevel=15 -XX:+ExitOnOutOfMemoryError \
    -XX:+PerfDisableSharedMem -Djava.awt.headless=true \
    -Djava.net.preferIPv4Stack=true \
    "-Dkafka.logs.dir=$DATA/logs" \
    "-Dlog4j2.configurationFile=$DATA/conf/log4j2.xml"
}

# ---------------------------------------------------------------- process

# A real Kafka exchange: ApiVersions, then Metadata (all topics), whose
# broker list must hold a broker on our port. Prints the cluster id, the
# broker id and the number of topics.
node_probe() {
  python3 - "$PORT" <<'EOF'
import socket, struct, sys
port = int(sys.argv[1])
CLIENT = b"strata-kafka-sh"

def recv_exact(s, n):
    buf = b""
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            raise EOFError("connection closed")
        buf += chunk
    return buf

def call(s, key, version, corr, body=b""):
    # Request header v1: api key, api version, correlation id, client id.
    req = struct.pack(">hhih", key, version, corr, len(CLIENT)) + CLIENT + body
    s.sendall(struct.pack(">i", len(req)) + req)
    size, = struct.unpack(">i", recv_exact(s, 4))
    resp = recv_exact(s, size)
    rcorr, = struct.unpack(">i", resp[:4])
    assert rcorr == corr, "correlation id %d, expected %d" % (rcorr, corr)
    return resp[4:]                        # response header v0: just the id

class Reader:
    def __init__(self, b): self.b, self.p = b, 0
    def take(self, fmt):
        v = struct.unpack_from(fmt, self.b, self.p); self.p += struct.calcsize(fmt)
        return v if len(v) > 1 else v[0]
    def string(self):
        n = self.take(">h")
        if n < 0: return None
        v = self.b[self.p:self.p + n].decode(); self.p += n
        return v

try:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.settimeout(5)
        # ApiVersions v0 (every broker answers v0, even with an error code).
        r = Reader(call(s, 18, 0, 1))
        err = r.take(">h")
        assert err == 0, "ApiVersions error %d" % err
        versions = {}
        for _ in range(r.take(">i")):
            k, lo, hi = r.take(">hhh")
            versions[k] = (lo, hi)
        lo, hi = versions[3]               # Metadata
        v = max(lo, 4)
        assert v <= min(hi, 8), "no non-flexible Metadata version in %d..%d" % (lo, hi)
        body = struct.pack(">i?", -1, False)          # all topics, no auto-create
        if v >= 8:
            body += struct.pack(">??", False, False)  # no authorized operations
        r = Reader(call(s, 3, v, 2, body))
        r.take(">i")                                  # throttle_time_ms
        brokers = []
        for _ in range(r.take(">i")):
            node = r.take(">i"); host = r.string(); bport = r.take(">i"); r.string()
            brokers.append((node, host, bport))
        cluster = r.string()
        r.take(">i")                                  # controller id
        ntopics = r.take(">i")
        mine = [b for b in brokers if b[2] == port]
        assert mine, "broker list %r has nobody on port %d" % (brokers, port)
        print("cluster %s, broker %d, %d topic(s)" % (cluster, mine[0][0], ntopics))
except Exception as e:
    print("no Kafka answer: %s" % e, file=sys.stderr)
    sys.exit(1)
EOF
}

port_in_use() {
  python3 - "$1" <<'EOF'
import socket, sys
s = socket.socket()
try:
    s.connect(("127.0.0.1", int(sys.argv[1])))
except OSError:
    sys.exit(1)
EOF
}

launch() {
  local java cp
  local -a opts
  java="$(find_java)"
  cp="$(fetch_jars)"
  mkdir -p "$DATA"/{conf,data,logs}
  write_configs
  format_storage "$java" "$cp"
  mapfile -t opts < <(jvm_opts)
  say "starting Kafka $KAFKA_VERSION (KRaft broker+controller) on 127.0.0.1:$PORT, controller port $CONTROLLER_PORT (data $DATA)"
  setsid nohup "$java" "${opts[@]}" -cp "$(cat "$cp")" kafka.Kafka "$CONF" \
    </dev/null >"$OUT" 2>&1 &
  echo $! >"$PIDFILE"
}

# ---------------------------------------------------------------- commands

cmd_start() {
  local info
  start_existing && return 0
  command -v python3 >/dev/null || die "python3 is needed for the Kafka protocol check"
  if info="$(node_probe 2>/dev/null)"; then
    die "port $PORT already answers Kafka ($info) but not a node of $DATA: stop it or set STRATA_KAFKA_PORT"
  fi
  if port_in_use "$PORT"; then
    die "port $PORT is in use by something else: set STRATA_KAFKA_PORT"
  fi
  if port_in_use "$CONTROLLER_PORT"; then
    die "controller port $CONTROLLER_PORT is in use: set STRATA_KAFKA_CONTROLLER_PORT"
  fi
  launch
  wait_for_node "$(cat "$PIDFILE")"
}

node_main "$@"
