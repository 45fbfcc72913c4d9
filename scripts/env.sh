# Sourced by the other scripts: where cargo builds, kept outside the clone so
# that later runs (and CI on the same machine) reuse the RocksDB build.
if [ -z "${CARGO_TARGET_DIR:-}" ]; then
  if mkdir -p /var/cache/strata-target 2>/dev/null && [ -w /var/cache/strata-target ]; then
    CARGO_TARGET_DIR=/var/cache/strata-target
  else
    CARGO_TARGET_DIR="${XDG_CACHE_HOME:-$HOME/.cache}/strata-target"
  fi
fi
export CARGO_TARGET_DIR
STRATA_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export STRATA_ROOT
STRATA_BIN="$CARGO_TARGET_DIR/release/strata"
export STRATA_BIN
# RocksDB: link the prebuilt library of scripts/rocksdb.sh (fetched here
# the first time) instead of compiling its C++, unless STRATA_ROCKSDB=source.
# The rpath lets the binaries find it where it is kept.
if [ "${STRATA_ROCKSDB:-prebuilt}" != source ]; then
  STRATA_ROCKSDB_DIR="$("$STRATA_ROOT/scripts/rocksdb.sh" dir)"
  if [ -f "$STRATA_ROCKSDB_DIR/librocksdb.so" ] || "$STRATA_ROOT/scripts/rocksdb.sh" fetch; then
    export ROCKSDB_LIB_DIR="$STRATA_ROCKSDB_DIR"
    case " ${RUSTFLAGS:-} " in
      *" -C link-arg=-Wl,-rpath,$STRATA_ROCKSDB_DIR "*) ;;
      *) export RUSTFLAGS="${RUSTFLAGS:+$RUSTFLAGS }-C link-arg=-Wl,-rpath,$STRATA_ROCKSDB_DIR" ;;
    esac
  else
    echo "env.sh: no prebuilt RocksDB; cargo compiles it from source (~16 min on 2 cores)" >&2
  fi
fi
