#!/usr/bin/env bash
# Installs the Debian 12 packages Plexus builds and tests with, skipping those already present.
# Runs apt-get as root, or through sudo when not root.
set -euo pipefail

packages=(
  cmake ninja-build g++ pkg-config
  clang libc++-dev libc++abi-dev          # the out-of-tree clang/libc++ plugin test
  libboost1.81-dev libboost-json1.81-dev libboost-program-options1.81-dev libboost-test1.81-dev
  libdlpack-dev                           # DLPack: tensors across the plugin boundary
  libopenblas-dev                         # CPU math
  libopenmpi-dev openmpi-bin              # multi-process runs
  abigail-tools                           # abidiff: the ABI guard
  binutils                                # nm / readelf for the export checks
  python3-numpy python3-torch             # reference implementations for parity tests (/usr/bin/python3)
  python3-venv                            # scripts/python-env.sh: the tokenizer interop tests' venv
  libomp-dev                              # OpenMP for clang: test.sh's second build
  python3-pil fonts-dejavu-core           # the plots of scripts/mhc_compare.py
  fortunes                                # the default run's corpus (/usr/share/games/fortunes)
  zlib1g-dev                              # plexus data digits reads scikit-learn's gzip'd digits
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages present"
  exit 0
fi

sudo_cmd=()
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "install-deps: need root or sudo to install: ${missing[*]}" >&2; exit 1; }
  sudo_cmd=(sudo)
fi
echo "install-deps: installing ${missing[*]}"
"${sudo_cmd[@]}" apt-get update -qq
DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
