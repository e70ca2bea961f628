#!/usr/bin/env bash
# Set up .venv, compile a small Llama-style model with backend="argus" and print what Argus did, then what to
# do next (the signatures it recorded for `argus warmup`).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
echo "demo: compiling a small Llama-style model with backend=\"argus\" (without a GPU: the Triton interpreter," \
     "a minute or so)..."
exec .venv/bin/python -m argus_inductor.demo "$@"
