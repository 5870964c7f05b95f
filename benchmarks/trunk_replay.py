"""Trunk replay: main's real history with PRs opened against it, judged alone and against main's
state.

The commits are vLLM's main, with their subjects (`../shared/data/vllm-main-subjects.jsonl`,
vendored unchanged in tests/data/upstream/ for a clone without ../shared). Breaks come from that
history: a `Revert "S"` breaks main from the commit whose subject is S until the revert; a `[ROCm] Fix`
commit fixes a break that an earlier commit (2 to 10 before it, seeded) introduced. Each break fails
one test with a message whose numbers change from run to run. Seeded on top: flaky tests (a first
attempt that fails, a rerun that passes; sometimes a whole run's failure, and a rerun of that main
commit), and infrastructure faults (an HSA error on a first attempt).

Main is tested every EVERY-th commit only (nightly-like: nobody schedules a main run right after a
culprit or a fix, so suspect ranges span untested commits and a break stays unknown until the next
main run); every third main run is a `schedule` event (GitHub's payload, with no repository object).
PRs are opened on random main commits and published a few commits later (their check is judged
against the newest trunk state then, as publish does), some break a test of their own (a test main
passes, or one main already fails, with another message), the rest change nothing the tests see. At
the end the sweep judges every blocked check again against main's newest state.

Everything goes through the real parts: each run is pytest with the plugin (a push or pull_request
event, reruns on), `history add`'s ingest, `trunk.state.build` over the main runs so far (with
main's commit list, as `history trunk --repo` gives), and the check `rocm-gate publish` would write
(`github.checks.build`), with and without the trunk state. It prints, against the anchor "judge each
run alone":
- PRs blocked by failures that were already on main (goal 0): a PR with no regression of its own whose check
  concludes `failure` though every failing test was red or flaky in the trunk state it was judged against;
  apart, those blocked by a break that no main run had shown yet at publish time (main untested since it
  landed: no trunk state can know it), and how many of them the sweep still blocks against main's newest
  state;
- regressions a PR introduced that were blocked (goal 100%);
- breaks whose suspect range contains the commit that broke main (goal 100%), and the ranges' median length;
- flaky tests flagged that are not flaky, and flaky tests missed (goal 0 each), on the flaky list the
  dashboard and the tracker show (`history.queries.flaky`), against history's former pass-rate rule (0.2 to
  0.8 over 10 runs, or any flaky verdict).

    .venv/bin/python benchmarks/trunk_replay.py [--commits 120] [--every 4] [--prs 40] [--seed 7] [--jobs 2]
                                                [--publish-delay 6]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from pytest_rocm.github import artifacts, checks  # noqa: E402
from pytest_rocm.history import queries, store  # noqa: E402
from pytest_rocm.trunk import state  # noqa: E402

SHARED = REPO.parent / "shared" / "data"
VENDORED = REPO / "tests" / "data" / "upstream" / "vllm-main-subjects.jsonl"
SKU = "MI300X"
TESTS = [f"test_{group}_{i}" for group in ("attention", "engine", "api", "moe") for i in range(4)]
FLAKY = ("test_api_1", "test_moe_2")

SUITE = """
import json
import os
import pytest

WORLD = json.loads(open(os.environ["WORLD"]).read())
pytestmark = pytest.mark.rocm_gate(group="engine")


def check(name, attempt):
    if name in WORLD["infra"] and attempt == 0:
        print("HSA_STATUS_ERROR_EXCEPTION: An HSAIL operation resulted in a hardware exception. code: 0x1016")
        raise AssertionError("HSA exception")
    if name in WORLD["flaky"] and (attempt == 0 or WORLD["flaky"][name] == "run"):
        raise AssertionError(f"lost a race after {WORLD['jitter']} steps")
    if name in WORLD["broken"]:
        raise AssertionError(WORLD["broken"][name])

""" + "".join(
    f'''
def {name}(attempt):
    check("{name}", attempt)
'''
    for name in TESTS
)

CONFTEST = """
import glob
import pathlib
import pytest

@pytest.fixture
def attempt(request):
    folder = pathlib.Path("attempts")
    folder.mkdir(exist_ok=True)
    name = request.node.nodeid.replace("/", "_").replace(":", "_")
    number = len(list(folder.glob(glob.escape(name) + "-*")))
    (folder / f"{name}-{number}").touch()
    return number
