#!/usr/bin/env bash
# Runs a real single-node Apache Cassandra 5.0 on 127.0.0.1 for tests, built
# only from Maven Central jars (no Docker, no tarball download).
#
#   scripts/cassandra.sh start    fetch the jars once, write the config, start
#                                 the node and wait until it answers CQL
#   scripts/cassandra.sh stop     SIGTERM (clean drain), SIGKILL after 60 s
#   scripts/cassandra.sh status   exit 0 if it answers CQL, 3 otherwise
#   scripts/cassandra.sh wipe     stop, then delete the data folder
#
# `start` resolves org.apache.cassandra:cassandra-all and its runtime
# dependencies with mvn into a cache kept outside the clone, so a second
# start downloads nothing. It needs Java 17 (found under /usr/lib/jvm),
# mvn (first start only) and python3 (for the CQL handshake check).
#
# Environment (all optional):
#   STRATA_CASSANDRA_HOME          jar cache (default /var/cache/strata-cassandra,
#                                  else ~/.cache/strata-cassandra)
#   STRATA_CASSANDRA_DATA          data, config, logs, pid (default <repo>/.cassandra)
#   STRATA_CASSANDRA_PORT          CQL native port (default 9042)
#   STRATA_CASSANDRA_STORAGE_PORT  internode port (default 7000)
#   STRATA_CASSANDRA_JMX_PORT      local JMX port; unset = JMX off (default)
#   STRATA_CASSANDRA_HEAP          max heap (default 1G; initial heap 512m or less)
#   STRATA_CASSANDRA_WAIT          seconds to wait for CQL on start (default 180)
#   STRATA_CASSANDRA_JAVA_HOME     a Java 17 to use instead of the one found
set -euo pipefail

CASSANDRA_VERSION=5.0.9          # newest 5.0.x on Maven Central when pinned

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DATA="${STRATA_CASSANDRA_DATA:-$ROOT/.cassandra}"
PORT="${STRATA_CASSANDRA_PORT:-9042}"
STORAGE_PORT="${STRATA_CASSANDRA_STORAGE_PORT:-7000}"
JMX_PORT="${STRATA_CASSANDRA_JMX_PORT:-}"
HEAP="${STRATA_CASSANDRA_HEAP:-1G}"
WAIT="${STRATA_CASSANDRA_WAIT:-180}"
STOP_WAIT=60
PIDFILE="$DATA/cassandra.pid"
LOG="$DATA/logs/system.log"
OUT="$DATA/logs/stdout.log"

NODE=cassandra
NODE_TITLE=Cassandra
NODE_VERSION=$CASSANDRA_VERSION
NODE_ARTIFACT="cassandra-all $CASSANDRA_VERSION"
NODE_HOME="${STRATA_CASSANDRA_HOME:-}"
NODE_JAVA="${STRATA_CASSANDRA_JAVA_HOME:-}"
NODE_MAIN=CassandraDaemon
NODE_CONF="$DATA/conf/cassandra.yaml"
# shellcheck source=lib/jvm-node.sh
source "$ROOT/scripts/lib/jvm-node.sh"

# ---------------------------------------------------------------- jars

pom_dependencies() {
  cat <<EOF
    <dependency>
      <groupId>org.apache.cassandra</groupId>
      <artifactId>cassandra-all</artifactId>
      <version>$CASSANDRA_VERSION</version>
    </dependency>
EOF
}

# ---------------------------------------------------------------- config

write_yaml() {
  cat >"$DATA/conf/cassandra.yaml" <<EOF
# Written by scripts/cassandra.sh on every start; edits are lost.
cluster_name: strata-test
num_tokens: 1
initial_token: 0
partitioner: org.apache.cassandra.dht.Murmur3Partitioner
endpoint_snitch: SimpleSnitch
seed_provider:
  - class_name: org.apache.cassandra.locator.SimpleSeedProvider
    parameters:
      - seeds: "127.0.0.1:$STORAGE_PORT"
listen_address: 127.0.0.1
rpc_address: 127.0.0.1
storage_port: $STORAGE_PORT
native_transport_port: $PORT
start_native_transport: true
data_file_directories:
  - $DATA/data
commitlog_directory: $DATA/commitlog
saved_caches_directory: $DATA/saved_caches
hints_directory: $DATA/hints
cdc_raw_directory: $DATA/cdc_raw
commitlog_sync: periodic
commitlog_sync_period: 1000ms
authenticator: AllowAllAuthenticator
authorizer: AllowAllAuthorizer
role_manager: CassandraRoleManager
network_authorizer: AllowAllNetworkAuthorizer
storage_compatibility_mode: NONE
auto_snapshot: false
EOF
}

