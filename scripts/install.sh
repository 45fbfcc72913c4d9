#!/usr/bin/env bash
# Builds strata (release) and puts it on the PATH as a symbolic link to the
# build, so every `strata …` command of the README works as written and a
# later build is picked up without installing again:
#   scripts/install.sh            # /usr/local/bin/strata as root, else ~/.local/bin/strata
#   STRATA_INSTALL_DIR=/opt/bin scripts/install.sh
set -euo pipefail
source "$(dirname "$0")/env.sh"
"$STRATA_ROOT/scripts/setup.sh"
cd "$STRATA_ROOT"
cargo build --release --bin strata
if [ -n "${STRATA_INSTALL_DIR:-}" ]; then
  dir="$STRATA_INSTALL_DIR"
elif [ "$(id -u)" -eq 0 ]; then
  dir=/usr/local/bin
else
  dir="$HOME/.local/bin"
fi
mkdir -p "$dir"
ln -sfn "$STRATA_BIN" "$dir/strata"
echo "install: $dir/strata -> $STRATA_BIN"
case ":$PATH:" in
  *":$dir:"*) ;;
  *) echo "install: $dir is not on your PATH: add it, e.g. export PATH=\"$dir:\$PATH\"" >&2 ;;
esac
