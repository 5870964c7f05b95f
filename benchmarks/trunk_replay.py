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
import datetime as dt
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

from pytest_rocm.results.fingerprint import of_test as fingerprint_of  # noqa: E402
from pytest_rocm.schemas.artifacts import blocking_failures  # noqa: E402
from rocm_gate.github import artifacts, checks  # noqa: E402
from rocm_gate.history import queries, store  # noqa: E402
from rocm_gate.trunk import evidence, state  # noqa: E402

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
        extra={"base": base, "own": own, "number": number},
    )


def conclusion_of(results, trunk, now, base_date=None) -> tuple[str, dict]:
    content = checks.build(
        results, "rocm-gate / MI300X-1", None, trunk=trunk, base_date=base_date, now=now
    )
    found = (
        checks._against_trunk(results, trunk, [], base_date=base_date, now=now)[0]
        if trunk
        else None
    )
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


@dataclass
class Wiring:
    """How main's state reaches a PR check: `alone` (no state: the example callers as shipped
    before, with no dashboard workflow upstream); `daily` (a state built once a day by a dashboard,
    re-read by the sweep; a fork's base has no date, so the stale rule cannot apply to it); `live`
    (every main run GitHub lists as completed, at the publish; a main run's publish judges the blocked
    checks again at once; a fork's base dated from its merge commit)."""

    name: str
    blocked_known: int = 0  # clean PRs blocked by what a completed main run had already shown
    blocked_known_by_kind: dict = field(default_factory=lambda: {"branch": 0, "fork": 0})
    blocked_unknown: int = 0  # clean PRs blocked by a break no completed main run had shown
    own_blocked: int = 0
    block_hours: list = field(default_factory=list)  # how long each "known" block stood
    never_lifted: int = 0


def parse_time(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text).astimezone(dt.UTC)


def shown_by_main(name: str, fingerprint_hint: str, main_done: list, until: dt.datetime) -> bool:
    """Whether a main run completed by `until` failed (or flaked) `name`: the ground truth of
    "main had already shown it", from the runs' worlds, not from any trunk state."""
    for run in main_done:
        if run.extra["completed"] > until:
            continue
        if name in run.world["broken"] or name in run.world["flaky"]:
            return True
    return False


