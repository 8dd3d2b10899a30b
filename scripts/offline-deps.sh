#!/usr/bin/env bash
# Builds Plexus on a machine that cannot reach a package registry (an air-gapped GPU node, a
# container image without apt sources): download the Debian packages on a machine that can, carry
# the folder over, and unpack it there into a private prefix. Nothing is installed system-wide.
#
#   scripts/offline-deps.sh download DIR          on Debian 12 (or a machine with its apt lists):
#                                                 the .deb files a CUDA build needs, into DIR
#   scripts/offline-deps.sh unpack DIR PREFIX     on the target machine: unpacks DIR's .deb files
#                                                 into PREFIX and prints the settings to build with
#   scripts/offline-deps.sh env PREFIX            prints those settings again (shell syntax)
#
# The packages are what a GPU build and its tests need and such images often lack: Boost (json,
# program_options, test), DLPack, OpenBLAS with its Fortran runtime, and Debian's fortunes (the
# default run's corpus). The compiler, CMake, Ninja and the CUDA toolkit must already be there;
# MPI is left out (the GPU checks run one process). The libraries are Debian 12's builds, so the
# target needs glibc 2.36 or newer (Ubuntu 24.04 and Debian 12 qualify).
#
# scripts/gpu-check.sh does the unpacking itself when PLEXUS_DEPS_DIR names such a folder.
set -euo pipefail

packages=(
  libboost1.81-dev
  libboost-json1.81-dev libboost-json1.81.0
  libboost-container1.81-dev libboost-container1.81.0
  libboost-system1.81-dev libboost-system1.81.0
  libboost-program-options1.81-dev libboost-program-options1.81.0
  libboost-test1.81-dev libboost-test1.81.0
  libdlpack-dev
  libopenblas-dev libopenblas-pthread-dev libopenblas0-pthread libgfortran5 libquadmath0
  fortunes-min fortunes
)
multiarch=x86_64-linux-gnu

usage() {
  sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//' >&2
  exit 2
}
die() {
  echo "offline-deps: $*" >&2
  exit 1
}

download() {
  local dir="$1"
  command -v apt-get >/dev/null || die "download needs apt-get (run it on Debian 12)"
  mkdir -p "$dir"
  dir="$(cd "$dir" && pwd)"
  # Root's downloads would otherwise warn that the _apt user cannot write into DIR.
  (cd "$dir" && apt-get -q -o APT::Sandbox::User=root download "${packages[@]}") ||
    die "apt-get download failed (are the apt lists current? try: apt-get update)"
  local count size
  count="$(find "$dir" -maxdepth 1 -name '*.deb' | wc -l)"
  size="$(du -sh "$dir" | cut -f1)"
  echo "offline-deps: $count packages ($size) in $dir"
  echo "offline-deps: on the target machine: scripts/offline-deps.sh unpack $dir PREFIX"
}

extract_deb() {
  local deb="$1" prefix="$2"
  if command -v dpkg-deb >/dev/null; then
    dpkg-deb -x "$deb" "$prefix"
    return
  fi
  # Without dpkg: a .deb is an ar archive whose data.tar.* holds the files.
  local member
  member="$(ar t "$deb" | grep '^data\.tar' | head -n 1)" || die "$deb: not a .deb (no data.tar member)"
  ar p "$deb" "$member" | tar -x -C "$prefix" -f - ||
    die "$deb: cannot extract $member (tar lacks its compression?)"
}

print_env() {
  local prefix="$1"
  local lib="$prefix/usr/lib/$multiarch"
  echo "export CMAKE_PREFIX_PATH=\"$prefix/usr\${CMAKE_PREFIX_PATH:+:\$CMAKE_PREFIX_PATH}\""
  echo "export LD_LIBRARY_PATH=\"$lib\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}\""
  echo "export PLEXUS_FORTUNES_DIR=\"$prefix/usr/share/games/fortunes\""
}

unpack() {
  local dir="$1" prefix="$2"
  [ -d "$dir" ] || die "no folder $dir (make it with: scripts/offline-deps.sh download $dir)"
  mapfile -t debs < <(find "$dir" -maxdepth 1 -name '*.deb' | sort)
  [ "${#debs[@]}" -gt 0 ] || die "$dir holds no .deb files"
  mkdir -p "$prefix"
  prefix="$(cd "$prefix" && pwd)"
  for deb in "${debs[@]}"; do extract_deb "$deb" "$prefix"; done

  # Debian points libopenblas.so and cblas.h at the chosen variant through alternatives, which an
  # unpacked package does not set up: link the pthread variant where CMake looks.
  local lib="$prefix/usr/lib/$multiarch"
  if [ -d "$lib/openblas-pthread" ]; then
    ln -sfn openblas-pthread/libopenblas.so "$lib/libopenblas.so"
    ln -sfn openblas-pthread/libopenblas.so.0 "$lib/libopenblas.so.0"
    ln -sfn "$multiarch/openblas-pthread" "$prefix/usr/include/openblas"
  fi

  # Every unpacked library must load here: list what the dynamic loader cannot find.
  local missing=""
  while IFS= read -r so; do
    local out
    out="$(LD_LIBRARY_PATH="$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" ldd "$so" 2>&1 || true)"
    if grep -q 'not found' <<<"$out"; then
      missing+="  $(basename "$so"): $(grep 'not found' <<<"$out" | awk '{print $1}' | tr '\n' ' ')"$'\n'
    fi
  done < <(find "$lib" -name '*.so*' -type f)
  if [ -n "$missing" ]; then
    printf 'offline-deps: these libraries need others that are not on this machine:\n%s' "$missing" >&2
    die "add the packages that provide them to DIR"
  fi
  echo "offline-deps: ${#debs[@]} packages unpacked into $prefix; build with:" >&2
  print_env "$prefix"
}

[ $# -ge 1 ] || usage
case "$1" in
  download) [ $# -eq 2 ] || usage; download "$2" ;;
  unpack) [ $# -eq 3 ] || usage; unpack "$2" "$3" ;;
  env) [ $# -eq 2 ] || usage; print_env "$(cd "$2" && pwd)" ;;
  -h | --help | help) usage ;;
  *) echo "offline-deps: unknown command '$1' (expected download, unpack or env)" >&2; usage ;;
esac
