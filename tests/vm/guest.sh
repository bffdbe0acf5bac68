#!/bin/bash
# The VM's second stage, pid 1 in the host's own userland (read-only over 9p; tests/vm/init):
# only cgroup2 mounted, tmpfs wherever something is written, then tests/vm/checks.mjs (which
# starts and stops sandboxd itself). Reports on the console (tests/vm/run.sh parses it), then
# powers the VM off.
set -u
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/tmp LANG=C.UTF-8
say() { echo "$*" >/dev/console; }
end() { say "VMTEST end"; sync; echo o >/proc/sysrq-trigger; sleep 10; exit 0; }
fail_boot() { say "VMTEST not ok boot: $*"; end; }
read -r up _ </proc/uptime
say "VMFIG boot_s=$up (kernel start to the host userland as pid 1, guest clock)"

if [ "${MB_VM_MODE:-v2}" = v1 ]; then
  # a cgroup v1 host as systemd lays one out: cpu and cpuacct in one hierarchy (and a link for
  # each), an empty cgroup2 at unified
  mount -t tmpfs -o mode=755 cgroup /sys/fs/cgroup || fail_boot "tmpfs on /sys/fs/cgroup failed"
  for h in cpu,cpuacct memory pids freezer; do
    mkdir "/sys/fs/cgroup/$h" && mount -t cgroup -o "$h" "cgroup-${h/,/-}" "/sys/fs/cgroup/$h" || fail_boot "mount of the v1 $h hierarchy failed"
  done
  ln -s cpu,cpuacct /sys/fs/cgroup/cpu && ln -s cpu,cpuacct /sys/fs/cgroup/cpuacct &&
    mkdir /sys/fs/cgroup/unified && mount -t cgroup2 cgroup2 /sys/fs/cgroup/unified || fail_boot "the unified mount failed"
else
  mount -t cgroup2 cgroup2 /sys/fs/cgroup || fail_boot "mount -t cgroup2 failed"
fi
for d in /tmp /run /var/tmp /var/log; do mount -t tmpfs -o mode=1777 tmpfs "$d" || fail_boot "tmpfs on $d failed"; done
mkdir -p /dev/pts /dev/shm && mount -t devpts -o newinstance,ptmxmode=0666 devpts /dev/pts && mount -t tmpfs tmpfs /dev/shm ||
  fail_boot "devpts or /dev/shm failed"
ip link set lo up || fail_boot "ip link set lo up failed"
say "VMLOG kernel $(uname -r), $(nproc) CPUs, $(awk '/MemTotal/ {print int($2/1024)}' /proc/meminfo) MB; cgroup mounts: $(awk '$9 ~ /^cgroup/ {print $9 " at " $5}' /proc/self/mountinfo | tr '\n' ' ')"
[ -f /sys/fs/cgroup/cgroup.controllers ] && say "VMLOG root cgroup controllers: $(cat /sys/fs/cgroup/cgroup.controllers)"

cd "$MB_ROOT" || fail_boot "cd $MB_ROOT failed"
MB_SANDBOXD="$MB_BUILD/bin/sandboxd" timeout -k 5 1200 node tests/vm/checks.mjs >/dev/console 2>&1 ||
  say "VMTEST not ok checks: tests/vm/checks.mjs exited $?"
end
