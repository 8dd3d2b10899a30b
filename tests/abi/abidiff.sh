#!/usr/bin/env bash
# The ABI guard: checks that the SDK's C headers are still binary compatible with the released
# ABI baseline of their major version (sdk/abi/baseline-<major>.0.abi).
#
# It builds tests/abi/abi_anchor.c (a shared library whose exported functions reach every SDK
# type) from the CURRENT headers with debug info, dumps its ABI with abidw and compares it
# with the baseline using abidiff. Within a major version the only change allowed is the one
# docs/abi.md and plexus/abi.h allow: data members appended at the END of an extensible plx_*
# struct (plus anchors for new types). See sdk/abi/README.md.
#
# Two abidiff passes, both must be clean:
#   1. abidiff with sdk/abi/suppressions.abignore. Any bit of its exit status left set fails:
#      1/2 (tool or usage error), 4 (ABI change), 8 (incompatible change).
#   2. A leaf-change report without suppressions (harmless changes included), checked line by
#      line against the one allowed shape: "size grew, members inserted at offsets >= the old
#      size". libabigail 2.2's has_data_member_inserted_at = end also hides other changes of a
#      matching struct (a changed member type with or without an append, swapped members), and
#      abidiff counts a renamed member as harmless, so pass 1 alone would let those through.
#      Anything this pass does not recognise fails. (New enumerators of a DLPack enum, from a
#      newer dlpack.h on the build machine, are accepted.)
#
# Usage: abidiff.sh [options]
#   --cc <compiler>        C compiler for the anchor (default: $CC or cc)
#   --sdk-include <dir>    SDK headers to check (default: <repo>/sdk/include)
#   --include <dir>        extra include directory, e.g. where dlpack/dlpack.h lives (repeatable)
#   --baseline <file>      baseline to compare with (default: sdk/abi/baseline-<major>.0.abi)
#   --suppressions <file>  (default: sdk/abi/suppressions.abignore)
#   --work-dir <dir>       keep the anchor, the dump and the reports there (default: a temp dir)
#   --update-baseline      write the baseline from the current headers instead of checking;
#                          only for a new major version (see sdk/abi/README.md)
set -euo pipefail

die() {
  echo "abidiff.sh: error: $*" >&2
  exit 2
}

script_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source_dir="$(cd "$script_dir/../.." && pwd)"
cc="${CC:-cc}"
sdk_include="$source_dir/sdk/include"
extra_includes=()
baseline=""
suppressions="$source_dir/sdk/abi/suppressions.abignore"
work_dir=""
update=0

while (($#)); do
  case "$1" in
    --cc) cc="${2:?--cc needs a value}"; shift 2 ;;
    --sdk-include) sdk_include="${2:?--sdk-include needs a value}"; shift 2 ;;
    --include) extra_includes+=("-I${2:?--include needs a value}"); shift 2 ;;
    --baseline) baseline="${2:?--baseline needs a value}"; shift 2 ;;
    --suppressions) suppressions="${2:?--suppressions needs a value}"; shift 2 ;;
    --work-dir) work_dir="${2:?--work-dir needs a value}"; shift 2 ;;
    --update-baseline) update=1; shift ;;
    -h | --help) sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
done

for tool in abidw abidiff; do
  command -v "$tool" >/dev/null ||
    die "'$tool' not found: install libabigail's tools (Debian/Ubuntu: apt-get install abigail-tools)"
done
command -v "$cc" >/dev/null || die "C compiler '$cc' not found (pass --cc or set CC)"
[[ -f "$sdk_include/plexus/abi.h" ]] || die "no SDK headers at '$sdk_include' (expected plexus/abi.h)"
[[ -f "$suppressions" ]] || die "suppression file '$suppressions' not found"

