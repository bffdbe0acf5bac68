#!/usr/bin/env bash
# envd stream benchmarks (issue 12): 256 MiB of stdout (`head -c BENCH_BYTES /dev/zero`) through
# moonbox's pipe and collect modes in envd's binary (proto) and JSON codecs, against the official
# e2b SDK's onStdout on the SAME sandboxd in the SAME run; sandboxd's own CPU per transfer
# (utime + stime from /proc/<pid>/stat, its threads only); spawn→exit of `true` and 1 KiB
# write+read through `cat` in both codecs (proto as a ratio to JSON: no regression is ≤ 1.05×).
# Rounds alternate the order (SDK, proto, json / json, proto, SDK, …) so that load from other
# processes falls on every side; figures are medians over rounds. Ratios only; nothing here is a
# pass/fail timing threshold: exit status is non-zero only when an operation fails.
#
#   bench/stream.sh                     # BUILD_DIR (default ./build) is built if needed
#   BENCH_TP_ROUNDS=3 BENCH_ROUNDS=3 BENCH_N=30 BENCH_BYTES=268435456 bench/stream.sh
# The client decode cost against memcpy is build/bench/bench_decode (bench/run.sh runs it).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD_DIR=${BUILD_DIR:-$ROOT/build}
case $BUILD_DIR in /*) ;; *) BUILD_DIR=$ROOT/$BUILD_DIR ;; esac
TP_ROUNDS=${BENCH_TP_ROUNDS:-3} ROUNDS=${BENCH_ROUNDS:-3} N=${BENCH_N:-30} BYTES=${BENCH_BYTES:-268435456}
. "$ROOT/bench/lib.sh"

bench_build stream
bench_need_sdk
KEY="e2b_$(printf '%040d' 0)"
sbxd_start "$KEY"
export E2B_API_URL=$URL E2B_SANDBOX_URL=$URL E2B_API_KEY=$KEY
export MB_BUILD_DIR=$BUILD_DIR MB_SOURCE_DIR=$ROOT

rc=0
TCK=$(getconf CLK_TCK)
sbxd_ticks() { awk '{print $14 + $15}' "/proc/$SBXD_PID/stat"; }   # sandboxd's own user+sys
mbx() { local c=$1; shift; MOONBOX_ENVD_CODEC=$c "$BUILD_DIR/bin/moonbox" run "$ROOT/bench/providers_compose.lua" "$ROOT/bench/providers_ops.lua" "$@"; }
sdk() { node "$ROOT/bench/providers_sdk.mjs" "$@"; }
# step NAME OUTFILE CMD...: runs CMD, appends its RESULT line (plus the server CPU it cost) to OUTFILE
step() {
  local name=$1 out=$2; shift 2
  local t0 t1 log=$WORK/step.log
  t0=$(sbxd_ticks)
  if "$@" >"$log" 2>&1; then
    t1=$(sbxd_ticks)
    sed "s/^/  [$name] /" "$log" | grep -v 'RESULT ' || true
    sed -n 's/^RESULT \(.*\)/\1/p' "$log" | sed "s/}\$/,\"server_cpu_s\":$(awk -v a="$t0" -v b="$t1" -v t="$TCK" 'BEGIN{print (b-a)/t}')}/" >>"$out"
  else
    cat "$log"; echo "$name: FAILED"; rc=1
  fi
}

echo "== stdout throughput, $((BYTES / 1048576)) MiB ($TP_ROUNDS rounds; SDK, proto, json in turn)"
for r in $(seq 1 "$TP_ROUNDS"); do
  if [ $((r % 2)) = 1 ]; then order="sdk proto json"; else order="json proto sdk"; fi
  for side in $order; do
    if [ "$side" = sdk ]; then step sdk "$WORK/tp_sdk.json" sdk throughput "$BYTES"
    else step "$side" "$WORK/tp_$side.json" mbx "$side" throughput "$BYTES"; fi
  done
done
echo "== spawn→exit of \`true\` and 1 KiB write+read ($ROUNDS rounds × $N; proto and json in turn)"
for r in $(seq 1 "$ROUNDS"); do
  if [ $((r % 2)) = 1 ]; then order="proto json"; else order="json proto"; fi
  for c in $order; do
    step "$c-latency" "$WORK/lat_$c.json" mbx "$c" latency "$N"
    step "$c-echo" "$WORK/echo_$c.json" mbx "$c" echo "$N"
  done
done

sbxd_stop
sbxd_check_left

echo "== summary"
node - "$WORK" "$BYTES" <<'JS' || rc=1
const fs = require('fs'), W = process.argv[2], BYTES = Number(process.argv[3])
const load = (f) => { try { return fs.readFileSync(`${W}/${f}`, 'utf8').split('\n').filter(Boolean).map(JSON.parse) } catch { return [] } }
const med = (a) => { const s = a.filter((x) => Number.isFinite(x)).sort((x, y) => x - y), n = s.length
  return n === 0 ? NaN : n % 2 ? s[(n - 1) / 2] : (s[n / 2 - 1] + s[n / 2]) / 2 }
const f = (x, d = 2) => (Number.isFinite(x) ? x.toFixed(d) : '?')
const goal = (ok) => (ok === undefined ? 'no figure' : ok ? 'goal met' : 'over goal')
const mbs = (mib) => mib * 1.048576   // MiB/s → MB/s
const sdk = load('tp_sdk.json'), sdkMiB = med(sdk.map((x) => x.mb_s))
console.log(`SDK onStdout        ${f(sdkMiB, 1)} MiB/s (${f(mbs(sdkMiB), 0)} MB/s); sandboxd CPU ${f(med(sdk.map((x) => x.server_cpu_s)))} s per ${BYTES / 1048576} MiB`)
let ok = sdk.length > 0
for (const c of ['proto', 'json']) {
  const t = load(`tp_${c}.json`)
  ok = ok && t.length > 0
  for (const m of ['pipe', 'collect']) {
    const v = med(t.map((x) => x[m]?.mb_s)), r = v / sdkMiB
    console.log(`moonbox ${c.padEnd(5)} ${m.padEnd(7)} ${f(v, 1)} MiB/s (${f(mbs(v), 0)} MB/s): ${f(r)}× the SDK ` +
      `(goal ≥ 4× and ≥ 250 MB/s: ${goal(Number.isFinite(r) ? r >= 4 && mbs(v) >= 250 : undefined)}); client CPU ${f(med(t.map((x) => x[m]?.client_cpu_s)))} s`)
  }
  // a throughput step is two transfers (pipe, then collect)
  const cpu = med(t.map((x) => x.server_cpu_s / 2)), lim = c === 'proto' ? 1 : 2
  console.log(`moonbox ${c.padEnd(5)} sandboxd CPU ${f(cpu)} s per ${BYTES / 1048576} MiB (goal ≤ ${lim} s: ${goal(Number.isFinite(cpu) ? cpu <= lim : undefined)})`)
}
for (const [file, what] of [['lat', 'spawn→exit `true`'], ['echo', '1 KiB write+read']]) {
  const p = load(`${file}_proto.json`), j = load(`${file}_json.json`)
  ok = ok && p.length > 0 && j.length > 0
  const mp = med(p.map((x) => x.median_ms)), mj = med(j.map((x) => x.median_ms)), r = mp / mj
  console.log(`${what.padEnd(19)} proto ${f(mp)} ms, json ${f(mj)} ms: ${f(r)}× (goal ≤ 1.05×: ${goal(Number.isFinite(r) ? r <= 1.05 : undefined)})`)
}
process.exit(ok ? 0 : 1)
JS
exit $rc
