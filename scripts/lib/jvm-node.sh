# Shared by scripts/cassandra.sh and scripts/kafka.sh: a single JVM server
# node for tests, assembled from Maven Central jars, started in the
# background, probed until it answers, stopped with SIGTERM then SIGKILL.
# Sourced, not run. The sourcing script sets, before calling anything:
#
#   NODE          short name: messages say "$NODE.sh: …", the jar cache is
#                 strata-$NODE
#   NODE_TITLE    the server's name in messages (Cassandra, Kafka)
#   NODE_VERSION  the version pinned (jar cache subfolder)
#   NODE_ARTIFACT what mvn resolves, for messages (e.g. cassandra-all 5.0.9)
#   NODE_HOME     the jar cache the user asked for ("" = default)
#   NODE_JAVA     a Java 17 home the user asked for ("" = search)
#   NODE_MAIN     the main class, to recognise the node's process
#   NODE_CONF     the config file written at start (marks a data folder
#                 of the script; also in the process's command line)
#   DATA PIDFILE LOG OUT WAIT STOP_WAIT   as their names say
#   NODE_USAGE    (optional) the commands for the usage message
#
# and defines: pom_dependencies (the <dependency> elements whose runtime
# classpath is the node's), node_probe (a real protocol exchange; prints what it learnt,
# fails if the node does not answer), launch (starts the node, writes
# PIDFILE) and cmd_start.

say() { echo "$NODE.sh: $*"; }
die() { echo "$NODE.sh: $*" >&2; exit 1; }

usage() {
  echo "usage: $0 ${NODE_USAGE:-start|stop|status|wipe}" >&2
  echo "  (see the header of $0 for the environment variables)" >&2
  exit 2
}

# ---------------------------------------------------------------- jars

cache_dir() {
  if [ -n "$NODE_HOME" ]; then
    mkdir -p "$NODE_HOME" && echo "$NODE_HOME"
  elif mkdir -p "/var/cache/strata-$NODE" 2>/dev/null && [ -w "/var/cache/strata-$NODE" ]; then
    echo "/var/cache/strata-$NODE"
  else
    mkdir -p "$HOME/.cache/strata-$NODE" && echo "$HOME/.cache/strata-$NODE"
  fi
}

# The pom whose runtime classpath mvn resolves, into file $1.
write_pom() {
  cat >"$1" <<EOF
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>strata.local</groupId>
  <artifactId>$NODE-runtime</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <dependencies>
$(pom_dependencies)
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
  dir="$cache/$NODE_VERSION"
  cp="$dir/classpath.txt"
  if classpath_complete "$cp"; then
    echo "$cp"; return
  fi
  command -v mvn >/dev/null || die "mvn not found (apt-get install maven) and no cached jars in $dir"
  mkdir -p "$dir"
  write_pom "$dir/pom.xml"
  say "downloading $NODE_ARTIFACT and its dependencies into $cache (once)" >&2
  if ! mvn -B -Dstyle.color=never -f "$dir/pom.xml" -Dmaven.repo.local="$cache/m2" \
      org.apache.maven.plugins:maven-dependency-plugin:3.6.1:build-classpath \
      -Dmdep.includeScope=runtime -Dmdep.outputFile="$cp.tmp" >"$dir/mvn.log" 2>&1; then
    grep -E 'ERROR|BUILD' "$dir/mvn.log" | head -20 >&2
    die "mvn could not resolve $NODE_ARTIFACT (full output: $dir/mvn.log)"
  fi
  mv "$cp.tmp" "$cp"
  classpath_complete "$cp" || die "classpath in $cp lists missing jars"
  echo "$cp"
}

# ---------------------------------------------------------------- java

java_major() { "$1" -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -1; }

