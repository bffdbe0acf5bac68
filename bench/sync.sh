#!/usr/bin/env bash
# Workspace-sync benchmarks (issue 13, "Benchmarks"): a push of a generated 10,000-file, ~100 MB
# tree against the floor measured in the same run (GNU tar of the tree to /dev/null + one upload
# of a file of the archive's size), with its request count; a pull after 10 files changed, with
# its request count, against the sandbox's own sha256sum of the tree. Ratios only; a missed goal
# is reported, not failed. Starts its own sandboxd (state dir: BENCH_STATE_DIR, default under the
# build directory) and stops it at the end.
#
#   bench/sync.sh
#   BENCH_ROUNDS=5 BENCH_FILES=10000 BENCH_FILE_BYTES=10000 BENCH_STATE_DIR=/dev/shm/sbxd bench/sync.sh
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD_DIR=${BUILD_DIR:-$ROOT/build}
case $BUILD_DIR in /*) ;; *) BUILD_DIR=$ROOT/$BUILD_DIR ;; esac
ROUNDS=${BENCH_ROUNDS:-3} FILES=${BENCH_FILES:-10000} FILE_BYTES=${BENCH_FILE_BYTES:-10000}
. "$ROOT/bench/lib.sh"

bench_build sync
KEY="e2b_$(printf '%040d' 0)"
if [ -n "${BENCH_STATE_DIR:-}" ]; then
  mkdir -p "$BENCH_STATE_DIR"
  STATE_OVERRIDE=$(mktemp -d "$BENCH_STATE_DIR/state.XXXXXX")
fi
sbxd_start "$KEY"
if [ -n "${STATE_OVERRIDE:-}" ]; then   # restart it on the chosen file system
  kill -TERM "$SBXD_PID"; wait "$SBXD_PID" || true
  "$BUILD_DIR/bin/sandboxd" --listen 127.0.0.1:0 --api-key-fd 3 --state-dir "$STATE_OVERRIDE" --exit-with-parent >"$LOGF" 2>&1 3<<<"$KEY" &
  SBXD_PID=$! STATE=$STATE_OVERRIDE URL=
  for _ in $(seq 1 300); do URL=$(sed -n 's/^sandboxd listening on \(http:[^ ]*\).*/\1/p' "$LOGF"); [ -n "$URL" ] && break; sleep 0.05; done
fi
export E2B_API_URL=$URL E2B_SANDBOX_URL=$URL E2B_API_KEY=$KEY
export MB_BUILD_DIR=$BUILD_DIR MB_BENCH_STATE=$WORK/records MB_BENCH_WORK=$WORK
echo "== sandboxd state on: $(df --output=fstype,target "$STATE" | tail -1)"

echo "== generate the tree: $FILES files × $FILE_BYTES bytes (random), 100 per directory"
python3 - "$WORK/tree" "$FILES" "$FILE_BYTES" <<'PY'
import os, sys
root, files, size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
for i in range(files):
    d = os.path.join(root, "d%03d" % (i // 100))
    if i % 100 == 0: os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "f%03d.bin" % (i % 100)), "wb") as fh: fh.write(os.urandom(size))
PY

rc=0
"$BUILD_DIR/bin/moonbox" run "$ROOT/bench/sync_compose.lua" "$ROOT/bench/sync_ops.lua" "$WORK/tree" "$ROUNDS" | tee "$WORK/out.log" || rc=1
sbxd_stop
sbxd_check_left

echo "== summary"
python3 - "$WORK/out.log" "$FILES" "$FILE_BYTES" <<'PY' || rc=1
import json, statistics, sys
line = [l for l in open(sys.argv[1]) if l.startswith("RESULT ")][-1]
r = json.loads(line[7:])
med = statistics.median
# ratios per round (each push next to its own floor), then their median
vs_floor = med([p / f for p, f in zip(r["push"], r["floor"])])
vs_extract = med([p / (f + x) for p, f, x in zip(r["push"], r["floor"], r["extract"])])
vs_hash = med([p / h for p, h in zip(r["pull"], r["hash"])])
files, size = int(sys.argv[2]), int(sys.argv[3])
print("push of %d files, %.1f MiB (archive %.1f MiB): median %.0f ms, %d requests (goal <= 3)" % (
    files, files * size / 1048576, r["archive_bytes"] / 1048576, med(r["push"]), max(r["push_requests"])))
print("  vs the floor (GNU tar to /dev/null, median %.0f ms, + one upload of the archive's size, %.0f ms): %.2fx (goal <= 1.5x)%s" % (
    med(r["tar"]), med(r["upload"]), vs_floor, "" if vs_floor <= 1.5 else "  over goal"))
print("  vs the floor + the sandbox's own tar -x of that archive (median %.0f ms): %.2fx" % (med(r["extract"]), vs_extract))
print("pull after 10 changed files: median %.0f ms, %d requests (goal <= 3); vs the sandbox's own sha256sum of the tree (%.0f ms): %.2fx" % (
    med(r["pull"]), max(r["pull_requests"]), med(r["hash"]), vs_hash))
print("request goals: %s" % ("met" if max(r["push_requests"]) <= 3 and max(r["pull_requests"]) <= 3 else "NOT met"))
PY
exit $rc
