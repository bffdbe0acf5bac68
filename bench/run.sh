#!/usr/bin/env bash
# Runs every benchmark binary in build/bench (bench_*); each prints its own ratio to a baseline
# measured in the same run. Exit status is non-zero if any benchmark failed.
# MB_BUILD_DIR selects another build directory (default: build).
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD=${MB_BUILD_DIR:-build}
export MB_SOURCE_DIR=$PWD
rc=0
found=0
for b in "$BUILD"/bench/bench_*; do
  [ -x "$b" ] || continue
  found=1
  echo "== $(basename "$b")"
  "$b" || { echo "$(basename "$b"): FAILED"; rc=1; }
done
if [ "$found" = 0 ]; then echo "no benchmarks in $BUILD/bench (run: make build)"; exit 1; fi
for s in bench/sandboxd.sh bench/sandboxd_snapshot.sh bench/templates.sh bench/providers.sh bench/stream.sh bench/consumers.sh bench/api.sh bench/sync.sh bench/edge.sh; do
  echo "== $(basename "$s")"
  BUILD_DIR=$BUILD "$s" || { echo "$(basename "$s"): FAILED"; rc=1; }
done
exit $rc
