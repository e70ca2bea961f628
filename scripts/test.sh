#!/usr/bin/env bash
# Set up .venv and run the whole test suite on the CPU (Triton interpreter for kernels).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
.venv/bin/ruff check .
exec .venv/bin/python -m pytest -q -n 2 "$@"
