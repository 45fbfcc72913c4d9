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
DEP_PLUGIN=org.apache.maven.plugins:maven-dependency-plugin:3.6.1

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DATA="${STRATA_CASSANDRA_DATA:-$ROOT/.cassandra}"
PORT="${STRATA_CASSANDRA_PORT:-9042}"
STORAGE_PORT="${STRATA_CASSANDRA_STORAGE_PORT:-7000}"
JMX_PORT="${STRATA_CASSANDRA_JMX_PORT:-}"
HEAP="${STRATA_CASSANDRA_HEAP:-1G}"
WAIT="${STRATA_CASSANDRA_WAIT:-180}"
PIDFILE="$DATA/cassandra.pid"
LOG="$DATA/logs/system.log"
OUT="$DATA/logs/stdout.log"

say() { echo "cassandra.sh: $*"; }
die() { echo "cassandra.sh: $*" >&2; exit 1; }

usage() {
  echo "usage: $0 start|stop|status|wipe" >&2
  echo "  (see the header of $0 for the environment variables)" >&2
  exit 2
}

# ---------------------------------------------------------------- jars

cache_dir() {
  if [ -n "${STRATA_CASSANDRA_HOME:-}" ]; then
    mkdir -p "$STRATA_CASSANDRA_HOME" && echo "$STRATA_CASSANDRA_HOME"
  elif mkdir -p /var/cache/strata-cassandra 2>/dev/null && [ -w /var/cache/strata-cassandra ]; then
    echo /var/cache/strata-cassandra
  else
    mkdir -p "$HOME/.cache/strata-cassandra" && echo "$HOME/.cache/strata-cassandra"
  fi
}

write_pom() {
  cat >"$1" <<EOF
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>strata.local</groupId>
  <artifactId>cassandra-runtime</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency>
      <groupId>org.apache.cassandra</groupId>
      <artifactId>cassandra-all</artifactId>
      <version>$CASSANDRA_VERSION</version>
    </dependency>
  </dependencies>
</project>
EOF
}

# Every jar of a classpath file exists?
classpath_complete() {
  [ -s "$1" ] || return 1
  local jar
  while IFS= read -r jar; do
    [ -f "$jar" ] || return 1
  done < <(tr ':' '\n' <"$1")
}

# Prints the path of a file holding the ':'-separated runtime classpath,
# resolving it with mvn the first time.
fetch_jars() {
  local cache dir cp
  cache="$(cache_dir)"
  dir="$cache/$CASSANDRA_VERSION"
  cp="$dir/classpath.txt"
  if classpath_complete "$cp"; then
    echo "$cp"; return
  fi
  command -v mvn >/dev/null || die "mvn not found (apt-get install maven) and no cached jars in $dir"
  mkdir -p "$dir"
  write_pom "$dir/pom.xml"
  say "downloading cassandra-all $CASSANDRA_VERSION and its dependencies into $cache (once)" >&2
  if ! mvn -B -Dstyle.color=never -f "$dir/pom.xml" -Dmaven.repo.local="$cache/m2" \
      "$DEP_PLUGIN:build-classpath" -Dmdep.includeScope=runtime \
      -Dmdep.outputFile="$cp.tmp" >"$dir/mvn.log" 2>&1; then
    grep -E 'ERROR|BUILD' "$dir/mvn.log" | head -20 >&2
    die "mvn could not resolve cassandra-all $CASSANDRA_VERSION (full output: $dir/mvn.log)"
  fi
  mv "$cp.tmp" "$cp"
  classpath_complete "$cp" || die "classpath in $cp lists missing jars"
  echo "$cp"
}

# ---------------------------------------------------------------- java

java_major() { "$1" -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -1; }

