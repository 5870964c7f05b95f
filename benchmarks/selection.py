"""PR test selection on vLLM's real history: the project's `rocm-gate select` against vLLM's own AMD
rules.

Data (the shared folder's `data/`): 3,000 first-parent commits of vLLM's main branch; the newest 53
are a fork's own work (after upstream's 9aaf83ef) and are left out. Learn from the older 2,000
commits, evaluate on the rest (947 upstream commits).

- Ground truth: a commit that changes test files of group G (by `pytest_rocm/maps/vllm.toml`) together with
  source files must select G from its source files alone.
- Anchor: vLLM's `test-amd.yaml` (the steps that run by default, not `optional`): a step runs when a changed
  source file starts with one of its `source_file_dependencies` (none: always). The groups a step covers are
  those of the test paths its commands name (a step named for evals or benchmarks covers accuracy or
  performance).
- GPU time: a step costs `num_gpus x timeout_in_minutes` (no durations are known). Running everything costs
  every default step. vLLM's rules run whole steps. The project selects test paths, so of a step it runs the
  share of the step's test files that fall under them (a step that names no test path runs whole when its
  group, or any group, is selected); selecting everything runs every step.

Why the project saves less than vLLM's rules (56.4% against 72.1%, at recall 0.9834 against 0.9475):
the map's `[selection] everything` (build files, ROCm images and requirements, this CI's
configuration, core modules) covers 164 of the 947 commits (17%), and each of those runs everything,
as does a file history knows too little of; on the rest the co-change learned from the 580 commits
that changed sources together with tests selects about half of the GPU time on average. vLLM's
hand-written per-step dependencies are narrower, and miss 5% of the groups a change touched. The
curve printed last shows what the two knobs of a link trade.

Prints, for the project and for vLLM's rules: recall on the ground truth, the mean share of GPU time
saved against running everything, how often everything ran, and the commits where a group was
missed.

    .venv/bin/python benchmarks/selection.py [--data DIR]
"""

from __future__ import annotations

import argparse
import re
import shlex
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from pytest_rocm.catalog.groups import load_group_map  # noqa: E402
from pytest_rocm.selection.cochange import CoChange, is_test_file, is_test_path, read_history  # noqa: E402
from pytest_rocm.selection.select import select  # noqa: E402

FORK_COMMITS = 53
LEARN = 2000
# pytest options whose value is the next word
VALUE_OPTIONS = {
    "-m",
    "-k",
    "-p",
    "-c",
    "-n",
    "-o",
    "--deselect",
    "--ignore",
    "--shard-id",
    "--num-shards",
    "--rootdir",
    "--config-list-file",
    "--timeout",
    "--junitxml",
    "--maxfail",
}


def step_test_paths(step: dict, tree: list[str]) -> set[str]:
    """The test paths a step's commands name: pytest arguments, and any word naming a path of the
    tree."""
    # the words are relative to the step's working directory: `tests/` in it, or the repository root
    working_dir = step.get("working_dir", "/vllm-workspace/tests").rstrip("/")
    base = {"/vllm-workspace/tests": "tests/", "/vllm-workspace": ""}.get(working_dir)
    found = set()
    for command in step.get("commands") or [step.get("command", "")]:
        for segment in re.split(r"&&|;|\|\|?", command):
            try:
                words = shlex.split(segment)
            except ValueError:
                words = segment.split()
            skip = False
            for word in words:
                if skip:
                    skip = False
                    continue
                if word in VALUE_OPTIONS:
                    skip = True
                    continue
                if word.startswith("-") or "=" in word or base is None:
                    continue
                path = base + word.split("::")[0].removeprefix("./")
                if any(t == path or t.startswith(path.rstrip("/") + "/") for t in tree):
                    found.add(path if path.endswith(".py") else path.rstrip("/") + "/")
    return found


def named_group(label: str) -> str | None:
    lowered = label.lower()
    if "eval" in lowered or "accuracy" in lowered or "gsm8k" in lowered:
        return "accuracy"
    if "benchmark" in lowered:
        return "performance"
    return None


