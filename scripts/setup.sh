#!/usr/bin/env bash
# Create .venv (once) and install what Argus needs; cheap to run again.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
stamp=.venv/.argus-setup
want=$(cat pyproject.toml scripts/setup.sh | sha256sum | cut -c1-16)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  # torch 2.13.0 is the CPU build (a local file on our machines); triton 3.6 matches the GPU
  # machines' compiler so its interpreter behaves the same; numpy < 2.4 for that interpreter.
  .venv/bin/python -m pip install --quiet --disable-pip-version-check \
    "torch==2.13.0" "triton==3.6.*" "numpy<2.4"
  .venv/bin/python -m pip install --quiet --disable-pip-version-check -e ".[dev,hf]"
  echo "$want" > "$stamp"
fi
