# shellcheck shell=bash
# Paths the user gave a script (in its environment or its flags), made
# absolute from the folder the script was started in, for the scripts under
# scripts/ that then move to the repository: source this and call the
# functions before the `cd`,
#
#   source "$(dirname "$0")/lib/caller-paths.sh"
#   caller_programs FLOWLANE PYTHON     # binaries: FLOWLANE=target/release/flowlane
#   caller_paths OUT                    # files and folders: OUT=results
#   cd "$(dirname "$0")/.."
#
# so that `FLOWLANE=target/release/flowlane scripts/x.sh` runs the binary
# the user meant, not one under the repository.

# caller_paths NAME...: each variable NAME that is set and not empty, a file
# or folder (there or not yet), made absolute from the current folder.
caller_paths() {
  local name
  for name in "$@"; do
    if [ -n "${!name:-}" ]; then
      printf -v "$name" '%s' "$(realpath -m -- "${!name}")"
    fi
  done
}

# caller_programs NAME...: each variable NAME that names a program by a path
# (a `/` in it, as execvp(3) tells a path from a name looked up on PATH),
# made absolute from the current folder; a bare name (`python3`) is left
# to PATH.
caller_programs() {
  local name
  for name in "$@"; do
    case ${!name:-} in
      */*) caller_paths "$name" ;;
    esac
  done
}
