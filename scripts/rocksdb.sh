#!/usr/bin/env bash
# The prebuilt RocksDB strata links instead of compiling RocksDB's C++
# (~16 of the first build's ~21 minutes on 2 cores): the shared library of
# Maven Central's org.rocksdb:rocksdbjni, whose version is exactly the one
# the `librocksdb-sys` crate of Cargo.lock bundles (11.8.1), built by the
# RocksDB project with LZ4 (the only codec strata's options select), Snappy,
# Zstd, Zlib and BZip2. It exports RocksDB's C API, which is all the
# `rocksdb` crate calls. README.md, "Building", says what differs.
#
#   scripts/rocksdb.sh fetch   download and unpack it once (mvn), check it
#   scripts/rocksdb.sh dir     print the folder that holds librocksdb.so
#
# scripts/env.sh links against it (ROCKSDB_LIB_DIR, and an rpath so that
# the binaries find it at run time) unless STRATA_ROCKSDB=source, which
# compiles RocksDB from the crate's bundled sources as a plain
# `cargo build` does.
#
# Environment:
#   STRATA_ROCKSDB_HOME  where it is kept (default /var/cache/strata-rocksdb,
#                        else ~/.cache/strata-rocksdb)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

say() { echo "rocksdb.sh: $*" >&2; }
die() { echo "rocksdb.sh: $*" >&2; exit 1; }

# The RocksDB version librocksdb-sys bundles, from Cargo.lock ("0.19.0+11.8.1").
version() {
  awk '/^name = "librocksdb-sys"$/ { getline; sub(/.*\+/, ""); sub(/".*/, ""); print; exit }' \
    "$ROOT/Cargo.lock"
}

home() {
  if [ -n "${STRATA_ROCKSDB_HOME:-}" ]; then
    echo "$STRATA_ROCKSDB_HOME"
  elif mkdir -p /var/cache/strata-rocksdb 2>/dev/null && [ -w /var/cache/strata-rocksdb ]; then
    echo /var/cache/strata-rocksdb
  else
    echo "${XDG_CACHE_HOME:-$HOME/.cache}/strata-rocksdb"
  fi
}

dir() { echo "$(home)/$(version)"; }

fetch() {
  local v d m2 jar
  v="$(version)"
  [ -n "$v" ] || die "no librocksdb-sys in $ROOT/Cargo.lock"
  d="$(dir)"
  if [ -f "$d/librocksdb.so" ]; then
    return 0
  fi
  command -v mvn >/dev/null || die "mvn not found (apt-get install maven)"
  command -v unzip >/dev/null || die "unzip not found (apt-get install unzip)"
  mkdir -p "$d"
  m2="$(home)/m2"
  say "downloading org.rocksdb:rocksdbjni:$v from Maven Central into $d (once, ~90 MB)"
  if ! mvn -B -q -Dstyle.color=never -Dmaven.repo.local="$m2" \
      org.apache.maven.plugins:maven-dependency-plugin:3.6.1:get \
      -Dartifact="org.rocksdb:rocksdbjni:$v" -Dtransitive=false >"$d/mvn.log" 2>&1; then
    tail -20 "$d/mvn.log" >&2
    die "mvn could not download org.rocksdb:rocksdbjni:$v (full output: $d/mvn.log)"
  fi
  jar="$m2/org/rocksdb/rocksdbjni/$v/rocksdbjni-$v.jar"
  [ -f "$jar" ] || die "$jar is missing after the download"
  unzip -o -q "$jar" librocksdbjni-linux64.so -d "$d"
  # The C API the rocksdb crate calls, and the version it was built from.
  if ! nm -D --defined-only "$d/librocksdbjni-linux64.so" | grep ' T rocksdb_open$' >/dev/null; then
    rm -f "$d/librocksdbjni-linux64.so"
    die "rocksdbjni $v does not export RocksDB's C API (rocksdb_open): use STRATA_ROCKSDB=source"
  fi
  mv "$d/librocksdbjni-linux64.so" "$d/librocksdb.so.tmp"
  mv "$d/librocksdb.so.tmp" "$d/librocksdb.so"
  rm -f "$jar"
  say "RocksDB $v ready: $d/librocksdb.so"
}

case "${1:-}" in
  fetch) fetch ;;
  dir) dir ;;
  *) echo "usage: $0 fetch|dir" >&2; exit 2 ;;
esac
