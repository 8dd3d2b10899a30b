#!/usr/bin/env bash
# Creates the Python environment of the benchmarks' PyTorch peers (bench/train_vs_torch.py
# --peers eager,compile): a venv with current PyTorch from PyPI, pinned, and numpy. Neither the
# build nor the tests need it (the test suite's PyTorch reference is Debian's python3-torch).
#
#   scripts/bench-env.sh            creates or checks <repo>/.venv-bench (PLEXUS_BENCH_VENV=DIR elsewhere)
#
# PyPI's Linux wheel of torch is its CUDA build and imports its CUDA libraries even on a CPU-only
# machine, so they come along: about 5.4 GB on disk. torch.compile's CPU backend (inductor)
# compiles C++ with the system's g++ at run time.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${PLEXUS_BENCH_VENV:-$root/.venv-bench}"
python="${PLEXUS_PYTHON:-/usr/bin/python3}"
torch_version=2.15.0
packages=(torch=="$torch_version" numpy)

ready() {
  "$venv/bin/python" -c "import sys, torch; sys.exit(0 if torch.__version__.split('+')[0] == '$torch_version' else 1)" \
    2>/dev/null
}

if [ -x "$venv/bin/python" ] && ready; then
  echo "bench-env: $venv is ready (torch $torch_version)"
  exit 0
fi
command -v "$python" >/dev/null || { echo "bench-env: no $python (set PLEXUS_PYTHON)" >&2; exit 1; }
echo "bench-env: creating $venv with ${packages[*]} (about 5.4 GB)"
"$python" -m venv "$venv" || {
  echo "bench-env: '$python -m venv' failed (Debian: apt-get install python3-venv)" >&2
  exit 1
}
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check "${packages[@]}"
ready || { echo "bench-env: $venv does not import torch $torch_version" >&2; exit 1; }
echo "bench-env: $venv is ready"
