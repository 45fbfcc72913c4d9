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
#   scripts/kafka.sh user-add NAME PASSWORD
#                             give user NAME SCRAM-SHA-256 and SCRAM-SHA-512
#                             credentials (new or replaced) and wait until
#                             NAME can log in over SASL_SSL
#   scripts/kafka.sh user-delete NAME
#                             delete both SCRAM credentials of NAME and wait
#                             until the broker refuses NAME (fails if NAME
#                             has none)
#   scripts/kafka.sh login NAME PASSWORD [MECHANISM]
#                             one login over SASL_SSL (default SCRAM-SHA-256;
#                             also SCRAM-SHA-512, PLAIN): exit 0 if accepted,
#                             2 if refused, 1 if no answer
# user-add, user-delete and login print one line; the broker must run.
#
# Secured listener: the broker also listens with SASL_SSL on
# 127.0.0.1:9094 (TLS with the test certificates of scripts/lib/tls.sh,
# made once into <repo>/.tls/: server.p12, ca.pem to trust, client.pem/.key,
# other-ca.pem), mechanisms PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512, user
# `strata` with password $STRATA_KAFKA_SCRAM_PASSWORD in all three (PLAIN
# users live in the listener's JAAS config; SCRAM credentials in the cluster
# metadata: added when the storage is formatted, and by `start` with
# kafka-configs to a data folder formatted without them; SCRAM passwords
# without , [ ] =). `start` returns once SCRAM-SHA-256, SCRAM-SHA-512 and
# PLAIN logins as strata work there. The inter-broker and controller
# listeners stay PLAINTEXT, with no authorizer: on 9092 anyone may do
# anything, user changes included. A Java client's settings for 9094 are
# written to <data>/conf/sasl-ssl-client.properties (mode 600); librdkafka:
#   security.protocol=SASL_SSL sasl.mechanism=SCRAM-SHA-256
#   sasl.username=strata sasl.password=... ssl.ca.location=<repo>/.tls/ca.pem
#
# `start` resolves org.apache.kafka:kafka_2.13 (the broker), kafka-tools
# (the CLI classes, without Kafka Connect) and a log4j2 SLF4J binding with
# mvn into a cache kept outside the clone, so a second start downloads
# nothing. It needs Java 17 (found under /usr/lib/jvm), mvn (first start
# only), python3 (for the Kafka protocol check: ApiVersions, then a
# Metadata request that must list this broker; over SASL_SSL after a
# SaslHandshake/SaslAuthenticate login), keytool and openssl (certificates).
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
#   STRATA_KAFKA_SASL_SSL_PORT    SASL_SSL client port (default 9094)
#   STRATA_KAFKA_SCRAM_PASSWORD   password of user strata (PLAIN and SCRAM;
#                                 default strata-kafka-secret-6Q2x)
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
SASL_SSL_PORT="${STRATA_KAFKA_SASL_SSL_PORT:-9094}"
SASL_USER=strata
SASL_PASSWORD="${STRATA_KAFKA_SCRAM_PASSWORD:-strata-kafka-secret-6Q2x}"
HEAP="${STRATA_KAFKA_HEAP:-512m}"
WAIT="${STRATA_KAFKA_WAIT:-120}"
STOP_WAIT="${STRATA_KAFKA_STOP_WAIT:-60}"
CONF="$DATA/conf/server.properties"
PIDFILE="$DATA/kafka.pid"
CLUSTER_ID_FILE="$DATA/cluster.id"
LOG="$DATA/logs/server.log"
OUT="$DATA/logs/stdout.log"
CLIENT_CONF="$DATA/conf/sasl-ssl-client.properties"

NODE=kafka
NODE_TITLE="Kafka $KAFKA_VERSION"
NODE_VERSION=$KAFKA_VERSION
NODE_ARTIFACT="kafka_2.13 $KAFKA_VERSION"
NODE_HOME="${STRATA_KAFKA_HOME:-}"
NODE_JAVA="${STRATA_KAFKA_JAVA_HOME:-}"
NODE_MAIN=kafka.Kafka
NODE_CONF="$CONF"
NODE_USAGE="start|stop|status|wipe|user-add NAME PASSWORD|user-delete NAME|login NAME PASSWORD [MECHANISM]"
# shellcheck source=lib/jvm-node.sh
source "$ROOT/scripts/lib/jvm-node.sh"
# shellcheck source=lib/tls.sh
source "$ROOT/scripts/lib/tls.sh"

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

