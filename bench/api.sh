#!/usr/bin/env bash
# Sandbox API benchmark (issue 11): requests per ctx.e2b call on a private sandboxd (goal: 1
# each, as the SDK). Counts, not timings; exit status non-zero only when a call fails outright.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD_DIR=${BUILD_DIR:-$ROOT/build}
case $BUILD_DIR in /*) ;; *) BUILD_DIR=$ROOT/$BUILD_DIR ;; esac
. "$ROOT/bench/lib.sh"

bench_build api
KEY="e2b_$(printf '%040d' 0)"
sbxd_start "$KEY"
export E2B_API_URL=$URL E2B_SANDBOX_URL=$URL E2B_API_KEY=$KEY MB_BUILD_DIR=$BUILD_DIR
rc=0
echo "== requests per sandbox API call"
"$BUILD_DIR/bin/moonbox" run "$ROOT/bench/providers_compose.lua" "$ROOT/bench/api_ops.lua" || rc=1
sbxd_stop
sbxd_check_left
exit $rc