"""


def fake_sha(*parts) -> str:
    return hashlib.sha1("/".join(map(str, parts)).encode()).hexdigest()


def load_history() -> list[dict]:
    """Main's commits oldest first: sha, date, subject."""
    source = SHARED / "vllm-main-subjects.jsonl"
    source = source if source.is_file() else VENDORED
    # newest first
    return list(reversed([json.loads(line) for line in source.read_text().splitlines() if line]))


@dataclass
class Break:
    culprit: int  # index of the commit that broke main
    fix: int  # index of the commit that fixed it
    test: str
    how: str  # "revert" or "rocm fix"


def find_breaks(commits: list[dict], rng: random.Random) -> list[Break]:
    index = {c["subject"]: i for i, c in enumerate(commits)}
    found = []
    for i, commit in enumerate(commits):
        revert = re.match(r'Revert "(.+)"', commit["subject"])
        if revert:
            name = revert.group(1)
            culprit = next(
                (j for s, j in index.items() if j < i and (s == name or s.startswith(name))), None
            )
            if culprit is not None:
                found.append(Break(culprit, i, "", "revert"))
        elif re.match(r"\[ROCm\]\s*\[?(Bug)?fix", commit["subject"], re.IGNORECASE):
            found.append(Break(max(0, i - rng.randint(2, 10)), i, "", "rocm fix"))
    return found


def choose_window(
    commits: list[dict], size: int, rng: random.Random
) -> tuple[list[dict], list[Break]]:
    """The `size` consecutive commits holding the most reverts whose culprit is also in them."""
    best = (-1, 0)
    for start in range(0, max(1, len(commits) - size), 10):
        window = commits[start : start + size]
        count = sum(b.how == "revert" for b in find_breaks(window, random.Random(0)))
        if count > best[0]:
            best = (count, start)
    window = commits[best[1] : best[1] + size]
    breaks = [b for b in find_breaks(window, rng) if b.fix > b.culprit]
    usable = [t for t in TESTS if t not in FLAKY]
    busy: dict[str, list[Break]] = {}
    kept = []
    for b in breaks:  # one break per test at a time, so each break is judged on its own
        free = [
            t
            for t in usable
            if all(o.fix < b.culprit or o.culprit > b.fix for o in busy.get(t, []))
        ]
        if not free:
            continue
        b.test = rng.choice(free)
        busy.setdefault(b.test, []).append(b)
        kept.append(b)
    return window, kept


@dataclass
class Run:
    name: str
    world: dict
    event: str
    payload: dict
    env: dict
    folder: Path | None = None
    extra: dict = field(default_factory=dict)
    platform: str = "mi300x-1"
    args: tuple = ()  # more pytest arguments


def world_at(
    index: int, breaks: list[Break], rng: random.Random, flake_p: float, infra_p: float
) -> dict:
    # a break makes greedy decoding diverge at the same token on every run, with a logprob that
    # jitters by up to 2% from run to run: one failure (results/fingerprint.py keeps the token, and
    # takes measured values within 10% for the same)
    broken = {
        b.test: f"output of {b.test} diverged at token {1 + (b.culprit * 7919) % 500} (logprob "
        f"{-(0.1 + (b.culprit % 90) / 100) * (1 + rng.uniform(-0.02, 0.02)):.4f})"
        for b in breaks
        if b.culprit <= index < b.fix
    }
    flaky = {}
    for name in FLAKY:
        roll = rng.random()
        if roll < flake_p * 0.25:
            flaky[name] = (
                "run"  # fails both attempts of this run: only a rerun of the commit shows the flake
            )
        elif roll < flake_p:
            flaky[name] = "attempt"
    infra = [rng.choice(TESTS)] if rng.random() < infra_p else []
    return {"broken": broken, "flaky": flaky, "infra": infra, "jitter": rng.randint(1, 99)}


def execute(run: Run, root: Path) -> Run:
    folder = root / run.name
    folder.mkdir()
    (folder / "test_suite.py").write_text(SUITE)
    (folder / "conftest.py").write_text(CONFTEST)
    (folder / "world.json").write_text(json.dumps(run.world))
    (folder / "event.json").write_text(json.dumps(run.payload))
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "WORLD": str(folder / "world.json"),
        "GITHUB_EVENT_NAME": run.event,
        "GITHUB_EVENT_PATH": str(folder / "event.json"),
        "GITHUB_REPOSITORY": "vllm-project/vllm",
        **run.env,
    }
    env.pop("PYTEST_ROCM_PLATFORM", None)
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            f"--rocm-platform={run.platform}",
            "--rocm-report-dir=results",
            "-p",
            "no:cacheprovider",
            "-q",
            *run.args,
            "test_suite.py",
        ],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    run.folder = folder / "results"
    if not (run.folder / "gate-report.json").is_file():
        raise SystemExit(f"{run.name}: the plugin wrote no gate report in {run.folder}")
    return run


