#!/usr/bin/env bash
# The network benchmark (issue 17): memory per sandbox (1, 10, 50), cold create with internet vs
# without, a 100 MB download and connect latency through the gateway and egress proxy vs from the
# host, all measured in one run against the stand-in world of spec/support/networld.py (traffic
# stays on this machine). Needs root (network namespaces) and the e2b SDK; see bench/network.mjs.
#
#   bench/network.sh            # BUILD_DIR (default ./build) is built if needed; BENCH_ROUNDS=5
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD_DIR=${BUILD_DIR:-$ROOT/build}
. "$ROOT/bench/lib.sh"
[ "$(id -u)" -eq 0 ] || { echo "network bench: needs root (it makes network namespaces)" >&2; exit 2; }
bench_build network --target sandboxd
bench_need_sdk
MB_BUILD_DIR=$BUILD_DIR node "$ROOT/bench/network.mjs"