major="$(sed -n 's/^#define PLX_ABI_MAJOR \([0-9][0-9]*\).*/\1/p' "$sdk_include/plexus/abi.h")"
minor="$(sed -n 's/^#define PLX_ABI_MINOR \([0-9][0-9]*\).*/\1/p' "$sdk_include/plexus/abi.h")"
[[ -n "$major" && -n "$minor" ]] || die "cannot read PLX_ABI_MAJOR/PLX_ABI_MINOR from $sdk_include/plexus/abi.h"
# Every 1.y is checked against 1.0: compatibility is with the first release of the major,
# not with the previous minor, so small steps cannot add up to a break.
[[ -n "$baseline" ]] || baseline="$source_dir/sdk/abi/baseline-$major.0.abi"

if [[ -z "$work_dir" ]]; then
  work_dir="$(mktemp -d "${TMPDIR:-/tmp}/plexus-abi.XXXXXX")"
  trap 'rm -rf "$work_dir"' EXIT
else
  mkdir -p "$work_dir"
fi

anchor="$work_dir/libplexus_abi_anchor.so"
current="$work_dir/current.abi"

# -g -Og: abidw reads the types from DWARF; -Og keeps every parameter type in it.
# -fdebug-prefix-map and abidw's path options keep machine-specific paths out of the dump, so the
# committed baseline is the same whoever generates it.
"$cc" -std=c99 -g -Og -shared -fPIC -Wall -Wextra -Wpedantic -Werror \
  "-fdebug-prefix-map=$source_dir=." -I"$sdk_include" "${extra_includes[@]}" \
  -o "$anchor" "$script_dir/abi_anchor.c" ||
  die "building the ABI anchor from $sdk_include failed (see the compiler output above)"
# --no-architecture: the layouts are pinned for every LP64 target, so the same baseline serves
# x86-64 and aarch64.
abidw --no-corpus-path --no-comp-dir-path --short-locs --no-architecture --no-elf-needed \
  --out-file "$current" "$anchor" || die "abidw failed on $anchor"
# Without type information abidiff would compare symbol names only and see no change at all.
grep -q "<class-decl name='plx_host_api'" "$current" ||
  die "the ABI dump has no type information (was the anchor built without -g?)"

if ((update)); then
  cp "$current" "$baseline"
  echo "abidiff.sh: wrote $baseline from the ABI $major.$minor headers in $sdk_include"
  exit 0
fi
[[ -f "$baseline" ]] ||
  die "no baseline '$baseline' for ABI major $major; a new major needs one (abidiff.sh --update-baseline)"

echo "ABI guard: SDK headers $major.$minor ($sdk_include) against $(basename "$baseline")"

# ---- pass 1: abidiff with the suppressions -------------------------------------------------
set +e
abidiff --no-default-suppression --suppressions "$suppressions" "$baseline" "$current" \
  >"$work_dir/abidiff.txt" 2>&1
status=$?
set -e
if ((status & 3)); then
  cat "$work_dir/abidiff.txt" >&2
  die "abidiff could not compare the ABIs (exit status $status)"
fi
if ((status & 12)); then
  cat "$work_dir/abidiff.txt"
  echo
  echo "ABI guard: FAILED: abidiff reports an ABI change that a minor version must not make" \
    "(exit status $status:$( ((status & 4)) && echo ' ABI change')$( ((status & 8)) && echo ' incompatible change'))."
  echo "Only data members appended at the end of a plx_* struct (and new anchors) are allowed;"
  echo "see sdk/abi/README.md."
  exit 1
fi

# ---- pass 2: every leaf change must be an append -------------------------------------------
set +e
abidiff --no-default-suppression --leaf-changes-only --harmless "$baseline" "$current" >"$work_dir/leaf.txt" 2>&1
status=$?
set -e
if ((status & 3)); then
  cat "$work_dir/leaf.txt" >&2
  die "abidiff could not compare the ABIs (exit status $status)"
