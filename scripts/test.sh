#!/usr/bin/env bash
# The README's second command (and CI's): installs what is missing, builds, and runs the whole
# test suite with ctest. Extra arguments go to ctest, e.g. scripts/test.sh -L unit.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$root/scripts/install-deps.sh"
"$root/scripts/build.sh"
build="${PLEXUS_BUILD_DIR:-$root/build}"
ctest --test-dir "$build" --output-on-failure -j "${PLEXUS_JOBS:-$(nproc)}" "$@"
