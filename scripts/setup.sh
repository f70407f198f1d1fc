#!/usr/bin/env bash
# Installs everything flowlane needs to build, test and demo on Debian/Ubuntu,
# idempotently: system packages (compilers for the BPF programs, libraries the
# -sys crates link, the test bed's tools), a Rust toolchain when none is
# present (the distribution's rustc/cargo when they are at least the
# workspace's rust-version; otherwise it says which rustup command to run and
# exits non-zero), and the rustfmt/clippy components.
#
# Sourcing it (`. scripts/setup.sh`) only defines its functions: the
# toolchain decision is tested by scripts/setup-test.sh with fake versions.
set -euo pipefail

PKGS=(
  clang llvm m4 binutils pkg-config make gcc   # BPF programs, libxdp (xsk-rs use_cc_build)
  libelf-dev zlib1g-dev                        # libbpf
  libhwloc-dev hwloc libudev-dev               # numa-sched topology (hwlocality; its static link flags name -ludev)
  linux-libc-dev libc6-dev                     # UAPI headers for the BPF programs
  iproute2 ethtool iperf3 netcat-openbsd curl iputils-ping procps  # test bed and kernel peers
  bpftool xdp-tools                            # inspection only (xdp-loader status, xdpdump); `bench rx` has its own generator
  python3 valgrind
  python3-scapy                                # scripts/conformance.sh's scripted TCP peer
  prometheus                                   # promtool and a real Prometheus for the daemon's metrics tests
)

# The command that installs a current Rust toolchain where the distribution's
# is too old or missing.
RUSTUP_CMD="curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs | sh -s -- -y --profile minimal -c rustfmt,clippy && . \"\$HOME/.cargo/env\""

# version_ge A B: whether dotted version A >= B (numeric per component;
# missing components count as 0).
version_ge() {
  local -a a b
  IFS=. read -r -a a <<<"$1"
  IFS=. read -r -a b <<<"$2"
  local i n=$((${#a[@]} > ${#b[@]} ? ${#a[@]} : ${#b[@]}))
  for ((i = 0; i < n; i++)); do
    local x=$((10#${a[i]:-0})) y=$((10#${b[i]:-0}))
    ((x > y)) && return 0
    ((x < y)) && return 1
  done
  return 0
}

# upstream_version DEBVER: the upstream x.y.z of a Debian package version
# ("1.63.0+dfsg1-2" -> 1.63.0, "1:1.85.0~rc1-1" -> 1.85.0); empty for "(none)".
upstream_version() {
  local v=${1#*:}
  [[ $v =~ ^([0-9]+(\.[0-9]+)*) ]] && echo "${BASH_REMATCH[1]}" || true
}

# rust_min_version [CARGO_TOML]: the workspace's rust-version.
rust_min_version() {
  sed -n 's/^rust-version *= *"\([0-9.]*\)".*/\1/p' "${1:-Cargo.toml}" | head -n1
}

# rust_plan INSTALLED PACKAGED MIN: what to do about the toolchain, given the
# installed rustc's version (empty: no cargo), the distribution's candidate
# (empty: none) and the minimum. Prints one of:
#   ok        installed and new enough
#   old       installed but older than MIN (rustup update, or rustup)
#   apt       none installed; the distribution's is new enough
#   rustup    none installed; the distribution has none new enough
rust_plan() {
  local installed=$1 packaged=$2 min=$3
  if [ -n "$installed" ]; then
    if version_ge "$installed" "$min"; then echo ok; else echo old; fi
  elif [ -n "$packaged" ] && version_ge "$packaged" "$min"; then
    echo apt
  else
    echo rustup
  fi
}

# Runs as root directly, otherwise through sudo; with neither, says what to
# do and exits 1.
as_root() {
  if [ "$(id -u)" -eq 0 ]; then
    "$@"
  elif command -v sudo >/dev/null; then
    sudo "$@"
  else
    echo "setup: installing system packages needs root, and this user is not root and has no sudo: run scripts/setup.sh as root (e.g. su -c 'bash scripts/setup.sh'), then run this again" >&2
    exit 1
  fi
}

APT_UPDATED=
apt_update() {
  if [ -z "$APT_UPDATED" ]; then
    echo "setup: apt-get update"
    as_root apt-get update -q
    APT_UPDATED=1
  fi
}

apt_install() {
  echo "setup: apt-get install $* (this can take a few minutes)"
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$@"
}

install_system_packages() {
  local missing=() p
  for p in "${PKGS[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if ((${#missing[@]})); then
    echo "setup: ${#missing[@]} system package(s) missing"
    apt_update
    apt_install "${missing[@]}"
  else
    echo "setup: system packages present"
  fi
}

installed_rustc_version() {
  command -v cargo >/dev/null && command -v rustc >/dev/null || return 0
  rustc --version | awk '{print $2}' | sed 's/-.*//'
}

packaged_rustc_version() {
  upstream_version "$(apt-cache policy rustc 2>/dev/null | awk '/Candidate:/ {print $2}')"
}

install_rust() {
  local min installed packaged=
  min=$(rust_min_version "$(dirname "${BASH_SOURCE[0]}")/../Cargo.toml")
  installed=$(installed_rustc_version)
  if [ -z "$installed" ]; then
    apt_update
    packaged=$(packaged_rustc_version)
  fi
  case $(rust_plan "$installed" "$packaged" "$min") in
    ok)
      echo "setup: Rust $installed (>= $min) present"
      ;;
    old)
      echo "setup: rustc $installed is older than $min (rust-version in Cargo.toml)." >&2
      if command -v rustup >/dev/null; then
        echo "setup: run: rustup update stable" >&2
      else
        echo "setup: remove the distribution's rustc/cargo and run: $RUSTUP_CMD" >&2
      fi
      exit 1
      ;;
    apt)
      echo "setup: no Rust toolchain; installing the distribution's rustc $packaged (>= $min)"
      local extra=() p
      for p in rustfmt rust-clippy; do
        apt-cache show "$p" >/dev/null 2>&1 && extra+=("$p")
      done
      apt_install rustc cargo "${extra[@]}"
      ;;
    rustup)
      if [ -x "$HOME/.cargo/bin/cargo" ]; then
        echo "setup: Rust is installed in $HOME/.cargo/bin but not on PATH: run  . \"\$HOME/.cargo/env\"  and run this again" >&2
        exit 1
      fi
      echo "setup: no Rust toolchain, and the distribution's rustc (${packaged:-none}) is older than $min (rust-version in Cargo.toml)." >&2
      echo "setup: install Rust with rustup, then run this again:" >&2
      echo "  $RUSTUP_CMD" >&2
      exit 1
      ;;
  esac
  local c
  for c in rustfmt clippy; do
    if command -v rustup >/dev/null && ! rustup component list --installed 2>/dev/null | grep -q "^$c"; then
      echo "setup: rustup component add $c"
      rustup component add "$c" || echo "setup: could not add rust component $c (continuing)"
    fi
  done
}

main() {
  install_system_packages
  install_rust
  # bpffs for the test bed's pinned maps.
  if [ "$(id -u)" -eq 0 ] && ! grep -q " /sys/fs/bpf bpf " /proc/mounts; then
    mount -t bpf bpf /sys/fs/bpf || true
  fi
  echo "setup: ok"
}

if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then
  main "$@"
fi
