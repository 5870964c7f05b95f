"""Plugin overhead: a 5,000-test suite (a fifth of it marked) with pytest-rocm disabled and enabled.

Runs both alternately (at least 5 times each) and prints the median wall times and their ratio.
Anchor: the same suite with `-p no:rocm`. Target: ratio <= 1.05.

    .venv/bin/python benchmarks/overhead.py [--runs 5] [--tests 5000]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

MARKS = [
    '@pytest.mark.rocm_gate(group="attention")',
    '@pytest.mark.rocm_gate(group="engine", blocking=False)',
    '@pytest.mark.rocm_gate(group="distributed_moe")\n@pytest.mark.hardware(sku="MI300X", gpus=2)',
    '@pytest.mark.rocm_gate(group="api")\n'
    '@pytest.mark.rocm_known_gap(reason="gap", issue="https://github.com/vllm-project/vllm/issues/1")',
    '@pytest.mark.rocm_gate(group="spec_decode")\n@pytest.mark.hardware(arch="gfx950")',
]


def write_suite(root: Path, tests: int, per_file: int = 100) -> None:
    for f in range(tests // per_file):
        lines = ["import pytest", ""]
        for t in range(per_file):
            number = f * per_file + t
            if number % 5 == 0:
                lines.append(MARKS[(number // 5) % len(MARKS)])
            lines += [f"def test_{number}():", f"    assert {number} + 1 == {number + 1}", ""]
        (root / f"test_gen_{f:03d}.py").write_text("\n".join(lines))


def timed(command: list[str], cwd: Path) -> float:
    start = time.perf_counter()
    done = subprocess.run(command, cwd=cwd, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    if done.returncode not in (0, 1):
        sys.exit(f"pytest failed ({done.returncode}):\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--tests", type=int, default=5000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        write_suite(root, args.tests)
        (root / "pytest.ini").write_text("[pytest]\n")
        base = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist", "-p", "no:timeout"]
        disabled = [*base, "-p", "no:rocm"]
        enabled = [*base, "--rocm-platform=mi300x-8", f"--rocm-report-dir={root / 'report'}"]
        timed(enabled, root)  # warm the file cache and .pyc files for both
        off, on = [], []
        for _ in range(args.runs):
            off.append(timed(disabled, root))
            on.append(timed(enabled, root))
        report = (root / "report" / "gate-report.json")
        assert report.is_file(), "the enabled run wrote no gate report"
    off_median, on_median = statistics.median(off), statistics.median(on)
    print(f"suite: {args.tests} tests, {args.tests // 5} marked; {args.runs} alternating runs each")
    print(f"plugin disabled (-p no:rocm): median {off_median:.3f} s  runs {', '.join(f'{t:.2f}' for t in off)}")
    print(f"plugin enabled (records + report): median {on_median:.3f} s  runs {', '.join(f'{t:.2f}' for t in on)}")
    print(f"ratio enabled/disabled: {on_median / off_median:.3f}  (target <= 1.05)")


if __name__ == "__main__":
    main()
