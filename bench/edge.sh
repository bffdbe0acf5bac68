#!/usr/bin/env bash
# Edge mode vs plain HTTP (issue 11), on one sandboxd serving both: spawn→exit of `true` and a
# 1 KiB write+read through moonbox, configured for the plain listener (E2B_API_URL /
# E2B_SANDBOX_URL = http://) or for the TLS edge (E2B_DOMAIN + MOONBOX_CA_FILE + MOONBOX_CONNECT_TO,
# https://49983-<id>.<domain>), with a CA made here. BENCH_ROUNDS rounds (default 5) × BENCH_N
# timed runs (30) after a warm-up, alternating which side goes first; the ratio is the median of
# the edge's round medians over the plain side's. Goal ≤ 1.3× once the connection is warm.
# Connection reuse, from both ends: the connections each moonbox process opened during its timed
# runs (mb.http.stats, goal 0), and sandboxd's own count per listener (connections accepted;
# on TLS each is one full handshake) against the requests it served.
# Ratios, not timings: exit status non-zero only when an operation fails.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD_DIR=${BUILD_DIR:-$ROOT/build}
case $BUILD_DIR in /*) ;; *) BUILD_DIR=$ROOT/$BUILD_DIR ;; esac
. "$ROOT/bench/lib.sh"
ROUNDS=${BENCH_ROUNDS:-5} N=${BENCH_N:-30}
DOMAIN=bench.moonbox.test

bench_build edge
KEY="e2b_$(printf '%040d' 0)"
echo "== a CA and the edge's certificate (openssl)"
openssl req -x509 -newkey rsa:2048 -nodes -subj /CN=bench-ca -days 2 -keyout "$WORK/ca.key" -out "$WORK/ca.pem" 2>/dev/null
printf 'subjectAltName=DNS:*.%s,DNS:%s\n' "$DOMAIN" "$DOMAIN" >"$WORK/edge.ext"
openssl req -newkey rsa:2048 -nodes -subj /CN=edge -keyout "$WORK/edge.key" -out "$WORK/edge.csr" 2>/dev/null
openssl x509 -req -in "$WORK/edge.csr" -CA "$WORK/ca.pem" -CAkey "$WORK/ca.key" -CAcreateserial -days 1 \
  -extfile "$WORK/edge.ext" -out "$WORK/edge.pem" 2>/dev/null

echo "== start sandboxd (plain HTTP and TLS, --domain $DOMAIN)"
STATE=$WORK/state LOGF=$WORK/sandboxd.log
"$BUILD_DIR/bin/sandboxd" --listen 127.0.0.1:0 --tls-listen 127.0.0.1:0 --tls-cert "$WORK/edge.pem" --tls-key "$WORK/edge.key" \
  --domain "$DOMAIN" --api-key-fd 3 --state-dir "$STATE" --exit-with-parent >"$LOGF" 2>&1 3<<<"$KEY" &
SBXD_PID=$!
URL= TLS=
for _ in $(seq 1 300); do
  URL=$(sed -n 's/^sandboxd listening on \(http:[^ ]*\)$/\1/p' "$LOGF")
  TLS=$(sed -n 's/^sandboxd listening on https:\/\/\([^ ]*\)$/\1/p' "$LOGF")
  [ -n "$URL" ] && [ -n "$TLS" ] && break
  kill -0 "$SBXD_PID" 2>/dev/null || break
  sleep 0.05
done
[ -n "$URL" ] && [ -n "$TLS" ] || { echo "sandboxd did not start:" >&2; cat "$LOGF" >&2; exit 1; }

rc=0
run_side() { # plain|edge → the RESULT line of one moonbox process
  local out
  if [ "$1" = plain ]; then
    out=$(env -u E2B_DOMAIN -u MOONBOX_CA_FILE -u MOONBOX_CONNECT_TO E2B_API_URL="$URL" E2B_SANDBOX_URL="$URL" \
      E2B_API_KEY="$KEY" MB_BUILD_DIR="$BUILD_DIR" "$BUILD_DIR/bin/moonbox" run "$ROOT/bench/providers_compose.lua" \
      "$ROOT/bench/edge_ops.lua" "$N" 2>&1) || { echo "$out" >&2; return 1; }
  else
    out=$(env -u E2B_API_URL -u E2B_SANDBOX_URL E2B_DOMAIN="$DOMAIN" MOONBOX_CA_FILE="$WORK/ca.pem" \
      MOONBOX_CONNECT_TO="::${TLS}" E2B_API_KEY="$KEY" MB_BUILD_DIR="$BUILD_DIR" "$BUILD_DIR/bin/moonbox" run \
      "$ROOT/bench/providers_compose.lua" "$ROOT/bench/edge_ops.lua" "$N" 2>&1) || { echo "$out" >&2; return 1; }
  fi
  sed -n 's/^RESULT //p' <<<"$out" | tail -1
}
: >"$WORK/results"
echo "== $ROUNDS rounds × $N runs each, alternating"
for r in $(seq 1 "$ROUNDS"); do
  if [ $((r % 2)) -eq 1 ]; then order="plain edge"; else order="edge plain"; fi
  for side in $order; do
    res=$(run_side "$side") || { rc=1; continue; }
    echo "$side $res" >>"$WORK/results"
    echo "  round $r $side: $res"
  done
done
sbxd_stop
sbxd_check_left

python3 - "$WORK/results" "$LOGF" <<'EOF'
import json, re, statistics, sys
rows = [l.split(" ", 1) for l in open(sys.argv[1]) if l.strip()]
log = open(sys.argv[2]).read()
by = {"plain": [], "edge": []}
for side, js in rows:
    by[side].append(json.loads(js))
print("== edge (TLS, per-sandbox hosts) vs plain HTTP, same sandboxd")
if not by["plain"] or not by["edge"]:
    print("  no results"); sys.exit(1)
for op, label in (("spawn", "spawn→exit `true`"), ("write_read", "1 KiB write+read")):
    p = statistics.median(r[op]["median_ms"] for r in by["plain"])
    e = statistics.median(r[op]["median_ms"] for r in by["edge"])
    ratio = e / p
    conn = {s: sum(r[op]["connects"] for r in by[s]) for s in by}
    req = {s: by[s][0][op]["requests"] for s in by}
    print(f"  {label}: plain {p:.2f} ms, edge {e:.2f} ms: {ratio:.2f}x (goal <= 1.3x{'' if ratio <= 1.3 else ': over goal'}); "
          f"{req['edge']:g} request(s) per operation; connections opened while timed: plain {conn['plain']}, edge {conn['edge']}")
for scheme in ("http", "https"):
    m = re.search(rf"^sandboxd: {scheme}://\S+ served (\d+) requests on (\d+) connections$", log, re.M)
    if m:
        q, c = int(m.group(1)), int(m.group(2))
        print(f"  sandboxd {scheme}: {q} requests on {c} connections ({q / max(c, 1):.0f} per connection"
              + ("; each TLS connection is one handshake" if scheme == "https" else "") + ")")
EOF
exit $rc
