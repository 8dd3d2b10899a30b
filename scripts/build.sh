#!/usr/bin/env bash
# Configures and builds Plexus into ./build (Ninja). The build type is $PLEXUS_BUILD_TYPE (default
# Release, what users run; Debug, RelWithDebInfo and MinSizeRel build too). Extra arguments go to
# the CMake configure step, e.g. scripts/build.sh -DPLEXUS_WITH_CUDA=OFF, or
# -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_C_COMPILER=clang (into a fresh PLEXUS_BUILD_DIR).
# PLEXUS_BUILD_TARGETS="A B" builds those targets only (default: everything).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${PLEXUS_BUILD_DIR:-$root/build}"
jobs="${PLEXUS_JOBS:-$(nproc)}"
type="${PLEXUS_BUILD_TYPE:-Release}"
case "$type" in
  Debug | Release | RelWithDebInfo | MinSizeRel) ;;
  *)
    echo "build.sh: PLEXUS_BUILD_TYPE='$type': expected Debug, Release, RelWithDebInfo or MinSizeRel" >&2
    exit 2
    ;;
esac
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE="$type" "$@"
# PLEXUS_BUILD_TARGETS (space-separated) builds only those, e.g. for a test of the configuration.
targets=()
if [ -n "${PLEXUS_BUILD_TARGETS:-}" ]; then
  read -r -a names <<<"$PLEXUS_BUILD_TARGETS"
  targets=(--target "${names[@]}")
fi
cmake --build "$build" -j "$jobs" "${targets[@]}"
