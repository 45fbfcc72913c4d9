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
# With --secure (e.g. `scripts/cassandra.sh start --secure`) each command
# acts on a second, secured node beside the plain one: own data folder,
# cluster name strata-test-secure, CQL on 127.0.0.1:9142 over TLS only
# (certificates of scripts/lib/tls.sh, made once into <repo>/.tls/: the
# server's server.p12, clients trust ca.pem; no client certificate is asked
# for, so clients with and without one connect), PasswordAuthenticator
# logins, caches of roles and credentials off (a changed password or role
# applies at once). `start --secure` then logs in as the default superuser
# cassandra/cassandra (ready ~1 s after start) and makes role `strata`,
# superuser with LOGIN, password $STRATA_CASSANDRA_SECURE_PASSWORD (created
# if missing, its password reset if its login is refused; Cassandra 5.0
# refuses a second change of a role's password within 5 s); system_auth
# keeps one replica. `status --secure` and the start check log in as
# strata over TLS.
# A client connects with TLS (CA .tls/ca.pem, name 127.0.0.1 or localhost)
# and SASL PLAIN (PasswordAuthenticator) as strata.
#
# `start` resolves org.apache.cassandra:cassandra-all and its runtime
# dependencies with mvn into a cache kept outside the clone, so a second
# start downloads nothing. It needs Java 17 (found under /usr/lib/jvm),
# mvn (first start only) and python3 (for the CQL handshake check);
# --secure also keytool and openssl (certificates).
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
# and for --secure, in place of ..._DATA, _PORT, _STORAGE_PORT, _JMX_PORT, _HEAP:
#   STRATA_CASSANDRA_SECURE_DATA          default <repo>/.cassandra-secure
#   STRATA_CASSANDRA_SECURE_PORT          CQL over TLS (default 9142)
#   STRATA_CASSANDRA_SECURE_STORAGE_PORT  internode port (default 7010)
#   STRATA_CASSANDRA_SECURE_JMX_PORT      local JMX port; unset = JMX off
#   STRATA_CASSANDRA_SECURE_HEAP          max heap (default 768M)
#   STRATA_CASSANDRA_SECURE_PASSWORD      password of role strata (default
#                                         strata-cassandra-secret-9Vb3)
set -euo pipefail

CASSANDRA_VERSION=5.0.9          # newest 5.0.x on Maven Central when pinned

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SECURE=false
ARGS=()
for arg in "$@"; do
  if [ "$arg" = --secure ]; then SECURE=true; else ARGS+=("$arg"); fi
done
if $SECURE; then
  DATA="${STRATA_CASSANDRA_SECURE_DATA:-$ROOT/.cassandra-secure}"
  PORT="${STRATA_CASSANDRA_SECURE_PORT:-9142}"
  STORAGE_PORT="${STRATA_CASSANDRA_SECURE_STORAGE_PORT:-7010}"
  JMX_PORT="${STRATA_CASSANDRA_SECURE_JMX_PORT:-}"
  HEAP="${STRATA_CASSANDRA_SECURE_HEAP:-768M}"
  CLUSTER_NAME=strata-test-secure
  AUTHENTICATOR=PasswordAuthenticator
else
  DATA="${STRATA_CASSANDRA_DATA:-$ROOT/.cassandra}"
  PORT="${STRATA_CASSANDRA_PORT:-9042}"
  STORAGE_PORT="${STRATA_CASSANDRA_STORAGE_PORT:-7000}"
  JMX_PORT="${STRATA_CASSANDRA_JMX_PORT:-}"
  HEAP="${STRATA_CASSANDRA_HEAP:-1G}"
  CLUSTER_NAME=strata-test
  AUTHENTICATOR=AllowAllAuthenticator
fi
SECURE_VAR=""
if $SECURE; then SECURE_VAR=SECURE_; fi
ROLE=strata
ROLE_PASSWORD="${STRATA_CASSANDRA_SECURE_PASSWORD:-strata-cassandra-secret-9Vb3}"
WAIT="${STRATA_CASSANDRA_WAIT:-180}"
STOP_WAIT=60
PIDFILE="$DATA/cassandra.pid"
LOG="$DATA/logs/system.log"
OUT="$DATA/logs/stdout.log"

