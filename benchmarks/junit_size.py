"""JUnit XML size: what pytest-rocm's properties add to `--junitxml` on an upstream-sized run.

A generated tree shaped like vLLM's (48,000 parametrized tests in files under the folders of
`pytest_rocm/maps/vllm.toml`, so the map gives most of them a group; a few `rocm_gate` markers,
blocking and not) runs once per setting, side by side, on a simulated MI300X runner:

- anchor: pytest's own file, the plugin disabled (`-p no:rocm`);
- before: every test case with rocm_group, rocm_blocking, rocm_sku and rocm_arch (now `--rocm-junit-properties=full`);
- after: the default (`minimal`): a marker's rocm_group, rocm_blocking and rocm_known_gap where they apply
  (the map's groups are not repeated: parity reads the map), the platform once per file.

Prints each file's size, its ratio to the anchor, and the bytes per test case.

    .venv/bin/python benchmarks/junit_size.py [--tests 48000]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
FOLDERS = [
    "tests/kernels/attention",
    "tests/v1/core",
    "tests/entrypoints/openai",
    "tests/models/multimodal",
    "tests/distributed",
    "tests/v1/spec_decode",
    "tests/utils_",
]


def write_tree(root: Path, tests: int, per_file: int = 400) -> None:
    for number in range(tests // per_file):
        folder = root / FOLDERS[number % len(FOLDERS)]
        folder.mkdir(parents=True, exist_ok=True)
        mark = (
            '@pytest.mark.rocm_gate(group="attention")\n'
            if number % 10 == 0
            else '@pytest.mark.rocm_gate(group="engine", blocking=False)\n'
            if number % 10 == 1
            else ""
        )
        (folder / f"test_case_{number:04d}.py").write_text(
            "import pytest\n\n"
            f"{mark}@pytest.mark.parametrize('dtype', ['bfloat16', 'float16'])\n"
            f"@pytest.mark.parametrize('seq_len', range({per_file // 2}))\n"
            "def test_forward(dtype, seq_len):\n    pass\n"
        )


def run(root: Path, junit: Path, *args: str) -> int:
    plugin = (
        []
        if "no:rocm" in args
        else [f"--rocm-group-map={REPO / 'pytest_rocm/maps/vllm.toml'}", "--rocm-platform=mi300x-8"]
    )
    command = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        f"--junitxml={junit}",
        *plugin,
        *args,
    ]
    done = subprocess.run(command, cwd=root, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(
            f"pytest failed ({done.returncode}):\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
        )
    return junit.stat().st_size


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tests", type=int, default=48_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        write_tree(root, args.tests)
        (root / "pytest.ini").write_text("[pytest]\n")
        sizes = {
            "plain pytest (-p no:rocm), anchor": run(root, root / "plain.xml", "-p", "no:rocm"),
            "before: four properties per test (full)": run(
                root, root / "full.xml", "--rocm-junit-properties=full"
            ),
            "after: what tools read (minimal, default)": run(root, root / "minimal.xml"),
        }
    anchor = sizes["plain pytest (-p no:rocm), anchor"]
    print(
        f"JUnit XML size, {args.tests:,} test cases on a simulated MI300X runner with the vLLM group map"
    )
    for name, size in sizes.items():
        print(
            f"  {name:<44} {size / 1e6:8.2f} MB  {size / anchor:5.3f}x  {size / args.tests:6.1f} B/test"
        )
    before, after = (
        sizes["before: four properties per test (full)"],
        sizes["after: what tools read (minimal, default)"],
    )
    print(
        f"  added by the plugin: before +{(before - anchor) / anchor:.1%}, after +{(after - anchor) / anchor:.1%}"
    )


if __name__ == "__main__":
    main()
