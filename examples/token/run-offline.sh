#!/usr/bin/env bash
# examples/token offline (root): the stand-in world of spec/support/networld.py (allowed.test
# with HTTP and HTTPS, in a network namespace of its own: nothing leaves this machine), a sandboxd
# that resolves names there and trusts its CA, and the composition with a token from this shell.
#   examples/token/run-offline.sh        (after `make`; needs root for the namespaces)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${BUILD_DIR:-$ROOT/build}
WORK=$(mktemp -d /tmp/moonbox-token.XXXXXX)
WORLD_PID= SBXD_PID=
cleanup() {
  [ -n "$SBXD_PID" ] && kill "$SBXD_PID" 2>/dev/null && wait "$SBXD_PID" 2>/dev/null
  [ -n "$WORLD_PID" ] && kill "$WORLD_PID" 2>/dev/null && wait "$WORLD_PID" 2>/dev/null
  rm -rf "$WORK"
}
trap cleanup EXIT
python3 "$ROOT/spec/support/networld.py" "$WORK/world" --until-signal >"$WORK/world.json" &
WORLD_PID=$!
for _ in $(seq 300); do [ -s "$WORK/world.json" ] && break; sleep 0.1; done
read -r DNS CA < <(python3 -c 'import json,sys; w=json.load(open(sys.argv[1])); print(w["dns"], w["ca"])' "$WORK/world.json")
KEY=e2b_$(openssl rand -hex 20)
"$BUILD/bin/sandboxd" --listen 127.0.0.1:0 --api-key-fd 3 --state-dir "$WORK/state" --dns "$DNS" --egress-ca "$CA" \
  >"$WORK/sandboxd.out" 2>"$WORK/sandboxd.err" 3<<<"$KEY" &
SBXD_PID=$!
for _ in $(seq 200); do grep -q 'listening on' "$WORK/sandboxd.out" 2>/dev/null && break; sleep 0.1; done
URL=$(sed -n 's/^sandboxd listening on \(http:\/\/[0-9.:]*\)$/\1/p' "$WORK/sandboxd.out")
export E2B_API_URL=$URL E2B_SANDBOX_URL=$URL E2B_API_KEY=$KEY
DEMO_TOKEN=${DEMO_TOKEN:-tok-$(openssl rand -hex 12)} "$BUILD/bin/moonbox" run "$ROOT/examples/token/compose.lua" "$ROOT/examples/token/token.lua"