find_java() {
  local cand
  for cand in "${STRATA_CASSANDRA_JAVA_HOME:-}" "${JAVA_HOME:-}" \
              /usr/lib/jvm/java-17-openjdk-amd64 /usr/lib/jvm/*17*; do
    [ -n "$cand" ] && [ -x "$cand/bin/java" ] || continue
    if [ "$(java_major "$cand/bin/java")" = 17 ]; then
      echo "$cand/bin/java"; return
    fi
  done
  die "no Java 17 found (set STRATA_CASSANDRA_JAVA_HOME, or apt-get install openjdk-17-jre-headless)"
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

# The pid from the pid file if that process is alive and is our node.
live_pid() {
  local pid
  [ -f "$PIDFILE" ] || return 1
  pid="$(cat "$PIDFILE")"
  [ -n "$pid" ] && [ -r "/proc/$pid/cmdline" ] || return 1
  grep -qa CassandraDaemon "/proc/$pid/cmdline" || return 1
  echo "$pid"
}

# A real CQL exchange: OPTIONS -> SUPPORTED, STARTUP -> READY, then
# SELECT release_version FROM system.local. Prints the version.
cql_probe() {
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
        print(body[pos:pos + n].decode())
except Exception as e:
    print("no CQL: %s" % e, file=sys.stderr)
    sys.exit(1)
EOF
}

show_log_tail() {
  echo "cassandra.sh: log: $LOG (stdout/stderr: $OUT); last lines:" >&2
  tail -n 30 "$LOG" >&2 2>/dev/null || true
  tail -n 15 "$OUT" >&2 2>/dev/null || true
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

wait_for_cql() {
  local pid="$1" start=$SECONDS version
  while [ $((SECONDS - start)) -lt "$WAIT" ]; do
    if ! kill -0 "$pid" 2>/dev/null; then
      rm -f "$PIDFILE"
      show_log_tail
      die "Cassandra exited during start-up"
    fi
    if version="$(cql_probe 2>/dev/null)"; then
      say "Cassandra $version answers CQL on 127.0.0.1:$PORT (pid $pid, $((SECONDS - start)) s)"
      return 0
    fi
    sleep 1
  done
  show_log_tail
  say "no CQL answer after $WAIT s: stopping it" >&2
  stop_pid "$pid"
  exit 1
}

stop_pid() {
  local pid="$1" waited=0
  kill -TERM "$pid" 2>/dev/null || true
  while kill -0 "$pid" 2>/dev/null && [ "$waited" -lt 60 ]; do
    sleep 1
    waited=$((waited + 1))
  done
  if kill -0 "$pid" 2>/dev/null; then
    say "still alive after 60 s: SIGKILL"
    kill -KILL "$pid" 2>/dev/null || true
    sleep 1
  fi
  rm -f "$PIDFILE"
}

# ---------------------------------------------------------------- commands

cmd_start() {
  local pid version
  if pid="$(live_pid)"; then
    if version="$(cql_probe 2>/dev/null)"; then
      say "already running: Cassandra $version on 127.0.0.1:$PORT (pid $pid)"
      return 0
    fi
    say "pid $pid is running but not answering CQL yet: waiting"
    wait_for_cql "$pid"
    return 0
  fi
  rm -f "$PIDFILE"
  if version="$(cql_probe 2>/dev/null)"; then
    die "port $PORT already answers CQL (Cassandra $version) but not a node of $DATA: stop it or set STRATA_CASSANDRA_PORT"
  fi
  command -v python3 >/dev/null || die "python3 is needed for the CQL check"
  launch
  wait_for_cql "$(cat "$PIDFILE")"
}

cmd_stop() {
  local pid
  if ! pid="$(live_pid)"; then
    rm -f "$PIDFILE"
    say "not running"
    return 0
  fi
  say "stopping pid $pid"
  stop_pid "$pid"
  say "stopped"
}

cmd_status() {
  local pid version
  if pid="$(live_pid)" && version="$(cql_probe 2>/dev/null)"; then
    say "running: Cassandra $version on 127.0.0.1:$PORT (pid $pid, data $DATA)"
    return 0
  fi
  if [ -n "${pid:-}" ]; then
    say "not answering CQL on 127.0.0.1:$PORT (pid $pid is alive: starting or stuck; log $LOG)"
  else
    say "not running"
  fi
  return 3
}

cmd_wipe() {
  if [ -d "$DATA" ] && [ ! -f "$DATA/conf/cassandra.yaml" ]; then
    die "$DATA does not look like a data folder of this script: not deleting it"
  fi
  cmd_stop
  rm -rf "$DATA"
  say "deleted $DATA"
}

[ $# -eq 1 ] || usage
case "$1" in
  start) cmd_start ;;
  stop) cmd_stop ;;
  status) cmd_status ;;
  wipe) cmd_wipe ;;
  *) usage ;;
esac
