#!/usr/bin/env bash
# The cgroup v2 suite in a VM (make test-vm; scripts/test.sh runs it too). A cgroup-v2-only Linux
# where these machines have v1: Debian's generic kernel (fetched with `apt-get download`, unpacked
# with dpkg-deb, never installed), a busybox initramfs that loads virtio, 9p and overlay and
# mounts this host's own userland read-only over 9p, then tests/vm/guest.sh as pid 1 in it: only
# cgroup2 mounted, tmpfs where something is written, sandboxd with its state on tmpfs, and
# tests/vm/checks.mjs driving it through the official E2B SDK. qemu in software emulation (TCG:
# KVM guests do not boot on these machines), no network device (-nic none). A second boot of the
# same kernel lays the controllers out as a systemd cgroup v1 host does (MB_VM_MODE=v1).
#
# The guest reports on the serial console: "VMTEST ok|not ok <check>: <detail>" per check,
# "VMFIG <name>=<value>" figures, "VMTEST end" last. This prints them and one line
# "vm: N passed, N failed"; exit status 0 when every check passed and the guest finished.
#
# Env: MB_VM_CACHE (default build/vm-cache: the kernel package, unpacked, the initramfs),
# MB_VM_TIMEOUT (seconds, default 900: the whole boot-to-poweroff), MB_BUILD_DIR (default build).
set -uo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
BUILD=${MB_BUILD_DIR:-$ROOT/build}
CACHE=${MB_VM_CACHE:-$BUILD/vm-cache}
TIMEOUT=${MB_VM_TIMEOUT:-900}
KPKG_META=linux-image-amd64            # generic: 9p, virtio and overlay as modules (cloud has no 9p)
fail() { echo "vm: $*" >&2; echo "vm: 0 passed, 1 failed"; exit 1; }

for t in qemu-system-x86_64 busybox dpkg-deb apt-get; do
  command -v "$t" >/dev/null || fail "$t missing (scripts/install-deps.sh installs qemu-system-x86 and busybox-static)"
done
[ -x "$BUILD/bin/sandboxd" ] && [ -x "$BUILD/bin/sandboxd-init" ] || fail "$BUILD/bin/sandboxd missing: build first (make build)"
[ -d "$ROOT/spec/sdk/node_modules/e2b" ] || fail "spec/sdk/node_modules/e2b missing (scripts/install-deps.sh)"
BB=$(command -v busybox)
# The initramfs needs a static busybox (Debian's busybox-static): nothing of the host is mounted yet.
if ldd "$BB" >/dev/null 2>&1; then fail "$BB is dynamically linked: install busybox-static"; fi
mkdir -p "$CACHE" || fail "cannot create $CACHE"

# ---- the kernel: the package linux-image-amd64 depends on, downloaded once per version ----
KPKG=$(apt-cache depends "$KPKG_META" 2>/dev/null | awk '/Depends: linux-image-[0-9]/ {print $2; exit}')
if [ -n "$KPKG" ]; then
  DEB=$(ls "$CACHE/$KPKG"_*.deb 2>/dev/null | head -1)
  if [ -z "$DEB" ]; then
    echo "vm: fetching $KPKG (apt-get download)"
    (cd "$CACHE" && apt-get download -q "$KPKG" >"$CACHE/download.log" 2>&1) || { cat "$CACHE/download.log"; fail "apt-get download $KPKG failed"; }
    DEB=$(ls "$CACHE/$KPKG"_*.deb 2>/dev/null | head -1)
  fi
else   # no package lists: whatever was fetched before
  DEB=$(ls -t "$CACHE"/linux-image-*-amd64_*.deb 2>/dev/null | head -1)
  KPKG=$(basename "${DEB%%_*}")
