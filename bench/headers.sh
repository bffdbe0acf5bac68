#!/usr/bin/env bash
# The header-rules benchmark (issue 18): HTTPS through the egress proxy that sets a rule's header
# (TLS terminated and made again) vs the plain enforced path (TLS relayed as it is) vs the host,
# for small requests on a kept-alive connection and a 100 MB download, all in one run against the
# stand-in world of spec/support/networld.py. Needs root and the e2b SDK; see bench/headers.mjs.
#
#   bench/headers.sh            # BUILD_DIR (default ./build) is built if needed; BENCH_ROUNDS=5
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD_DIR=${BUILD_DIR:-$ROOT/build}
. "$ROOT/bench/lib.sh"
[ "$(id -u)" -eq 0 ] || { echo "headers bench: needs root (it makes network namespaces)" >&2; exit 2; }
bench_build headers --target sandboxd
bench_need_sdk
MB_BUILD_DIR=$BUILD_DIR node "$ROOT/bench/headers.mjs"
