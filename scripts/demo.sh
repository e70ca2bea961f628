#!/usr/bin/env bash
# Set up .venv, compile a small model with backend="argus" and print what Argus did.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
exec .venv/bin/python -m argus_inductor.demo "$@"