fi
[ -n "$DEB" ] && [ -f "$DEB" ] || fail "no kernel package: apt-cache knows no $KPKG_META (apt-get update?) and $CACHE has none"
# What is kept: the package, its kernel image and the initramfs made from it (the unpacked tree,
# ~400 MB of modules, only while the initramfs is made).
VMLINUZ=$CACHE/$KPKG.vmlinuz
INITRD=$CACHE/$KPKG.initramfs.gz
# virtio PCI and 9p (the root), overlay (sandbox roots)
WANT="virtio_pci 9pnet_virtio 9p overlay"
if [ ! -f "$INITRD" ] || [ ! -f "$VMLINUZ" ] || [ "$INITRD" -ot "$DEB" ] || [ "$INITRD" -ot tests/vm/init ] ||
   [ "$INITRD" -ot tests/vm/run.sh ] || [ "$INITRD" -ot "$BB" ]; then
  KDIR=$(mktemp -d "$CACHE/unpack.XXXXXX") || fail "cannot create a directory in $CACHE"
  trap 'rm -rf "$KDIR"' EXIT
  dpkg-deb -x "$DEB" "$KDIR" || fail "dpkg-deb -x $DEB failed"
  KVER=$(ls "$KDIR/lib/modules" | head -1)
  MODDIR=$KDIR/lib/modules/$KVER
  [ -n "$KVER" ] && [ -f "$KDIR/boot/vmlinuz-$KVER" ] || fail "no kernel image in $DEB"
  [ -f "$MODDIR/modules.dep" ] || (cd "$KDIR" && "$BB" depmod -b . "$KVER") || fail "depmod of $KVER failed"
  # the initramfs: busybox, the modules in dependency order (modules.dep), tests/vm/init
  IRD=$KDIR/initramfs
  mkdir -p "$IRD"/{bin,dev,proc,sys,mnt/root,lib/modules} || fail "cannot create $IRD"
  cp "$BB" "$IRD/bin/busybox" && cp tests/vm/init "$IRD/init" && chmod 755 "$IRD/init" || fail "cannot fill $IRD"
  order=()
  add_mod() { # name: its dependencies first (modules.dep: "path: dep dep ...")
    local line path deps d
    line=$(grep -E "(^|/)$1\\.ko(\\.[a-z]+)?:" "$MODDIR/modules.dep" | head -1)
    [ -n "$line" ] || { grep -qE "(^|/)$1\\.ko" "$MODDIR/modules.builtin" 2>/dev/null && return 0; fail "module $1 not in $KVER"; }
    path=${line%%:*}; deps=${line#*:}
    for d in $deps; do add_mod "$(basename "${d%%.ko*}")"; done
    for d in "${order[@]+"${order[@]}"}"; do [ "$d" = "$path" ] && return 0; done
    order+=("$path")
  }
  for m in $WANT; do add_mod "$m"; done
  for p in "${order[@]}"; do
    cp "$MODDIR/$p" "$IRD/lib/modules/" || fail "cannot copy $p"
    case "$p" in *.xz) "$BB" unxz -f "$IRD/lib/modules/$(basename "$p")";; esac
    basename "${p%.xz}" >>"$IRD/modules"
  done
  (cd "$IRD" && find . | "$BB" cpio -o -H newc 2>/dev/null | gzip -1) >"$INITRD.tmp" && mv "$INITRD.tmp" "$INITRD" &&
    cp "$KDIR/boot/vmlinuz-$KVER" "$VMLINUZ" || fail "cannot pack the initramfs"
  rm -rf "$KDIR"
  trap - EXIT
fi

# ---- two boots: cgroup v2 only (the suite proper), then the same kernel as a v1 host ----
mkdir -p "$BUILD/test-logs"
p=0; f=0
boot() { # mode: v2 | v1
  local mode=$1 log=$BUILD/test-logs/vm-console-$1.log t0 t1 rc out
  echo "vm: booting $KPKG ($(basename "$DEB")) under qemu (TCG, 2 vCPUs, 2 GiB, no network), cgroup $mode; console: $log"
  t0=$(date +%s.%N)
  rm -f "$log"
  # Kernel parameters that are name=value and unknown to the kernel become init's environment.
  timeout -k 10 "$TIMEOUT" qemu-system-x86_64 -accel tcg,thread=multi -cpu max -smp 2 -m 2048 \
    -nographic -monitor none -serial "file:$log" -no-reboot -nic none \
    -kernel "$VMLINUZ" -initrd "$INITRD" \
    -append "console=ttyS0 panic=-1 quiet loglevel=3 MB_ROOT=$ROOT MB_BUILD=$BUILD MB_VM_MODE=$mode" \
    -virtfs "local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap" </dev/null >/dev/null 2>&1
  rc=$?
  t1=$(date +%s.%N)
  [ -f "$log" ] || { echo "vm: qemu wrote no console log (exit $rc)"; f=$((f + 1)); return; }
  # (a line may start with the terminal resets firmware and kernel print)
  out=$(grep -aoE '(VMTEST|VMFIG|VMLOG) .*' "$log" | tr -d '\r')
  echo "$out"
  p=$((p + $(grep -cE '^VMTEST ok ' <<<"$out"))); f=$((f + $(grep -cE '^VMTEST not ok ' <<<"$out")))
  if ! grep -q '^VMTEST end' <<<"$out"; then
    f=$((f + 1))
    [ "$rc" -eq 124 ] && echo "vm: the guest did not finish within ${TIMEOUT}s" || echo "vm: the guest stopped before its end (qemu exit $rc)"
    tail -30 "$log" | tr -d '\r'
  fi
  awk -v a="$t0" -v b="$t1" -v m="$mode" 'BEGIN { printf "VMFIG suite_%s_s=%.1f (boot to power-off, host clock)\n", m, b - a }'
}
boot v2
boot v1
[ "$p" -eq 0 ] && [ "$f" -eq 0 ] && f=1
echo "vm: $p passed, $f failed"
[ "$f" -eq 0 ]
