#!/usr/bin/env bash
# make fuzz-long: every libFuzzer target of the project (fuzz/fuzz_*.c, ASan + UBSan) for at least
# FUZZ_RUNS executions each (default 10 M; libFuzzer's -runs), FUZZ_JOBS at a time (default 2).
# Corpora persist in build-fuzz/corpus/<target> between runs (never in the repository); the
# committed regression corpus fuzz/corpus/<target> (inputs found outside CI) is replayed first and
# seeds the run (read only); a fuzz/<target>.dict is used when present. Prints each target's executions and time; exits
# non-zero if any target crashed, leaked or did not reach FUZZ_RUNS.
# FUZZ_TARGETS="fuzz_a fuzz_b" runs only those. FUZZ_FORK=N runs each target as one libFuzzer run
# in fork mode (-fork=N: N worker processes, FUZZ_RUNS executions in all), for a slow target such
# as fuzz_sbx_multipart, whose every input makes and removes a real directory tree.
set -uo pipefail
cd "$(dirname "$0")/.."
RUNS=${FUZZ_RUNS:-10000000}
JOBS=${FUZZ_JOBS:-2}
FORK=${FUZZ_FORK:-0}
TARGETS=${FUZZ_TARGETS:-}
command -v clang >/dev/null || { echo "fuzz-long: clang is missing (scripts/install-deps.sh)"; exit 1; }
CC=clang cmake -S . -B build-fuzz -DMB_FUZZ=ON >/dev/null && cmake --build build-fuzz -j2 --target fuzzers >/dev/null || {
  echo "fuzz-long: building the fuzzers failed"; exit 1; }
for t in $TARGETS; do   # a misspelt name would otherwise run nothing and pass
  [ -x "build-fuzz/fuzz/$t" ] || { echo "fuzz-long: FUZZ_TARGETS names '$t', which is not a fuzzer (fuzz/fuzz_*.c)"; exit 2; }
done
LOGS=build-fuzz/long-logs
mkdir -p "$LOGS"
one() {
  local f=$1 name; name=$(basename "$f")
  local corpus=build-fuzz/corpus/$name dict=fuzz/$name.dict
  mkdir -p "$corpus"
  local args=(-runs="$RUNS" -rss_limit_mb=2048 -timeout=60 -print_final_stats=1)
  [ "$FORK" -gt 0 ] && args+=(-fork="$FORK")
  [ -f "$dict" ] && args+=(-dict="$dict")
  local seeds=() reg=() r
  if [ -d "fuzz/corpus/$name" ]; then
    seeds=("fuzz/corpus/$name"); for r in "fuzz/corpus/$name"/*; do [ -f "$r" ] && reg+=("$r"); done
  fi
  if [ ${#reg[@]} -gt 0 ] && ! "$f" "${reg[@]}" >"$LOGS/$name-regressions.log" 2>&1; then
    echo "FAIL $name: the regression corpus fuzz/corpus/$name fails (see $LOGS/$name-regressions.log)"
    return 1
  fi
  local t0=$SECONDS
  "$f" "${args[@]}" "$corpus" "${seeds[@]}" >"$LOGS/$name.log" 2>&1
  local rc=$? done
  # one process says "Done N runs in T second(s)"; fork mode "INFO: fuzzed for N iterations, wrapping up soon"
  done=$(sed -n -e 's/^Done \([0-9]*\) runs in .*/\1/p' -e 's/^INFO: fuzzed for \([0-9]*\) iterations.*/\1/p' "$LOGS/$name.log" | tail -1)
  if [ "$rc" -eq 0 ] && [ "${done:-0}" -ge "$RUNS" ]; then
    echo "ok   $name: ${done} executions in $((SECONDS - t0)) s"
  else
    echo "FAIL $name: exit $rc after ${done:-?} executions in $((SECONDS - t0)) s (see $LOGS/$name.log)"
    return 1
  fi
}
export -f one
export RUNS LOGS FORK
for f in build-fuzz/fuzz/fuzz_*; do
  [ -f "$f" ] && [ -x "$f" ] || continue
  if [ -z "$TARGETS" ] || [[ " $TARGETS " == *" $(basename "$f") "* ]]; then echo "$f"; fi   # status 0: pipefail
done | xargs -P "$JOBS" -I{} bash -c 'one "$@"' _ {}
