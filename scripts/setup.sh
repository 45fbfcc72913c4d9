#!/usr/bin/env bash
# Installs what building strata needs on a fresh Debian machine (RocksDB's
# bindgen needs libclang and its headers; cmake for native builds, libcurl
# headers for librdkafka's, OpenSSL's for its TLS; a font
# for strata-bench's plots), then
# fetches the flights data. Safe to run again: it skips what is present.
set -euo pipefail
source "$(dirname "$0")/env.sh"
need=()
command -v cmake >/dev/null || need+=(cmake)
[ -e /usr/lib/llvm-14/lib/libclang.so ] || ls /usr/lib/llvm-*/lib/libclang.so >/dev/null 2>&1 || need+=(libclang-dev)
ls /usr/lib/llvm-*/lib/clang/*/include/stdbool.h >/dev/null 2>&1 || need+=(libclang-dev)
# rdkafka builds librdkafka with cmake; librdkafka 2.11+ wants the libcurl
# headers even with curl disabled (it does not link libcurl).
[ -e /usr/include/x86_64-linux-gnu/curl/curl.h ] || [ -e /usr/include/curl/curl.h ] || need+=(libcurl4-openssl-dev)
# librdkafka links the system OpenSSL for TLS and SCRAM (rdkafka's `ssl`).
[ -e /usr/include/openssl/ssl.h ] || need+=(libssl-dev)
command -v pkg-config >/dev/null || need+=(pkg-config)
# strata-bench draws its plots' text with DejaVu Sans.
[ -e /usr/share/fonts/truetype/dejavu/DejaVuSans.ttf ] || need+=(fonts-dejavu-core)
if [ ${#need[@]} -gt 0 ]; then
  echo "setup: installing ${need[*]}"
  if [ "$(id -u)" -eq 0 ]; then
    apt-get update -qq && apt-get install -y -qq "${need[@]}"
  else
    sudo apt-get update -qq && sudo apt-get install -y -qq "${need[@]}"
  fi
fi
command -v cargo >/dev/null || { echo "setup: cargo not found: install Rust with rustup first" >&2; exit 1; }
"$STRATA_ROOT/scripts/fetch-data.sh"
