#!/usr/bin/env bash
# Creates the Python environment of the interop tests (tests/integration/test_tokenizers_interop.cpp,
# test_tensorboard.cpp) and of scripts/gen_unicode_tables.py: a venv with Hugging Face's
# `tokenizers` and `unicodedata2`, and TensorBoard's event reader (tensorboard with the packages its
# event_accumulator imports), pinned; and a second one with transformers (below). Nothing else
# needs them: the build and every other test run without them, and the interop tests report
# themselves skipped where they are missing.
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

# The Hugging Face export test's (tests/integration/test_hf_export.cpp) second venv, <repo>/.venv-hf
# (PLEXUS_HF_VENV): transformers on Debian's python3-torch (1.13, seen through the system site
# packages; transformers 4.38 is the newest that runs on it), with the packages it imports, pinned;
# and megatron-core, whose dataset code test_megatron_data runs (its wheel alone, 17 MB: the
# dataset modules run on Debian's torch when entered without megatron.core's package __init__).
hf_venv="${PLEXUS_HF_VENV:-$root/.venv-hf}"
hf_packages=(transformers==4.38.2 huggingface_hub==0.21.4 tokenizers==0.15.2 safetensors==0.4.2
  regex==2023.12.25 tqdm==4.66.2 filelock==3.13.1 packaging==23.2 pyyaml==6.0.1 requests==2.31.0
  urllib3==2.2.1 idna==3.6 charset-normalizer==3.3.2 certifi==2024.2.2 fsspec==2024.2.0
  typing_extensions==4.10.0 megatron-core==0.16.1)

hf_ready() {
  "$hf_venv/bin/python" - <<'PY' 2>/dev/null
import sys
import torch, transformers
from transformers import LlamaForCausalLM
from importlib.metadata import version
sys.exit(0 if transformers.__version__ == "4.38.2" and version("megatron-core") == "0.16.1" else 1)
PY
}

make_venv() {  # DIR, venv options...
  local dir="$1"
  shift
  command -v "$python" >/dev/null || { echo "python-env: no $python (set PLEXUS_PYTHON)" >&2; exit 1; }
  "$python" -m venv "$@" "$dir" || {
    echo "python-env: '$python -m venv' failed (Debian: apt-get install python3-venv)" >&2
    exit 1
  }
}

if [ -x "$venv/bin/python" ] && ready; then
  echo "python-env: $venv is ready (tokenizers 0.22.2, unicodedata2 16.0.0, tensorboard 2.18.0)"
else
  echo "python-env: creating $venv with ${packages[*]}"
  make_venv "$venv"
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps "${packages[@]}"
  ready || { echo "python-env: $venv does not import the pinned packages" >&2; exit 1; }
  echo "python-env: $venv is ready"
fi

if [ -x "$hf_venv/bin/python" ] && hf_ready; then
  echo "python-env: $hf_venv is ready (transformers 4.38.2 and megatron-core 0.16.1 on the system's torch)"
  exit 0
fi
if ! "$python" -c 'import torch' 2>/dev/null; then
  echo "python-env: $python cannot import torch (Debian: python3-torch): no $hf_venv" >&2
  exit 1
fi
echo "python-env: creating $hf_venv with ${hf_packages[*]}"
make_venv "$hf_venv" --system-site-packages
"$hf_venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps "${hf_packages[@]}"
hf_ready || { echo "python-env: $hf_venv does not import transformers" >&2; exit 1; }
echo "python-env: $hf_venv is ready"
