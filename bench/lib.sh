# bench/lib.sh — sourced by the bench scripts that run a private sandboxd, after `set -euo
# pipefail` and with ROOT and BUILD_DIR set. Sourcing installs the traps that stop that sandboxd
# and remove the scratch directory WORK on exit.
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

# bench_build NAME [CMAKE_BUILD_ARGS...]: makes WORK ($BUILD_DIR/bench/NAME-run.XXXXXX), configures
# BUILD_DIR if it has no cache yet and builds it (with the extra args, e.g. --target T); exits
# with the build log on failure. Scratch (state dir, log) lives under the build directory: same
# file system as a real state dir, and out of shared /tmp, where other runs may sweep.
bench_build() {
  local name=$1; shift
  echo "== build ($BUILD_DIR)"
  mkdir -p "$BUILD_DIR/bench"
  WORK=$(mktemp -d "$BUILD_DIR/bench/$name-run.XXXXXX")
  if [ ! -f "$BUILD_DIR/CMakeCache.txt" ]; then cmake -S "$ROOT" -B "$BUILD_DIR" >/dev/null; fi
  cmake --build "$BUILD_DIR" "$@" -j2 >"$WORK/build.log" 2>&1 || { cat "$WORK/build.log"; exit 1; }
}

# Exits unless the official e2b SDK is installed.
bench_need_sdk() {
  [ -d "$ROOT/spec/sdk/node_modules/e2b" ] || { echo "e2b SDK missing: (cd spec/sdk && npm ci)" >&2; exit 1; }
}

# sbxd_start KEY: starts $BUILD_DIR/bin/sandboxd on 127.0.0.1 (port 0 = a free port) with API key
# KEY, state dir STATE=$WORK/state and log LOGF=$WORK/sandboxd.log (variables put before the call,
# VAR=x sbxd_start KEY, reach it as environment); sets SBXD_PID and URL; exits with the log when
# it does not come up.
sbxd_start() {
  echo "== start sandboxd"
  STATE=$WORK/state LOGF=$WORK/sandboxd.log
  "$BUILD_DIR/bin/sandboxd" --listen 127.0.0.1:0 --api-key-fd 3 --state-dir "$STATE" --exit-with-parent >"$LOGF" 2>&1 3<<<"$1" &
  SBXD_PID=$!
  URL=
  for _ in $(seq 1 300); do
    URL=$(sed -n 's/^sandboxd listening on \(http:[^ ]*\).*/\1/p' "$LOGF")
    [ -n "$URL" ] && break
    kill -0 "$SBXD_PID" 2>/dev/null || break
    sleep 0.05
  done
  [ -n "$URL" ] || { echo "sandboxd did not start:" >&2; cat "$LOGF" >&2; exit 1; }
}

# sbxd_stop: SIGTERM, waits; sets rc=1 unless sandboxd exited 0.
sbxd_stop() {
  echo "== stop sandboxd"
  kill -TERM "$SBXD_PID"
  local st=0
  wait "$SBXD_PID" || st=$?
  SBXD_PID=
  [ "$st" -eq 0 ] || { echo "sandboxd exited with status $st" >&2; rc=1; }
}

# sbxd_check_left: sets rc=1 when sandbox directories are left in STATE.
sbxd_check_left() {
  local left
  left=$(find "$STATE/sandboxes" -mindepth 1 -maxdepth 1 2>/dev/null | wc -l)
  [ "$left" -eq 0 ] || { echo "$left sandbox directories left behind" >&2; rc=1; }
}
