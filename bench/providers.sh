#!/usr/bin/env bash
# Provider-family benchmarks (issue 4, "Benchmarks"): requests per operation counted at the
# transport, spawn→exit latency of `true` and 256 MiB of stdout through ctx.subprocess against
# the official e2b SDK (spec/sdk/node_modules/e2b) on the SAME sandboxd in the SAME run, and
# peak host RSS while readBytes refuses a 1 GiB file. Every ratio is against a baseline measured
# here; nothing is a pass/fail timing threshold. Exit status: non-zero only when an operation
# (or the bench itself) fails — a missed goal is reported, not failed.
#
#   bench/providers.sh                     # BUILD_DIR (default ./build) is built if needed
#   BENCH_ROUNDS=3 BENCH_N=30 BENCH_TP_ROUNDS=3 BENCH_BYTES=268435456 BENCH_BIG=1073741824 bench/providers.sh
#
# Latency and throughput alternate moonbox and SDK rounds (ABBA…) so that load from other
# processes on the (2, shared) cores falls on both sides; ratios use the medians over rounds.
# Starts its own sandboxd (127.0.0.1, port 0, its own --state-dir, key e2b_ + 40 zeros) and
# stops it (SIGTERM) at the end.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD_DIR=${BUILD_DIR:-$ROOT/build}
case $BUILD_DIR in /*) ;; *) BUILD_DIR=$ROOT/$BUILD_DIR ;; esac
ROUNDS=${BENCH_ROUNDS:-3} N=${BENCH_N:-30} TP_ROUNDS=${BENCH_TP_ROUNDS:-3}
BYTES=${BENCH_BYTES:-268435456} BIG=${BENCH_BIG:-1073741824}
. "$ROOT/bench/lib.sh"

bench_build providers
bench_need_sdk

KEY="e2b_$(printf '%040d' 0)"
sbxd_start "$KEY"
export E2B_API_URL=$URL E2B_SANDBOX_URL=$URL E2B_API_KEY=$KEY
export MB_BUILD_DIR=$BUILD_DIR MB_SOURCE_DIR=$ROOT

rc=0
TCK=$(getconf CLK_TCK)
sbxd_ticks() { awk '{print $14 + $15}' "/proc/$SBXD_PID/stat"; }   # sandboxd's own user+sys
mbx() { "$BUILD_DIR/bin/moonbox" run "$ROOT/bench/providers_compose.lua" "$ROOT/bench/providers_ops.lua" "$@"; }
sdk() { node "$ROOT/bench/providers_sdk.mjs" "$@"; }
# step NAME OUTFILE CMD...: runs CMD, appends its RESULT line (plus the server CPU it cost) to OUTFILE
step() {
  local name=$1 out=$2; shift 2
  local t0 t1 log=$WORK/step.log
  t0=$(sbxd_ticks)
  if "$@" >"$log" 2>&1; then
    t1=$(sbxd_ticks)
    grep -v '^RESULT ' "$log" || true
    sed -n 's/^RESULT \(.*\)/\1/p' "$log" | sed "s/}\$/,\"server_cpu_s\":$(awk -v a="$t0" -v b="$t1" -v t="$TCK" 'BEGIN{print (b-a)/t}')}/" >>"$out"
  else
    cat "$log"; echo "$name: FAILED"; rc=1
  fi
}

echo "== requests per operation (moonbox: mb.http.stats() deltas; JS: seams-and-anchor.md §7)"
step counts "$WORK/counts.json" mbx counts
# alternate ROUNDS NAME FILE OP ARG: ROUNDS rounds of `mbx OP ARG` and `sdk OP ARG` (steps mb-NAME
# and sdk-NAME into $WORK/mb_FILE.json and $WORK/sdk_FILE.json), moonbox first in odd rounds
alternate() {
  local rounds=$1 name=$2 file=$3 op=$4 arg=$5 r
  for r in $(seq 1 "$rounds"); do
    if [ $((r % 2)) = 1 ]; then
      step "mb-$name" "$WORK/mb_$file.json" mbx "$op" "$arg"; step "sdk-$name" "$WORK/sdk_$file.json" sdk "$op" "$arg"
    else
      step "sdk-$name" "$WORK/sdk_$file.json" sdk "$op" "$arg"; step "mb-$name" "$WORK/mb_$file.json" mbx "$op" "$arg"
    fi
  done
}
echo "== spawn→exit of \`true\` ($ROUNDS rounds × $N, alternating)"
alternate "$ROUNDS" latency lat latency "$N"
echo "== stdout throughput, $((BYTES / 1048576)) MiB ($TP_ROUNDS rounds, alternating)"
alternate "$TP_ROUNDS" tp tp throughput "$BYTES"
echo "== peak host RSS, readBytes($((BIG / 1048576)) MiB file, 1 MiB)"
step rss "$WORK/rss.json" mbx rss "$BIG"

sbxd_stop
sbxd_check_left

echo "== summary"
node - "$WORK" <<'EOF' || rc=1
const fs = require('fs'), W = process.argv[2]
const load = (f) => { try { return fs.readFileSync(`${W}/${f}`, 'utf8').split('\n').filter(Boolean).map(JSON.parse) } catch { return [] } }
const med = (a) => { const s = a.filter((x) => typeof x === 'number').sort((x, y) => x - y), n = s.length
  return n === 0 ? NaN : n % 2 ? s[(n - 1) / 2] : (s[n / 2 - 1] + s[n / 2]) / 2 }
const f = (x, d = 2) => (Number.isFinite(x) ? x.toFixed(d) : '?')
const goal = (ok) => (ok === undefined ? 'no figure' : ok ? 'goal met' : 'over goal')
const counts = load('counts.json')[0]
if (counts) {
  const pick = (re) => counts.rows.find((r) => re.test(r.op)) || {}
  const sp = pick(/^spawn `true`/), gw = pick(/replaceIfVersion \(ok\)/), rs = pick(/^fs\.resolve/)
  console.log(`requests      spawn ${sp.requests} (JS ${sp.js}), guarded write ${gw.requests} (JS ${gw.js}; goal ≤ 3), ` +
    `resolve ${rs.requests} (JS ${rs.js}); all rows above`)
} else console.log('requests      no result')
const ml = load('mb_lat.json'), sl = load('sdk_lat.json')
const perRound = ml.map((m, i) => (sl[i] ? m.median_ms / sl[i].median_ms : NaN))
const lr = med(ml.map((x) => x.median_ms)) / med(sl.map((x) => x.median_ms))
console.log(`spawn→exit    moonbox ${f(med(ml.map((x) => x.median_ms)))} ms vs SDK ${f(med(sl.map((x) => x.median_ms)))} ms: ` +
  `${f(lr)}× (goal ≤ 1.0×, ${goal(Number.isFinite(lr) ? lr <= 1 : undefined)}); per round ${perRound.map((x) => f(x)).join(', ')}`)
const mt = load('mb_tp.json'), st = load('sdk_tp.json')
const sdkMB = med(st.map((x) => x.mb_s)), sdkCpu = med(st.map((x) => x.server_cpu_s))
for (const mode of ['pipe', 'collect']) {
  const v = med(mt.map((x) => x[mode]?.mb_s)), r = v / sdkMB
  console.log(`stdout ${mode.padEnd(7)} moonbox ${f(v, 1)} MiB/s vs SDK ${f(sdkMB, 1)} MiB/s: ${f(r)}× (goal ≥ 1×, ${goal(Number.isFinite(r) ? r >= 1 : undefined)})`)
}
// server_cpu_s of a moonbox throughput step covers both modes (two transfers)
console.log(`              CPU per transfer: sandboxd ${f(med(mt.map((x) => x.server_cpu_s / 2)))} s (SDK run ${f(sdkCpu)} s), ` +
  `client ${f(med(mt.map((x) => x.pipe?.client_cpu_s)))} s pipe / ${f(med(mt.map((x) => x.collect?.client_cpu_s)))} s collect ` +
  `(SDK node ${f(med(st.map((x) => x.client_cpu_s)))} s)`)
const rss = load('rss.json')[0]
if (rss) {
  const r = rss.rows[0]
  console.log(`host RSS      readBytes(1 GiB, 1 MiB) → ${r.code}: +${f(r.delta_kib / 1024)} MiB over baseline ${f(r.baseline_kib / 1024, 1)} MiB ` +
    `(goal ≤ 2 MiB, ${goal(r.delta_kib <= 2048)}); transport cap alone (envd:download) +${f(rss.rows[1].delta_kib / 1024)} MiB`)
} else console.log('host RSS      no result')
const ok = counts && ml.length && sl.length && mt.length && st.length && rss
process.exit(ok ? 0 : 1)
EOF
exit $rc
