#!/usr/bin/env bash
# Sets up, builds and installs strata (scripts/install.sh), then runs
# route-history on the real flights data:
#   scripts/route-history.sh [extra strata run arguments, e.g. -D state.l1.capacity=1MB]
# Output goes to out/route-history (committed part files), checkpoints to
# out/route-history-checkpoints. A fresh run replaces both; a run given
# --restore (e.g. `scripts/route-history.sh --restore latest` after an
# interrupt) keeps them and continues.
set -euo pipefail
source "$(dirname "$0")/env.sh"
"$STRATA_ROOT/scripts/install.sh"
cd "$STRATA_ROOT"
out="$STRATA_ROOT/out/route-history"
restoring=false
for arg in "$@"; do
  case "$arg" in --restore|--restore=*) restoring=true ;; esac
done
if ! $restoring; then rm -rf "$out" "$out-checkpoints"; fi
"$STRATA_BIN" run route-history --input data/flights-3m.parquet --output "$out" \
  --checkpoint-dir "$out-checkpoints" "$@"
echo "output: $(cat "$out"/part-*.jsonl | wc -l) lines in $out"