def main() -> int:
    args = arguments()
    rng = random.Random(args.seed)
    commits, breaks = choose_window(load_history(), args.commits, rng)
    times = [parse_time(c["date"]) for c in commits]
    tested = sorted({i for i in range(0, len(commits), args.every)} | {len(commits) - 1})
    runs = []
    for n, i in enumerate(tested):
        run = main_run(commits, i, breaks, rng, args, event="schedule" if n % 7 == 6 else "push")
        run.extra["completed"] = times[i] + dt.timedelta(
            minutes=args.main_minutes * rng.uniform(0.8, 1.2)
        )
        runs.append(run)
    for i in rng.sample(tested, max(1, len(tested) // 10)):  # a re-run: how a whole-run flake shows
        run = main_run(commits, i, breaks, rng, args, attempt=2)
        run.extra["completed"] = times[i] + dt.timedelta(minutes=args.main_minutes * 2.2)
        runs.append(run)
    prs = []
    for n in range(args.prs):
        base = rng.randrange(len(commits))
        pr = pr_run(commits, n + 1, base, breaks, rng, args)
        # opened up to `--open-hours` after its base landed (a PR based on a fresh commit), its check
        # published when its run completes
        opened = times[base] + dt.timedelta(hours=rng.uniform(0, args.open_hours))
        pr.extra["published"] = opened + dt.timedelta(
            minutes=args.pr_minutes * rng.uniform(0.8, 1.2)
        )
        pr.extra["fork"] = rng.random() < args.fork_share
        prs.append(pr)
    root = Path(tempfile.mkdtemp(prefix="trunk-replay-"))
    try:
        with ThreadPoolExecutor(args.jobs) as pool:
            done = list(pool.map(lambda r: execute(r, root), runs + prs))
        out = replay(done, commits, times, breaks, args)
        report(out, args)
        if args.json:
            Path(args.json).write_text(json.dumps(out, indent=2, default=str) + "\n")
        return 0
    finally:
        shutil.rmtree(root, ignore_errors=True)


def arguments():
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--commits", type=int, default=120)
    parser.add_argument("--every", type=int, default=1, help="main is gated on every N-th push")
    parser.add_argument("--prs", type=int, default=40)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument(
        "--flake", type=float, default=0.3, help="chance a flaky test flakes in a run"
    )
    parser.add_argument(
        "--infra", type=float, default=0.1, help="chance a run hits an infrastructure fault"
    )
    parser.add_argument("--main-minutes", type=float, default=45.0, help="a main run's length")
    parser.add_argument("--pr-minutes", type=float, default=60.0, help="a PR run's length")
    parser.add_argument(
        "--open-hours", type=float, default=6.0, help="a PR opens this long after its base at most"
    )
    parser.add_argument("--fork-share", type=float, default=0.3)
    parser.add_argument("--sweep-minutes", type=float, default=30.0)
    parser.add_argument(
        "--daily-at", default="06:30", help="the dashboard's cron time (UTC), for `daily`"
    )
    parser.add_argument("--json", metavar="FILE", help="also write the figures as JSON")
    return parser.parse_args()


def replay(done: list, commits: list, times: list, breaks: list, args) -> dict:
    """Judge every PR under each wiring, in time order, against the same executed runs."""
    main_done = sorted(
        [r for r in done if r.name.startswith("main")], key=lambda r: (r.extra["completed"], r.name)
    )
    pr_done = sorted(
        [r for r in done if r.name.startswith("pr")], key=lambda r: r.extra["published"]
    )
    sha_list = [c["sha"] for c in commits]
    root = Path(tempfile.mkdtemp(prefix="trunk-replay-store-"))
    conn = store.connect(root / "history.db")
    first_seen: dict[int, dict] = {}
    wirings = {name: Wiring(name) for name in ("alone", "daily", "live")}
    hh, mm = map(int, args.daily_at.split(":"))
    start_day = min(times).replace(hour=hh, minute=mm, second=0, microsecond=0)
    dailies = [
        start_day + dt.timedelta(days=d) for d in range(0, (max(times) - start_day).days + 3)
    ]
    # events in time order: a main run completes, a daily state is made, a PR check is published
    events = [(r.extra["completed"], 0, "main", r) for r in main_done]
    events += [(t, 1, "daily", None) for t in dailies]
    events += [(r.extra["published"], 2, "publish", r) for r in pr_done]
    events.sort(key=lambda e: (e[0], e[1]))
    daily_state = None
    blocked: dict[str, dict[str, dt.datetime]] = {w: {} for w in wirings}  # pr name -> since
    results_of = {pr.name: artifacts.read_results(pr.folder) for pr in pr_done}
    ingested = []
    for moment, _, kind, run in events:
        if kind == "main":
            ingest_main(conn, run, breaks, sha_list, first_seen)
            ingested.append(run)
            # live: the main run's own publish judges the blocked checks again, now
            live = state.build(conn, SKU, 30, sha_list, generated=moment.isoformat())
            lift(
                blocked["live"],
                wirings["live"],
                results_of,
                live,
                moment,
                pr_done,
                times,
                sha_list,
                True,
            )
        elif kind == "daily":
            daily_state = state.build(conn, SKU, 30, sha_list, generated=moment.isoformat())
            # the sweep after it (every --sweep-minutes) judges blocked checks against it
            when = moment + dt.timedelta(minutes=args.sweep_minutes)
            lift(
                blocked["daily"],
                wirings["daily"],
                results_of,
                daily_state,
                when,
                pr_done,
                times,
                sha_list,
                False,
            )
        else:
            live = state.build(conn, SKU, 30, sha_list, generated=moment.isoformat())
            live["other_prs"] = other_prs(conn, run, results_of[run.name], live, sha_list, moment)
            for name, trunk in (("alone", None), ("daily", daily_state), ("live", live)):
                judge_at_publish(
                    run,
                    wirings[name],
                    trunk,
                    moment,
                    results_of,
                    times,
                    sha_list,
                    ingested,
                    blocked[name],
                )
    end = max(e[0] for e in events)
    for name, wiring in wirings.items():
        for since in blocked[name].values():
            wiring.never_lifted += 1
            wiring.block_hours.append((end - since).total_seconds() / 3600)
    return summarize(wirings, done, main_done, pr_done, breaks, first_seen, conn, sha_list, commits)


def other_prs(conn, pr, results, trunk, sha_list, moment) -> dict:
    """What other PRs published before showed of this PR's failures (trunk/evidence.py, as the live
    knowledge computes it); then this PR joins the store, as its publish adds it."""
    failures = {
        name: fingerprint_of(results.report["tests"][name])
        for name in blocking_failures(results.report["tests"])
    }
    since = (moment - dt.timedelta(hours=48)).isoformat()
    rows = queries.pr_results(conn, SKU, sorted(failures), since) if failures else {}
    main_tested = [r[1] for r in state.main_runs(conn, SKU)[0]]
    mine = f"vllm-project/vllm:pr-{pr.extra['number']}"
    found = evidence.from_other_prs(
        failures,
        rows,
        mine,
        sha_list[pr.extra["base"]],
        list(trunk.get("commits") or []),
        main_tested,
    )
    store.ingest(
        conn,
        pr.folder,
        "pr",
        f"{5000 + pr.extra['number']}-1",
        facts={
            "head_ref": mine,
            "base_sha": sha_list[pr.extra["base"]],
            "completed": moment.isoformat(),
        },
    )
    return found


def base_date_for(pr, wiring: str, times: list) -> dt.datetime | None:
    """The PR's base date as each wiring knows it: the PR listing for a branch PR (GitHub lists none
    for a fork's run); live dates every base from the commit itself."""
    if wiring == "live" or not pr.extra["fork"]:
        return times[pr.extra["base"]]
    return None


def judge_at_publish(
    pr, wiring, trunk, moment, results_of, times, sha_list, ingested, blocked
) -> None:
    results = results_of[pr.name]
    base_date = base_date_for(pr, wiring.name, times)
    conclusion, classes = conclusion_of(results, trunk, moment, base_date)
    own = pr.extra["own"]
    if own is not None:
        if conclusion == "failure" and classes.get(f"test_suite.py::{own}", "new") == "new":
            wiring.own_blocked += 1
        return
    if conclusion != "failure":
        return
    failing = [
        n.split("::")[-1]
        for n, t in results.report["tests"].items()
        if t["blocking"] and t["verdict"] in ("regression", "unconfirmed")
    ]
    known = bool(failing) and all(shown_by_main(n, "", ingested, moment) for n in failing)
    if known:
        wiring.blocked_known += 1
        wiring.blocked_known_by_kind["fork" if pr.extra["fork"] else "branch"] += 1
        blocked[pr.name] = moment
    else:
        wiring.blocked_unknown += 1


def lift(blocked, wiring, results_of, trunk, moment, pr_done, times, sha_list, live) -> None:
    """Judge the blocked checks again against `trunk` at `moment`; a lifted block's time stood."""
    by_name = {pr.name: pr for pr in pr_done}
    for name, since in list(blocked.items()):
        pr = by_name[name]
        conclusion, _ = conclusion_of(
            results_of[name], trunk, moment, base_date_for(pr, wiring.name, times)
        )
        if conclusion != "failure":
            wiring.block_hours.append((moment - since).total_seconds() / 3600)
            del blocked[name]


def summarize(
    wirings, done, main_done, pr_done, breaks, first_seen, conn, sha_list, commits
) -> dict:
    listed = queries.flaky(conn, landed=frozenset(sha_list))["flaky"]
    flagged = {f["test"].split("::")[-1] for f in listed}
    flaked = {n for r in main_done for n in r.world["flaky"]}
    detected = [b for b in breaks if id(b) in first_seen]
    contains = [b for b in detected if sha_list[b.culprit] in (first_seen[id(b)]["suspects"] or [])]
    lengths = [
        first_seen[id(b)]["suspect_count"] for b in detected if first_seen[id(b)]["suspect_count"]
    ]
    return {
        "commits": len(commits),
        "main_runs": len(main_done),
        "prs": len(pr_done),
        "forks": sum(pr.extra["fork"] for pr in pr_done),
        "breaks": len(breaks),
        "breaks_seen_on_main": len(detected),
        "prs_with_own_regression": sum(pr.extra["own"] is not None for pr in pr_done),
        "clean_prs": sum(pr.extra["own"] is None for pr in pr_done),
        "wirings": {
            name: {
                "blocked_known": w.blocked_known,
                "blocked_known_branch": w.blocked_known_by_kind["branch"],
                "blocked_known_fork": w.blocked_known_by_kind["fork"],
                "blocked_unknown": w.blocked_unknown,
                "own_blocked": w.own_blocked,
                "block_median_h": statistics.median(w.block_hours) if w.block_hours else None,
                "block_max_h": max(w.block_hours) if w.block_hours else None,
                "never_lifted": w.never_lifted,
            }
            for name, w in wirings.items()
        },
        "suspect_range_contains_culprit": len(contains),
        "suspect_median_length": statistics.median(lengths) if lengths else None,
        "flaky_truth": sorted(flaked),
        "flaky_flagged": sorted(flagged),
        "anchor_flaky_flagged": sorted(pass_rate_flaky(conn)),
    }


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

    def hours(value):
        return "-" if value is None else f"{value:.1f} h"

    total = out["prs_with_own_regression"]
    print(
        f"vLLM main replay: {out['commits']} commits, {out['main_runs']} main runs (every {args.every} push(es) "
        f"gated, {args.main_minutes:g} min each), {out['breaks']} breaks ({out['breaks_seen_on_main']} seen on "
        f"main), {out['prs']} PRs ({out['forks']} from forks; {total} with a regression of their own, "
        f"{out['clean_prs']} clean), each published {args.pr_minutes:g} min after it opened"
    )
    print(
        f"{'main state at the check':34s} {'clean PRs blocked by':>22s} {'(branch/fork)':>14s} "
        f"{'block stood':>22s} {'never lifted':>13s} {'PR regressions':>15s}"
    )
    print(f"{'':34s} {'what main had shown':>22s} {'':>14s} {'median / longest':>22s}")
    labels = {
        "alone": "none (no dashboard upstream)",
        "daily": f"daily dashboard ({args.daily_at} UTC)",
        "live": "live: every main run at publish",
    }
    for name, w in out["wirings"].items():
        stood = (
            f"{hours(w['block_median_h'])} / {hours(w['block_max_h'])}"
            if w["block_median_h"] is not None
            else "-"
        )
        print(
            f"{labels[name]:34s} {w['blocked_known']:>22d} {str(w['blocked_known_branch']) + '/' + str(w['blocked_known_fork']):>14s} "
            f"{stood:>22s} {w['never_lifted']:>13d} {pct(w['own_blocked'], total):>15s}"
        )
    print("goal: 0 clean PRs blocked by what main had shown, 100% of PR regressions blocked")
    for name, w in out["wirings"].items():
        print(
            f"  {labels[name]}: {w['blocked_unknown']} clean PR(s) blocked by a break no completed main run had shown yet"
        )
    print(
        f"suspect range holds the culprit: {pct(out['suspect_range_contains_culprit'], out['breaks_seen_on_main'])} "
        f"(median length {out['suspect_median_length']} commits)"
    )
    not_flaky = sorted(set(out["flaky_flagged"]) - set(out["flaky_truth"]))
    missed = sorted(set(out["flaky_truth"]) - set(out["flaky_flagged"]))
    print(
        f"flaky listed that are not flaky: {len(not_flaky)} {not_flaky}; flaky missed: {len(missed)} {missed}"
    )


if __name__ == "__main__":
    raise SystemExit(main())
