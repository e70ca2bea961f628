#!/usr/bin/env bash
# Create .venv (once) and install what Argus needs; cheap to run again (silent when .venv is up to date).
# It says what it does: a line before each step, pip's own output while it installs (progress bars only on a
# terminal, so CI logs stay plain lines), and a heartbeat line every SETUP_HEARTBEAT_S seconds (default 30)
# while pip runs, so a large download is never minutes of silence. Shared by demo.sh and test.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
say() { echo "setup: $*"; }
start=$(date +%s)
if [ ! -x .venv/bin/python ]; then
  say "setting up .venv with $("$PY" --version 2>&1) (first run: a few minutes)..."
  "$PY" -m venv .venv
fi
stamp=.venv/.argus-setup
want=$(cat pyproject.toml scripts/setup.sh | sha256sum | cut -c1-16)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  say "installing torch, triton and Argus into .venv (first run: a few minutes; torch is a large download)..."
  if [ -t 1 ]; then bar=on; else bar=off; fi
  every=${SETUP_HEARTBEAT_S:-30}
  ( while sleep "$every" >/dev/null 2>&1; do say "still installing ($(( $(date +%s) - start )) s)..."; done ) &
  heartbeat=$!
  trap 'kill "$heartbeat" 2>/dev/null || true' EXIT
  # torch 2.13.0 is the CPU build (a local file on our machines); triton 3.6 matches the GPU
  # machines' compiler so its interpreter behaves the same; numpy < 2.4 for that interpreter.
  .venv/bin/python -m pip install --disable-pip-version-check --progress-bar "$bar" \
    "torch==2.13.0" "triton==3.6.*" "numpy<2.4"
  .venv/bin/python -m pip install --disable-pip-version-check --progress-bar "$bar" -e ".[dev,hf]"
  kill "$heartbeat" 2>/dev/null || true
  trap - EXIT
  echo "$want" > "$stamp"
  say ".venv is ready ($(( $(date +%s) - start )) s)"
fi
