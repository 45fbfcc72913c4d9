#!/usr/bin/env bash
# The test command: builds strata once (release) and runs every test of the
# workspace — unit, property-based and end-to-end on the real flights data.
set -euo pipefail
source "$(dirname "$0")/env.sh"
"$STRATA_ROOT/scripts/setup.sh"
cd "$STRATA_ROOT"
cargo build --release --workspace --bins
cargo test --release --workspace "$@"