def main_run(commits, index, breaks, rng, args, attempt=1, event="push") -> Run:
    sha = commits[index]["sha"]
    before = commits[index - 1]["sha"] if index else "0" * 40
    world = world_at(index, breaks, rng, args.flake, args.infra)
    payload = {"after": sha, "before": before, "repository": {"default_branch": "main"}}
    if event == "schedule":  # GitHub's schedule payload: no repository object
        payload = {"schedule": "0 6 * * *", "workflow": ".github/workflows/rocm-gate.yml"}
    return Run(
        f"main-{index:04d}-{attempt}",
        world,
        event,
        payload,
        {
            "GITHUB_REF": "refs/heads/main",
            "GITHUB_SHA": sha,
            "GITHUB_RUN_ID": str(1000 + index),
            "GITHUB_RUN_ATTEMPT": str(attempt),
        },
        extra={"index": index},
    )


def pr_run(commits, number, base, breaks, rng, args) -> Run:
    world = world_at(base, breaks, rng, args.flake, args.infra)
    own = None
    roll = rng.random()
    if roll < 0.35:  # the PR breaks a test main passes
        passing = [t for t in TESTS if t not in world["broken"] and t not in FLAKY]
        own = rng.choice(passing)
    elif roll < 0.45 and world["broken"]:  # it breaks a test main already fails, differently
        own = rng.choice(sorted(world["broken"]))
    elif roll < 0.5:  # it breaks a flaky test, another way
        own = rng.choice(FLAKY)
        world["flaky"].pop(own, None)
    if own:
        world["broken"][own] = f"KeyError: 'rope_scaling' in PR {number}"
    head, merge = fake_sha("head", number), fake_sha("merge", number)
    payload = {
        "pull_request": {
            "number": number,
            "head": {"sha": head},
            "base": {"sha": commits[base]["sha"]},
        },
        "repository": {"default_branch": "main"},
    }
    return Run(
        f"pr-{number:03d}",
        world,
        "pull_request",
        payload,
        {
            "GITHUB_REF": f"refs/pull/{number}/merge",
            "GITHUB_SHA": merge,
            "GITHUB_RUN_ID": str(5000 + number),
        },
        extra={"base": base, "own": own},
    )


def conclusion_of(results, trunk) -> tuple[str, dict]:
    content = checks.build(results, "rocm-gate / MI300X-1", None, trunk=trunk)
    found = checks._against_trunk(results, trunk, [])[0] if trunk else None
    return content.conclusion, (found.classes if found else {})


