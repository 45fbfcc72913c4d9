#!/usr/bin/env bash
# Runs a real S3-compatible server on 127.0.0.1 for checkpoints in an object
# store (`--checkpoint-dir s3://strata/<prefix>`): s3s-fs, built from
# crates.io (no Docker, no download site), which keeps each bucket as a
# folder of its data directory.
#
#   scripts/s3.sh start    build s3s-fs once (cargo install, ~5 min, a line
#                          every 30 s while it builds), create
#                          the bucket `strata`, start the server and wait
#                          until it answers
#   scripts/s3.sh stop     SIGTERM, SIGKILL after 10 s
#   scripts/s3.sh status   exit 0 if the server answers, 3 otherwise
#   scripts/s3.sh env      print the AWS_* settings that reach it, for
#                          `eval "$(scripts/s3.sh env)"`
#   scripts/s3.sh wipe     stop, then delete the data folder
#
# Environment (all optional):
#   STRATA_S3_HOME   where s3s-fs is installed (default /var/cache/strata-s3,
#                    else ~/.cache/strata-s3)
#   STRATA_S3_DATA   data, log, pid (default <repo>/.s3)
#   STRATA_S3_PORT   port (default 9000)
#   STRATA_S3_WAIT   seconds to wait for the server on start (default 60)
set -euo pipefail

S3S_VERSION=0.14.1    # the newest s3s-fs that builds with Rust 1.95
ACCESS_KEY=strata     # test credentials: the server is for this machine only
SECRET_KEY=strata-test-secret
BUCKET=strata

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DATA="${STRATA_S3_DATA:-$ROOT/.s3}"
PORT="${STRATA_S3_PORT:-9000}"
WAIT="${STRATA_S3_WAIT:-60}"
PIDFILE="$DATA/s3s-fs.pid"
LOG="$DATA/s3s-fs.log"
if [ -z "${STRATA_S3_HOME:-}" ]; then
  if mkdir -p /var/cache/strata-s3 2>/dev/null && [ -w /var/cache/strata-s3 ]; then
    STRATA_S3_HOME=/var/cache/strata-s3
  else
    STRATA_S3_HOME="${XDG_CACHE_HOME:-$HOME/.cache}/strata-s3"
  fi
fi
BIN="$STRATA_S3_HOME/bin/s3s-fs"

answers() {
  # Any HTTP reply (an unauthenticated request gets 403) means it is up.
  (
    exec 3<>"/dev/tcp/127.0.0.1/$PORT" || exit 1
    printf 'GET / HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n' >&3
    IFS= read -r -t 5 line <&3 || exit 1
    [[ "$line" == HTTP/* ]]
  ) 2>/dev/null
}

install() {
  [ -x "$BIN" ] && return 0
  mkdir -p "$STRATA_S3_HOME"
  local log="$STRATA_S3_HOME/build.log" started=$SECONDS
  echo "s3: building s3s-fs $S3S_VERSION into $STRATA_S3_HOME (once, ~5 min on 2 cores; log: $log)"
  # Its own target folder: strata's build may hold the shared one meanwhile.
  cargo install --root "$STRATA_S3_HOME" --target-dir "$STRATA_S3_HOME/build" \
    s3s-fs --version "$S3S_VERSION" --features binary --locked >"$log" 2>&1 &
  local pid=$!
  while kill -0 "$pid" 2>/dev/null; do
    sleep 1
    if (( (SECONDS - started) % 30 == 0 )); then
      echo "s3: still building s3s-fs: $((SECONDS - started)) s, $(grep -c Compiling "$log") crates compiled"
    fi
  done
  if ! wait "$pid"; then
    echo "s3: building s3s-fs failed; the end of its log:" >&2; tail -20 "$log" >&2; return 1
  fi
  echo "s3: built s3s-fs in $((SECONDS - started)) s"
  rm -rf "$STRATA_S3_HOME/build"
}

start() {
  if answers; then echo "s3: already running on 127.0.0.1:$PORT"; return 0; fi
  install
  mkdir -p "$DATA/root/$BUCKET"
  nohup "$BIN" --host 127.0.0.1 --port "$PORT" --access-key "$ACCESS_KEY" \
    --secret-key "$SECRET_KEY" "$DATA/root" >"$LOG" 2>&1 &
  echo $! >"$PIDFILE"
  for _ in $(seq 1 $((WAIT * 5))); do
    if answers; then echo "s3: s3s-fs answers on 127.0.0.1:$PORT (bucket $BUCKET)"; return 0; fi
    if ! kill -0 "$(cat "$PIDFILE")" 2>/dev/null; then
      echo "s3: s3s-fs exited; its log:" >&2; cat "$LOG" >&2; return 1
    fi
    sleep 0.2
  done
  echo "s3: s3s-fs did not answer within ${WAIT}s; its log: $LOG" >&2
  return 1
}

stop() {
  [ -f "$PIDFILE" ] || return 0
  local pid; pid="$(cat "$PIDFILE")"
  kill "$pid" 2>/dev/null || true
  for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
  kill -9 "$pid" 2>/dev/null || true
  rm -f "$PIDFILE"
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  status) if answers; then echo "s3: up on 127.0.0.1:$PORT"; else echo "s3: down"; exit 3; fi ;;
  env)
    echo "export AWS_ENDPOINT=http://127.0.0.1:$PORT AWS_ALLOW_HTTP=true AWS_REGION=us-east-1"
    echo "export AWS_ACCESS_KEY_ID=$ACCESS_KEY AWS_SECRET_ACCESS_KEY=$SECRET_KEY"
    ;;
  wipe) stop; rm -rf "$DATA" ;;
  *) echo "usage: $0 start|stop|status|env|wipe" >&2; exit 2 ;;
esac
