"""Verdict accuracy on a generated fault campaign: infra vs regression vs flake.

Generates 205 blocking gate tests with injected faults, runs them with pytest-rocm
under `-n 2` on a simulated runner (8 x MI300X, plus one MI325X that becomes
unhealthy), and prints the confusion matrix of verdicts against the truth, the
false blocks (a blocking test judged `regression` whose fault was infrastructure
or a flake) and the missed regressions. Target: 0 and 0. A second run of the same
campaign without the real regressions must not conclude `failure`.

Then small shapes, as maintainers run them: 1 to 3 tests per worker (a flake, an
infrastructure fault, a regression, a regression that prints an infra signature,
each placed first, last or alone), under no xdist, `-n 1`, `-n 2`, `-n 4`,
`--dist loadscope` and `--dist loadfile`, each judged the same way; plus the
conclusion of each small run (never `success` with a regression in it, never
`failure` without one).

  - 130 tests that pass;
  - 35 infrastructure faults: every default signature printed once (then the rerun
    passes), engine children dying with exit code 134, workers killed with exit
    code 134, hangs past the timeout, and faults on a device that then fails its
    health probe;
  - 20 real regressions: 15 plain assertion failures, and 5 that print an infra
    signature ("Memory access fault", "GPU Hang", ...) and fail every time on
    healthy devices (a new kernel's bug that looks like hardware);
  - 20 flakes: fail once without a signature, then pass.

    .venv/bin/python benchmarks/verdicts.py
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

SIGNATURE_LINES = [
    "HSA_STATUS_ERROR_OUT_OF_RESOURCES: The runtime failed to allocate the necessary resources.",
    "RuntimeError: HIP error: hipErrorNoDevice",
    "HIP error: hipErrorLaunchFailure (unspecified launch failure)",
    "HW Exception by GPU node-2 (Agent handle: 0x55d1) reason :GPU Hang",
    "Memory access fault by GPU node-3 (Agent handle: 0x5a2f) on address 0x7f2a. Reason: Unknown.",
    "[ 8123.4] amdgpu 0000:1b:00.0: amdgpu: GPU reset begin!",
    "NCCL WARN NET/IB : Got completion from peer with error 12",
    "OSError: [Errno 28] No space left on device: '/root/.cache/vllm'",
    "RuntimeError: vLLM server did not become healthy within 480 s",
]

# The simulated runner of the fault campaign tests: attempt counting, health probe, profile.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from test_verdicts import CONFTEST, PROBE, PROFILE  # noqa: E402

HEADER = """
import os, subprocess, sys, time
import pytest