def pass_rate_flaky(conn) -> set[str]:
    """History's former rule (vLLM's AMD dashboard): a flaky verdict, or a pass rate of 0.2 to 0.8
    over 10 runs."""
    out = set()
    rows = conn.execute(
        "SELECT t.name, r.verdict FROM results r JOIN tests t ON t.id = r.test_id JOIN runs u ON "
        "u.id = r.run_id WHERE u.origin = 'main' ORDER BY COALESCE(u.started, ''), u.id"
    ).fetchall()
    by_test: dict[str, list[str]] = {}
    for name, verdict in rows:
        if verdict in ("pass", "regression", "unconfirmed", "infra", "flaky"):
            by_test.setdefault(name, []).append(verdict)
    for name, verdicts in by_test.items():
        last = verdicts[-10:]
        rate = sum(v == "pass" for v in last) / len(last)
        if "flaky" in last or (len(last) >= 5 and 0.2 <= rate <= 0.8):
            out.add(name.split("::")[-1])
    return out


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--commits", type=int, default=120)
    parser.add_argument(
        "--every",
        type=int,
        default=4,
        help="main is tested every N-th commit (and at breaks/fixes)",
    )
    parser.add_argument("--prs", type=int, default=40)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument(
        "--flake", type=float, default=0.3, help="chance a flaky test flakes in a run"
    )
    parser.add_argument(
        "--infra", type=float, default=0.1, help="chance a run hits one infrastructure fault"
    )
    parser.add_argument(
        "--publish-delay",
        type=int,
        default=6,
        help="a PR's check is published when main is up to this many commits past its base",
    )
    parser.add_argument("--json", metavar="FILE", help="also write the figures as JSON")
    args = parser.parse_args()
    rng = random.Random(args.seed)
    commits, breaks = choose_window(load_history(), args.commits, rng)
    # the cadence a nightly gives: never a run scheduled after a culprit or a fix
    tested = sorted({i for i in range(0, len(commits), args.every)} | {len(commits) - 1})
    runs = [
        main_run(commits, i, breaks, rng, args, event="schedule" if n % 3 == 2 else "push")
        for n, i in enumerate(tested)
    ]
    # a rerun of a few main commits (a maintainer's "re-run", a second nightly): how a whole-run
    # flake shows
    runs += [
        main_run(commits, i, breaks, rng, args, attempt=2)
        for i in rng.sample(tested, max(1, len(tested) // 5))
    ]
    prs = [
        pr_run(commits, n + 1, rng.randrange(len(commits)), breaks, rng, args)
        for n in range(args.prs)
    ]
    for pr in prs:  # published when main has moved on a little
        pr.extra["published"] = min(
            len(commits) - 1, pr.extra["base"] + rng.randint(0, args.publish_delay)
        )
    root = Path(tempfile.mkdtemp(prefix="trunk-replay-"))
    try:
        with ThreadPoolExecutor(args.jobs) as pool:
            done = list(pool.map(lambda r: execute(r, root), runs + prs))
        main_done = sorted(
            [r for r in done if r.name.startswith("main")], key=lambda r: (r.extra["index"], r.name)
        )
        pr_done = sorted(
            [r for r in done if r.name.startswith("pr")], key=lambda r: r.extra["published"]
        )
        conn = store.connect(root / "history.db")
        sha_list = [c["sha"] for c in commits]
        figures = {
            judge: {"blocked_preexisting": 0, "blocked_not_yet_on_main": 0, "new_blocked": 0}
            for judge in ("alone", "trunk", "sweep")
        }
        clean_on_red = new_total = 0
        wrongly: list[dict] = []
        first_seen: dict[int, dict] = {}
        queue = list(main_done)
        for pr in pr_done + [None]:
            while queue and (pr is None or queue[0].extra["index"] <= pr.extra["published"]):
                ingest_main(conn, queue.pop(0), breaks, sha_list, first_seen)
            if pr is None:
                break
            # the newest trunk state at publish time (the dashboard workflow keeps it)
            trunk = state.build(conn, SKU, 30, sha_list[: pr.extra["published"] + 1])
            pr.extra["trunk"] = trunk
        final_state = state.build(conn, SKU, 30, sha_list)
        for pr in pr_done:
            results = artifacts.read_results(pr.folder)
            own = pr.extra["own"]
            red = any(b.culprit <= pr.extra["base"] < b.fix for b in breaks)
            # the sweep: a blocked check judged again against main's newest state
            for judge, given in (
                ("alone", None),
                ("trunk", pr.extra["trunk"]),
                ("sweep", final_state),
            ):
                # what main's state knew when it was judged (alone: what it could have known)
                trunk = given if given is not None else pr.extra["trunk"]
                conclusion, classes = conclusion_of(results, given)
                if own is None and conclusion == "failure":
                    # blocked with no regression of its own: by what main's state already showed, or
                    # by a break (or flake) no main run had shown yet when the PR was judged
                    failing = [
                        n
                        for n, t in results.report["tests"].items()
                        if t["verdict"] in ("regression", "unconfirmed")
                    ]
                    known = all(
                        n in trunk["tests"]
                        and (
                            trunk["tests"][n]["state"] != "passing"
                            or trunk["tests"][n]["flaky_count"]
                            or trunk["tests"][n].get("breaks")
                        )
                        for n in failing
                    )
                    figures[judge][
                        "blocked_preexisting" if known else "blocked_not_yet_on_main"
                    ] += 1
                    if judge != "alone" and known:
                        wrongly.append(
                            {
                                "pr": pr.name,
                                "judged": judge,
                                "base": pr.extra["base"],
                                "classes": classes,
                                "world": pr.world,
                            }
                        )
                if (
                    own is not None
                    and conclusion == "failure"
                    and classes.get(f"test_suite.py::{own}", "new") == "new"
                ):
                    figures[judge]["new_blocked"] += 1
            new_total += own is not None
            clean_on_red += own is None and red
        # the flaky list the dashboard and the tracker show
        listed = queries.flaky(conn, landed=frozenset(sha_list))["flaky"]
        flagged = {f["test"].split("::")[-1] for f in listed}
        flaked = {r.world["flaky"] and n for r in main_done for n in r.world["flaky"]}
        flaked.discard(None)
        anchor_flagged = pass_rate_flaky(conn)
        detected = [b for b in breaks if id(b) in first_seen]
        contains = [
            b for b in detected if sha_list[b.culprit] in (first_seen[id(b)]["suspects"] or [])
        ]
        lengths = [
            first_seen[id(b)]["suspect_count"]
            for b in detected
            if first_seen[id(b)]["suspect_count"]
        ]
        out = {
            "commits": len(commits),
            "main_runs": len(main_done),
            "prs": len(pr_done),
            "breaks": len(breaks),
            "breaks_seen_on_main": len(detected),
            "prs_with_own_regression": new_total,
            "clean_prs_opened_while_main_red": clean_on_red,
            **figures,
            "suspect_range_contains_culprit": len(contains),
            "suspect_median_length": statistics.median(lengths) if lengths else None,
            "flaky_truth": sorted(flaked),
            "blocked_without_cause": wrongly,
            "flaky_flagged": sorted(flagged),
            "anchor_flaky_flagged": sorted(anchor_flagged),
        }
        report(out, args)
        return 0
    finally:
        shutil.rmtree(root, ignore_errors=True)


def ingest_main(conn, run: Run, breaks, sha_list, first_seen) -> None:
    store.ingest(conn, run.folder)
    index = run.extra["index"]
    pending = [b for b in breaks if id(b) not in first_seen and b.culprit <= index < b.fix]
    if not pending:
        return
    trunk = state.build(conn, SKU, 30, sha_list)
    for b in pending:
        entry = trunk["tests"].get(f"test_suite.py::{b.test}")
        if entry and entry["state"] == "failing":
            first_seen[id(b)] = entry


def report(out: dict, args) -> None:
    def pct(part, whole):
        return f"{part}/{whole} ({part / whole:.0%})" if whole else f"{part}/0"

    alone, trunk, sweep = out["alone"], out["trunk"], out["sweep"]
    not_flaky = sorted(set(out["flaky_flagged"]) - set(out["flaky_truth"]))
    missed = sorted(set(out["flaky_truth"]) - set(out["flaky_flagged"]))
    anchor_not_flaky = sorted(set(out["anchor_flaky_flagged"]) - set(out["flaky_truth"]))
    anchor_missed = sorted(set(out["flaky_truth"]) - set(out["anchor_flaky_flagged"]))
    total = out["prs_with_own_regression"]
    print(
        f"vLLM main replay: {out['commits']} commits, {out['main_runs']} main runs (every {args.every}th commit), "
        f"{out['breaks']} breaks ({out['breaks_seen_on_main']} seen on main), {out['prs']} PRs published up to "
        f"{args.publish_delay} commits after their base ({total} with a regression of their own, "
        f"{out['clean_prs_opened_while_main_red']} clean ones opened while main was red)"
    )
    print(f"{'':44s} {'judged alone':>14s} {'at publish':>14s} {'sweep, newest':>14s}  goal")
    print(
        "(blocked: the check concludes `failure` for a PR with no regression of its own: main's failures, main's "
        "flakes; `at publish`: against the newest trunk state then; `sweep`: judged again against main's newest)"
    )
    print(
        f"{'PRs blocked by what main already showed':44s} {alone['blocked_preexisting']:>14d} "
        f"{trunk['blocked_preexisting']:>14d} {sweep['blocked_preexisting']:>14d}  0"
    )
    print(
        f"{'  blocked by a break no main run showed yet':44s} {alone['blocked_not_yet_on_main']:>14d} "
        f"{trunk['blocked_not_yet_on_main']:>14d} {sweep['blocked_not_yet_on_main']:>14d}  (nothing can know it)"
    )
    print(
        f"{'PR regressions blocked':44s} {pct(alone['new_blocked'], total):>14s} "
        f"{pct(trunk['new_blocked'], total):>14s} {pct(sweep['new_blocked'], total):>14s}  100%"
    )
    print(
        f"{'suspect range holds the culprit':44s} {'-':>14s} "
        f"{pct(out['suspect_range_contains_culprit'], out['breaks_seen_on_main']):>14s} {'':>14s}  100% "
        f"(median length {out['suspect_median_length']} commits)"
    )
    print(
        f"{'flaky listed that are not flaky':44s} {len(anchor_not_flaky):>14d} {len(not_flaky):>14d} {'':>14s}  0  "
        f"{not_flaky or anchor_not_flaky}"
    )
    print(
        f"{'flaky tests missed':44s} {len(anchor_missed):>14d} {len(missed):>14d} {'':>14s}  0  "
        f"{missed or anchor_missed}"
    )
    print(
        "(flaky: `judged alone` is history's former pass-rate rule; the others, the dashboard's flaky list)"
    )
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    raise SystemExit(main())
