#!/usr/bin/env bash
# The project's own tests. pytest's exit status 5 (no tests collected) is a failure here, like any other.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup-env.sh suites,test
bash scripts/setup-sglang-env.sh
set +e
.venv/bin/python -m pytest tests -n 2 "$@"
status=$?
set -e
if [ "$status" -eq 5 ]; then
    echo "pytest collected no tests (exit 5): treating as a failure" >&2
    exit 1
fi
exit "$status"
