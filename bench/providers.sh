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
SBXD_PID= WORK=
cleanup() {
  if [ -n "$SBXD_PID" ] && kill -0 "$SBXD_PID" 2>/dev/null; then
    kill -TERM "$SBXD_PID" 2>/dev/null || true
    wait "$SBXD_PID" 2>/dev/null || true
  fi
  if [ -n "$WORK" ]; then rm -rf "$WORK"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

echo "== build ($BUILD_DIR)"
mkdir -p "$BUILD_DIR/bench"
WORK=$(mktemp -d "$BUILD_DIR/bench/providers-run.XXXXXX")
if [ ! -f "$BUILD_DIR/CMakeCache.txt" ]; then cmake -S "$ROOT" -B "$BUILD_DIR" >/dev/null; fi
cmake --build "$BUILD_DIR" -j2 >"$WORK/build.log" 2>&1 || { cat "$WORK/build.log"; exit 1; }
[ -d "$ROOT/spec/sdk/node_modules/e2b" ] || { echo "e2b SDK missing: (cd spec/sdk && npm ci)" >&2; exit 1; }

echo "== start sandboxd"
STATE=$WORK/state LOGF=$WORK/sandboxd.log
KEY="e2b_$(printf '%040d' 0)"
"$BUILD_DIR/bin/sandboxd" --listen 127.0.0.1:0 --api-key "$KEY" --state-dir "$STATE" >"$LOGF" 2>&1 &
SBXD_PID=$!
URL=
for _ in $(seq 1 300); do
  URL=$(sed -n 's/^sandboxd listening on \(http:[^ ]*\).*/\1/p' "$LOGF")
  [ -n "$URL" ] && break
  kill -0 "$SBXD_PID" 2>/dev/null || break
  sleep 0.05
done
[ -n "$URL" ] || { echo "sandboxd did not start:" >&2; cat "$LOGF" >&2; exit 1; }
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
echo "== spawn→exit of \`true\` ($ROUNDS rounds × $N, alternating)"
for r in $(seq 1 "$ROUNDS"); do
  if [ $((r % 2)) = 1 ]; then
    step mb-latency "$WORK/mb_lat.json" mbx latency "$N"; step sdk-latency "$WORK/sdk_lat.json" sdk latency "$N"
  else
    step sdk-latency "$WORK/sdk_lat.json" sdk latency "$N"; step mb-latency "$WORK/mb_lat.json" mbx latency "$N"
  fi
done
echo "== stdout throughput, $((BYTES / 1048576)) MiB ($TP_ROUNDS rounds, alternating)"
for r in $(seq 1 "$TP_ROUNDS"); do
  if [ $((r % 2)) = 1 ]; then
    step mb-tp "$WORK/mb_tp.json" mbx throughput "$BYTES"; step sdk-tp "$WORK/sdk_tp.json" sdk throughput "$BYTES"
  else
    step sdk-tp "$WORK/sdk_tp.json" sdk throughput "$BYTES"; step mb-tp "$WORK/mb_tp.json" mbx throughput "$BYTES"
  fi
done
echo "== peak host RSS, readBytes($((BIG / 1048576)) MiB file, 1 MiB)"
step rss "$WORK/rss.json" mbx rss "$BIG"

echo "== stop sandboxd"
kill -TERM "$SBXD_PID"
st=0
wait "$SBXD_PID" || st=$?
SBXD_PID=
[ "$st" -eq 0 ] || { echo "sandboxd exited with status $st" >&2; rc=1; }
left=$(find "$STATE/sandboxes" -mindepth 1 -maxdepth 1 2>/dev/null | wc -l)
[ "$left" -eq 0 ] || { echo "$left sandbox directories left behind" >&2; rc=1; }

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
