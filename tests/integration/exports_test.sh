#!/usr/bin/env bash
# Checks every in-tree plugin library (ctest abi.exports):
#   - it exports exactly one dynamic symbol, plexus_plugin_entry_v1. Anything more could bind to
#     another plugin's symbols (or theirs to it) and break the moment two plugins disagree;
#   - it has no DT_NEEDED on libplexus_core. Plugins reach the host only through plx_host_api, which
#     is what lets them be built by other compilers and standard libraries than the core.
#
# Usage: exports_test.sh <plugin directory>      (normally <build>/lib/plexus/plugins)
# An empty or missing directory passes with a note: not every configuration builds plugins.
set -euo pipefail

die() {
  echo "exports_test.sh: error: $*" >&2
  exit 2
}

(($# == 1)) || die "usage: exports_test.sh <plugin directory>"
plugin_dir="$1"
for tool in nm readelf; do
  command -v "$tool" >/dev/null || die "'$tool' not found (Debian/Ubuntu: apt-get install binutils)"
done

shopt -s nullglob
plugins=("$plugin_dir"/*.so)
if ((${#plugins[@]} == 0)); then
  echo "no in-tree plugins in $plugin_dir: nothing to check"
  exit 0
fi

failures=0
for plugin in "${plugins[@]}"; do
  name="$(basename "$plugin")"
  problems=()

  # Defined dynamic symbols, without version suffixes (name@VERSION / name@@VERSION).
  if ! symbols="$(nm -D --defined-only "$plugin" 2>&1)"; then
    problems+=("nm failed: $symbols")
  else
    exports="$(awk 'NF >= 3 { sub(/@.*/, "", $3); print $3 }' <<<"$symbols" | sort -u)"
    if [[ "$exports" != "plexus_plugin_entry_v1" ]]; then
      problems+=("exports $(wc -l <<<"$exports") symbol(s) instead of only plexus_plugin_entry_v1:")
      while IFS= read -r line; do problems+=("    $line"); done <<<"$symbols"
    fi
  fi

  if ! dynamic="$(readelf -d "$plugin" 2>&1)"; then
    problems+=("readelf failed: $dynamic")
  else
    needed="$(sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' <<<"$dynamic")"
    if grep -q '^libplexus_core' <<<"$needed"; then
      problems+=("links the core library (NEEDED $(grep '^libplexus_core' <<<"$needed" | tr '\n' ' ' | sed 's/ $//')); a plugin gets everything from the host through plx_host_api")
    fi
  fi

  if ((${#problems[@]})); then
    echo "FAIL $name"
    printf '  %s\n' "${problems[@]}"
    failures=$((failures + 1))
  else
    echo "ok   $name (exports plexus_plugin_entry_v1; needs: $(tr '\n' ' ' <<<"$needed"))"
  fi
done

if ((failures)); then
  echo "$failures of ${#plugins[@]} plugin(s) in $plugin_dir break the export rules" \
    "(build them with plexus_add_plugin, which applies the version script and --no-undefined)"
  exit 1
fi
echo "all ${#plugins[@]} plugin(s) in $plugin_dir export only plexus_plugin_entry_v1 and do not link the core"
