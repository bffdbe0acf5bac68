#!/usr/bin/env bash
# The test command (README, .ci/run): builds, runs every suite, prints one line
# "N passed, N failed" summing them all. Exit status is non-zero when anything failed.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
JOBS=${JOBS:-2}
LOG=$ROOT/build/test-logs
mkdir -p "$LOG"
passed=0; failed=0; skipped=0
# The user's own E2B endpoint, if any: #cloud specs run against it (the sandboxd below replaces
# E2B_* for every other suite).
CLOUD_KEY=${E2B_API_KEY:-}; CLOUD_URL=${E2B_API_URL:-}
T0=$SECONDS
# busted under Lua 5.4 whatever `lua` is (luarocks pulls lua5.1 in and takes the alternative)
BUSTED=(lua5.4 "$(command -v busted || echo /usr/bin/busted)")
note() { printf '== %s\n' "$*"; }
add()  { passed=$((passed + $1)); failed=$((failed + $2)); note "$3: $1 passed, $2 failed ($((SECONDS - T0)) s so far)"; }

build() { # dir, target ("all" for everything), extra cmake args...
  local dir=$1 target=$2; shift 2
  cmake -S . -B "$dir" "$@" >"$LOG/cmake-$(basename "$dir").log" 2>&1 &&
    cmake --build "$dir" -j"$JOBS" --target "$target" >"$LOG/build-$(basename "$dir").log" 2>&1
}

run_ctest() { # dir, label
  local out; out=$(cd "$1" && ctest --output-on-failure -j"$JOBS" 2>&1); echo "$out" >"$LOG/ctest-$2.log"
  local total fail
  total=$(sed -n 's/.*tests failed out of \([0-9]*\).*/\1/p' <<<"$out" | tail -1)
  fail=$(sed -n 's/.* \([0-9]*\) tests failed out of.*/\1/p' <<<"$out" | tail -1)
  if [ -z "$total" ]; then total=0; fail=0; grep -q 'No tests were found' <<<"$out" || fail=1; fi
  [ "$fail" -gt 0 ] && grep -E 'Failed|\*\*\*' <<<"$out" | head -20
  add $((total - fail)) "$fail" "C unit tests ($2)"
}

note "build"
if ! build build all; then tail -40 "$LOG/build-build.log"; echo "0 passed, 1 failed"; exit 1; fi
run_ctest build release

