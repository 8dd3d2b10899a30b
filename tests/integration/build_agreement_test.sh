#!/usr/bin/env bash
# The README's two commands build once: scripts/quickstart.sh's build followed by scripts/test.sh's
# (their invocations, scripts/lib/builds.sh) compiles nothing the second time. Cheap: both
# configure into a scratch directory and build one object file; then every compile command of the
# two configurations must be identical (so no target of the ~490 would be rebuilt), and ninja,
# asked by the second for the object the first built, must say there is no work to do. Exit 77 (skipped) when the
# compiler is not one the code is checked with: there quickstart builds without -Werror and
# test.sh with it by design (cmake/PlexusWarnings.cmake).
#   build_agreement_test.sh SOURCE_DIR WORK_DIR
set -euo pipefail
root="$1"
work="$2"
rm -rf "$work"
mkdir -p "$work"
export PLEXUS_BUILD_DIR="$work/build"
export PLEXUS_JOBS=1
# One object of the core, built by the first configuration and checked after the second.
object="framework/CMakeFiles/plexus_core.dir/src/hash/xxhash64.cpp.o"
export PLEXUS_BUILD_TARGETS="$object"
# shellcheck source=../../scripts/lib/builds.sh
source "$root/scripts/lib/builds.sh"

echo "== quickstart.sh's build"
plexus_quickstart_build >"$work/quickstart.log" 2>&1 || { cat "$work/quickstart.log"; exit 1; }
if ! grep -q "^PLEXUS_WARNINGS_AS_ERRORS_IN_EFFECT:INTERNAL=ON" "$work/build/CMakeCache.txt"; then
  grep "warnings as errors" "$work/quickstart.log" || true
  echo "skipped: this compiler is not one the code is checked with, so quickstart.sh builds without -Werror"
  exit 77
fi
cp "$work/build/compile_commands.json" "$work/quickstart.json"

echo "== test.sh's build"
plexus_test_build >"$work/test.log" 2>&1 || { cat "$work/test.log"; exit 1; }
if ! diff -u "$work/quickstart.json" "$work/build/compile_commands.json" >"$work/diff.txt"; then
  echo "FAIL: test.sh's configuration changes compile commands that quickstart.sh's made; every" \
    "object would be compiled again:"
  head -40 "$work/diff.txt"
  exit 1
fi
# What ninja itself said when test.sh's build asked for the object the first build made. (Not
# `ninja -n`: the project's CONFIGURE_DEPENDS globs make a dry run always list their re-check and
# the CMake re-run it may lead to; a real run checks the globs, finds them unchanged and stops.)
if ! grep -q "^ninja: no work to do" "$work/test.log" || grep -q "Building\|Linking" "$work/test.log"; then
  echo "FAIL: after test.sh's configuration ninja rebuilt $object:"
  cat "$work/test.log"
  exit 1
fi
echo "OK: $(grep -c '"command"' "$work/quickstart.json") compile commands identical; ninja: no work to do"
rm -rf "$work"
