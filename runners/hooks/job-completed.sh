#!/usr/bin/env bash
# ACTIONS_RUNNER_HOOK_JOB_COMPLETED: nothing may outlive the job on the GPUs. A process still holding a GPU
# (or its memory) poisons the next job's timings and memory, so the node is labelled for draining and the
# job log says which process it was. Labelling needs the runner's service account (rbac.yaml: patch nodes).
set -uo pipefail
left=$(amd-smi process --json 2>/dev/null | python3 -c '
import json, sys
try:
    data = json.load(sys.stdin)
except ValueError:
    sys.exit(0)
found = []
for gpu in data if isinstance(data, list) else [data]:
    for entry in gpu.get("process_list", []) or []:
        info = entry.get("process_info", entry)
        if isinstance(info, dict) and info.get("pid"):
            found.append(f"GPU {gpu.get(\"gpu\")}: pid {info[\"pid\"]} {info.get(\"name\", \"?\")}")
print("; ".join(found))
')
if [ -n "$left" ]; then
  echo "::error title=GPU work left behind after the job::${left}"
  if [ -n "${NODE_NAME:-}" ] && command -v kubectl >/dev/null; then
    kubectl label node "$NODE_NAME" pytest-rocm/drain=leftover-gpu-process --overwrite \
      || echo "::warning::could not label node $NODE_NAME for draining"
  fi
  exit 1
fi
