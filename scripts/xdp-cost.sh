#!/usr/bin/env bash
# What the XDP steering program costs a frame, by kind of frame: the
# kernel's timing of the program alone (BPF_PROG_TEST_RUN, a million runs,
# best of five rounds), for this tree's program and for the program of each
# REV given (built here with clang, as ebpf/build.rs builds it), side by
# side for before-and-after figures. Root only (it loads BPF programs).
#
#   scripts/xdp-cost.sh [REV ...]
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" != 0 ]; then
    echo "xdp-cost.sh: loading BPF programs needs root: run it as root" >&2
    exit 1
fi
work=$(mktemp -d /tmp/flowlane-xdp-cost.XXXXXX)
trap 'rm -rf "$work"' EXIT

measure() { # $1: label, $2: object file ("" = this build's)
    FL_STEER_OBJ="$2" cargo test -q -p flowlane-ebpf --lib steer::cost \
        -- --ignored --nocapture --test-threads 1 2>&1 |
        sed -n "s/^cost /$1 /p" >> "$work/$1.txt"
    if ! grep -q . "$work/$1.txt"; then
        echo "xdp-cost.sh: measuring $1 failed: run the command above by hand to see why" >&2
        exit 1
    fi
}

# The BPF helper headers ebpf/build.rs gets from libbpf-sys.
host=$(rustc -vV | sed -n 's/^host: //p')
libbpf_sys=$(cargo metadata --format-version 1 --locked --filter-platform "$host" |
    python3 -c 'import json, sys; print(next(p["manifest_path"] for p in json.load(sys.stdin)["packages"] if p["name"] == "libbpf-sys"))')
mkdir -p "$work/include/bpf"
cp "$(dirname "$libbpf_sys")"/libbpf/src/bpf_*.h "$work/include/bpf/"

labels=(tree)
objects=("")
for rev in "$@"; do
    label=$(git rev-parse --short "$rev")
    mkdir -p "$work/$label"
    for f in xdp_steer.bpf.c flowlane_common.h; do
        git show "$rev:ebpf/src/bpf/$f" > "$work/$label/$f"
    done
    clang -target bpf -O2 -g -Wall -Wno-comment "-I/usr/include/$(uname -m)-linux-gnu" \
        -I"$work/include" -I"$work/$label" \
        -c "$work/$label/xdp_steer.bpf.c" -o "$work/$label/xdp_steer.bpf.o"
    labels+=("$label")
    objects+=("$work/$label/xdp_steer.bpf.o")
done
for _ in $(seq "${PASSES:-3}"); do
    for i in "${!labels[@]}"; do
        measure "${labels[$i]}" "${objects[$i]}"
    done
done

printf '%-26s' frame
for l in "${labels[@]}"; do printf ' %16s' "$l"; done
echo
while read -r _ name _ _ _; do
    printf '%-26s' "$name"
    for l in "${labels[@]}"; do
        printf ' %16s' "$(awk -v n="$name" '$2 == n && (!m || $4 < m) { m = $4; v = $3 }
            END { print m " ns " v }' "$work/$l.txt")"
    done
    echo
done < <(awk '!seen[$2]++' "$work/tree.txt")
