#!/usr/bin/env bash
# Installs everything flowlane needs to build, test and demo on Debian/Ubuntu,
# idempotently: system packages (compilers for the BPF programs, libraries the
# -sys crates link, the test bed's tools) and Rust components.
set -euo pipefail

PKGS=(
  clang llvm m4 binutils pkg-config make gcc   # BPF programs, libxdp (xsk-rs use_cc_build)
  libelf-dev zlib1g-dev                        # libbpf
  libhwloc-dev hwloc libudev-dev               # numa-sched topology (hwlocality; its static link flags name -ludev)
  linux-libc-dev libc6-dev                     # UAPI headers for the BPF programs
  iproute2 ethtool iperf3 netcat-openbsd curl iputils-ping procps  # test bed and kernel peers
  bpftool xdp-tools                            # inspection; xdp-trafficgen for the RX ceiling benchmark
  python3 valgrind
)

missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if ((${#missing[@]})); then
  if [ "$(id -u)" -ne 0 ]; then
    SUDO=sudo
  else
    SUDO=
  fi
  echo "setup: installing ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

if ! command -v cargo >/dev/null; then
  echo "setup: cargo not found; install Rust (rustup) first" >&2
  exit 1
fi
for c in rustfmt clippy; do
  if command -v rustup >/dev/null && ! rustup component list --installed 2>/dev/null | grep -q "^$c"; then
    rustup component add "$c" >/dev/null 2>&1 || echo "setup: could not add rust component $c (continuing)"
  fi
done

# bpffs for the test bed's pinned maps.
if [ "$(id -u)" -eq 0 ] && ! grep -q " /sys/fs/bpf bpf " /proc/mounts; then
  mount -t bpf bpf /sys/fs/bpf || true
fi
echo "setup: ok"