fi
# Fail-closed: a line is accepted only if it is part of the allowed shape; everything else
# (member type or offset changes, deletions, removed or changed functions, other type kinds,
# output this libabigail version words differently) is reported as a violation.
awk '
  # One message per offending block: the first line that does not fit, then the rest of the
  # block (its nested details) is skipped.
  function violation(why) {
    printf "  %s%s:\n    %s\n", (name != "" ? (is_enum ? "enum " : "struct ") name ": " : ""), why, $0
    bad++
    skipping = 1
  }
  /^$/ { inserting = 0; enumerating = 0; skipping = 0; next }
  skipping && !/^.(struct|enum) .* changed:$/ { next }
  /^Leaf changes summary: / || /^Changed leaf types summary: / { next }
  /^Removed\/Changed\/Added functions summary: / {
    if ($0 !~ /summary: 0 Removed[^,]*, 0 Changed[^,]*, [0-9]+ Added/) violation("functions removed or changed")
    next
  }
  /^Removed\/Changed\/Added variables summary: / {
    if ($0 !~ /summary: 0 Removed[^,]*, 0 Changed[^,]*, 0 Added/) violation("variables changed")
    next
  }
  /^[0-9]+ Added functions?:$/ { adding = 1; is_enum = 0; name = ""; next }
  /^  \[A\] / {
    if (!adding || $0 !~ /^  \[A\] .function void plx_abi_anchor_[A-Za-z0-9_]+\(/) violation("unexpected added function")
    next
  }
  # A newer DLPack on the build machine may know more device types: new enumerators are
  # compatible (the ones Plexus uses keep their values); any other enum change is not.
  /^.enum [A-Za-z_][A-Za-z0-9_]* at .*. changed:$/ {
    adding = 0; inserting = 0; skipping = 0; old_size = -1; is_enum = 1
    name = $2
    next
  }
  is_enum && /^  type size hasn.t changed$/ { next }
  is_enum && /^  [0-9]+ enumerator insertions?:$/ { enumerating = 1; next }
  is_enum && enumerating && /^    .[A-Za-z_][A-Za-z0-9_]*::[A-Za-z_][A-Za-z0-9_]*. value .-?[0-9]+.$/ { next }
  /^.struct [A-Za-z_][A-Za-z0-9_]* at .*. changed:$/ {
    adding = 0; inserting = 0; skipping = 0; old_size = -1; is_enum = 0; enumerating = 0
    name = $2
    # Only the extensible structs (plx_*, which start with struct_size) may grow; the value
    # structs plx_tensor_desc and the DLPack types are frozen.
    if (name !~ /^plx_/ || name == "plx_tensor_desc") violation("a frozen struct changed")
    next
  }
  /^  type size hasn.t changed$/ { violation("changed without growing (a member changed type, moved or was replaced)"); next }
  /^  type size changed from [0-9]+ to [0-9]+ \(in bits\)$/ {
    old_size = $5 + 0
    if ($7 + 0 <= old_size) violation("changed without growing")
    next
  }
  /^  [0-9]+ data member insertions?:$/ {
    if (old_size < 0) violation("members inserted without growing it")
    inserting = 1
    next
  }
  inserting && /^    .*, at offset [0-9]+ \(in bits\)/ {
    offset = $0
    sub(/.*, at offset /, "", offset)
    sub(/ .*/, "", offset)
    if (offset + 0 < old_size) violation("member inserted before the old end (offset " offset " < old size " old_size " bits)")
    appended++
    next
  }
  { violation("a change other than appended members") }
  END {
    if (bad) exit 1
    printf "%d appended data member(s) accepted\n", appended
  }
' "$work_dir/leaf.txt" >"$work_dir/leaf-check.txt" || {
  cat "$work_dir/leaf.txt"
  echo
  echo "ABI guard: FAILED: the change report contains more than appended data members:"
  cat "$work_dir/leaf-check.txt"
  echo "Only data members appended at the end of a plx_* struct (and new anchors) are allowed;"
  echo "see sdk/abi/README.md."
  exit 1
}

if grep -q "^'.* changed:\$\|^  \[A\] " "$work_dir/leaf.txt"; then
  echo "Compatible additions since the baseline:"
  sed 's/^/  /' "$work_dir/leaf.txt"
fi
echo "ABI guard: OK ($(cat "$work_dir/leaf-check.txt"))"
