#!/usr/bin/env bash
# Extracts scikit-learn's 8x8 handwritten digits (digits.csv.gz, 1,797 images, 57,512 bytes) from
# Debian's python3-sklearn package without installing it (installing pulls numpy and scipy, never
# used here): apt-get download, then dpkg -x into a scratch folder. Prints the file's path.
#   scripts/fetch-digits.sh [DIR]     (default: build/data; writes DIR/digits.csv.gz)
# Uses Debian's own copy when python3-sklearn is installed. Exits non-zero, saying why, when the
# package cannot be downloaded (no apt lists or no network): the MIMO tests then report
# themselves skipped.
set -euo pipefail

dir="${1:-build/data}"
target="$dir/digits.csv.gz"
installed=/usr/lib/python3/dist-packages/sklearn/datasets/data/digits.csv.gz
mkdir -p "$dir"
if [ -s "$target" ]; then
  echo "$target"
  exit 0
fi
if [ -s "$installed" ]; then
  cp "$installed" "$target"
  echo "$target"
  exit 0
fi
command -v apt-get >/dev/null || { echo "fetch-digits: needs apt-get (Debian 12)" >&2; exit 1; }
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
if ! (cd "$scratch" && apt-get -q -o APT::Sandbox::User=root download python3-sklearn >/dev/null 2>&1); then
  echo "fetch-digits: 'apt-get download python3-sklearn' failed (are the apt lists current? try apt-get update)" >&2
  exit 1
fi
dpkg -x "$scratch"/python3-sklearn_*.deb "$scratch/x"
found="$scratch/x$installed"
[ -s "$found" ] || { echo "fetch-digits: the package holds no $installed" >&2; exit 1; }
cp "$found" "$target.tmp" && mv "$target.tmp" "$target"
echo "$target"
