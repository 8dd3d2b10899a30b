#!/usr/bin/env bash
# Builds the SDK's example plugins (sdk/examples/cpp_layer and c_layer) the way a third party
# would: against an INSTALLED Plexus, found only through find_package(PlexusSDK), each in its own
# fresh CMake build. The C++ plugin is built with clang++ and libc++ (Plexus itself uses g++ and
# libstdc++), so the load test that follows (external_plugins_test.cpp) proves the plugin
# boundary really is compiler- and standard-library-neutral.
#
# Runs as the ctest fixture integration.external_plugins_build:
#   out_of_tree.sh --build-dir <Plexus build> --source-dir <Plexus source> --out-dir <dir>
#                  [--cmake <cmake>]
# Leaves <out-dir>/cpp_layer/libplexus_example_cpp.so and <out-dir>/c_layer/libplexus_example_c.so.
set -euo pipefail

die() {
  echo "out_of_tree.sh: error: $*" >&2
  exit 1
}

build_dir=""
source_dir=""
out_dir=""
cmake_bin="cmake"
while (($#)); do
  case "$1" in
    --build-dir) build_dir="${2:?--build-dir needs a value}"; shift 2 ;;
    --source-dir) source_dir="${2:?--source-dir needs a value}"; shift 2 ;;
    --out-dir) out_dir="${2:?--out-dir needs a value}"; shift 2 ;;
    --cmake) cmake_bin="${2:?--cmake needs a value}"; shift 2 ;;
    -h | --help) sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
done
[[ -n "$build_dir" && -n "$source_dir" && -n "$out_dir" ]] || die "--build-dir, --source-dir and --out-dir are required"
[[ -f "$build_dir/CMakeCache.txt" ]] || die "'$build_dir' is not a configured Plexus build directory"
[[ -d "$source_dir/sdk/examples" ]] || die "'$source_dir' has no sdk/examples"

# ---- toolchain: fail loudly, naming the package, rather than skipping --------------------
for tool in "$cmake_bin" ninja gcc readelf nm; do
  command -v "$tool" >/dev/null || die "'$tool' is required but not found in PATH"
done
command -v clang++ >/dev/null ||
  die "clang++ not found: the C++ example is built with clang++ and libc++ to prove plugins need not" \
    "share Plexus's compiler or standard library (Debian/Ubuntu: apt-get install clang libc++-dev libc++abi-dev)"

tmp="$(mktemp -d "${TMPDIR:-/tmp}/plexus-out-of-tree.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT

# A program that includes a libc++ header and links, so a missing libc++ shows up here with a
# clear message rather than as a compile error deep inside the example's build.
printf '#include <string>\nint main() { std::string s("libc++"); return s.size() == 6 ? 0 : 1; }\n' >"$tmp/probe.cpp"
if ! clang++ -std=c++17 -stdlib=libc++ "$tmp/probe.cpp" -o "$tmp/probe" >"$tmp/probe.log" 2>&1; then
  cat "$tmp/probe.log" >&2
  die "clang++ -stdlib=libc++ cannot build a program: libc++ is missing" \
    "(Debian/Ubuntu: apt-get install libc++-dev libc++abi-dev)"
fi

# ---- 1. install Plexus (the SDK is what matters; everything else comes along) -------------
prefix="$tmp/prefix"
echo "== installing $build_dir into a scratch prefix"
if ! "$cmake_bin" --install "$build_dir" --prefix "$prefix" >"$tmp/install.log" 2>&1; then
  cat "$tmp/install.log" >&2
  die "cmake --install failed (is the build complete? run cmake --build first)"
fi
[[ -f "$prefix/lib/cmake/PlexusSDK/PlexusSDKConfig.cmake" ]] ||
  die "the install has no lib/cmake/PlexusSDK/PlexusSDKConfig.cmake"

# ---- 2. configure and build each example in a fresh directory ------------------------------
# build_example <name> <cmake args...>
build_example() {
  local name="$1"
  shift
  local dir="$out_dir/$name"
  echo "== building sdk/examples/$name in $dir"
  rm -rf "$dir"
  mkdir -p "$dir"
  # The package registry is off so that only the scratch prefix can provide PlexusSDK.
  if ! "$cmake_bin" -S "$source_dir/sdk/examples/$name" -B "$dir" -G Ninja \
    -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF \
    -DCMAKE_FIND_USE_SYSTEM_PACKAGE_REGISTRY=OFF -DEXAMPLE_WARNINGS_AS_ERRORS=ON "$@" \
    >"$dir/configure.log" 2>&1; then
    cat "$dir/configure.log" >&2
    die "configuring sdk/examples/$name against the installed SDK failed"
  fi
  local found
  found="$(sed -n 's/^PlexusSDK_DIR:PATH=//p' "$dir/CMakeCache.txt")"
  [[ "$found" == "$prefix/lib/cmake/PlexusSDK" ]] ||
    die "sdk/examples/$name found PlexusSDK in '$found', not in the scratch install '$prefix'"
  if ! "$cmake_bin" --build "$dir" >"$dir/build.log" 2>&1; then
    cat "$dir/build.log" >&2
    die "building sdk/examples/$name failed"
  fi
}

build_example cpp_layer -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_CXX_FLAGS=-stdlib=libc++
build_example c_layer -DCMAKE_C_COMPILER=gcc

cpp_plugin="$out_dir/cpp_layer/libplexus_example_cpp.so"
c_plugin="$out_dir/c_layer/libplexus_example_c.so"
for plugin in "$cpp_plugin" "$c_plugin"; do
  [[ -f "$plugin" ]] || die "the build did not produce $plugin"
done

# ---- 3. check the results from the outside -------------------------------------------------
needed() { readelf -d "$1" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'; }

# Exactly one export: the entry point (plexus_add_plugin's version script hides the rest).
for plugin in "$cpp_plugin" "$c_plugin"; do
  exports="$(nm -D --defined-only "$plugin" | awk '{ sub(/@.*/, "", $3); print $3 }' | sort -u | tr '\n' ' ')"
  [[ "$exports" == "plexus_plugin_entry_v1 " ]] ||
    die "$(basename "$plugin") must export only plexus_plugin_entry_v1, exports: $exports"
  if needed "$plugin" | grep -q '^libplexus_core'; then
    die "$(basename "$plugin") depends on libplexus_core; a plugin gets everything through plx_host_api"
  fi
done

# The C++ plugin really runs on libc++: it needs libc++.so and not libstdc++.
cpp_needed="$(needed "$cpp_plugin" | tr '\n' ' ')"
grep -q 'libc++\.so' <<<"$cpp_needed" ||
  die "$(basename "$cpp_plugin") was meant to be built against libc++ but needs: $cpp_needed"
if grep -q 'libstdc++' <<<"$cpp_needed"; then
  die "$(basename "$cpp_plugin") needs libstdc++ as well as libc++: $cpp_needed"
fi
# The C plugin needs no C++ runtime at all.
c_needed="$(needed "$c_plugin" | tr '\n' ' ')"
if grep -q 'libc++\|libstdc++' <<<"$c_needed"; then
  die "$(basename "$c_plugin") is plain C but needs a C++ runtime: $c_needed"
fi

# The host refuses plugin files and directories that others may write; a permissive umask on
# the machine running the tests must not make the load test fail for the wrong reason.
chmod go-w "$out_dir" "$out_dir/cpp_layer" "$out_dir/c_layer" "$cpp_plugin" "$c_plugin"

echo "== ok"
echo "   $cpp_plugin (clang++ + libc++; needs: $cpp_needed)"
echo "   $c_plugin (gcc, C99; needs: $c_needed)"
