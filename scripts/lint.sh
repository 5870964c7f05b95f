#!/usr/bin/env bash
# The project's linters, as .ci/run and the pre-commit hooks run them: ruff (lint, complexity and format,
# pinned in pyproject.toml's `test` extra, configured in its [tool.ruff]), mypy's ratchet (its errors may only
# shrink: scripts/mypy-ratchet.py), then the workflows' three linters.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -x .venv/bin/ruff ] || ! .venv/bin/python -c "import mypy" 2>/dev/null; then
    bash scripts/setup-env.sh test
fi
.venv/bin/ruff check .
.venv/bin/ruff format --check .
# mypy's errors may only shrink (mypy-baseline.txt)
.venv/bin/python scripts/mypy-ratchet.py
bash scripts/lint-workflows.sh
