#!/usr/bin/env bash
# The README's second command (and CI's): installs what is missing, then builds and tests two
# configurations, each with warnings as errors (PLEXUS_WARNINGS_AS_ERRORS=ON):
#   1. the main build, build/: g++ (the default compiler), Release (what users build; its -O3
#      brings out warnings that -O2 does not; PLEXUS_TEST_BUILD_TYPE, else PLEXUS_BUILD_TYPE,
#      changes it), every suite through ctest. Extra arguments go to this ctest, e.g.
#      scripts/test.sh -L unit. It is scripts/quickstart.sh's build (scripts/lib/builds.sh), so
#      after quickstart.sh nothing is recompiled;
#   2. a second compiler, build-clang/: clang++ Release without CUDA (another compiler's warnings
#      and code generation), the unit tests. PLEXUS_TEST_SECOND_BUILD=0 skips it.
# PLEXUS_BUILD_DIR moves the first, PLEXUS_CLANG_BUILD_DIR the second (default: the first's name
# with -clang appended).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
jobs="${PLEXUS_JOBS:-$(nproc)}"
build="${PLEXUS_BUILD_DIR:-$root/build}"
clang_build="${PLEXUS_CLANG_BUILD_DIR:-$build-clang}"
"$root/scripts/install-deps.sh"
# The tokenizer interop tests need Hugging Face's tokenizers from PyPI; without it they report
# themselves skipped and the rest of the suite runs all the same.
if ! "$root/scripts/python-env.sh"; then
  echo "test.sh: !!! WARNING: scripts/python-env.sh failed: the tokenizers interop tests will be SKIPPED !!!" >&2
fi

# The MIMO tests train on scikit-learn's digits, extracted from Debian's python3-sklearn into the
# build folder; without it they report themselves skipped.
if ! "$root/scripts/fetch-digits.sh" "${PLEXUS_BUILD_DIR:-$root/build}/data" >/dev/null; then
  echo "test.sh: !!! WARNING: scripts/fetch-digits.sh failed: the MIMO digits tests will be SKIPPED !!!" >&2
fi

# The build type of quickstart.sh's build unless told otherwise, so that one build serves both.
type="${PLEXUS_TEST_BUILD_TYPE:-${PLEXUS_BUILD_TYPE:-Release}}"
echo "== test.sh: g++ $type ($build)"
# quickstart.sh's build with warnings as errors demanded: on the checked compilers the same
# build, so after quickstart.sh nothing is recompiled (scripts/lib/builds.sh).
# shellcheck source=lib/builds.sh
source "$root/scripts/lib/builds.sh"
PLEXUS_BUILD_DIR="$build" PLEXUS_BUILD_TYPE="$type" plexus_test_build
ctest --test-dir "$build" --output-on-failure -j "$jobs" "$@"

if [ "${PLEXUS_TEST_SECOND_BUILD:-1}" != 0 ]; then
  echo "== test.sh: clang++ Release, no CUDA ($clang_build)"
  PLEXUS_BUILD_DIR="$clang_build" PLEXUS_BUILD_TYPE=Release "$root/scripts/build.sh" \
    -DPLEXUS_WARNINGS_AS_ERRORS=ON -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
    -DPLEXUS_WITH_CUDA=OFF
  ctest --test-dir "$clang_build" --output-on-failure -j "$jobs" -L unit
fi
