#!/usr/bin/env bash
# Installs what moonbox needs from Debian packages (and the E2B SDK from npm for the
# conformance suite). Idempotent and quick when everything is present. Without root it
# prints exactly which packages are missing and exits 1.
set -euo pipefail
cd "$(dirname "$0")/.."

DEB_PACKAGES=(
  build-essential cmake pkg-config
  lua5.4 liblua5.4-dev lua-cjson lua-busted luarocks
  libuv1-dev libcurl4-openssl-dev libssl-dev libmicrohttpd-dev libjansson-dev zlib1g-dev
  libprotobuf-c-dev protobuf-c-compiler
  libarchive-dev                      # workspace sync: the host writes and reads tar streams
  libmnl-dev libnftables-dev libc-ares-dev   # sandboxd's gateway (rtnetlink, its nftables table) and egress proxy (resolving allowed names)
  libgnutls28-dev                            # the egress proxy's TLS interception (a CA per sandbox, certificates per name)
  musl-tools clang libclang-rt-14-dev
  attr iproute2 procps ncurses-bin python3 git sudo curl openssl strace
  passt nftables xfsprogs
  dnsmasq-base                        # spec/support/networld.py: the stand-in world's DNS server (egress and secrets specs, examples/token)
  clangd                              # the lsp consumer's server in the tests and examples/world
  qemu-system-x86 busybox-static      # tests/vm: sandboxd in a cgroup-v2-only VM (TCG), its initramfs
  skopeo umoci                        # sandboxd's template builds: fromImage pulls (skopeo) and unpacks (umoci) an image
  docker-registry apache2-utils       # spec/sdk/template_image.test.mjs: a registry on loopback with htpasswd auth
  nodejs npm
)

missing=()
for p in "${DEB_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
# node/npm may come from outside Debian (e.g. a preinstalled toolchain): accept those.
if command -v node >/dev/null && command -v npm >/dev/null; then
  missing=("${missing[@]/nodejs}"); missing=("${missing[@]/npm}")
  tmp=(); for p in "${missing[@]}"; do [ -n "$p" ] && tmp+=("$p"); done; missing=("${tmp[@]+"${tmp[@]}"}")
fi

if [ "${#missing[@]}" -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "install-deps: missing Debian packages (run as root or install them): ${missing[*]}" >&2
    exit 1
  fi
  echo "install-deps: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q >/dev/null
  apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
fi

# The official E2B SDK for the conformance suite (spec/sdk): the pinned 2.29.1 and the current
# release side by side (e2b, e2b-latest), and the E2B CLI (@e2b/cli: template_cli.test.mjs),
# exactly as spec/sdk/package-lock.json has them (npm ci).
if [ -f spec/sdk/package.json ]; then
  for p in e2b e2b-latest @e2b/cli; do
    if [ ! -f "spec/sdk/node_modules/$p/package.json" ]; then
      (cd spec/sdk && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
      break
    fi
  done
fi
echo "install-deps: ok"