write_logback() {
  cat >"$DATA/conf/logback.xml" <<EOF
<configuration scan="false">
  <appender name="FILE" class="ch.qos.logback.core.rolling.RollingFileAppender">
    <file>$LOG</file>
    <rollingPolicy class="ch.qos.logback.core.rolling.FixedWindowRollingPolicy">
      <fileNamePattern>$DATA/logs/system.log.%i.zip</fileNamePattern>
      <minIndex>1</minIndex>
      <maxIndex>3</maxIndex>
    </rollingPolicy>
    <triggeringPolicy class="ch.qos.logback.core.rolling.SizeBasedTriggeringPolicy">
      <maxFileSize>20MB</maxFileSize>
    </triggeringPolicy>
    <encoder>
      <pattern>%-5level [%thread] %date{ISO8601} %F:%L - %msg%n</pattern>
    </encoder>
  </appender>
  <root level="INFO">
    <appender-ref ref="FILE"/>
  </root>
</configuration>
EOF
}

# Java 17 flags from Cassandra 5.0's conf/jvm17-server.options and
# jvm-server.options, plus fast single-node start-up.
jvm_opts() {
  local xms=512m
  case "$HEAP" in *[mM]) [ "${HEAP%[mM]}" -lt 512 ] && xms="$HEAP" ;; esac
  printf '%s\n' \
    "-Xms$xms" "-Xmx$HEAP" \
    -XX:+UseG1GC -XX:+ParallelRefProcEnabled -XX:MaxTenuringThreshold=1 \
    -XX:G1RSetUpdatingPauseTimePercent=5 -XX:MaxGCPauseMillis=300 \
    -XX:+ExitOnOutOfMemoryError -XX:+HeapDumpOnOutOfMemoryError "-XX:HeapDumpPath=$DATA/logs" \
    -XX:+PerfDisableSharedMem -XX:+UseThreadPriorities -XX:StringTableSize=1000003 \
    -Djdk.attach.allowAttachSelf=true \
    --add-exports java.base/jdk.internal.misc=ALL-UNNAMED \
    --add-exports java.management.rmi/com.sun.jmx.remote.internal.rmi=ALL-UNNAMED \
    --add-exports java.rmi/sun.rmi.registry=ALL-UNNAMED \
    --add-exports java.rmi/sun.rmi.server=ALL-UNNAMED \
    --add-exports java.sql/java.sql=ALL-UNNAMED \
    --add-exports java.base/java.lang.ref=ALL-UNNAMED \
    --add-exports jdk.unsupported/sun.misc=ALL-UNNAMED \
    --add-exports jdk.compiler/com.sun.tools.javac.file=ALL-UNNAMED \
    --add-exports jdk.attach/sun.tools.attach=ALL-UNNAMED \
    --add-opens java.base/java.lang.module=ALL-UNNAMED \
    --add-opens java.base/jdk.internal.loader=ALL-UNNAMED \
    --add-opens java.base/jdk.internal.ref=ALL-UNNAMED \
    --add-opens java.base/jdk.internal.reflect=ALL-UNNAMED \
    --add-opens java.base/jdk.internal.math=ALL-UNNAMED \
    --add-opens java.base/jdk.internal.module=ALL-UNNAMED \
    --add-opens java.base/jdk.internal.util.jar=ALL-UNNAMED \
    --add-opens jdk.management/com.sun.management.internal=ALL-UNNAMED \
    --add-opens java.base/sun.nio.ch=ALL-UNNAMED \
    --add-opens java.base/java.io=ALL-UNNAMED \
    --add-opens java.base/java.lang.reflect=ALL-UNNAMED \
    --add-opens jdk.compiler/com.sun.tools.javac=ALL-UNNAMED \
    --add-opens java.base/java.lang=ALL-UNNAMED \
    --add-opens java.base/java.util=ALL-UNNAMED \
    -Dio.netty.tryReflectionSetAccessible=true \
    -Dio.netty.allocator.useCacheForAllThreads=true \
    -Dio.netty.allocator.maxOrder=11 \
    -Djava.net.preferIPv4Stack=true \
    "-Dcassandra.config=file://$DATA/conf/cassandra.yaml" \
    "-Dlogback.configurationFile=file://$DATA/conf/logback.xml" \
    "-Dcassandra.storagedir=$DATA" "-Dcassandra.logdir=$DATA/logs" \
    -Dcassandra-foreground=yes \
    -Dcassandra.skip_wait_for_gossip_to_settle=0 \
    -Dcassandra.ring_delay_ms=0 \
    -Dcassandra.initial_token=0
  if [ -n "$JMX_PORT" ]; then
    echo "-Dcassandra.jmx.local.port=$JMX_PORT"
  fi
}

