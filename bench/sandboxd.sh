#!/usr/bin/env bash
# sandboxd benchmarks (issue 3): create→ready as a ratio to the kernel floor, and 50 concurrent
# sandboxes × 10 commands (peak RSS, p50/p99 latency, ratio to the same commands on the host).
# Every ratio is against a baseline measured in this run; nothing here is a pass/fail timing
# threshold. Exit status: 0 unless a benchmark could not run or a command failed.
#
#   bench/sandboxd.sh                 # BUILD_DIR (default ./build) is built if needed
#   BENCH_N=50 BENCH_SANDBOXES=50 BENCH_COMMANDS=10 bench/sandboxd.sh
#   BENCH_PARTS=create bench/sandboxd.sh    # only create→ready (default: "create load")
#
# Starts its own sandboxd (127.0.0.1, port 0 = a free port; its own --state-dir and API key),
# with SANDBOXD_TRACE_CREATE=1 so the create bench can split the time; stops it (SIGTERM) at
# the end. bench/sandboxd_floor.c is compiled here with cc -O2 (not by bench/CMakeLists.txt,
# which only globs bench_*.c and links mbcore).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD_DIR=${BUILD_DIR:-$ROOT/build}
. "$ROOT/bench/lib.sh"

bench_build sandboxd --target sandboxd moonbox
FLOOR=$BUILD_DIR/bench/sandboxd_floor
if [ ! -x "$FLOOR" ] || [ "$ROOT/bench/sandboxd_floor.c" -nt "$FLOOR" ]; then
  ${CC:-cc} -O2 -std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror "$ROOT/bench/sandboxd_floor.c" -o "$FLOOR"
fi
bench_need_sdk

KEY="e2b_$(od -An -N20 -tx1 /dev/urandom | tr -d ' \n')"
SANDBOXD_TRACE_CREATE=1 sbxd_start "$KEY"
grep -v 'api key' "$LOGF" | grep -v 'ready in' || true
export E2B_API_URL=$URL E2B_SANDBOX_URL=$URL E2B_API_KEY=$KEY
export MOONBOX_BIN=$BUILD_DIR/bin/moonbox SANDBOXD_PID=$SBXD_PID SANDBOXD_FLOOR=$FLOOR SANDBOXD_STATE_DIR=$STATE SANDBOXD_LOG=$LOGF

rc=0
PARTS=" ${BENCH_PARTS:-create load} "
if [[ $PARTS == *" create "* ]]; then
  echo "== create→ready (bench/sandboxd_create.mjs)"
  node "$ROOT/bench/sandboxd_create.mjs" | tee "$WORK/create.out" || rc=1
fi
if [[ $PARTS == *" load "* ]]; then
  echo "== 50 × 10 commands (bench/sandboxd_load.mjs)"
  node "$ROOT/bench/sandboxd_load.mjs" | tee "$WORK/load.out" || rc=1
fi

sbxd_stop
if grep -E 'sandboxd: (sandbox|cleanup).*(removing|rmdir)' "$LOGF" >&2; then rc=1; fi
sbxd_check_left

echo "== summary"
PARTS=$PARTS node - "$WORK/create.out" "$WORK/load.out" <<'EOF' || rc=1
const fs = require('fs')
const get = (f) => { try { const l = fs.readFileSync(f, 'utf8').split('\n').find((x) => x.startsWith('RESULT ')); return l ? JSON.parse(l.slice(7)) : null } catch { return null } }
const c = get(process.argv[2]), l = get(process.argv[3])
const wanted = process.env.PARTS || ' create load '
const f = (x) => (typeof x === 'number' ? x.toFixed(2) : '?')
const goal = (x, max) => (typeof x !== 'number' ? 'no figure' : x <= max ? 'goal met' : 'over goal')
if (c) {
  console.log(`create→ready  (Node's fetch as the client) cold ${f(c.raw_ms)} ms vs floor ${f(c.floor_ms)} ms: ${f(c.ratio_raw)}× (goal ≤ 2×, ${goal(c.ratio_raw, 2)}); ` +
    `cold with the link made during the create ${f(c.rawnet_ms)} ms: ${f(c.ratio_rawnet)}×; ` +
    `pooled ${f(c.pooled_ms)} ms: ${f(c.ratio_pooled)}× (goal ≤ 1.5×, ${goal(c.ratio_pooled, 1.5)})` +
    (c.sbx_create_ms !== undefined ? `; in-server sbx_create ${f(c.ratio_sbx_create)}×` : '') + `; via SDK ${f(c.ratio_sdk)}×`)
  if (c.mb_cold_ms !== undefined || c.mb_pooled_ms !== undefined) {
    console.log(`              through moonbox's client: cold ${f(c.mb_cold_ms)} ms: ${f(c.ratio_mb_cold)}× (goal ≤ 2×, ${goal(c.ratio_mb_cold, 2)}); ` +
      `pooled ${f(c.mb_pooled_ms)} ms: ${f(c.ratio_mb_pooled)}× (goal ≤ 1.5×, ${goal(c.ratio_mb_pooled, 1.5)})`)
  }
} else console.log(`create→ready  ${wanted.includes(' create ') ? 'no result' : 'skipped'}`)
if (l) {
  console.log(`load          ${l.succeeded}/${l.commands} ok; peak RSS ${f(l.peak_rss_mb)} MB (goal ≤ 100 MB, ${goal(l.peak_rss_mb, 100)}); ` +
    `p50 ${f(l.p50_ms)} ms (${f(l.ratio_p50)}× host), p99 ${f(l.p99_ms)} ms (${f(l.ratio_p99)}× host); idle ${f(l.ratio_idle_p50)}× host`)
} else console.log(`load          ${wanted.includes(' load ') ? 'no result' : 'skipped'}`)
process.exit((c || !wanted.includes(' create ')) && (l ? l.ok : !wanted.includes(' load ')) ? 0 : 1)
EOF
exit $rc
