"""torch: the build (HIP or CUDA) and the devices it sees, asked in a subprocess.

A subprocess, not an import: a hung GPU can hang `torch.cuda` calls (the timeout
keeps detection from hanging the run), and initialising HIP/CUDA in the pytest
controller before xdist starts its workers is what GPU test runs must avoid.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

from pytest_rocm.hw.model import Gpu
from pytest_rocm.hw.parsers import Parsed, UnexpectedOutput
from pytest_rocm.hw.skus import identify_amd, identify_nvidia, normalise_arch

TIMEOUT_S = 60

SCRIPT = r"""
import json, torch
out = {"torch": torch.__version__, "hip": getattr(torch.version, "hip", None),
       "cuda": getattr(torch.version, "cuda", None), "devices": []}
if (out["hip"] or out["cuda"]) and torch.cuda.is_available():
    for i in range(torch.cuda.device_count()):
        p = torch.cuda.get_device_properties(i)
        out["devices"].append({"name": p.name, "arch": getattr(p, "gcnArchName", ""), "memory": p.total_memory,
                               "units": p.multi_processor_count, "major": p.major, "minor": p.minor})
print(json.dumps(out))
"""


def probe(python: str = sys.executable, env: dict | None = None) -> Parsed:
    if env is None and importlib.util.find_spec("torch") is None:
        raise FileNotFoundError("torch is not installed")
    try:
        done = subprocess.run(
            [python, "-c", SCRIPT], capture_output=True, text=True, timeout=TIMEOUT_S, env=env
        )
    except subprocess.TimeoutExpired as exc:
        raise TimeoutError(f"torch did not answer in {TIMEOUT_S} s (hung GPU or driver?)") from exc
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise RuntimeError(f"torch failed: {last}")
    try:
        return parse(done.stdout.strip().splitlines()[-1])
    except (IndexError, json.JSONDecodeError) as exc:
        raise UnexpectedOutput(f"torch probe printed no JSON: {done.stdout[-200:]!r}") from exc


def parse(text: str) -> Parsed:
    data = json.loads(text)
    parsed = Parsed(versions={"torch": data["torch"]})
    hip, cuda = data.get("hip"), data.get("cuda")
    if hip:
        parsed.versions["hip"] = hip
    elif cuda:
        parsed.versions["cuda"] = cuda
    for index, device in enumerate(data.get("devices", [])):
        memory = round(device["memory"] / 1024**3, 1)
        if hip:
            sku, arch = identify_amd(
                device["name"], normalise_arch(device.get("arch")), None, memory, device["units"]
            )
        else:
            sku, arch = identify_nvidia(device["name"], f"{device['major']}.{device['minor']}")
        parsed.gpus.append(
            Gpu(
                index=index,
                vendor="amd" if hip else "nvidia",
                sku=sku,
                arch=arch,
                raw_name=device["name"],
                memory_gb=memory,
                compute_units=device["units"] if hip else None,
            )
        )
    return parsed
