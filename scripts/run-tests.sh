#!/usr/bin/env bash
# The project's own tests. pytest's exit status 5 (no tests collected) is a failure here, like any other.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup-env.sh suites,test
bash scripts/setup-sglang-env.sh
# The history store's PostgreSQL cases need a server (tests/conftest.py: postgres_server). Unless one is
# given ($ROCM_GATE_TEST_POSTGRES, as .ci/run gives it), start a throwaway one where PostgreSQL is installed,
# and require the tests to use it; where none can be had they skip, naming what is missing.
if [ -z "${ROCM_GATE_TEST_POSTGRES:-}" ] && bash scripts/postgres.sh available; then
    pgdir="$(mktemp -d /tmp/rocm-gate-pg.XXXXXX)"
    trap 'bash scripts/postgres.sh stop "$pgdir"; rm -rf "$pgdir"' EXIT
    if url="$(bash scripts/postgres.sh start "$pgdir")"; then
        export ROCM_GATE_TEST_POSTGRES="$url" ROCM_GATE_REQUIRE_POSTGRES=1
    else
        echo "run-tests: could not start PostgreSQL (above); its tests skip" >&2
    fi
fi
set +e
.venv/bin/python -m pytest tests -n 2 "$@"
status=$?
set -e
if [ "$status" -eq 5 ]; then
    echo "pytest collected no tests (exit 5): treating as a failure" >&2
    exit 1
fi
exit "$status"
