#!/usr/bin/env bash
# Configures and builds Plexus into ./build (Ninja, RelWithDebInfo). Extra arguments go to
# the CMake configure step, e.g. scripts/build.sh -DPLEXUS_WITH_CUDA=OFF.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${PLEXUS_BUILD_DIR:-$root/build}"
jobs="${PLEXUS_JOBS:-$(nproc)}"
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@"
cmake --build "$build" -j "$jobs"
