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