NODE=cassandra
NODE_TITLE=Cassandra
if $SECURE; then NODE_TITLE="Cassandra (secure)"; fi
NODE_VERSION=$CASSANDRA_VERSION
NODE_ARTIFACT="cassandra-all $CASSANDRA_VERSION"
NODE_HOME="${STRATA_CASSANDRA_HOME:-}"
NODE_JAVA="${STRATA_CASSANDRA_JAVA_HOME:-}"
NODE_MAIN=CassandraDaemon
NODE_CONF="$DATA/conf/cassandra.yaml"
NODE_USAGE="start|stop|status|wipe [--secure]"
# shellcheck source=lib/jvm-node.sh
source "$ROOT/scripts/lib/jvm-node.sh"
# shellcheck source=lib/tls.sh
source "$ROOT/scripts/lib/tls.sh"

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
cluster_name: $CLUSTER_NAME
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
authenticator: $AUTHENTICATOR
authorizer: AllowAllAuthorizer
role_manager: CassandraRoleManager
network_authorizer: AllowAllNetworkAuthorizer
storage_compatibility_mode: NONE
auto_snapshot: false
EOF
  if $SECURE; then
    chmod 600 "$DATA/conf/cassandra.yaml"
    secure_yaml >>"$DATA/conf/cassandra.yaml"
  fi
}

# require_client_auth: Cassandra 5.0.9 reads a boolean (its value
# `optional` comes with 5.1); false = no client certificate asked for.
secure_yaml() {
  cat <<EOF
roles_validity: 0ms
credentials_validity: 0ms
client_encryption_options:
  enabled: true
  optional: false
  keystore: $TLS_DIR/server.p12
  keystore_password: $TLS_PASSWORD
  truststore: $TLS_DIR/truststore.p12
  truststore_password: $TLS_PASSWORD
  store_type: PKCS12
  require_client_auth: false
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
  if $SECURE; then
    # The default superuser is made 10 s after start unless told otherwise.
    echo -Dcassandra.superuser_setup_delay_ms=1000
  fi
}

# ---------------------------------------------------------------- process

# A real CQL exchange: OPTIONS -> SUPPORTED, STARTUP -> READY, then
# SELECT release_version FROM system.local. Prints the version. The secure
# node: the same over TLS (trusting ca.pem), logged in as strata; while
# `start` waits for it, only the TLS handshake, OPTIONS and STARTUP.
PROBE_LOGIN=true
node_probe() {
  if ! $SECURE; then
    cql "$PORT"
  elif $PROBE_LOGIN; then
    CQL_CA="$TLS_DIR/ca.pem" CQL_USER="$ROLE" CQL_PASSWORD="$ROLE_PASSWORD" cql "$PORT"
  else
    CQL_CA="$TLS_DIR/ca.pem" CQL_HANDSHAKE_ONLY=1 cql "$PORT"
  fi
}

# cql PORT [STATEMENT...]: the exchange above, each STATEMENT run before
# the SELECT (any RESULT will do). From the environment: CQL_CA, a CA file:
# over TLS checking the certificate names 127.0.0.1; CQL_USER and
# CQL_PASSWORD: the SASL PLAIN login a server with an authenticator asks
# for; CQL_HANDSHAKE_ONLY=1: being asked for a login ends the exchange
# successfully. Exit 0 = done, 2 = login refused, 1 = anything else.
cql() {
  CQL_CA="${CQL_CA:-}" CQL_USER="${CQL_USER:-}" CQL_PASSWORD="${CQL_PASSWORD:-}" \
    CQL_HANDSHAKE_ONLY="${CQL_HANDSHAKE_ONLY:-}" python3 - "$@" <<'EOF'
import os, socket, ssl, struct, sys
port, statements = int(sys.argv[1]), sys.argv[2:]
ca, user, password = os.environ["CQL_CA"], os.environ["CQL_USER"], os.environ["CQL_PASSWORD"]
handshake_only = os.environ["CQL_HANDSHAKE_ONLY"] == "1"

class Refused(Exception):
    pass

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
    body = recv_exact(s, length)
    if rop == 0x00:                                     # ERROR: code, message
        code, n = struct.unpack(">iH", body[:6])
        message = body[6:6 + n].decode()
        if code == 0x0100:                              # bad credentials
            raise Refused("login as %s refused: %s" % (user, message))
        raise RuntimeError("error 0x%04x: %s" % (code, message))
    return rop, body

def string(b):
    return struct.pack(">H", len(b)) + b

def query(s, stream, q):
    q = q.encode()
    op, body = call(s, stream, 0x07, struct.pack(">i", len(q)) + q + struct.pack(">HB", 1, 0))
    assert op == 0x08, "QUERY answered opcode %d" % op
    return body

try:
    with socket.create_connection(("127.0.0.1", port), timeout=3) as s:
        how = ""
        if ca:
            s = ssl.create_default_context(cafile=ca).wrap_socket(s, server_hostname="127.0.0.1")
            how = "%s, " % s.version()
        op, _ = call(s, 1, 0x05)                       # OPTIONS
        assert op == 0x06, "OPTIONS answered opcode %d" % op
        op, body = call(s, 2, 0x01, struct.pack(">H", 1) + string(b"CQL_VERSION") + string(b"3.0.0"))
        if op == 0x03:                                 # AUTHENTICATE (authenticator class)
            authenticator = body[2:].decode().rsplit(".", 1)[-1]
            if handshake_only:
                print("%sasks for a login (%s)" % (how, authenticator))
                sys.exit(0)
            assert user, "the server asks for a login (%s)" % authenticator
            token = b"\0" + user.encode() + b"\0" + password.encode()
            op, _ = call(s, 3, 0x0F, struct.pack(">i", len(token)) + token)   # AUTH_RESPONSE
            assert op == 0x10, "AUTH_RESPONSE answered opcode %d" % op        # AUTH_SUCCESS
            how += "login as %s, " % user
        else:
            assert op == 0x02, "STARTUP answered opcode %d" % op
        for i, q in enumerate(statements):
            query(s, 10 + i, q)
        body = query(s, 4, "SELECT release_version FROM system.local")
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
        print(how + "release " + body[pos:pos + n].decode())
except Refused as e:
    print(e, file=sys.stderr)
    sys.exit(2)
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
  if $SECURE; then tls_ensure; fi
  write_yaml
  write_logback
  mapfile -t opts < <(jvm_opts)
  # jamm measures memtable sizes; Cassandra's own scripts load it as an agent.
  jamm="$(tr ':' '\n' <"$cp" | grep -m1 '/jamm-[^/]*\.jar$' || true)"
  if [ -n "$jamm" ]; then opts+=("-javaagent:$jamm"); fi
  read -r -a prefix <<<"$(no_mlock_prefix)"
  if $SECURE; then
    say "starting Cassandra $CASSANDRA_VERSION on 127.0.0.1:$PORT, TLS only, PasswordAuthenticator (data $DATA)"
  else
    say "starting Cassandra $CASSANDRA_VERSION on 127.0.0.1:$PORT (data $DATA)"
  fi
  setsid "${prefix[@]}" "$java" "${opts[@]}" -cp "$DATA/conf:$(cat "$cp")" \
    org.apache.cassandra.service.CassandraDaemon </dev/null >"$OUT" 2>&1 &
  echo $! >"$PIDFILE"
}