pytestmark = pytest.mark.rocm_gate(group="engine")
"""


def campaign(with_regressions: bool) -> tuple[str, dict[str, str]]:
    """Test source and the truth: test name -> pass | infra | regression | flaky."""
    tests, truth = [], {}

    def add(name: str, kind: str, body: str, marks: str = '@pytest.mark.hardware(sku="MI300X")\n'):
        tests.append(f"{marks}def {name}(attempt, gpus):\n{body}\n")
        truth[name] = kind

    for i in range(130):
        add(f"test_pass_{i}", "pass", f"    assert sum(range({i})) == {sum(range(i))}")
    for i in range(18):  # every signature, printed once
        line = SIGNATURE_LINES[i % len(SIGNATURE_LINES)]
        add(
            f"test_infra_signature_{i}",
            "infra",
            f"    if attempt == 0:\n        print({line!r})\n        assert False, 'engine died'",
        )
    for i in range(5):
        add(
            f"test_infra_child_134_{i}",
            "infra",
            "    code = subprocess.run([sys.executable, '-c', f'import os; os._exit(134 if {attempt} == 0 else 0)']).returncode\n"
            "    assert code == 0, f'engine child exited with code {code}'",
        )
    for i in range(4):
        add(f"test_infra_worker_killed_{i}", "infra", "    if attempt == 0:\n        os._exit(134)")
    for i in range(4):
        add(
            f"test_infra_hang_{i}",
            "infra",
            "    if attempt == 0:\n        time.sleep(30)",
            '@pytest.mark.hardware(sku="MI300X")\n@pytest.mark.timeout(1)\n',
        )
    for i in range(4):
        add(
            f"test_infra_unhealthy_device_{i}",
            "infra",
            "    open(f'unhealthy-{gpus[0]}', 'w').close()\n    print('HW Exception by GPU node-9 reason :GPU Hang')\n"
            "    assert False, 'hang'",
            '@pytest.mark.hardware(sku="MI325X")\n',
        )
    for i in range(20):
        add(f"test_flaky_{i}", "flaky", "    assert attempt > 0, 'lost a race'")
    if with_regressions:
        for i in range(15):
            add(
                f"test_regression_{i}",
                "regression",
                f"    assert {i} + 1 == {i + 2}, 'wrong result'",
            )
        for i in range(5):
            line = SIGNATURE_LINES[(3 + i) % 5 + 2]
            add(
                f"test_regression_like_hardware_{i}",
                "regression",
                f"    print({line!r})\n    assert False, 'kernel bug'",
            )
    return HEADER + "\n".join(tests), truth


def run(with_regressions: bool) -> tuple[dict, dict[str, str], float]:
    source, truth = campaign(with_regressions)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "conftest.py").write_text(CONFTEST)
        (root / "probe.py").write_text(PROBE)
        (root / "runner.json").write_text(json.dumps(PROFILE))
        (root / "test_campaign.py").write_text(source)
        (root / "pytest.ini").write_text("[pytest]\n")
        start = time.perf_counter()
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pytest",
                "-q",
                "-n",
                "2",
                "-p",
                "no:cacheprovider",
                "--rocm-platform=runner.json",
                "--rocm-report-dir=out",
                "--rocm-health-probe={python} probe.py",
            ],
            cwd=root,
            capture_output=True,
            text=True,
        )
        elapsed = time.perf_counter() - start
        report = json.loads((root / "out" / "gate-report.json").read_text())
    return report, truth, elapsed


# Small shapes: (name, tests) where each test is (kind, body). Kinds as in the campaign.
SMALL_BODIES = {
    "pass": "    pass",
    "flaky": "    assert attempt > 0, 'lost a race'",
    "infra": "    if attempt == 0:\n        print('HW Exception by GPU node-2 (Agent handle: 0x55d1) reason :GPU Hang')\n"
    "        assert False, 'engine died'",
    "regression": "    assert 1 + 1 == 3, 'wrong result'",
    "regression_like_hw": "    print('Memory access fault by GPU node-3 (Agent handle: 0x5a2f) on address 0x7f2a.')\n"
    "    assert False, 'kernel bug'",
}
SMALL_SHAPES = {
    "1 flaky": ["flaky"],
    "1 infra": ["infra"],
    "1 regression": ["regression"],
    "flaky first of 3": ["flaky", "pass", "pass"],
    "flaky last of 3": ["pass", "pass", "flaky"],
    "infra first of 3": ["infra", "pass", "pass"],
    "hw-looking regression first of 3": ["regression_like_hw", "pass", "pass"],
    "regression last of 2": ["pass", "regression"],
    "flaky, infra, regression": ["flaky", "infra", "regression"],
}
SMALL_RUNS = {
    "no xdist": [],
    "-n 1": ["-n", "1"],
    "-n 2": ["-n", "2"],
    "-n 4": ["-n", "4"],
    "loadscope -n 2": ["-n", "2", "--dist=loadscope"],
    "loadfile -n 2": ["-n", "2", "--dist=loadfile"],
}


def run_small(kinds: list[str], args: list[str]) -> tuple[dict, dict[str, str]]:
    truth = {f"test_{i}_{kind}": kind.replace("_like_hw", "") for i, kind in enumerate(kinds)}
    source = HEADER + "\n".join(
        f"def {name}(attempt, gpus):\n{SMALL_BODIES[kind]}\n" for name, kind in zip(truth, kinds)
    )
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "conftest.py").write_text(CONFTEST)
        (root / "probe.py").write_text(PROBE)
        (root / "test_small.py").write_text(source)
        (root / "pytest.ini").write_text("[pytest]\n")
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pytest",
                "-q",
                *args,
                "-p",
                "no:cacheprovider",
                "--rocm-platform=mi300x-4",
                "--rocm-report-dir=out",
                "--rocm-health-probe={python} probe.py",
            ],
            cwd=root,
            capture_output=True,
            text=True,
        )
        report = json.loads((root / "out" / "gate-report.json").read_text())
    return report, truth


def small_shapes() -> tuple[int, int, int, int]:
    """Every small shape under every run mode; prints one line per run, returns the totals."""
    runs = false_blocks = missed = wrong_conclusions = 0
    print(f"\nsmall shapes: {len(SMALL_SHAPES)} shapes x {len(SMALL_RUNS)} run modes")
    for shape, kinds in SMALL_SHAPES.items():
        cells = []
        for args in SMALL_RUNS.values():
            report, truth = run_small(kinds, args)
            verdicts = {n.split("::")[1]: t["verdict"] for n, t in report["tests"].items()}
            runs += 1
            fb = sum(
                1 for n in truth if verdicts.get(n) == "regression" and truth[n] != "regression"
            )
            mr = sum(
                1 for n in truth if truth[n] == "regression" and verdicts.get(n) != "regression"
            )
            has_regression = "regression" in truth.values()
            expected = (
                "failure"
                if has_regression
                else ("neutral" if "infra" in truth.values() else "success")
            )
            wrong = report["conclusion"] != expected
            false_blocks, missed, wrong_conclusions = (
                false_blocks + fb,
                missed + mr,
                wrong_conclusions + wrong,
            )
            cells.append(
                "ok" if not (fb or mr or wrong) else f"FB{fb}/MR{mr}/{report['conclusion']}"
            )
        print(
            f"  {shape:<34} "
            + "  ".join(f"{mode}: {cell}" for mode, cell in zip(SMALL_RUNS, cells))
        )
    return runs, false_blocks, missed, wrong_conclusions


def main() -> None:
    runs, small_false_blocks, small_missed, wrong = small_shapes()
    print(
        f"small shapes: {runs} runs, false blocks: {small_false_blocks}, missed regressions: {small_missed}, "
        f"wrong conclusions: {wrong}"
    )
    report, truth, elapsed = run(with_regressions=True)
    verdicts = {nodeid.split("::")[1]: test["verdict"] for nodeid, test in report["tests"].items()}
    missing = sorted(set(truth) - set(verdicts))
    matrix = Counter((truth[name], verdicts.get(name, "(missing)")) for name in truth)
    kinds = ["pass", "infra", "regression", "flaky"]
    columns = ["pass", "infra", "regression", "flaky", "(missing)"]
    print(
        f"campaign: {len(truth)} blocking gate tests ({', '.join(f'{k} {sum(v == k for v in truth.values())}' for k in kinds)}); "
        f"pytest -n 2 wall time {elapsed:.1f} s"
    )
    print("\nconfusion matrix (rows: truth, columns: verdict)")
    print(f"{'':<12}" + "".join(f"{c:>12}" for c in columns))
    for kind in kinds:
        print(f"{kind:<12}" + "".join(f"{matrix[(kind, c)]:>12}" for c in columns))
    false_blocks = sorted(
        n for n in truth if verdicts.get(n) == "regression" and truth[n] != "regression"
    )
    missed = sorted(
        n for n in truth if truth[n] == "regression" and verdicts.get(n) != "regression"
    )
    print(
        f"\nfalse blocks (infra or flaky judged regression): {len(false_blocks)} {false_blocks or ''}"
    )
    print(f"missed regressions: {len(missed)} {missed or ''}")
    print(f"tests without a verdict: {len(missing)} {missing or ''}")
    print(f"conclusion: {report['conclusion']} ({report['conclusion_reason'][:100]}...)")
    clean, _, clean_elapsed = run(with_regressions=False)
    print(
        f"same campaign without the real regressions: conclusion {clean['conclusion']} "
        f"({clean['conclusion_reason'][:80]}...; {clean_elapsed:.1f} s)"
    )


if __name__ == "__main__":
    main()
