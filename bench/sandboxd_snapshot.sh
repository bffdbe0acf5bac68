#!/usr/bin/env bash
# sandboxd snapshot benchmark (issue 10): a snapshot of a sandbox whose upper layer holds 1 GiB,
# and a sandbox created from it, as ratios to a cold create of `base` in the same run, with the
# disk each adds (bench/sandboxd_snapshot.mjs). Run twice when it can be:
#   1. with the state dir next to the build (the build's file system, e.g. ext4: a snapshot copies
#      its upper layer's data there)
#   2. on XFS with reflinks, a loop-mounted image made here (root, mkfs.xfs and a loop device
#      needed; else skipped with the reason): the copy shares the data's blocks
# Nothing here is a pass/fail timing threshold. Exit status: 0 unless a run could not be done or
# something was left behind.
#
#   bench/sandboxd_snapshot.sh
#   BENCH_N=5 BENCH_SNAPSHOT_MB=1,1024 bench/sandboxd_snapshot.sh
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD_DIR=${BUILD_DIR:-$ROOT/build}
. "$ROOT/bench/lib.sh"

bench_build sandboxd-snapshot --target sandboxd
KEY="e2b_$(od -An -N20 -tx1 /dev/urandom | tr -d ' \n')"
rc=0
OUT=$WORK/snapshot.out
MNT= LOOPIMG=
unmount_xfs() {
  if [ -n "$MNT" ] && mountpoint -q "$MNT"; then umount "$MNT" || true; fi
  if [ -n "$LOOPIMG" ]; then rm -f "$LOOPIMG"; fi
  MNT= LOOPIMG=
}
# sandboxd first, then the image, then the scratch directory (never removed while mounted)
on_exit() {
  if [ -n "$SBXD_PID" ] && kill -0 "$SBXD_PID" 2>/dev/null; then kill -TERM "$SBXD_PID"; wait "$SBXD_PID" || true; fi
  SBXD_PID=
  unmount_xfs
  cleanup
}
trap on_exit EXIT

# one_run LABEL: sandboxd without a warm pool on STATE (set by the caller through WORK), the bench.
one_run() {
  local label=$1
  SANDBOXD_WARM_POOL=0 sbxd_start "$KEY"
  E2B_API_URL=$URL E2B_SANDBOX_URL=$URL E2B_API_KEY=$KEY SANDBOXD_STATE_DIR=$STATE BENCH_LABEL=$label \
    node "$ROOT/bench/sandboxd_snapshot.mjs" | tee -a "$OUT" || rc=1
  sbxd_stop
  sbxd_check_left
  local layers
  layers=$(find "$STATE/layers" -mindepth 1 -maxdepth 1 2>/dev/null | wc -l)
  [ "$layers" -eq 0 ] || { echo "$layers snapshot layers left behind" >&2; rc=1; }
}

fs=$(findmnt -n -o FSTYPE -T "$BUILD_DIR" 2>/dev/null || stat -f -c %T "$BUILD_DIR")
echo "== state dir on the build's file system ($fs)"
one_run "$fs"

if [ "$(id -u)" -ne 0 ] || ! command -v mkfs.xfs >/dev/null || ! [ -e /dev/loop-control ]; then
  echo "== XFS with reflinks: skipped (needs root, mkfs.xfs from xfsprogs and a loop device)"
else
  echo "== state dir on XFS with reflinks (a loop-mounted image)"
  LOOPIMG=$WORK/xfs.img MNT=$WORK/xfs saved=$WORK
  mb=$(echo "${BENCH_SNAPSHOT_MB:-1,1024}" | tr ',' '\n' | sort -n | tail -1)
  truncate -s "$(( (mb * 3 + 2048) ))M" "$LOOPIMG"
  mkfs.xfs -q -m reflink=1 "$LOOPIMG"
  mkdir -p "$MNT"
  if mount -o loop "$LOOPIMG" "$MNT"; then
    WORK=$MNT
    one_run "xfs+reflink"
  else
    echo "   (cannot mount a loop device here: skipped)"
  fi
  WORK=$saved
  unmount_xfs
fi

echo "== summary"
node - "$OUT" <<'EOF' || rc=1
const fs = require('fs')
const runs = fs.readFileSync(process.argv[2], 'utf8').split('\n').filter((l) => l.startsWith('RESULT ')).map((l) => JSON.parse(l.slice(7)))
const f = (x) => (typeof x === 'number' ? x.toFixed(2) : '?')
const goal = (x) => (x <= 2 ? 'goal met' : 'over goal')
for (const r of runs) {
  for (const s of r.sizes)
    console.log(`${r.label.padEnd(12)} ${String(s.mb).padStart(5)} MiB: snapshot ${f(s.ratio_snapshot)}× cold (${goal(s.ratio_snapshot)}, ` +
      `+${f(s.snapshot_disk_mb)} MiB), create from it ${f(s.ratio_from)}× cold (${goal(s.ratio_from)}, +${f(s.from_disk_mb)} MiB)`)
  if (r.snapshot_growth !== undefined)
    console.log(`${r.label.padEnd(12)} largest vs smallest layer: snapshot ${f(r.snapshot_growth)}×, create from it ${f(r.from_growth)}×`)
}
process.exit(runs.length ? 0 : 1)
EOF
exit $rc
