"""The device check of "a fault poisons its process": the four runs of tests/data/h100-sticky-fault/
(a device-side assert once or on every attempt, serially and under xdist, and a clean run) through
the plugin, printing what each should conclude against what it concluded, with the platform the
plugin detected and its health probe's answer.

    python benchmarks/device_check.py            # on a machine with a GPU: real PyTorch
    python benchmarks/device_check.py --standin  # anywhere: the stand-in runtime, a simulated H100

On a GPU the tests of tests/data/sticky-fault-tree/ index out of range on the device (CUDA raises a
device-side assert, sticky for the process) and the platform is detected; without one (or with
`--standin`) they run the stand-in that poisons its process as the real runtime did, on
`--rocm-platform=h100-1` (`--wording hip` for HIP's text on a simulated MI300X). Each run takes
seconds here and about 20 s on an H100 (each process imports torch): the whole check stays under 5
minutes. Exit 0 when every run concluded what is true, 1 otherwise.

What is true (the README of tests/data/h100-sticky-fault/): a fault that did not come back in a
fresh process is no regression (`neutral`: an infrastructure fault with its evidence); a fault that
came back names exactly the faulting test (`failure`, 1 regression); nothing else is blamed.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TREE = Path(__file__).resolve().parent.parent / "tests" / "data" / "sticky-fault-tree"
GATHER = "test_fault.py::test_gather_with_device_side_index"
# (name, TRIAL_MODE, xdist workers, conclusion, regressions)
RUNS = [
    ("transient", "transient", 2, "neutral", []),
    ("serial-transient", "transient", 0, "neutral", []),
    ("regression", "regression", 2, "failure", [GATHER]),
    ("serial-regression", "regression", 0, "failure", [GATHER]),
    ("clean", "clean", 2, "success", []),
]


def has_gpu() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


def run(name: str, mode: str, workers: int, standin: bool, wording: str, folder: Path) -> dict:
    tree = folder / name
    shutil.copytree(TREE, tree)
    env = {**os.environ, "TRIAL_MODE": mode, "TRIAL_STATE": str(tree / "state")}
    env.pop("PYTEST_ROCM_PLATFORM", None)
    args = [sys.executable, "-m", "pytest", "--rocm-report-dir=out", "-p", "no:cacheprovider", "-q"]
    if standin:
        env.update(STANDIN_RUNTIME="1", STANDIN_WORDING=wording)
        args.append("--rocm-platform=" + ("mi300x-1" if wording.startswith("hip") else "h100-1"))
    if workers:
        args += ["-n", str(workers)]
    started = time.monotonic()
    done = subprocess.run(args, cwd=tree, env=env, capture_output=True, text=True, timeout=240)
    seconds = time.monotonic() - started
    try:
        report = json.loads((tree / "out" / "gate-report.json").read_text())
    except (OSError, ValueError) as exc:
        return {
            "error": f"no gate report ({exc}); pytest exited {done.returncode}: {done.stdout[-2000:]}"
        }
    return {"report": report, "seconds": seconds}


def regressions(report: dict) -> list[str]:
    return sorted(
        n for n, t in report["tests"].items() if t["blocking"] and t["verdict"] == "regression"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--standin", action="store_true", help="the stand-in runtime, even on a GPU"
    )
    parser.add_argument(
        "--wording",
        default="cuda",
        choices=["cuda", "cuda-old", "hip", "hip-old"],
        help="the stand-in's error text (default: cuda)",
    )
    options = parser.parse_args(argv)
    standin = options.standin or not has_gpu()
    print(
        "runtime:",
        f"stand-in ({options.wording} wording)" if standin else "real PyTorch on the GPU",
    )
    rows, right = [], True
    with tempfile.TemporaryDirectory(prefix="device-check-") as folder:
        for name, mode, workers, expected, expected_regressions in RUNS:
            got = run(name, mode, workers, standin, options.wording, Path(folder))
            if "error" in got:
                print(f"{name}: {got['error']}")
                right = False
                continue
            report = got["report"]
            found = regressions(report)
            ok = report["conclusion"] == expected and found == expected_regressions
            others = sorted(
                {t["verdict"] for n, t in report["tests"].items() if n != GATHER}
                - {"pass", "not_applicable"}
            )
            ok = ok and not others
            right = right and ok
            rows.append(
                (
                    name,
                    f"-n {workers}" if workers else "serial",
                    expected,
                    report["conclusion"],
                    ", ".join(found) or "none",
                    ", ".join(others) or "-",
                    f"{got['seconds']:.1f}",
                    "ok" if ok else "WRONG",
                )
            )
            if name == "regression":
                probes = report["tests"][GATHER]["probes"]
                print("health probe after the fault:", json.dumps(probes[:1]))
            if name == "clean":
                manifest = report["manifest"]
                print(
                    "detected:",
                    manifest["platform"].get("description"),
                    "| versions:",
                    json.dumps(manifest["platform"].get("versions", {})),
                )
                print("health probe before the tests:", json.dumps(report["preflight"]))
    headers = ("run", "workers", "expected", "concluded", "regressions", "other verdicts", "s", "")
    widths = [max(len(str(r[i])) for r in [headers, *rows]) for i in range(len(headers))]
    for row in [headers, *rows]:
        print("  ".join(str(cell).ljust(width) for cell, width in zip(row, widths)).rstrip())
    print("all runs concluded what is true" if right else "SOME RUNS CONCLUDED WRONG")
    return 0 if right else 1


if __name__ == "__main__":
    sys.exit(main())