# The installed tree, as a user gets it: cmake --install to a temporary prefix; the embedding
# example built against it through pkg-config (shared and static) and run with a clean
# environment (it starts the prefix's own sandboxd); a stock lua5.4 and the installed moonbox
# with only the prefix's standard paths; luarocks make from a copy of the checkout; the
# committed protobuf-c code matches proto/.
install_suite() {
  local T P ip=0 ifl=0 pc
  T=$(mktemp -d /tmp/moonbox-install.XXXXXX); P=$T/prefix
  check() { # name, command...
    local name=$1; shift
    if "$@" >"$LOG/install-$name.log" 2>&1; then ip=$((ip + 1))
    else ifl=$((ifl + 1)); echo "install check failed: $name (log: $LOG/install-$name.log)"; tail -15 "$LOG/install-$name.log"; fi
  }
  clean() { env -i PATH=/usr/local/bin:/usr/bin:/bin HOME="$T" "$@"; }
  embed_ok() { # the example's output: the timer fed the waiting command, nothing was left, no error said
    "$@" >"$T/embed.out" 2>"$T/embed.err"; local rc=$?; cat "$T/embed.out" "$T/embed.err"
    [ "$rc" -eq 0 ] && [ ! -s "$T/embed.err" ] && grep -qx 'sandbox: got hello from tick 3' "$T/embed.out" &&
      grep -qx "embed: command exited 0; the program's timer ticked 3 times while it waited" "$T/embed.out" &&
      grep -qx 'embed: loop closed cleanly (no handle of moonbox left)' "$T/embed.out"
  }
  lua_ok() { # stock lua5.4, only the prefix's Lua 5.4 paths
    clean LUA_PATH="$1/?.lua;$1/?/init.lua;;" LUA_CPATH="$2/?.so;;" TREE="$1" lua5.4 -e '
      local mb = require "moonbox"
      assert(mb.core.version and mb.run(function() return mb.sleep(0) end))
      assert(require("moonbox.policies.env").drop_prefixes, "moonbox.policies.env")
      local f = require("moonbox.policies").default_file("env")
      local tree = os.getenv("TREE")
      assert(f:sub(1, #tree) == tree, "shipped policies from the prefix: " .. f)
      print("lua5.4: require moonbox: ok, shipped policies from " .. f)'
  }
  # The installed libraries define no global name outside the embedding API's mb_ prefix but
  # these deliberate ones: the Lua entry point (moonbox.h) and libmoonbox.so's version node
  # (core/libmoonbox.map). An embedder's own symbols (its envd protos, say) cannot clash.
  local exports_extra="luaopen_moonbox_core MOONBOX_0"
  exports_prefixed() { # library...: lists every defined global that is neither mb_* nor extra
    local lib syms bad rc=0
    for lib in "$@"; do
      [ -f "$lib" ] || { echo "$lib: missing"; rc=1; continue; }
      # (the static symbol table, and the dynamic one of a shared library, stripped or not)
      syms=$( { nm -g --defined-only "$lib" 2>/dev/null; case $lib in *.so*) nm -D --defined-only "$lib";; esac; } |
        awk 'NF >= 3 { n = $3; sub(/@.*/, "", n); print n }' | sort -u)
      grep -qx mb_version <<<"$syms" || { echo "$lib: mb_version is not defined (nm failed?)"; rc=1; continue; }
      bad=$(awk -v extra=" $exports_extra " '!/^mb_/ && index(extra, " " $0 " ") == 0' <<<"$syms")
      if [ -n "$bad" ]; then
        echo "$lib: $(wc -l <<<"$bad") defined global(s) neither mb_* nor one of: $exports_extra"; echo "$bad"; rc=1
      else echo "$lib: $(wc -l <<<"$syms") defined globals, all mb_* or one of: $exports_extra"; fi
    done
    return "$rc"
  }
  # core/gen is committed: regenerating it from proto/ must give the same files
  check proto-generated sh -c "scripts/gen-proto.sh $T/gen && diff -r core/gen $T/gen"
  check cmake-install cmake --install build --prefix "$P"
  pc=$P/lib/pkgconfig
  check exports-prefixed exports_prefixed "$P/lib/libmoonbox.a" "$P/lib/libmoonbox.so"
  mkdir -p "$T/embed" && cp examples/embed/embed.c examples/embed/Makefile "$T/embed/"
  check embed-build clean PKG_CONFIG_PATH="$pc" make -s -C "$T/embed"
  check embed-run embed_ok clean "$T/embed/embed" "$ROOT/examples/embed"
  # moonbox.h on its own, as the first and only include, in strict C11 and in C++
  printf '#include <moonbox.h>\nint main(void) { return mb_version() == 0; }\n' >"$T/alone.c"
  check header-alone clean sh -c "cc -std=c11 -Wall -Wextra -Werror -pedantic -I$P/include -c -o $T/alone.o $T/alone.c && c++ -x c++ -std=c++11 -Wall -Wextra -Werror -I$P/include -c -o $T/alone-cxx.o $T/alone.c"
  check embed-static-build clean sh -c "cc -std=c11 -D_POSIX_C_SOURCE=200809L -Wall -Wextra -Werror \$(PKG_CONFIG_PATH=$pc pkg-config --cflags moonbox) -DEMBED_LUA_DIR=\\\"\$(PKG_CONFIG_PATH=$pc pkg-config --variable=lmoddir moonbox)\\\" -o $T/embed/embed-static $T/embed/embed.c $P/lib/libmoonbox.a \$(PKG_CONFIG_PATH=$pc pkg-config --libs lua5.4 libuv libcurl libcrypto jansson libprotobuf-c libarchive) -ldl -lm"
  check embed-static-run embed_ok clean "$T/embed/embed-static" "$ROOT/examples/embed"
  check lua-require lua_ok "$P/share/lua/5.4" "$P/lib/lua/5.4"
  check moonbox-installed clean sh -c "$P/bin/moonbox --help | grep -qF 'Lua modules: $P/bin/../share/lua/5.4' && $P/bin/moonbox policy env --from-host >/dev/null && $P/bin/moonbox dump-config $ROOT/examples/demo/compose.lua | grep -qF '$P/share/lua/5.4/moonbox/policies/env.lua'"
  check sandboxd-version clean sh -c "$P/bin/sandboxd --version | grep -qx \"sandboxd \$(sed -n 's/^#define MOONBOX_VERSION \"\\(.*\\)\"/\\1/p' $P/include/moonbox.h) (moonbox)\""
  # the rock builds the whole project with its CMake (programs included) from a copy of the tree
  mkdir -p "$T/src" && tar --exclude='./build*' --exclude=./.git --exclude=node_modules -cf - . | tar -xf - -C "$T/src"
  check luarocks-make sh -c "cd $T/src && CMAKE_BUILD_PARALLEL_LEVEL=$JOBS luarocks --lua-version=5.4 make --tree=$T/rocks --deps-mode=none moonbox-dev-1.rockspec"
  check luarocks-require lua_ok "$T/rocks/share/lua/5.4" "$T/rocks/lib/lua/5.4"
  # the demo from the rock alone: its moonbox finds its Lua tree, sandboxd and mbwrap (the copy's
  # sources moved away so that nothing can come from them)
  mv "$T/src" "$T/src.away"
  check luarocks-demo clean sh -c "cd $ROOT/examples/demo && $T/rocks/bin/moonbox run compose.lua demo.lua | grep -q 'after disposal: local sandboxd running: false'"
  rm -rf "$T"
  add "$ip" "$ifl" "installed tree (cmake --install, pkg-config, embedding example, lua5.4, luarocks)"
}
note "install to a temporary prefix, embed, require"
install_suite

note "sanitizer build (ASan + UBSan)"
if build build-asan all -DMB_SANITIZE=ON -DCMAKE_BUILD_TYPE=Debug; then
  run_ctest build-asan asan
else tail -40 "$LOG/build-build-asan.log"; add 0 1 "sanitizer build"; fi

# The binding specs that need no sandboxd, against the ASan+UBSan core.so: no leak, no UB
# from Lua's side either (stock lua5.4 is not instrumented, so the runtime is preloaded).
ASAN_RT=$(gcc -print-file-name=libasan.so); UBSAN_RT=$(gcc -print-file-name=libubsan.so)
if [ -f build-asan/lib/moonbox/core.so ] && [ -f "$ASAN_RT" ]; then
  note "busted binding specs under ASan + UBSan"
  out=$(LD_PRELOAD="$ASAN_RT $UBSAN_RT" ASAN_OPTIONS=detect_leaks=1:halt_on_error=1 \
    UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 MB_BUILD_DIR=$ROOT/build-asan \
    LUA_PATH="$ROOT/lua/?.lua;$ROOT/lua/?/init.lua;$ROOT/spec/?.lua;;" \
    LUA_CPATH="$ROOT/build-asan/lib/?.so;;" \
    timeout -k 10 600 "${BUSTED[@]}" -o TAP spec/codec_spec.lua spec/scheduler_spec.lua spec/http_spec.lua spec/egress_spec.lua 2>&1)
  rc=$?; echo "$out" >"$LOG/busted-asan.log"
  p=$(grep -c '^ok ' <<<"$out"); f=$(grep -c '^not ok ' <<<"$out")
  if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then f=1; tail -30 <<<"$out"; fi
  add "$p" "$f" "busted under ASan"
fi

# One sandboxd for the suites that need it; specs that kill or restart it start their own.
SBXD_PORT=${SBXD_PORT:-$(python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])')}
SBXD_STATE=$(mktemp -d /tmp/moonbox-test-state.XXXXXX)
SBXD_PID=
if [ -x build/bin/sandboxd ]; then
  note "starting sandboxd on 127.0.0.1:$SBXD_PORT"
  # (the previous run's log must not answer for this one: the redirection happens in the child)
  rm -f "$LOG/sandboxd.log"
  build/bin/sandboxd --listen "127.0.0.1:$SBXD_PORT" --api-key-fd 3 \
    --state-dir "$SBXD_STATE" --exit-with-parent >"$LOG/sandboxd.log" 2>&1 3<<<"e2b_$(printf '%040d' 0)" &
  SBXD_PID=$!
  for _ in $(seq 1 300); do
    grep -qs "sandboxd listening on http://127.0.0.1:$SBXD_PORT" "$LOG/sandboxd.log" && break
    kill -0 "$SBXD_PID" 2>/dev/null || { echo "sandboxd exited at start:"; cat "$LOG/sandboxd.log"; break; }
    sleep 0.1
  done
  export E2B_API_URL="http://127.0.0.1:$SBXD_PORT" E2B_SANDBOX_URL="http://127.0.0.1:$SBXD_PORT"
  export E2B_API_KEY="e2b_$(printf '%040d' 0)" MB_SANDBOXD_PID=$SBXD_PID
fi
cleanup() { [ -n "$SBXD_PID" ] && kill "$SBXD_PID" 2>/dev/null && wait "$SBXD_PID" 2>/dev/null; rm -rf "$SBXD_STATE"; }
trap cleanup EXIT

note "busted specs"
export MB_BUILD_DIR=$ROOT/build
export LUA_PATH="$ROOT/lua/?.lua;$ROOT/lua/?/init.lua;$ROOT/spec/?.lua;;"
export LUA_CPATH="$ROOT/build/lib/?.so;;"
tags=()
[ -z "$SBXD_PID" ] && tags=(--exclude-tags=sandboxd)
tags+=(--exclude-tags=cloud)
busted_counts() { # TAP text → sets p, f, s (pending specs print "ok N # SKIP" and count as skipped)
  s=$(grep -cE '^ok .*# (SKIP|skip|pending)' <<<"$1"); p=$(( $(grep -c '^ok ' <<<"$1") - s )); f=$(grep -c '^not ok ' <<<"$1")
  skipped=$((skipped + s))
}
if ls spec/*_spec.lua spec/**/*_spec.lua >/dev/null 2>&1; then
  # Twice over in one Lua state: a long-lived harness's state (tasks, pools, streams,
  # sandboxes) must not turn the second pass into failures or hangs (the soak goes longer).
  note "busted: the whole suite but the matrix, ${BUSTED_REPEAT:-2} times in one Lua state"
  out=$(timeout -k 10 2400 "${BUSTED[@]}" -o TAP --repeat="${BUSTED_REPEAT:-2}" "${tags[@]}" spec/*_spec.lua 2>&1)
  echo "$out" >"$LOG/busted.log"
  busted_counts "$out"
  [ "$f" -gt 0 ] && grep -A8 '^not ok ' <<<"$out" | head -80
  if ! grep -qE '^1\.\.[0-9]+' <<<"$out"; then echo "$out" | tail -20; f=$((f + 1)); fi
  add "$p" "$f" "busted"
fi
# moonbox against sandboxd in edge mode (TLS, routing by Host, a CA made by the spec), configured
# as for E2B's cloud: once (the spec starts its own sandboxd; the SDK's edge suite is
# spec/sdk/edge.test.mjs, the proxy's wire checks tests/sandboxd/edge.test.mjs).
if [ -d spec/edge ] && [ -n "$SBXD_PID" ]; then
  note "busted: moonbox on an E2B edge (spec/edge)"
  out=$(timeout -k 10 300 "${BUSTED[@]}" -o TAP spec/edge 2>&1); echo "$out" >"$LOG/busted-edge.log"
  busted_counts "$out"
  [ "$f" -gt 0 ] && grep -A8 '^not ok ' <<<"$out" | head -40
  if ! grep -qE '^1\.\.[0-9]+' <<<"$out"; then echo "$out" | tail -20; f=$((f + 1)); fi
  add "$p" "$f" "busted edge (moonbox on sandboxd --domain, TLS)"
fi
# The matrix: the seam contract suite, the consumer suite and workspace sync, the same files,
# × {host providers, E2B providers on sandboxd}. The host cell runs as an unprivileged user (as root no permission
# is ever denied, and the permission cases would be vacuous), from a copy it can read.
matrix_cell() { # family, label, command prefix...
  local fam=$1 label=$2; shift 2
  note "matrix: seam + consumers + sync on the $label"
  out=$(MOONBOX_SEAM_PROVIDER=$fam timeout -k 10 1200 "$@" "${BUSTED[@]}" -o TAP --repeat="${MATRIX_REPEAT:-2}" \
    spec/seam spec/consumers spec/sync 2>&1); echo "$out" >"$LOG/matrix-$fam.log"
  busted_counts "$out"
  [ "$f" -gt 0 ] && grep -A8 '^not ok ' <<<"$out" | head -60
  if ! grep -qE '^1\.\.[0-9]+' <<<"$out"; then echo "$out" | tail -20; f=$((f + 1)); fi
  add "$p" "$f" "matrix cell $label ($s E2B-only specs skipped)"
}
[ -n "$SBXD_PID" ] && MOONBOX_ENVD_CODEC=proto matrix_cell e2b "E2B providers (sandboxd, binary Connect)"
# envd's other codec: the process and filesystem contracts once more with the E2B providers
# speaking Connect's JSON codec to the same sandboxd (it serves both; proto is the default).
if [ -n "$SBXD_PID" ]; then
  note "seam contract on the E2B providers in envd's JSON codec"
  out=$(MOONBOX_SEAM_PROVIDER=e2b MOONBOX_ENVD_CODEC=json timeout -k 10 900 "${BUSTED[@]}" -o TAP spec/seam 2>&1)
  echo "$out" >"$LOG/matrix-e2b-json.log"
  busted_counts "$out"
  [ "$f" -gt 0 ] && grep -A8 '^not ok ' <<<"$out" | head -60
  if ! grep -qE '^1\.\.[0-9]+' <<<"$out"; then echo "$out" | tail -20; f=$((f + 1)); fi
  add "$p" "$f" "seam on E2B providers, JSON codec ($s skipped)"
fi
if [ "$(id -u)" -eq 0 ]; then
  id nobody >/dev/null 2>&1 || useradd -r -M -s /usr/sbin/nologin nobody
  STAGE=$(mktemp -d /tmp/moonbox-matrix.XXXXXX)
  mkdir -p "$STAGE/build" && cp -r lua policies "$STAGE/" && cp -r build/lib build/bin "$STAGE/build/" &&
    mkdir "$STAGE/spec" && cp -r spec/seam spec/consumers spec/sync spec/support "$STAGE/spec/" && chmod -R a+rX "$STAGE"
  (cd "$STAGE" && matrix_cell local "host providers (as nobody)" runuser -u nobody -- env HOME=/tmp \
    MB_BUILD_DIR="$STAGE/build" LUA_PATH="$STAGE/lua/?.lua;$STAGE/lua/?/init.lua;$STAGE/spec/?.lua;;" \
    LUA_CPATH="$STAGE/build/lib/?.so;;"; echo "$passed $failed $skipped" >"$STAGE/counts")
  read -r passed failed skipped <"$STAGE/counts"; rm -rf "$STAGE"
else
  matrix_cell local "host providers (as $(id -un))" env
fi

# The world example on both compositions: the same transcript apart from the timings.
if [ -n "$SBXD_PID" ]; then
  note "examples/world on the host and in the sandbox"
  wp=0; wf=0
  for c in host sandbox; do
    if timeout -k 10 300 build/bin/moonbox run "examples/world/compose-$c.lua" examples/world/world.lua \
      >"$LOG/world-$c.log" 2>&1; then wp=$((wp + 1)); else wf=$((wf + 1)); tail -20 "$LOG/world-$c.log"; fi
  done
  if diff <(sed 's/^\[ *[0-9.]* ms\] //' "$LOG/world-host.log") <(sed 's/^\[ *[0-9.]* ms\] //' "$LOG/world-sandbox.log"); then
    wp=$((wp + 1)); else wf=$((wf + 1)); fi
  add "$wp" "$wf" "world example (host run, sandbox run, same transcript)"
fi

# The token example offline (root: its stand-in world is a network namespace): the header arrives
# at the host with the rule over HTTPS and HTTP, a forged one is replaced, the token is nowhere inside.
if [ "$(id -u)" = 0 ]; then
  note "examples/token offline (a host token the sandbox never sees)"
  if timeout -k 10 300 examples/token/run-offline.sh >"$LOG/token.log" 2>&1 \
     && [ "$(grep -c '^header Authorization match$' "$LOG/token.log")" = 3 ] && grep -q '^found in 0 places$' "$LOG/token.log" \
     && grep -q 'Could not resolve host: other.test' "$LOG/token.log"; then
    add 1 0 "token example"
  else
    tail -20 "$LOG/token.log"; add 0 1 "token example"
  fi
fi

# The soak, short: 1,000 mixed operations in one Lua state (`make soak` runs 10,000).
if [ -n "$SBXD_PID" ]; then
  note "soak (1,000 operations, one Lua state)"
  out=$(timeout -k 10 600 build/bin/moonbox run examples/demo/compose.lua tests/soak/soak.lua 1000 2>&1); echo "$out" >"$LOG/soak.log"
  p=$(sed -n 's/^soak: \([0-9]*\) passed, \([0-9]*\) failed$/\1/p' <<<"$out" | tail -1)
  f=$(sed -n 's/^soak: \([0-9]*\) passed, \([0-9]*\) failed$/\2/p' <<<"$out" | tail -1)
  grep -E '^soak: [0-9]+ operations' <<<"$out"
  [ "${f:-1}" != 0 ] && tail -30 <<<"$out"
  add "${p:-0}" "${f:-1}" "soak"
fi
if [ -n "$CLOUD_KEY" ] && [ -z "$CLOUD_URL" ]; then
  note "busted #cloud specs against E2B's cloud"
  out=$(env -u E2B_API_URL -u E2B_SANDBOX_URL E2B_API_KEY="$CLOUD_KEY" timeout -k 10 1500 "${BUSTED[@]}" -o TAP --tags=cloud spec 2>&1)
  echo "$out" >"$LOG/busted-cloud.log"; busted_counts "$out"
  [ "$f" -gt 0 ] && grep -A8 '^not ok ' <<<"$out" | head -40
  add "$p" "$f" "busted #cloud"
fi

# The conformance suite runs once per SDK: the pinned 2.29.1 (e2b) and the current release
# (e2b-latest, an npm alias in spec/sdk/package.json), chosen by MB_E2B_SDK (spec/sdk/helpers.mjs).
for sdk in e2b e2b-latest; do
  if [ ! -f "spec/sdk/node_modules/$sdk/package.json" ] || [ -z "$SBXD_PID" ]; then
    note "E2B SDK conformance ($sdk) cannot run: $( [ -z "$SBXD_PID" ] && echo 'sandboxd did not start' || echo "spec/sdk/node_modules/$sdk missing (scripts/install-deps.sh)")"
    add 0 1 "SDK conformance ($sdk)"
    continue
  fi
  ver=$(node -p "require('./spec/sdk/node_modules/$sdk/package.json').version")
  note "E2B SDK conformance (e2b@$ver)"
  out=$(cd spec/sdk && MB_E2B_SDK=$sdk timeout -k 10 1200 node --test --test-reporter=tap --test-concurrency=2 --test-timeout=240000 ./*.test.mjs 2>&1); echo "$out" >"$LOG/sdk-$sdk.log"
  p=$(sed -n 's/^# pass \([0-9]*\)/\1/p' <<<"$out" | tail -1); f=$(sed -n 's/^# fail \([0-9]*\)/\1/p' <<<"$out" | tail -1)
  s=$(sed -n 's/^# skipped \([0-9]*\)/\1/p' <<<"$out" | tail -1); skipped=$((skipped + ${s:-0}))
  [ "${f:-1}" != 0 ] && grep -B2 -A15 '^not ok\|^    not ok' <<<"$out" | head -120
  add "${p:-0}" "${f:-1}" "SDK conformance (e2b@$ver)"
done

if [ -n "$SBXD_PID" ] && ls tests/sandboxd/*.test.mjs >/dev/null 2>&1; then
  note "sandboxd wire checks"
  out=$(timeout -k 10 900 node --test --test-reporter=tap --test-timeout=240000 tests/sandboxd/*.test.mjs 2>&1); echo "$out" >"$LOG/wire.log"
  p=$(sed -n 's/^# pass \([0-9]*\)/\1/p' <<<"$out" | tail -1); f=$(sed -n 's/^# fail \([0-9]*\)/\1/p' <<<"$out" | tail -1)
  [ "${f:-1}" != 0 ] && grep -B2 -A15 '^not ok\|^    not ok' <<<"$out" | head -80
  add "${p:-0}" "${f:-1}" "sandboxd wire checks"
fi

# cgroup v2 for real: sandboxd in a VM that has only cgroup2 (these machines run v1), driven by
# the E2B SDK: limits, a fork bomb, an OOM kill, CPU quota, freeze, teardown, rootless; then the
# same kernel as a v1 host with cpu and cpuacct together (tests/vm/run.sh).
note "cgroup v2 VM (tests/vm)"
out=$(MB_VM_TIMEOUT=${MB_VM_TIMEOUT:-900} timeout -k 10 1000 tests/vm/run.sh 2>&1); echo "$out" >"$LOG/vm.log"
p=$(sed -n 's/^vm: \([0-9]*\) passed, \([0-9]*\) failed$/\1/p' <<<"$out" | tail -1)
f=$(sed -n 's/^vm: \([0-9]*\) passed, \([0-9]*\) failed$/\2/p' <<<"$out" | tail -1)
grep -E '^VMFIG ' <<<"$out"
[ "${f:-1}" != 0 ] && grep -E '^VMTEST not ok|^vm: ' <<<"$out" | head -20
add "${p:-0}" "${f:-1}" "cgroup v2 VM"

# Nothing secret on a command line (issue 19): a scanner reads every process's command line (and
# the environments other users could read) while moonbox runs with its embedded sandboxd and
# while the SDK drives a sandboxd; it first proves that it catches a key (tests/secrets).
if [ -x build/bin/sandboxd ] && [ -f spec/sdk/node_modules/e2b/package.json ]; then
  note "nothing secret on a command line (tests/secrets)"
  out=$(timeout -k 10 900 node --test --test-reporter=tap --test-concurrency=1 --test-timeout=300000 tests/secrets/*.test.mjs 2>&1)
  echo "$out" >"$LOG/secrets.log"
  p=$(sed -n 's/^# pass \([0-9]*\)/\1/p' <<<"$out" | tail -1); f=$(sed -n 's/^# fail \([0-9]*\)/\1/p' <<<"$out" | tail -1)
  [ "${f:-1}" != 0 ] && grep -B2 -A25 '^not ok' <<<"$out" | head -80
  add "${p:-0}" "${f:-1}" "nothing secret on a command line"
else
  note "nothing secret on a command line cannot run: build/bin/sandboxd or spec/sdk/node_modules/e2b missing"
  add 0 1 "nothing secret on a command line"
fi

if ! command -v clang >/dev/null; then
  note "fuzzers cannot run: clang missing (scripts/install-deps.sh)"; add 0 1 "fuzzers"
elif [ -f fuzz/CMakeLists.txt ]; then
  note "fuzzers (brief)"
  if CC=clang build build-fuzz fuzzers -DMB_FUZZ=ON; then
    fp=0; ff=0
    for f in build-fuzz/fuzz/fuzz_*; do
      [ -x "$f" ] || continue
      name=$(basename "$f")
      dict=(); [ -f "fuzz/$name.dict" ] && dict=(-dict="fuzz/$name.dict")
      # The committed regression corpus (fuzz/corpus/<target>: inputs found outside CI) is
      # replayed input by input first, then seeds the brief run; new inputs go to a scratch
      # directory, never into the repository.
      seeds=(); reg=()
      if [ -d "fuzz/corpus/$name" ]; then
        seeds=("fuzz/corpus/$name"); for r in "fuzz/corpus/$name"/*; do [ -f "$r" ] && reg+=("$r"); done
      fi
      scratch=build-fuzz/ci-corpus/$name; rm -rf "$scratch"; mkdir -p "$scratch"
      if { [ ${#reg[@]} -eq 0 ] || "$f" -rss_limit_mb=1024 "${reg[@]}"; } >"$LOG/$name-regressions.log" 2>&1; then fp=$((fp+1))
      else ff=$((ff+1)); echo "fuzz regression corpus fails: $name (log: $LOG/$name-regressions.log)"; tail -30 "$LOG/$name-regressions.log"; fi
      if "$f" -max_total_time="${FUZZ_SECONDS:-20}" -rss_limit_mb=1024 "${dict[@]}" "$scratch" "${seeds[@]}" >"$LOG/$name.log" 2>&1; then fp=$((fp+1)); else ff=$((ff+1)); tail -30 "$LOG/$name.log"; fi
    done
    add "$fp" "$ff" "fuzzers"
  else tail -30 "$LOG/build-build-fuzz.log"; add 0 1 "fuzz build"; fi
fi

if [ "$skipped" -gt 0 ]; then echo "$passed passed, $failed failed, $skipped skipped"; else echo "$passed passed, $failed failed"; fi
[ "$failed" -eq 0 ]
