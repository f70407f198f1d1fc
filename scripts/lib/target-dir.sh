# shellcheck shell=bash
# The folder cargo builds into, for the scripts under scripts/: they source
# this before they move to the repository,
#
#   source "$(dirname "$0")/lib/target-dir.sh"
#
# and find their binaries under "$target_dir/release". It is
# $CARGO_TARGET_DIR when set (a target directory shared between checkouts;
# made absolute as the user meant it, from the folder the script was
# started in, and exported so that the script's own cargo calls build
# there too), else the repository's target/.
source "$(dirname "${BASH_SOURCE[0]}")/caller-paths.sh"
if [ -n "${CARGO_TARGET_DIR:-}" ]; then
  caller_paths CARGO_TARGET_DIR
  export CARGO_TARGET_DIR
fi
target_dir=${CARGO_TARGET_DIR:-$(realpath -m "$(dirname "${BASH_SOURCE[0]}")/../../target")}