# ---------------------------------------------------------------- commands

cql_quote() {
  printf "'%s'" "${1//\'/\'\'}"
}

# cql over TLS as the default superuser cassandra/cassandra.
as_superuser() {
  CQL_CA="$TLS_DIR/ca.pem" CQL_USER=cassandra CQL_PASSWORD=cassandra cql "$PORT" "$@"
}

# Makes role strata a superuser with LOGIN as the default superuser, which
# Cassandra sets up a moment after start (retried until then), creating it
# with its password if missing; then logs in as strata, resetting the
# password first if refused. (Cassandra 5.0 refuses a second change of a
# role's password within 5 s: role_password_update_min_interval.)
ensure_role() {
  local start=$SECONDS deadline=60 told=false out rc
  until out="$(as_superuser \
      "ALTER KEYSPACE system_auth WITH replication = {'class': 'SimpleStrategy', 'replication_factor': 1}" \
      "CREATE ROLE IF NOT EXISTS $ROLE WITH PASSWORD = $(cql_quote "$ROLE_PASSWORD") AND LOGIN = true AND SUPERUSER = true" \
      "ALTER ROLE $ROLE WITH LOGIN = true AND SUPERUSER = true" 2>&1)"; do
    if [ $((SECONDS - start)) -ge "$deadline" ]; then
      die "could not set up role $ROLE as the default superuser cassandra within $deadline s: $out"
    fi
    if ! $told; then
      say "the default superuser cassandra is not usable yet ($out): retrying for up to $deadline s"
      told=true
    fi
    sleep 1
  done
  PROBE_LOGIN=true
  rc=0
  out="$(node_probe 2>&1)" || rc=$?
  if [ "$rc" -eq 2 ]; then
    say "$out: resetting the password of $ROLE"
    out="$(as_superuser "ALTER ROLE $ROLE WITH PASSWORD = $(cql_quote "$ROLE_PASSWORD")" 2>&1)" ||
      die "could not reset the password of $ROLE: $out"
    rc=0
    out="$(node_probe 2>&1)" || rc=$?
  fi
  [ "$rc" -eq 0 ] || die "role $ROLE set up, but its login fails: $out"
  say "role $ROLE ready on 127.0.0.1:$PORT: $out ($((SECONDS - start)) s)"
}

cmd_start() {
  local version
  if $SECURE; then PROBE_LOGIN=false; fi
  if ! start_existing; then
    if version="$(node_probe 2>/dev/null)"; then
      die "port $PORT already answers CQL (Cassandra $version) but not a node of $DATA: stop it or set STRATA_CASSANDRA_${SECURE_VAR}PORT"
    fi
    command -v python3 >/dev/null || die "python3 is needed for the CQL check"
    launch
    wait_for_node "$(cat "$PIDFILE")"
  fi
  if $SECURE; then ensure_role; fi
}

node_main "${ARGS[@]}"