find_java() {
  local cand
  for cand in "$NODE_JAVA" "${JAVA_HOME:-}" \
              /usr/lib/jvm/java-17-openjdk-amd64 /usr/lib/jvm/*17*; do
    [ -n "$cand" ] && [ -x "$cand/bin/java" ] || continue
    if [ "$(java_major "$cand/bin/java")" = 17 ]; then
      echo "$cand/bin/java"; return
    fi
  done
  die "no Java 17 found (set STRATA_${NODE^^}_JAVA_HOME, or apt-get install openjdk-17-jre-headless)"
}

# ---------------------------------------------------------------- process

# The pid from the pid file if that process is alive and is our node.
live_pid() {
  local pid
  [ -f "$PIDFILE" ] || return 1
  pid="$(cat "$PIDFILE")"
  [ -n "$pid" ] && [ -r "/proc/$pid/cmdline" ] || return 1
  grep -qaF "$NODE_MAIN" "/proc/$pid/cmdline" || return 1
  echo "$pid"
}

show_log_tail() {
  echo "$NODE.sh: log: $LOG (stdout/stderr: $OUT); last lines:" >&2
  tail -n 30 "$LOG" >&2 2>/dev/null || true
  tail -n 15 "$OUT" >&2 2>/dev/null || true
}

# Waits until the node answers node_probe; fails (stopping it) if it
# exits or does not answer within WAIT seconds.
wait_for_node() {
  local pid="$1" start=$SECONDS info
  while [ $((SECONDS - start)) -lt "$WAIT" ]; do
    if ! kill -0 "$pid" 2>/dev/null; then
      rm -f "$PIDFILE"
      show_log_tail
      die "$NODE_TITLE exited during start-up"
    fi
    if info="$(node_probe 2>/dev/null)"; then
      say "$NODE_TITLE answers on 127.0.0.1:$PORT: $info (pid $pid, $((SECONDS - start)) s)"
      return 0
    fi
    sleep 1
  done
  show_log_tail
  say "no answer after $WAIT s: stopping it" >&2
  stop_pid "$pid"
  exit 1
}

stop_pid() {
  local pid="$1" waited=0
  kill -TERM "$pid" 2>/dev/null || true
  while kill -0 "$pid" 2>/dev/null && [ "$waited" -lt "$STOP_WAIT" ]; do
    sleep 1
    waited=$((waited + 1))
  done
  if kill -0 "$pid" 2>/dev/null; then
    say "still alive after $STOP_WAIT s: SIGKILL"
    kill -KILL "$pid" 2>/dev/null || true
    sleep 1
  fi
  rm -f "$PIDFILE"
}

# ---------------------------------------------------------------- commands

# The part of `start` both share: an answering node of ours is reused, a
# starting one waited for. Returns 1 when a new node must be launched.
start_existing() {
  local pid info
  pid="$(live_pid)" || { rm -f "$PIDFILE"; return 1; }
  if info="$(node_probe 2>/dev/null)"; then
    say "already running: $NODE_TITLE on 127.0.0.1:$PORT, $info (pid $pid)"
    return 0
  fi
  say "pid $pid is running but not answering yet: waiting"
  wait_for_node "$pid"
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
  local pid info
  if pid="$(live_pid)" && info="$(node_probe 2>/dev/null)"; then
    say "running: $NODE_TITLE on 127.0.0.1:$PORT, $info (pid $pid, data $DATA)"
    return 0
  fi
  if [ -n "${pid:-}" ]; then
    say "not answering on 127.0.0.1:$PORT (pid $pid is alive: starting or stuck; log $LOG)"
  else
    say "not running"
  fi
  return 3
}

cmd_wipe() {
  if [ -d "$DATA" ] && [ ! -f "$NODE_CONF" ]; then
    die "$DATA does not look like a data folder of this script: not deleting it"
  fi
  cmd_stop
  rm -rf "$DATA"
  say "deleted $DATA"
}

# Runs the command named by the script's one argument.
node_main() {
  [ $# -eq 1 ] || usage
  case "$1" in
    start) cmd_start ;;
    stop) cmd_stop ;;
    status) cmd_status ;;
    wipe) cmd_wipe ;;
    *) usage ;;
  esac
}
