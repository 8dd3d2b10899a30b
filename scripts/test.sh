#!/usr/bin/env bash
# The README's second command (and CI's): installs what is missing, builds, and runs the whole
# test suite with ctest. Extra arguments go to ctest, e.g. scripts/test.sh -L unit.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$root/scripts/install-deps.sh"
# The tokenizer interop tests need Hugging Face's tokenizers from PyPI; without it they report
# themselves skipped and the rest of the suite runs all the same.
if ! "$root/scripts/python-env.sh"; then
  echo "test.sh: !!! WARNING: scripts/python-env.sh failed: the tokenizers interop tests will be SKIPPED !!!" >&2
fi
"$root/scripts/build.sh"
build="${PLEXUS_BUILD_DIR:-$root/build}"
ctest --test-dir "$build" --output-on-failure -j "${PLEXUS_JOBS:-$(nproc)}" "$@"
