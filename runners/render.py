"""Render the Helm values of each runner class (classes.toml) for the official ARC runner scale set
chart.

    python runners/render.py            write runners/values/<class>.yaml
    python runners/render.py --check    exit 1 if a committed values file differs from its rendering

One values file per class, installed with
    helm install <class> oci://ghcr.io/actions/actions-runner-controller-charts/gha-runner-scale-set \
        -n arc-runners -f runners/values/<class>.yaml
Scale-set runners are ephemeral: each takes one job and its pod is deleted.
"""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
from pytest_rocm.hw.skus import AMD_DEVICE_IDS  # noqa: E402

IMAGE = "ghcr.io/your-org/pytest-rocm-runner:0.1.0"  # built from runners/Dockerfile; set your registry's
HOOKS = {
    "ACTIONS_RUNNER_HOOK_JOB_STARTED": "/opt/pytest-rocm/hooks/job-started.sh",
    "ACTIONS_RUNNER_HOOK_JOB_COMPLETED": "/opt/pytest-rocm/hooks/job-completed.sh",
}
# The AMD GPU node labeller labels each node with its GPUs' PCI device id (without 0x).
DEVICE_ID_LABEL = "amd.com/gpu.device-id"


def classes() -> dict[str, dict]:
    return tomllib.loads((HERE / "classes.toml").read_text(encoding="utf-8"))["class"]


def device_ids(sku: str) -> list[str]:
    return sorted(device[2:] for device, (name, _) in AMD_DEVICE_IDS.items() if name == sku)


def values(name: str, spec: dict) -> dict:
    gpus = str(spec["gpus"])
    env = [{"name": key, "value": path} for key, path in HOOKS.items()] + [
        {"name": "PYTEST_ROCM_SKU", "value": spec["sku"]},
        {"name": "PYTEST_ROCM_GPUS", "value": gpus},
        {"name": "PYTEST_ROCM_RUNNER", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
    ]
    return {
        "githubConfigUrl": "https://github.com/your-org",
        "githubConfigSecret": "pytest-rocm-github-app",
        "runnerScaleSetName": name,
        "minRunners": 0,
        "maxRunners": spec["max_runners"],
        "template": {
            "metadata": {
                "labels": {"app.kubernetes.io/part-of": "pytest-rocm", "pytest-rocm/class": name}
            },
            "spec": {
                "serviceAccountName": "pytest-rocm-runner",
                "restartPolicy": "Never",
                "affinity": {
                    "nodeAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": {
                            "nodeSelectorTerms": [
                                {
                                    "matchExpressions": [
                                        {
                                            "key": DEVICE_ID_LABEL,
                                            "operator": "In",
                                            "values": device_ids(spec["sku"]),
                                        }
                                    ]
                                }
                            ]
                        }
                    }
                },
                "tolerations": [
                    {"key": "amd.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
                ],
                "securityContext": {
                    "runAsUser": 1001,
                    "runAsNonRoot": True,
                    "supplementalGroups": [44],
                },
                "containers": [
                    {
                        "name": "runner",
                        "image": IMAGE,
                        "command": ["/home/runner/run.sh"],
                        "env": env,
                        # The device plugin gives the container /dev/kfd and the /dev/dri render
                        # nodes of its GPUs.
                        "resources": {
                            "limits": {"amd.com/gpu": gpus},
                            "requests": {"amd.com/gpu": gpus},
                        },
                        "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"}],
                    }
                ],
                "volumes": [
                    {
                        "name": "dshm",
                        "emptyDir": {"medium": "Memory", "sizeLimit": spec["shm_size"]},
                    }
                ],
            },
        },
    }


def rendered() -> dict[Path, str]:
    header = (
        "# Rendered by runners/render.py from runners/classes.toml: change those, not this file.\n"
    )
    return {
        HERE / "values" / f"{name}.yaml": header
        + yaml.safe_dump(values(name, spec), sort_keys=False)
        for name, spec in classes().items()
    }


def main(argv: list[str]) -> int:
    files = rendered()
    if "--check" in argv:
        stale = [
            str(path)
            for path, text in files.items()
            if not path.is_file() or path.read_text() != text
        ]
        for path in stale:
            print(
                f"{path}: differs from its rendering; run `python runners/render.py`",
                file=sys.stderr,
            )
        return 1 if stale else 0
    for path, text in files.items():
        path.parent.mkdir(exist_ok=True)
        path.write_text(text)
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