def overlap(a: str, b: str) -> bool:
    return a.startswith(b) or b.startswith(a)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--data",
        type=Path,
        default=REPO.parent / "shared" / "data",
        help="the shared data folder: vLLM's CI step definitions (vllm-buildkite/, not copied into "
        "this repository); the history is read from tests/data/upstream/",
    )
    args = parser.parse_args()
    group_map = load_group_map(REPO / "pytest_rocm/maps/vllm.toml")
    tree = [
        line.strip()
        for line in (REPO / "tests/data/upstream/vllm-tests-tree.txt").read_text().splitlines()
    ]
    if not (args.data / "vllm-buildkite/test-amd.yaml").is_file():
        sys.exit(
            f"{args.data}/vllm-buildkite/test-amd.yaml not found: give the shared data folder with --data"
        )
    commits = read_history(REPO / "tests/data/upstream/vllm-main-history.jsonl")[::-1][
        :-FORK_COMMITS
    ]
    learn, evaluate = commits[:LEARN], commits[LEARN:]
    history = CoChange.learn(learn)

    steps = []
    for step in yaml.safe_load((args.data / "vllm-buildkite/test-amd.yaml").read_text())["steps"]:
        if step.get("optional"):
            continue
        paths = step_test_paths(step, tree)
        groups = {
            group_map.group_of(p if p.endswith(".py") else p + "test_x.py") for p in paths
        } - {None}
        if named_group(step["label"]):
            groups.add(named_group(step["label"]))
        files = [
            t for t in tree if is_test_file(t) and any(t == p or t.startswith(p) for p in paths)
        ]
        steps.append(
            {
                "label": step["label"],
                "deps": step.get("source_file_dependencies") or [],
                "paths": paths,
                "files": files,
                "groups": groups,
                "cost": step.get("num_gpus", 1) * step.get("timeout_in_minutes", 180),
            }
        )
    total = sum(s["cost"] for s in steps)

    def vllm_rules(sources):
        ran = [
            s
            for s in steps
            if not s["deps"] or any(f.startswith(d) for f in sources for d in s["deps"])
        ]
        return (
            set().union(*(s["groups"] for s in ran)) if ran else set(),
            sum(s["cost"] for s in ran),
            False,
        )

    def project(sources, tests):
        chosen = select(sources, group_map, history)
        if chosen.everything:
            return set(chosen.groups), total, True
        paths = tuple(set(chosen.tests) | set(tests))
        cost = 0.0
        for s in steps:
            # a step that names no test path runs whole, when its group (or any) is selected
            if not s["paths"]:
                cost += s["cost"] if not s["groups"] or s["groups"] & set(chosen.groups) else 0
            # the project runs the selected test files of the step: that share of its time
            elif s["files"]:
                cost += s["cost"] * sum(f.startswith(paths) for f in s["files"]) / len(s["files"])
            elif any(overlap(p, q) for p in s["paths"] for q in paths):
                cost += s["cost"]
        return set(chosen.groups), cost, False

    print(
        f"vLLM history: learn from {len(learn)} commits ({history.commits} with source and test changes), evaluate "
        f"on {len(evaluate)} upstream commits; {len(steps)} default AMD steps, {total:,} GPU-minutes to run all"
    )

    def measure(method):
        hits = pairs = everything = 0
        saved, missed = [], []
        for commit in evaluate:
            sources = [f for f in commit["files"] if not is_test_path(f)]
            tests = [f for f in commit["files"] if is_test_file(f)]
            groups, cost, all_of_it = (
                method(sources, tests) if method is project else method(sources)
            )
            everything += all_of_it
            saved.append(1 - cost / total)
            truth = {group_map.group_of(f) for f in tests} - {None} if sources else set()
            pairs += len(truth)
            hits += len(truth & groups)
            if truth - groups:
                missed.append(f"{commit['sha'][:10]} missed {', '.join(sorted(truth - groups))}")
        return hits, pairs, sum(saved) / len(saved), everything, missed

    results = {}
    for name, method in (
        ("project (rocm-gate select)", project),
        ("vLLM's test-amd.yaml rules", vllm_rules),
    ):
        hits, pairs, saved, everything, missed = measure(method)
        results[name] = (hits / pairs, saved)
        print(
            f"  {name:28} recall {hits / pairs:.4f} ({hits} of {pairs} commit-group pairs), GPU time saved "
            f"{saved:.1%}, everything on {everything} commits, missed groups on {len(missed)} commits"
        )
        for line in missed[:8]:
            print(f"      {line}")
        if len(missed) > 8:
            print(f"      and {len(missed) - 8} more")
    (p_recall, p_saved), (v_recall, v_saved) = results.values()
    print(
        f"  goal (dominate vLLM's rules): recall >= vLLM's {v_recall:.4f}: {'met' if p_recall >= v_recall else 'NOT met'}; "
        f"GPU time saved >= vLLM's {v_saved:.1%}: {'met' if p_saved >= v_saved else 'NOT met'}"
    )
    # the curve: the two knobs of a co-change link (cochange.CoChange.min_together and .rate); *
    # marks the default
    print("  the curve (min_together, rate -> recall, GPU time saved):")
    defaults = (history.min_together, history.rate)
    for min_together in (1, 2, 3, 5):
        for rate in (0.05, 0.1, 0.2, 0.35):
            history.min_together, history.rate = min_together, rate
            hits, pairs, saved, _, _ = measure(project)
            mark = "*" if (min_together, rate) == defaults else " "
            print(f"   {mark} {min_together}, {rate:.2f} -> {hits / pairs:.4f}, {saved:.1%}")
    history.min_together, history.rate = defaults


if __name__ == "__main__":
    main()
