#!/usr/bin/env bash
# Sets up, builds and runs route-history on the real flights data:
#   scripts/route-history.sh [extra strata run arguments, e.g. -D state.l1.capacity=1MB]
# Output goes to out/route-history (committed part files), checkpoints to
# out/route-history-checkpoints; both are replaced on each invocation.
set -euo pipefail
source "$(dirname "$0")/env.sh"
"$STRATA_ROOT/scripts/setup.sh"
cd "$STRATA_ROOT"
cargo build --release --bin strata
out="$STRATA_ROOT/out/route-history"
rm -rf "$out" "$out-checkpoints"
"$STRATA_BIN" run route-history --input data/flights-3m.parquet --output "$out" \
  --checkpoint-dir "$out-checkpoints" "$@"
echo "output: $(cat "$out"/part-*.jsonl | wc -l) lines in $out"
