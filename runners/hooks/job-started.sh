#!/usr/bin/env bash
# ACTIONS_RUNNER_HOOK_JOB_STARTED: the runner proves itself (preflight layers 1-3) before the job's first step.
# A non-zero exit fails the job before it runs, with the reason in the job log: a bad node never judges a PR.
set -uo pipefail
out="${RUNNER_TEMP:-/tmp}/pytest-rocm-preflight.json"
args=(preflight --require hardware,framework --out "$out"
      --sku "${PYTEST_ROCM_SKU:?set by the runner class}" --expect-gpus "${PYTEST_ROCM_GPUS:?set by the runner class}")
[ -f /etc/pytest-rocm/image.json ] && args+=(--stack /etc/pytest-rocm/image.json)
[ -n "${PYTEST_ROCM_EXPECT_STACK:-}" ] && args+=(--expect-stack "$PYTEST_ROCM_EXPECT_STACK")
[ "${PYTEST_ROCM_PREFLIGHT_BENCHMARKS:-0}" = 1 ] && args+=(--benchmarks)
rocm-gate "${args[@]}"
status=$?
if [ "$status" -ne 0 ]; then
  summary=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["summary"])' "$out" 2>/dev/null \
            || echo "preflight exited with $status")
  echo "::error title=pytest-rocm preflight refused this runner::${summary}"
  exit 1
fi
