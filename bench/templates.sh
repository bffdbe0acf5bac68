#!/usr/bin/env bash
# Template build benchmark (issue 20): three ratios, each to a baseline measured in the same run
# (bench/templates.mjs, the e2b SDK's Template builder against a private sandboxd without a warm
# pool, so that every create boots):
#   a. Sandbox.create from a template with a 1 GiB layer vs from base          (goal ≤ 1.2×)
#   b. a rebuild after editing the last step vs that step run alone in a sandbox (goal ≤ 1.3×)
#   c. a first build vs the same commands run by hand in a sandbox              (goal ≤ 1.5×)
# Nothing here is a pass/fail timing threshold. Exit status: 0 unless the run could not be done
# or something was left behind.
#
#   bench/templates.sh
#   BENCH_N=7 BENCH_BIG_MB=1024 bench/templates.sh
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD_DIR=${BUILD_DIR:-$ROOT/build}
. "$ROOT/bench/lib.sh"

bench_need_sdk
[ -d "$ROOT/spec/sdk/node_modules/e2b-latest" ] || { echo "e2b-latest SDK missing: (cd spec/sdk && npm ci)" >&2; exit 1; }
bench_build templates --target sandboxd
KEY="e2b_$(od -An -N20 -tx1 /dev/urandom | tr -d ' \n')"
rc=0
SANDBOXD_WARM_POOL=0 sbxd_start "$KEY"
E2B_API_URL=$URL E2B_SANDBOX_URL=$URL E2B_API_KEY=$KEY SANDBOXD_STATE_DIR=$STATE node "$ROOT/bench/templates.mjs" || rc=1
sbxd_stop
sbxd_check_left
exit $rc
