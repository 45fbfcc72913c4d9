#!/usr/bin/env bash
# The test command: builds strata once (release) and runs every test of the
# workspace — unit, property-based and end-to-end on the real flights data —
# then prints one closing line "tests: N passed, N failed".
set -euo pipefail
source "$(dirname "$0")/env.sh"
"$STRATA_ROOT/scripts/setup.sh"
cd "$STRATA_ROOT"
cargo build --release --workspace --bins
log="$(mktemp)"
trap 'rm -f "$log"' EXIT
status=0
cargo test --release --workspace "$@" 2>&1 | tee "$log" || status=$?
passed=$(grep -Eo '^test result: [A-Za-z]+\. [0-9]+ passed' "$log" | awk '{s+=$4} END {print s+0}')
failed=$(grep -Eo '[0-9]+ failed;' "$log" | awk '{s+=$1} END {print s+0}')
echo "tests: $passed passed, $failed failed"
exit "$status"
