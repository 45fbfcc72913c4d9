#!/usr/bin/env bash
# What a reviewer checks before the tests: formatting (cargo fmt), no
# import cycles between the modules of runtime/ and connectors/
# (scripts/module-cycles.py), and clippy on every target with warnings as
# errors (the workspace's lints: missing docs, unreachable pub items).
# scripts/test.sh runs it first; exits non-zero at the first failure.
set -euo pipefail
source "$(dirname "$0")/env.sh"
cd "$STRATA_ROOT"
echo "check: cargo fmt --check"
cargo fmt --all --check
echo "check: import cycles between modules"
python3 scripts/module-cycles.py runtime/src connectors/src
echo "check: cargo clippy --workspace --all-targets -- -D warnings"
cargo clippy --release --workspace --all-targets --features strata-runtime/fault-injection \
  -- -D warnings
