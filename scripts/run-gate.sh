#!/usr/bin/env bash
# The main job on this machine: show the platform, run the gate suites with the reports written.
# Reports land in out/gate/ (gate-report.json, manifest.json, junit.xml, records-*.jsonl).
# Exit status: 0 for conclusion success or neutral, 1 for failure (a blocking gate failed).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup-env.sh test
out="${PYTEST_ROCM_OUT:-out/gate}"
mkdir -p "$out"
.venv/bin/rocm-gate doctor || true   # informational here; runners use --expect-gpus/--expect-sku
set +e
.venv/bin/python -m pytest suites/demo -n 2 -p no:cacheprovider \
    --rocm-report-dir "$out" --junitxml "$out/junit.xml" "$@"
status=$?
set -e
conclusion=$(.venv/bin/python -c "import json,sys; print(json.load(open(sys.argv[1]))['conclusion'])" "$out/gate-report.json")
echo "gate conclusion: $conclusion (pytest exit status $status); reports in $out/"
[ "$conclusion" != "failure" ]
