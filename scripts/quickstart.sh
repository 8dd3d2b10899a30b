#!/usr/bin/env bash
# The README's first command: installs what is missing, builds, and runs the main job on the
# embedded default config.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$root/scripts/install-deps.sh"
# The same build as scripts/test.sh's (scripts/lib/builds.sh): running that next recompiles nothing.
# shellcheck source=lib/builds.sh
source "$root/scripts/lib/builds.sh"
plexus_quickstart_build
bin="${PLEXUS_BUILD_DIR:-$root/build}/bin"
echo
echo "== plexus plugins list"
"$bin/plexus" plugins list
echo
echo "== plexus config check --default"
"$bin/plexus" config check --default
data="${PLEXUS_BUILD_DIR:-$root/build}/data/fortunes"
if [ ! -f "$data.idx" ]; then
  echo
  echo "== plexus data prepare (Debian's fortunes)"
  # shellcheck source=lib/fortunes.sh
  source "$root/scripts/lib/fortunes.sh"
  prepare_fortunes "$bin/plexus" "$data"
fi
echo
echo "== plexus-train (the embedded default: a tiny GPT)"
cd "$root"
"$bin/plexus-train" --set data.path="$data" --set run.output_dir="${PLEXUS_RUN_DIR:-$root/runs/default-$(date +%Y%m%d-%H%M%S)}"
