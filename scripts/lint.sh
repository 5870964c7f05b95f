#!/usr/bin/env bash
# The project's linters, as .ci/run and the pre-commit hooks run them: ruff (lint and format, pinned in
# pyproject.toml's `test` extra, configured in its [tool.ruff]), then the workflows' three linters.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -x .venv/bin/ruff ]; then
    bash scripts/setup-env.sh test
fi
.venv/bin/ruff check .
.venv/bin/ruff format --check .
bash scripts/lint-workflows.sh
