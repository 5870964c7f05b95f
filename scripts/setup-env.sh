#!/usr/bin/env bash
# Create .venv (once) and install pytest-rocm with what the given extras need. Safe to rerun.
set -euo pipefail
cd "$(dirname "$0")/.."
extras="${1:-test}"
if [ ! -x .venv/bin/python ]; then
    python3 -m venv .venv
fi
.venv/bin/python -m pip install --quiet --disable-pip-version-check -e ".[${extras}]"
