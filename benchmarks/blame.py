"""The base experiment's cost (`rocm-gate blame`): minutes per blocked PR, against re-running the
whole gate on the base, side by side in one run.

A synthetic upstream tree, made here: MODULES test modules of TESTS tests each, every test taking
TEST_S seconds, and a conftest that takes STARTUP_S seconds to import (what a process pays before its
first test: importing torch and the framework, a model's load). main's base commit passes everything;
the PR breaks one test, which is its one blocking failure. The gates run on GitHub's merge commit of
the PR (under the pull_request event), then each way of asking "does the base fail it too?" runs on
the same checkout and is timed, wall clock on this machine:

- **base experiment**: `rocm-gate blame` as the gate workflow runs it: a second work tree of the
  base, the install (INSTALL_S seconds of `sleep`, the same in both), the blocking failure in
  `--attempts` fresh pytest processes (2), base-check.json, the work tree removed;
- **whole gate on the base**: the same work tree and install, then the whole suite once on the base
  with the gate's own reruns (one attempt after a failure), the work tree removed.

Prints both in minutes per blocked PR, their ratio, and what the experiment found (the test passes on
the base: the PR's own break). The ratio grows with the suite: a real gate runs hundreds of tests for
each blocking failure.

    .venv/bin/python benchmarks/blame.py [--modules 8] [--tests 5] [--test-seconds 0.5]
        [--startup-seconds 2] [--install-seconds 0] [--attempts 2]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

CONFTEST = """
import os
import time

time.sleep(float(os.environ.get("BENCH_STARTUP_S", "0")))  # the framework's import, a model's load
"""


def module(index: int, tests: int, broken: int | None) -> str:
    lines = [
        "import os",
        "import time",
        "",
        "import pytest",
        "",
        'pytestmark = pytest.mark.rocm_gate(group="engine")',
        'SECONDS = float(os.environ.get("BENCH_TEST_S", "0"))',
        "",
    ]
    for number in range(tests):
        lines += [
            f"def test_{index}_{number}():",
            "    time.sleep(SECONDS)",
            "    assert True"
            if broken != number
            else '    assert False, "greedy output diverged at token 9"',
            "",
        ]
    return "\n".join(lines) + "\n"


def git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), "-c", "user.name=b", "-c", "user.email=b@example.com", *args],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()


def make_tree(root: Path, args) -> dict:
    repo = root / "upstream"
    (repo / "tests").mkdir(parents=True)
    git(repo, "init", "-q", "-b", "main")
    (repo / "pytest.ini").write_text("[pytest]\ntestpaths = tests\n")
    (repo / "tests" / "conftest.py").write_text(CONFTEST)
    for index in range(args.modules):
        (repo / "tests" / f"test_m{index}.py").write_text(module(index, args.tests, None))
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "base")
    base = git(repo, "rev-parse", "HEAD")
    git(repo, "checkout", "-q", "-b", "pr")
    broken = args.modules // 2
    (repo / "tests" / f"test_m{broken}.py").write_text(module(broken, args.tests, 1))
    git(repo, "commit", "-q", "-am", "the PR")
    head = git(repo, "rev-parse", "HEAD")
    git(repo, "checkout", "-q", "--detach", base)
    git(repo, "merge", "-q", "--no-ff", "-m", "merge", head)
    return {"repo": repo, "base": base, "head": head, "merge": git(repo, "rev-parse", "HEAD")}


def environment(root: Path, tree: dict, args) -> dict:
    event = root / "event.json"
    event.write_text(
        json.dumps(
            {
                "pull_request": {
                    "number": 1,
                    "head": {"sha": tree["head"]},
                    "base": {"sha": tree["base"]},
                },
                "repository": {"default_branch": "main"},
            }
        )
    )
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "GITHUB_EVENT_NAME": "pull_request",
        "GITHUB_EVENT_PATH": str(event),
        "GITHUB_SHA": tree["merge"],
        "BENCH_STARTUP_S": str(args.startup_seconds),
        "BENCH_TEST_S": str(args.test_seconds),
    }
    env.pop("PYTEST_ROCM_PLATFORM", None)
    return env


def gate_run(cwd: Path, out: Path, env: dict) -> float:
    started = time.monotonic()
    subprocess.run(
        [sys.executable, "-m", "pytest", "--rocm-platform=mi300x-1", f"--rocm-report-dir={out}"]
        + ["-p", "no:cacheprovider", "-q"],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if not (out / "gate-report.json").is_file():
        raise SystemExit(f"the gates wrote no report in {out}")
    return time.monotonic() - started


def experiment(tree: dict, results: Path, env: dict, args) -> tuple[float, dict]:
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "rocm_gate.cli", "blame", "--results", str(results)]
        + ["--checkout", str(tree["repo"]), "--attempts", str(args.attempts)]
        + ["--install", f"sleep {args.install_seconds}", "--", "--rocm-platform=mi300x-1"],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    seconds = time.monotonic() - started
    if done.returncode != 0:
        raise SystemExit(f"rocm-gate blame failed: {done.stderr}")
    return seconds, json.loads((results / "base-check.json").read_text())


def whole_gate_on_base(tree: dict, root: Path, env: dict, args) -> float:
    started = time.monotonic()
    work = root / "whole-base"
    git(tree["repo"], "worktree", "add", "-q", "--detach", str(work), tree["base"])
    try:
        subprocess.run(["bash", "-c", f"sleep {args.install_seconds}"], cwd=work, check=True)
        gate_run(work, root / "whole-out", env)
    finally:
        git(tree["repo"], "worktree", "remove", "--force", str(work))
    return time.monotonic() - started


def arguments(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--modules", type=int, default=8)
    parser.add_argument("--tests", type=int, default=5, help="tests per module")
    parser.add_argument("--test-seconds", type=float, default=0.5)
    parser.add_argument("--startup-seconds", type=float, default=2.0)
    parser.add_argument("--install-seconds", type=float, default=0.0)
    parser.add_argument("--attempts", type=int, default=2)
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = arguments(argv)
    with tempfile.TemporaryDirectory(prefix="bench-blame-") as scratch:
        root = Path(scratch)
        tree = make_tree(root, args)
        env = environment(root, tree, args)
        pr_seconds = gate_run(tree["repo"], root / "out", env)
        base_check_s, check = experiment(tree, root / "out", env, args)
        whole_s = whole_gate_on_base(tree, root, env, args)
    [(nodeid, test)] = check["tests"].items()
    suite = args.modules * args.tests
    print(
        f"synthetic tree: {suite} tests ({args.modules} modules x {args.tests}, {args.test_seconds:g} s "
        f"each), {args.startup_seconds:g} s per process to start, install {args.install_seconds:g} s; "
        f"the PR's gate run took {pr_seconds:.1f} s; one blocking failure: {nodeid}"
    )
    print(f"{'way':<34}{'min per blocked PR':>20}{'seconds':>10}")
    print(
        f"{'base experiment (rocm-gate blame)':<34}{base_check_s / 60:>20.3f}{base_check_s:>10.1f}"
    )
    print(f"{'whole gate again on the base':<34}{whole_s / 60:>20.3f}{whole_s:>10.1f}")
    print(f"ratio: the whole gate costs {whole_s / base_check_s:.1f}x the base experiment")
    outcomes = ", ".join(a["outcome"] for a in test["attempts"])
    print(
        f"found: {nodeid} {test['on_base']} on the base ({outcomes}, {args.attempts} attempts); "
        f"base-check.json says {check['used_s']:.1f} s used of {check['budget_s']:.0f} s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