# ---------------------------------------------------------------- process

# A real CQL exchange: OPTIONS -> SUPPORTED, STARTUP -> READY, then
# SELECT release_version FROM system.local. Prints the version.
node_probe() {
  python3 - "$PORT" <<'EOF'
import socket, struct, sys
port = int(sys.argv[1])

def frame(stream, op, body=b""):
    return struct.pack(">BBhBi", 4, 0, stream, op, len(body)) + body

def recv_exact(s, n):
    buf = b""
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            raise EOFError("connection closed")
        buf += chunk
    return buf

def call(s, stream, op, body=b""):
    s.sendall(frame(stream, op, body))
    _, _, _, rop, length = struct.unpack(">BBhBi", recv_exact(s, 9))
    return rop, recv_exact(s, length)

def string(b):
    return struct.pack(">H", len(b)) + b

try:
    with socket.create_connection(("127.0.0.1", port), timeout=3) as s:
        op, _ = call(s, 1, 0x05)                       # OPTIONS
        assert op == 0x06, "OPTIONS answered opcode %d" % op
        op, _ = call(s, 2, 0x01, struct.pack(">H", 1) + string(b"CQL_VERSION") + string(b"3.0.0"))
        assert op == 0x02, "STARTUP answered opcode %d" % op
        q = b"SELECT release_version FROM system.local"
        op, body = call(s, 3, 0x07, struct.pack(">i", len(q)) + q + struct.pack(">HB", 1, 0))
        assert op == 0x08, "QUERY answered opcode %d" % op
        # Rows: kind, flags, column count, global table spec, one varchar column.
        kind, flags, ncols = struct.unpack(">iii", body[:12])
        assert kind == 2 and ncols == 1
        pos = 12
        for _ in range(2 if flags & 1 else 0):          # keyspace, table
            pos += 2 + struct.unpack(">H", body[pos:pos + 2])[0]
        pos += 2 + struct.unpack(">H", body[pos:pos + 2])[0]   # column name
        pos += 2                                              # type id
        nrows, = struct.unpack(">i", body[pos:pos + 4]); pos += 4
        assert nrows == 1
        n, = struct.unpack(">i", body[pos:pos + 4]); pos += 4
        print("release " + body[pos:pos + n].decode())
except Exception as e:
    print("no CQL: %s" % e, file=sys.stderr)
    sys.exit(1)
EOF
}

# As root, Cassandra mlockall()s every mapped page (thread stacks, code
# cache, ...), doubling its RSS to ~1 GB. A test node has no swap to fear:
# run it without CAP_IPC_LOCK where setpriv can drop it.
no_mlock_prefix() {
  if [ "$(id -u)" -eq 0 ] && setpriv --bounding-set -ipc_lock true 2>/dev/null; then
    echo setpriv --bounding-set -ipc_lock
  fi
}

launch() {
  local java cp jamm
  local -a opts prefix
  java="$(find_java)"
  cp="$(fetch_jars)"
  mkdir -p "$DATA"/{conf,data,commitlog,saved_caches,hints,cdc_raw,logs}
  write_yaml
  write_logback
  mapfile -t opts < <(jvm_opts)
  # jamm measures memtable sizes; Cassandra's own scripts load it as an agent.
  jamm="$(tr ':' '\n' <"$cp" | grep -m1 '/jamm-[^/]*\.jar$' || true)"
  if [ -n "$jamm" ]; then opts+=("-javaagent:$jamm"); fi
  read -r -a prefix <<<"$(no_mlock_prefix)"
  say "starting Cassandra $CASSANDRA_VERSION on 127.0.0.1:$PORT (data $DATA)"
  setsid "${prefix[@]}" "$java" "${opts[@]}" -cp "$DATA/conf:$(cat "$cp")" \
    org.apache.cassandra.service.CassandraDaemon </dev/null >"$OUT" 2>&1 &
  echo $! >"$PIDFILE"
}

# ---------------------------------------------------------------- commands

cmd_start() {
  local version
  start_existing && return 0
  if version="$(node_probe 2>/dev/null)"; then
    die "port $PORT already answers CQL (Cassandra $version) but not a node of $DATA: stop it or set STRATA_CASSANDRA_PORT"
  fi
  command -v python3 >/dev/null || die "python3 is needed for the CQL check"
  launch
  wait_for_node "$(cat "$PIDFILE")"
}

node_main "$@"
