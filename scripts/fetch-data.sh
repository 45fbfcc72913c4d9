#!/usr/bin/env bash
# Fetches the real flights data (3,000,000 US flights, Jan–Jun 2001) from the
# npm package vega-datasets@3.2.1 into data/ (git-ignored).
set -euo pipefail
source "$(dirname "$0")/env.sh"
dest="$STRATA_ROOT/data/flights-3m.parquet"
if [ -s "$dest" ]; then
  exit 0
fi
command -v npm >/dev/null || { echo "fetch-data: npm is needed to fetch vega-datasets" >&2; exit 1; }
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && npm pack --silent vega-datasets@3.2.1 >/dev/null)
tar -xzf "$tmp"/vega-datasets-3.2.1.tgz -C "$tmp" package/data/flights-3m.parquet
mkdir -p "$STRATA_ROOT/data"
mv "$tmp/package/data/flights-3m.parquet" "$dest"
echo "fetch-data: $dest ($(stat -c %s "$dest") bytes)"