# $1 as a JAAS / Java properties double-quoted string.
jaas_quote() {
  local v="${1//\\/\\\\}"
  printf '"%s"' "${v//\"/\\\"}"
}

# Holds passwords: mode 600.
write_properties() {
  : >"$CONF"
  chmod 600 "$CONF"
  cat >"$CONF" <<EOF
# Written by scripts/kafka.sh on every start; edits are lost.
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:$CONTROLLER_PORT
listeners=PLAINTEXT://127.0.0.1:$PORT,SASL_SSL://127.0.0.1:$SASL_SSL_PORT,CONTROLLER://127.0.0.1:$CONTROLLER_PORT
advertised.listeners=PLAINTEXT://127.0.0.1:$PORT,SASL_SSL://127.0.0.1:$SASL_SSL_PORT,CONTROLLER://127.0.0.1:$CONTROLLER_PORT
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,SASL_SSL:SASL_SSL,CONTROLLER:PLAINTEXT
inter.broker.listener.name=PLAINTEXT
controller.listener.names=CONTROLLER
listener.name.sasl_ssl.ssl.keystore.type=PKCS12
listener.name.sasl_ssl.ssl.keystore.location=$TLS_DIR/server.p12
listener.name.sasl_ssl.ssl.keystore.password=$TLS_PASSWORD
sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256,SCRAM-SHA-512
listener.name.sasl_ssl.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required user_$SASL_USER=$(jaas_quote "$SASL_PASSWORD");
listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
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

# A Java client's settings for the SASL_SSL listener as user strata.
write_client_properties() {
  : >"$CLIENT_CONF"
  chmod 600 "$CLIENT_CONF"
  cat >"$CLIENT_CONF" <<EOF
# Written by scripts/kafka.sh on every start; edits are lost. E.g.
#   java -cp "\$(cat <jar cache>/$KAFKA_VERSION/classpath.txt)" org.apache.kafka.tools.TopicCommand \\
#     --bootstrap-server 127.0.0.1:$SASL_SSL_PORT --command-config $CLIENT_CONF --list
bootstrap.servers=127.0.0.1:$SASL_SSL_PORT
security.protocol=SASL_SSL
sasl.mechanism=SCRAM-SHA-256
sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username=$(jaas_quote "$SASL_USER") password=$(jaas_quote "$SASL_PASSWORD");
ssl.truststore.type=PEM
ssl.truststore.location=$TLS_DIR/ca.pem
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

# Formats the log dir for KRaft (static voter set) unless already done,
# with the SCRAM credentials of user strata in the first metadata.
format_storage() {
  local java="$1" cp="$2" id
  [ -f "$DATA/data/meta.properties" ] && return 0
  id="$(cluster_id)"
  say "formatting $DATA/data for cluster $id"
  if ! "$java" -Xmx256m "-Dlog4j2.configurationFile=$DATA/conf/tools-log4j2.xml" \
      -cp "$(cat "$cp")" kafka.tools.StorageTool format --ignore-formatted \
      --cluster-id "$id" --config "$CONF" \
      --add-scram "SCRAM-SHA-256=[name=$SASL_USER,password=$SASL_PASSWORD]" \
      --add-scram "SCRAM-SHA-512=[name=$SASL_USER,password=$SASL_PASSWORD]" \
      >"$DATA/logs/format.log" 2>&1; then
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
  kafka_probe "$PORT"
}

# kafka_probe PORT [MECHANISM USER PASSWORD [known]]: node_probe's exchange
# on PORT; with a MECHANISM (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512) over TLS
# (trusting $TLS_DIR/ca.pem, checking the certificate names 127.0.0.1)
# after a SASL login as USER between ApiVersions and Metadata. With
# `known`, SCRAM only: stops after the server's first SCRAM message, which
# a broker sends only for a user it has credentials of. Exit 0 = done, 2 =
# login refused (user unknown with `known`), 1 = anything else.
kafka_probe() {
  KAFKA_PROBE_PASSWORD="${4:-}" python3 - "$1" "${2:-}" "${3:-}" "${5:-}" "$TLS_DIR/ca.pem" <<'EOF'
import base64, hashlib, hmac, os, socket, ssl, struct, sys
port, mech, user, mode, cafile = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5]
password = os.environ["KAFKA_PROBE_PASSWORD"]
CLIENT = b"strata-kafka-sh"

class Refused(Exception):
    pass

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
    def bytes(self):
        n = self.take(">i")
        v = self.b[self.p:self.p + n]; self.p += n
        return v

def sasl_login(s, versions):
    # SaslHandshake v1, then the mechanism's messages in SaslAuthenticate v1.
    for key in (17, 36):
        lo, hi = versions.get(key, (1, 0))
        assert lo <= 1 <= hi, "API %d has no version 1" % key
    mechs = mech.encode()
    r = Reader(call(s, 17, 1, 10, struct.pack(">h", len(mechs)) + mechs))
    err = r.take(">h")
    assert err == 0, "mechanism %s not enabled (error %d)" % (mech, err)
    corr = [10]
    def authenticate(data):
        corr[0] += 1
        r = Reader(call(s, 36, 1, corr[0], struct.pack(">i", len(data)) + data))
        err, msg = r.take(">h"), r.string()
        if err:
            raise Refused("%s login as %s refused: %s" % (mech, user, msg))
        return r.bytes()
    if mech == "PLAIN":
        authenticate(b"\0" + user.encode() + b"\0" + password.encode())
        return
    # SCRAM (RFC 5802), no channel binding.
    h = {"SCRAM-SHA-256": hashlib.sha256, "SCRAM-SHA-512": hashlib.sha512}[mech]
    b64 = lambda b: base64.b64encode(b).decode()
    nonce = b64(os.urandom(18))
    first_bare = "n=%s,r=%s" % (user.replace("=", "=3D").replace(",", "=2C"), nonce)
    server_first = authenticate(("n,," + first_bare).encode()).decode()
    if mode == "known":
        return
    attrs = dict(kv.split("=", 1) for kv in server_first.split(","))
    assert attrs["r"].startswith(nonce), "server nonce does not extend ours"
    salted = hashlib.pbkdf2_hmac(h().name, password.encode(), base64.b64decode(attrs["s"]), int(attrs["i"]))
    client_key = hmac.new(salted, b"Client Key", h).digest()
    final_bare = "c=biws,r=" + attrs["r"]
    auth_message = ",".join([first_bare, server_first, final_bare]).encode()
    signature = hmac.new(h(client_key).digest(), auth_message, h).digest()
    proof = bytes(a ^ b for a, b in zip(client_key, signature))
    server_final = authenticate((final_bare + ",p=" + b64(proof)).encode()).decode()
    server_key = hmac.new(salted, b"Server Key", h).digest()
    assert server_final == "v=" + b64(hmac.new(server_key, auth_message, h).digest()), \
        "wrong server signature"

try:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.settimeout(5)
        if mech:
            ctx = ssl.create_default_context(cafile=cafile)
            s = ctx.wrap_socket(s, server_hostname="127.0.0.1")
        # ApiVersions v0 (every broker answers v0, even with an error code).
        r = Reader(call(s, 18, 0, 1))
        err = r.take(">h")
        assert err == 0, "ApiVersions error %d" % err
        versions = {}
        for _ in range(r.take(">i")):
            k, lo, hi = r.take(">hhh")
            versions[k] = (lo, hi)
        if mech:
            sasl_login(s, versions)
            if mode == "known":
                print("%s knows user %s" % (mech, user))
                sys.exit(0)
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
        login = "%s login as %s, " % (mech, user) if mech else ""
        print("%scluster %s, broker %d, %d topic(s)" % (login, cluster, mine[0][0], ntopics))
except Refused as e:
    print(e, file=sys.stderr)
    sys.exit(2)
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
  tls_ensure
  write_configs
  format_storage "$java" "$cp"
  mapfile -t opts < <(jvm_opts)
  say "starting Kafka $KAFKA_VERSION (KRaft broker+controller) on 127.0.0.1:$PORT, SASL_SSL port $SASL_SSL_PORT, controller port $CONTROLLER_PORT (data $DATA)"
  setsid nohup "$java" "${opts[@]}" -cp "$(cat "$cp")" kafka.Kafka "$CONF" \
    </dev/null >"$OUT" 2>&1 &
  echo $! >"$PIDFILE"
}

# Runs a Kafka CLI tool class (short-lived JVM: C1 only, serial GC).
kafka_tool() {
  local java cp
  java="$(find_java)"
  cp="$(fetch_jars)"
  "$java" -Xmx256m -XX:TieredStopAtLevel=1 -XX:+UseSerialGC \
    "-Dlog4j2.configurationFile=$DATA/conf/tools-log4j2.xml" -cp "$(cat "$cp")" "$@"
}

# scram_alter NAME [PASSWORD]: kafka-configs on the PLAINTEXT port (no
# authorizer: allowed there) adds/replaces (with PASSWORD) or deletes the
# SCRAM-SHA-256 and SCRAM-SHA-512 credentials of user NAME. One call per
# mechanism: KRaft's controller refuses a request that alters a user twice
# ("A user credential cannot be altered twice in the same request"). On
# failure prints the error, fails.
scram_alter() {
  local name="$1" mech out
  local -a op
  for mech in SCRAM-SHA-256 SCRAM-SHA-512; do
    if [ $# -eq 2 ]; then op=(--add-config "$mech=[password=$2]"); else op=(--delete-config "$mech"); fi
    if ! out="$(kafka_tool org.apache.kafka.tools.ConfigCommand --bootstrap-server "127.0.0.1:$PORT" \
        --alter --entity-type users --entity-name "$name" "${op[@]}" 2>&1)"; then
      echo "$mech: $(grep -m1 -oE '[A-Za-z]+(Exception|Error): .*' <<<"$out" || tail -n1 <<<"$out")"
      return 1
    fi
  done
}

# kafka-configs' and the storage formatter's [key=value,...] syntax has no quoting.
check_scram_password() {
  case "$1" in
    *[],[=]*|"") die "a SCRAM password must be non-empty without , [ ] =" ;;
  esac
}

# Waits until user strata logs in over SASL_SSL with SCRAM-SHA-256,
# SCRAM-SHA-512 and PLAIN. When the broker refuses a SCRAM login (a data
# folder formatted without the credentials, or another password), adds
# them once with kafka-configs and waits for them to arrive.
ensure_sasl_user() {
  local start=$SECONDS added=false mech out rc
  tls_ensure
  write_client_properties
  while :; do
    rc=0
    for mech in SCRAM-SHA-256 SCRAM-SHA-512 PLAIN; do
      out="$(kafka_probe "$SASL_SSL_PORT" "$mech" "$SASL_USER" "$SASL_PASSWORD" 2>&1)" || { rc=$?; break; }
    done
    if [ "$rc" -eq 0 ]; then
      say "SASL_SSL answers on 127.0.0.1:$SASL_SSL_PORT: SCRAM-SHA-256, SCRAM-SHA-512 and PLAIN logins as $SASL_USER work ($((SECONDS - start)) s)"
      return 0
    fi
    if [ "$rc" -eq 2 ] && [ "$mech" = PLAIN ]; then
      die "$out (the broker runs with a config of another password: restart it)"
    fi
    if [ "$rc" -eq 2 ] && ! $added; then
      say "adding the SCRAM-SHA-256/512 credentials of $SASL_USER (kafka-configs)"
      out="$(scram_alter "$SASL_USER" "$SASL_PASSWORD")" || die "kafka-configs failed: $out"
      added=true
      continue
    fi
    if [ $((SECONDS - start)) -ge 10 ] && ! port_in_use "$SASL_SSL_PORT"; then
      die "nothing listens on 127.0.0.1:$SASL_SSL_PORT (a broker started without SASL_SSL? restart it: $0 stop; $0 start)"
    fi
    if [ $((SECONDS - start)) -ge "$WAIT" ]; then
      die "no SASL_SSL login as $SASL_USER on 127.0.0.1:$SASL_SSL_PORT after $WAIT s: $out"
    fi
    sleep 0.5
  done
}

# ---------------------------------------------------------------- commands

cmd_start() {
  local info
  check_scram_password "$SASL_PASSWORD"
  if ! start_existing; then
    command -v python3 >/dev/null || die "python3 is needed for the Kafka protocol check"
    if info="$(node_probe 2>/dev/null)"; then
      die "port $PORT already answers Kafka ($info) but not a node of $DATA: stop it or set STRATA_KAFKA_PORT"
    fi
    if port_in_use "$PORT"; then
      die "port $PORT is in use by something else: set STRATA_KAFKA_PORT"
    fi
    if port_in_use "$SASL_SSL_PORT"; then
      die "SASL_SSL port $SASL_SSL_PORT is in use: set STRATA_KAFKA_SASL_SSL_PORT"
    fi
    if port_in_use "$CONTROLLER_PORT"; then
      die "controller port $CONTROLLER_PORT is in use: set STRATA_KAFKA_CONTROLLER_PORT"
    fi
    launch
    wait_for_node "$(cat "$PIDFILE")"
  fi
  ensure_sasl_user
}

require_running() {
  node_probe >/dev/null 2>&1 || die "Kafka does not answer on 127.0.0.1:$PORT: $0 start first"
}

cmd_user_add() {
  local name="$1" password="$2" start=$SECONDS out
  check_scram_password "$password"
  require_running
  out="$(scram_alter "$name" "$password")" || die "user-add $name failed: $out"
  until out="$(kafka_probe "$SASL_SSL_PORT" SCRAM-SHA-256 "$name" "$password" 2>&1)" &&
        out="$(kafka_probe "$SASL_SSL_PORT" SCRAM-SHA-512 "$name" "$password" 2>&1)"; do
    [ $((SECONDS - start)) -lt 30 ] || die "user $name added, but its login over 127.0.0.1:$SASL_SSL_PORT fails: $out"
    sleep 0.2
  done
  say "user $name added: SCRAM-SHA-256 and SCRAM-SHA-512 logins work on 127.0.0.1:$SASL_SSL_PORT"
}

cmd_user_delete() {
  local name="$1" start=$SECONDS out rc256 rc512
  require_running
  out="$(scram_alter "$name")" || die "user-delete $name failed: $out"
  while :; do
    rc256=0; rc512=0
    kafka_probe "$SASL_SSL_PORT" SCRAM-SHA-256 "$name" "" known >/dev/null 2>&1 || rc256=$?
    kafka_probe "$SASL_SSL_PORT" SCRAM-SHA-512 "$name" "" known >/dev/null 2>&1 || rc512=$?
    [ "$rc256" -eq 2 ] && [ "$rc512" -eq 2 ] && break
    [ $((SECONDS - start)) -lt 30 ] || die "user $name deleted, but the broker on 127.0.0.1:$SASL_SSL_PORT still knows it"
    sleep 0.2
  done
  say "user $name deleted: its SCRAM logins are refused on 127.0.0.1:$SASL_SSL_PORT"
}

cmd_login() {
  local out rc=0
  case "$3" in PLAIN|SCRAM-SHA-256|SCRAM-SHA-512) ;; *) usage ;; esac
  out="$(kafka_probe "$SASL_SSL_PORT" "$3" "$1" "$2" 2>&1)" || rc=$?
  if [ "$rc" -eq 0 ]; then
    say "SASL_SSL 127.0.0.1:$SASL_SSL_PORT: $out"
  else
    echo "$NODE.sh: $out" >&2
  fi
  return "$rc"
}

case "${1:-}" in
  user-add) [ $# -eq 3 ] || usage; cmd_user_add "$2" "$3" ;;
  user-delete) [ $# -eq 2 ] || usage; cmd_user_delete "$2" ;;
  login) [ $# -eq 3 ] || [ $# -eq 4 ] || usage; cmd_login "$2" "$3" "${4:-SCRAM-SHA-256}" ;;
  *) node_main "$@" ;;
esac
