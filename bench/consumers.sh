#!/usr/bin/env bash
# Consumer benchmarks (issue 8): a bash run of `true`, a terminal send of `true` and an LSP
# hover (clangd), each through the same consumer on the host providers and on the E2B providers
# over a private sandboxd, in the same run. Reports the sandbox/host latency ratio of each op
# (medians over rounds; rounds alternate which world goes first) and the requests each op cost
# on the sandbox (goals: bash run 1, terminal send ≤ 2, LSP request = its stdin write only).
# Nothing here is a pass/fail timing threshold; the exit status is non-zero only when an
# operation fails.
#
#   bench/consumers.sh                        # BENCH_ROUNDS (default 3) × BENCH_N (30) per op
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD_DIR=${BUILD_DIR:-$ROOT/build}
case $BUILD_DIR in /*) ;; *) BUILD_DIR=$ROOT/$BUILD_DIR ;; esac
ROUNDS=${BENCH_ROUNDS:-3} N=${BENCH_N:-30}
. "$ROOT/bench/lib.sh"

bench_build consumers
command -v clangd >/dev/null || { echo "clangd missing (scripts/install-deps.sh)" >&2; exit 1; }
KEY="e2b_$(printf '%040d' 0)"
sbxd_start "$KEY"
export E2B_API_URL=$URL E2B_SANDBOX_URL=$URL E2B_API_KEY=$KEY MB_BUILD_DIR=$BUILD_DIR TMPDIR=$WORK

rc=0
run() { # world → appends its RESULT json to $WORK/<world>.json
  local log=$WORK/$1.log
  if "$BUILD_DIR/bin/moonbox" run "$ROOT/examples/world/compose-$1.lua" "$ROOT/bench/consumers_ops.lua" "$N" >"$log" 2>&1; then
    sed -n 's/^RESULT //p' "$log" >>"$WORK/$1.json"
  else
    cat "$log"; echo "consumers $1: FAILED"; rc=1
  fi
}
echo "== $ROUNDS rounds × $N of each op, host and sandbox alternating"
for r in $(seq 1 "$ROUNDS"); do
  if [ $((r % 2)) = 1 ]; then run host; run sandbox; else run sandbox; run host; fi
done
[ "$rc" = 0 ] && python3 - "$WORK/host.json" "$WORK/sandbox.json" <<'PY'
import json, statistics, sys
host = [json.loads(l) for l in open(sys.argv[1])]
sbx = [json.loads(l) for l in open(sys.argv[2])]
goals = {"bash_run_true": 1, "terminal_send_true": 2, "lsp_hover": 1}
for op in ("bash_run_true", "terminal_send_true", "lsp_hover"):
    h = statistics.median(x[op]["median_ms"] for x in host)
    s = statistics.median(x[op]["median_ms"] for x in sbx)
    req = max(x[op]["max_requests"] for x in sbx)
    print(f"{op:20s} host {h:7.2f} ms  sandbox {s:7.2f} ms  ratio {s / h:5.2f}x  "
          f"requests/op on the sandbox {req} (goal <= {goals[op]}{'' if req <= goals[op] else ', over goal'})")
    print("RESULT " + json.dumps({"op": op, "host_ms": h, "sandbox_ms": s, "ratio": s / h, "requests": req}))
PY
sbxd_stop
sbxd_check_left
exit $rc
