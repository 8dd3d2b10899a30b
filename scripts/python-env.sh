#!/usr/bin/env bash
# Creates the Python environment of the interop tests (tests/integration/test_tokenizers_interop.cpp,
# test_tensorboard.cpp) and of scripts/gen_unicode_tables.py: a venv with Hugging Face's
# `tokenizers` and `unicodedata2`, and TensorBoard's event reader (tensorboard with the packages its
# event_accumulator imports), pinned. Nothing else needs it: the build and every other test run
# without it, and the interop tests report themselves skipped where it is missing.
#
#   scripts/python-env.sh            creates or checks <repo>/.venv (PLEXUS_VENV=DIR puts it elsewhere)
#
# The pins go together: tokenizers 0.22.2 runs its split regexes with an Oniguruma at Unicode
# 16.0.0, the version unicodedata2 16.0.0 gives the table generator. Only the two wheels are
# installed (--no-deps: the tokenizers module does not import its hub client until asked to
# download), about 10 MB; TensorBoard's reader adds about 60 MB (numpy the most).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${PLEXUS_VENV:-$root/.venv}"
python="${PLEXUS_PYTHON:-/usr/bin/python3}"
packages=(tokenizers==0.22.2 unicodedata2==16.0.0
  tensorboard==2.18.0 protobuf==5.28.3 numpy==1.26.4 absl-py==2.1.0 six==1.16.0)

ready() {
  "$venv/bin/python" - <<'PY' 2>/dev/null
import sys
import tokenizers, unicodedata2, tensorboard
from tensorboard.backend.event_processing import event_accumulator
sys.exit(0 if tokenizers.__version__ == "0.22.2" and unicodedata2.unidata_version == "16.0.0"
         and tensorboard.__version__ == "2.18.0" else 1)
PY
}

if [ -x "$venv/bin/python" ] && ready; then
  echo "python-env: $venv is ready (tokenizers 0.22.2, unicodedata2 16.0.0, tensorboard 2.18.0)"
  exit 0
fi
command -v "$python" >/dev/null || { echo "python-env: no $python (set PLEXUS_PYTHON)" >&2; exit 1; }
echo "python-env: creating $venv with ${packages[*]}"
"$python" -m venv "$venv" || {
  echo "python-env: '$python -m venv' failed (Debian: apt-get install python3-venv)" >&2
  exit 1
}
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps "${packages[@]}"
ready || { echo "python-env: $venv does not import the pinned packages" >&2; exit 1; }
echo "python-env: $venv is ready"
