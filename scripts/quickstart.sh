#!/usr/bin/env bash
# The README's first command: installs what is missing, builds, and runs the main job on the
# embedded default config.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$root/scripts/install-deps.sh"
"$root/scripts/build.sh"
bin="${PLEXUS_BUILD_DIR:-$root/build}/bin"
echo
echo "== plexus plugins list"
"$bin/plexus" plugins list
echo
echo "== plexus config check --default"
"$bin/plexus" config check --default
