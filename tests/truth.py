"""The truth harness: histories of main and PRs whose truth is known, run through the real
decision path, and what each step published checked against an oracle that knows the truth.

A history (`World`, from `world(rng)`): main's commits on two SKUs; breaks (a commit breaks a test
on some SKUs, with an accuracy that jitters from run to run; a later commit may fix it); flaky
tests (on some main commits a first attempt loses a race and the rerun passes); infrastructure
faults (a first attempt's HSA error; on a bad node, every time); main runs at a cadence of their
own per SKU (push, schedule, dispatch and merge-queue events with GitHub's real payloads, an
ejected queue candidate that fails something main never had); a quarantine entered for a break;
PRs with stale and fresh bases, their own regressions (a new failure, the same test far worse
than main, a quarantined test failing another way, a flaky test failing twice), fixes of main's
breaks, infra faults followed by main's own failure.

Each run is the plugin's records (schema-valid, as the plugin writes them) through the real report
builder (`results/report.py`), a results folder read back through the strict loader, history's
ingest (`--origin pr` for PR runs, as the dashboard workflow does), the trunk state main's runs so
far give at the PR's publish time (`trunk/state.py`, with main's commit list), the check
`rocm-gate publish` writes (`github/checks.py`), then the quarantine file, the tracker issue, the
flaky list and trunk health. `judge(world)` returns every disagreement with the oracle, and how
many checks it made.

The oracle says what can be known: a break no main run had shown by the PR's publish time is new
to the trunk state (counted apart: the sweep judges it again once main learns of it).
"""

from __future__ import annotations

import datetime as dt
import json
import random
import re
import sqlite3
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import truth_upstream as upstream

from pytest_rocm.hw.profiles import builtin
from pytest_rocm.results.fingerprint import among, fingerprint, same_failure
from pytest_rocm.results.manifest import provenance
from pytest_rocm.results.records import PLAIN_PASS, RECORD_SCHEMA
from pytest_rocm.results.report import build_gate_report
from pytest_rocm.schemas.artifacts import schema_error
from rocm_gate.github import checks, tracker
from rocm_gate.github.artifacts import read_results
from rocm_gate.history import queries, store
from rocm_gate.trunk import judgement, quarantine, state
from rocm_gate.trunk.health import trunk_health

REPO = "example/upstream"
SKUS = ("MI300X", "MI355X")
GROUPS = ("attention", "engine", "api")
TESTS = [f"tests/test_{g}.py::test_{g}_{i}" for g in GROUPS for i in range(2)]
# the tests of the shapes grown from upstream's history (tests/truth_upstream.py), in a history only
# where it has their shape
STRICT = (
    "tests/test_attention.py::test_attention_2"  # xfail(strict=True) until a fix makes it XPASS
)
ALTERNATES = (
    "tests/test_engine.py::test_engine_2"  # fails on alternate main commits, no change to it
)
MOVED = "tests/test_api.py::test_api_2"  # its file moves to another folder, or is deleted
XPASS = "[XPASS(strict)] fp8 kv cache not supported on ROCm yet"
RACE = "AssertionError: lost a race in the scheduler"
HSA = (
    "HSA_STATUS_ERROR_EXCEPTION: An HSAIL operation resulted in a hardware exception. code: 0x1016"
)
OWN = "KeyError: 'rope_scaling'"
TEMPLATE = json.loads(
    (Path(__file__).parent / "data" / "main-job" / "gate-report.json").read_text()
)["manifest"]


def group_of(test: str) -> str:
    return test.split("::test_")[1].rsplit("_", 1)[0]


def accuracy(value: float) -> str:
    return f"AssertionError: gsm8k accuracy {value:.3f} below 0.700"


def timed_out(retries: int) -> str:
    """The failure of a test that fails on alternate commits: its count changes from run to run."""
    return f"AssertionError: engine step timed out after {retries} retries"


@dataclass
class Break:
    test: str
    skus: frozenset
    culprit: int  # the commit that broke it
    fix: int | None  # the commit that fixed it
    value: float  # its accuracy, jittering 3% from run to run
    message: str | None = None  # its failure, where it is not an accuracy (a strict xfail's XPASS)
    xfail: bool = False  # before the culprit the test xfails (a strict xfail), after the fix passes

    def at(self, commit: int, sku: str) -> bool:
        return (
            sku in self.skus and self.culprit <= commit and (self.fix is None or commit < self.fix)
        )

    def text(self, rng: random.Random | None = None) -> str:
        """Its failure message (an accuracy jittering from run to run, with `rng`)."""
        if self.message is not None:
            return self.message
        return accuracy(self.value * (1 + rng.uniform(-0.03, 0.03)) if rng else self.value)

    @property
    def shape(self) -> str:
        return "xpass" if self.message == XPASS else "accuracy"


@dataclass
class MainRun:
    sku: str
    commit: int
    event: str  # push, schedule, workflow_dispatch, merge_group; "ejected": a queue candidate that never landed
    hour: float
    runner: str
    complete: bool = True  # what its gate report says (judge reads it back): the roll call's runs


@dataclass
class PR:
    number: int
    sku: str
    base: int  # the main commit its merge commit was made on
    published: int  # main's newest commit when its check is published (the trunk state then)
    own: dict = field(default_factory=dict)  # test -> its failure (a regression of its own)
    fixes: set = field(default_factory=set)  # main's breaks this PR fixes
    infra: set = field(default_factory=set)  # a first attempt's HSA fault
    flaky: set = field(default_factory=set)  # a first attempt loses a race, the rerun passes
    unlucky: set = field(default_factory=set)  # both attempts lose the race (a regression verdict)
    alternates: bool = False  # fails ALTERNATES the way main does on alternate commits


@dataclass
class World:
    seed: int
    commits: list[str]
    breaks: list[Break]
    flakes: dict  # (test, sku) -> main commits where it flakes
    main_runs: list[MainRun]
    prs: list[PR]
    quarantined: (
        dict  # (test, sku) -> (the break, the commit from which the quarantine file lists it)
    )
    bad_node: tuple | None  # (sku, test): the runner node-bad-<sku> faults on it every time
    extra: list = field(default_factory=list)  # the shapes' tests this history has (STRICT, ...)
    # test -> (its id before, the commit its file moved at, its id from then: None, deleted)
    renamed: dict = field(default_factory=dict)
    alternating: dict = field(default_factory=dict)  # (test, sku) -> main commits that fail it
    shapes: list = field(default_factory=list)  # what upstream's history gave it, in words

    @property
    def tests(self) -> list[str]:
        return TESTS + self.extra

    def nodeid(self, test: str, commit: int) -> str | None:
        """The test's id in main's code at `commit` (None: not there)."""
        if test not in self.renamed:
            return test
        old, moved, new = self.renamed[test]
        return old if commit < moved else new

    def logical(self, nodeid: str) -> str:
        """The test an id is of."""
        return next(
            (t for t, (old, _, new) in self.renamed.items() if nodeid in (old, new)), nodeid
        )


def world(rng: random.Random, seed: int = 0) -> World:
    n = rng.randint(8, 14)
    commits = [f"{rng.getrandbits(160):040x}" for _ in range(n)]
    breaks: list[Break] = []
    for _ in range(rng.randint(1, 4)):
        test = rng.choice(TESTS)
        culprit = rng.randint(1, n - 2)
        fix = rng.choice([None, rng.randint(culprit + 1, n)])
        fix = None if fix is not None and fix >= n else fix
        skus = frozenset(rng.sample(SKUS, rng.randint(1, 2)))
        clash = any(
            b.test == test
            and b.skus & skus
            and not (
                (fix is not None and fix <= b.culprit) or (b.fix is not None and b.fix <= culprit)
            )
            for b in breaks
        )
        if not clash:
            breaks.append(Break(test, skus, culprit, fix, round(rng.uniform(0.2, 0.6), 3)))
    flakes = {}
    for _ in range(rng.randint(0, 2)):
        test, sku = rng.choice(TESTS), rng.choice(SKUS)
        if not any(b.test == test for b in breaks):
            flakes[(test, sku)] = set(rng.sample(range(n), rng.randint(1, 3)))
    main_runs = []
    for k, sku in enumerate(SKUS):
        every, offset = rng.randint(2, 4), rng.randint(0, 1)
        for commit in range(offset, n, every):
            event = rng.choice(["push", "push", "schedule", "workflow_dispatch", "merge_group"])
            main_runs.append(
                MainRun(sku, commit, event, commit + 0.5 + 0.1 * k, f"node-{sku}-{commit % 3}")
            )
        if rng.random() < 0.5:
            commit = rng.randint(1, n - 1)
            main_runs.append(MainRun(sku, commit, "ejected", commit + 0.7, f"node-{sku}-0"))
    bad_node = None
    if rng.random() < 0.5:
        bad_node = (rng.choice(SKUS), rng.choice(TESTS))
        sku = bad_node[0]
        for commit in range(n):
            main_runs.append(MainRun(sku, commit, "push", commit + 0.8, f"node-bad-{sku}"))
    main_runs.sort(key=lambda r: r.hour)
    quarantined = {}
    for b in breaks:
        if rng.random() < 0.3:
            sku = sorted(b.skus)[0]
            quarantined[(b.test, sku)] = (b, rng.randint(b.culprit, n - 1))
    prs = []
    for number in range(1, rng.randint(3, 7) + 1):
        sku = rng.choice(SKUS)
        base = rng.randint(0, n - 1)
        published = rng.randint(base, n - 1)
        pr = PR(number, sku, base, published)
        broken_here = [b for b in breaks if b.at(base, sku)]
        for _ in range(rng.randint(0, 2)):
            kind = rng.random()
            test = rng.choice(TESTS)
            if kind < 0.3:
                pr.own[test] = OWN
            elif kind < 0.45 and broken_here:
                b = rng.choice(broken_here)
                pr.own[b.test] = accuracy(b.value / 8)  # the same test, far worse than main
            elif kind < 0.6 and broken_here:
                pr.fixes.add(rng.choice(broken_here).test)
            elif kind < 0.75:
                pr.infra.add(test)
            elif kind < 0.85:
                pr.flaky.add(test)
            else:
                pr.unlucky.add(rng.choice([t for t, s in flakes if s == sku] or [test]))
        prs.append(pr)
    grown = World(seed, commits, breaks, flakes, main_runs, prs, quarantined, bad_node)
    grow(grown, random.Random(rng.getrandbits(64)))
    return grown


def grow(w: World, rng: random.Random) -> None:
    """The shapes of upstream's real history (tests/truth_upstream.py), each where a draw says: a
    break reverted (and re-landed, where upstream re-landed it) with a PR based inside the earlier
    episode, a test file moved (or deleted) with a PR based before the move, a test that fails on
    alternate commits, and a strict xfail that starts to XPASS after a fix. Main's commits become
    upstream's real ones around the episode or the move."""
    n = len(w.commits)
    relanded = [e for e in upstream.episodes() if e.reland is not None]
    episode = None
    if rng.random() < 0.45:  # upstream re-landed 2 of its 20 reverts: those half the time
        episode = rng.choice(relanded if rng.random() < 0.5 else upstream.episodes())
    move = rng.choice(upstream.moves()) if rng.random() < 0.4 else None
    if episode is not None:
        keys = [episode.culprit, episode.revert] + ([episode.reland] if episode.reland else [])
        w.commits, at = upstream.window(rng, n, keys)
        _episode(w, rng, episode, at)
    if move is not None:
        if episode is None:
            w.commits, (moved,) = upstream.window(rng, n, [move.commit])
        else:
            moved = rng.randint(2, n - 1)
        _move(w, rng, move, max(moved, 1))
    if rng.random() < 0.35:
        _alternating(w, rng)
    if rng.random() < 0.35:
        _strict_xfail(w, rng)
    if ALTERNATES in w.extra:
        _unlucky_on_alternates(w, rng)


def _alternating(w: World, rng: random.Random) -> None:
    """ALTERNATES fails on alternate commits of a SKU (now and then on two in a row, or on none),
    with no change to its code; main runs nightly there too, so every commit of the SKU is tested."""
    n = len(w.commits)
    w.extra.append(ALTERNATES)
    for sku in rng.sample(SKUS, rng.randint(1, 2)):
        parity = rng.randint(0, 1)
        w.alternating[(ALTERNATES, sku)] = {
            c for c in range(n) if (c % 2 == parity) != (rng.random() < 0.15)
        }
        tested = {r.commit for r in w.main_runs if r.sku == sku and r.event != "ejected"}
        w.main_runs += [
            MainRun(sku, c, "schedule", c + 0.65, f"node-{sku}-nightly")
            for c in range(n)
            if c not in tested
        ]
    w.main_runs.sort(key=lambda r: r.hour)
    w.shapes.append("a test that fails on alternate commits")


def _free(w: World, test: str) -> bool:
    return not any(b.test == test for b in w.breaks) and not any(t == test for t, _ in w.flakes)


def _episode(w: World, rng: random.Random, episode, at: list[int]) -> None:
    """A break at the real culprit's place, fixed by its revert, and, where upstream re-landed it,
    the same failure again from the re-land (fixed later, or not); a PR based inside the first."""
    n = len(w.commits)
    test = rng.choice([t for t in TESTS if _free(w, t)] + [MOVED])
    if test == MOVED and MOVED not in w.extra:
        w.extra.append(MOVED)
    skus = frozenset(rng.sample(SKUS, rng.randint(1, 2)))
    value = round(rng.uniform(0.2, 0.6), 3)
    w.breaks.append(Break(test, skus, at[0], at[1], value))
    said = f"{episode.subject!r} broke {test}, reverted"
    if len(at) > 2:
        fix = rng.choice([None, *range(at[2] + 1, n)])
        w.breaks.append(Break(test, skus, at[2], fix, value))
        said += " and re-landed"
        if at[0] < at[1]:  # a PR based inside the earlier episode, judged once main re-broke it
            base = rng.randint(at[0], at[1] - 1)
            published = rng.randint(max(base, at[2]), n - 1)
            w.prs.append(PR(len(w.prs) + 1, rng.choice(sorted(skus)), base, published))
    w.shapes.append(said)


def _move(w: World, rng: random.Random, move, at: int) -> None:
    """MOVED's file moves as upstream's did at `at` (or is deleted), with a break across the move
    where the test has none yet, and a PR based before the move, judged after it."""
    n = len(w.commits)
    deleted = rng.random() < 0.25
    function = MOVED.split("::")[1]
    new = None if deleted else f"{move.new}::{function}"
    w.renamed[MOVED] = (f"{move.old}::{function}", at, new)
    if MOVED not in w.extra:
        w.extra.append(MOVED)
    flaked = None
    if _free(w, MOVED) and rng.random() < 0.7:
        culprit = rng.randint(1, at)
        fix = rng.choice([None, *range(at + 1, n)])
        skus = frozenset(rng.sample(SKUS, rng.randint(1, 2)))
        w.breaks.append(Break(MOVED, skus, culprit, fix, round(rng.uniform(0.2, 0.6), 3)))
    elif _free(w, MOVED) and rng.random() < 0.5:  # it loses a race now and then, before the move
        flaked = rng.choice(SKUS)
        w.flakes[(MOVED, flaked)] = set(rng.sample(range(at), min(at, rng.randint(1, 2))))
    base = rng.randint(max(0, at - 4), at - 1)
    pr = PR(len(w.prs) + 1, flaked or rng.choice(SKUS), base, rng.randint(at, n - 1))
    if flaked and rng.random() < 0.7:  # and loses it in the PR's run of the old id
        pr.unlucky.add(MOVED)
    w.prs.append(pr)
    w.shapes.append(f"{move.old} {'deleted' if deleted else 'moved to ' + move.new}")


def _strict_xfail(w: World, rng: random.Random) -> None:
    """STRICT xfails on main until a fix makes it XPASS (a failure, strict), at a real `[ROCm]` fix
    where main's commits have one; its marker is removed later, or not."""
    n = len(w.commits)
    fixes = [i for i in upstream.rocm_fixes(w.commits) if 1 <= i <= n - 2]
    culprit = rng.choice(fixes) if fixes else rng.randint(1, n - 2)
    removed = rng.choice([None, *range(culprit + 1, n)])
    skus = frozenset(rng.sample(SKUS, rng.randint(1, 2)))
    w.breaks.append(Break(STRICT, skus, culprit, removed, 0.0, XPASS, xfail=True))
    w.extra.append(STRICT)
    base = rng.randint(culprit, n - 1)
    w.prs.append(PR(len(w.prs) + 1, rng.choice(sorted(skus)), base, rng.randint(base, n - 1)))
    w.shapes.append("a strict xfail that starts to XPASS")


def _unlucky_on_alternates(w: World, rng: random.Random) -> None:
    """PRs fail ALTERNATES as main does, where main's state shows it flaky at their publish and at
    the end (before that, nothing tells such a failure from the PR's own)."""
    last = len(w.commits) - 1
    for pr in w.prs:
        if (ALTERNATES, pr.sku) not in w.alternating:
            continue
        shown = [
            _knowable(w, _seen(w, pr.sku, at, range(len(w.commits))), ALTERNATES)
            for at in (pr.published, last)
        ]
        if all(any(s == "flaky" for _, s in said) for said in shown):
            pr.alternates = rng.random() < 0.7


# the runs -----------------------------------------------------------------------------------------


class Clock:
    """Times of the history, ending now (a trunk state has an age: attribution.stale)."""

    def __init__(self, n: int):
        self.start = dt.datetime.now(dt.UTC).replace(microsecond=0) - dt.timedelta(hours=n + 2)

    def at(self, hour: float) -> dt.datetime:
        return self.start + dt.timedelta(hours=hour)


def _manifest(sku: str, runner: str, prov: dict, started: dt.datetime) -> dict:
    platform = builtin(f"{sku.lower()}-1").to_dict()
    platform["profile"] = None  # as detected on the node: a simulated profile never passes a check
    return {
        **TEMPLATE,
        "platform": platform,
        "git_sha": prov["tested_sha"],
        "git_sha_from": "event",
        "provenance": prov,
        "runner": runner,
        "started": started.isoformat(),
        "finished": (started + dt.timedelta(minutes=20)).isoformat(),
    }


def _event(folder: Path, name: str, payload: dict, ref: str, sha: str, run_id: int) -> dict:
    """The provenance the plugin records for a GitHub event (results/manifest.py: provenance), from
    the event's payload as GitHub delivers it."""
    path = folder / "event.json"
    path.write_text(json.dumps(payload))
    environ = {
        "GITHUB_EVENT_NAME": name,
        "GITHUB_EVENT_PATH": str(path),
        "GITHUB_REF": ref,
        "GITHUB_SHA": sha,
        "GITHUB_REPOSITORY": REPO,
        "GITHUB_RUN_ID": str(run_id),
        "GITHUB_RUN_ATTEMPT": "1",
    }
    return provenance(folder, environ)  # the folder is no git checkout: the event says what ran


def main_event(world: World, run: MainRun, folder: Path, run_id: int) -> dict:
    sha = world.commits[run.commit] if run.event != "ejected" else f"{run_id:040x}"
    previous = world.commits[run.commit - 1] if run.commit else "0" * 40
    repository = {"full_name": REPO, "default_branch": "main"}
    if run.event == "push":
        return _event(
            folder,
            "push",
            {"after": sha, "before": previous, "ref": "refs/heads/main", "repository": repository},
            "refs/heads/main",
            sha,
            run_id,
        )
    if run.event == "schedule":  # GitHub's schedule payload names no repository
        return _event(
            folder,
            "schedule",
            {"schedule": "0 */6 * * *", "workflow": ".github/workflows/rocm-gate.yml"},
            "refs/heads/main",
            sha,
            run_id,
        )
    if run.event == "workflow_dispatch":
        return _event(
            folder,
            "workflow_dispatch",
            {"inputs": {}, "ref": "refs/heads/main", "repository": repository},
            "refs/heads/main",
            sha,
            run_id,
        )
    queue = f"refs/heads/gh-readonly-queue/main/pr-{run_id}-{previous}"
    group = {
        "head_sha": sha,
        "head_ref": queue,
        "base_sha": previous,
        "base_ref": "refs/heads/main",
    }
    return _event(folder, "merge_group", {"merge_group": group, "repository": repository}, queue, sha, run_id)  # fmt: skip


def pr_event(world: World, pr: PR, folder: Path, run_id: int) -> dict:
    payload = {
        "pull_request": {
            "number": pr.number,
            "head": {"sha": f"{pr.number:040x}"},
            "base": {"sha": world.commits[pr.base]},
        },
        "repository": {"full_name": REPO, "default_branch": "main"},
    }
    merge = f"{10**6 + pr.number:040x}"
    return _event(folder, "pull_request", payload, f"refs/pull/{pr.number}/merge", merge, run_id)


@dataclass
class Attempt:
    message: str | None  # None: passed
    infra: bool = False
    xfail: bool = False  # (passed) an xfail marker's test that failed as declared: xfailed


def _records(plan: dict[str, list[Attempt]], held: dict[str, dict], t0: float) -> list[dict]:
    """The records the plugin writes for these attempts: each test's first attempt in a worker of
    its own (an HSA fault poisons its process, plugin/poisoned.py: what ran after it there is
    collateral, which the sticky-fault tests cover), a rerun in a fresh process."""
    base = {"schema": RECORD_SCHEMA}
    out = [{**base, "kind": "preflight", "nodeid": "", "ok": True, "devices": [0], "detail": "ok", "exit_code": 0, "command": "probe", "t": t0, "worker": "controller"}]  # fmt: skip
    t = t0
    for index, (test, attempts) in enumerate(plan.items()):
        spec = {"group": group_of(test), "blocking": test not in held, "gate": True}
        if test in held:
            spec["quarantine"] = held[test]
        for number, attempt in enumerate(attempts):
            worker = f"gw{index}" if number == 0 else f"rerun{index}"
            t += 0.01
            if attempt.xfail:  # pytest's xfail: the call is skipped, with the marker's reason
                out.append({**base, **spec, "nodeid": test, "when": "setup", "outcome": "passed", "duration": 0.001, "t": t, "worker": worker, "gpus": [0]})  # fmt: skip
                out.append({**base, **spec, "nodeid": test, "when": "call", "outcome": "skipped", "duration": 0.001, "wasxfail": XPASS.split("] ", 1)[1], "t": t + 0.001, "worker": worker, "gpus": [0]})  # fmt: skip
                out.append({**base, **spec, "nodeid": test, "when": "teardown", "outcome": "passed", "duration": 0.001, "t": t + 0.002, "worker": worker, "gpus": [0]})  # fmt: skip
                continue
            if attempt.message is None:
                out.append({**base, **spec, "nodeid": test, "when": PLAIN_PASS, "outcome": "passed", "durations": [0.001, 0.01, 0.001], "t": t, "worker": worker, "gpus": [0]})  # fmt: skip
                continue
            out.append({**base, **spec, "nodeid": test, "when": "setup", "outcome": "passed", "duration": 0.001, "t": t, "worker": worker, "gpus": [0]})  # fmt: skip
            t += 0.01
            failure = f"def {test.split('::')[1]}():\n>       check()\nE       {attempt.message}"
            out.append({**base, **spec, "nodeid": test, "when": "call", "outcome": "failed", "duration": 0.01, "message": attempt.message, "failure": failure, "stdout_tail": HSA if attempt.infra else "", "stderr_tail": "", "t": t, "worker": worker, "gpus": [0]})  # fmt: skip
            t += 0.01
            out.append({**base, **spec, "nodeid": test, "when": "teardown", "outcome": "passed", "duration": 0.001, "t": t, "worker": worker, "gpus": [0]})  # fmt: skip
    out.append({**base, "kind": "session", "nodeid": "", "exitstatus": 0, "stopped": None, "collection_errors": [], "collected": list(plan), "t": t + 0.1, "worker": "controller"})  # fmt: skip
    return out


def _attempts(first: Attempt, truth: str | None, rerun: bool) -> list[Attempt]:
    """A test's attempts: the first, then (after a failed first) its rerun, which fails as the
    truth says."""
    if first.message is None or not rerun:
        return [first]
    return [first, Attempt(truth)]


def _break_at(world: World, test: str, commit: int, sku: str) -> Break | None:
    """Main's break of the test at the commit on the SKU."""
    return next((b for b in world.breaks if b.test == test and b.at(commit, sku)), None)


def _xfails(world: World, test: str, commit: int) -> bool:
    """The test's code at the commit holds its strict xfail marker and still fails as declared."""
    return any(b.test == test and b.xfail and commit < b.culprit for b in world.breaks)


def _fails_on_main(world: World, test: str, commit: int, sku: str, rng=None) -> str | None:
    """What main's code at the commit fails the test with on the SKU (None: it passes or xfails):
    its break, or a failure of a test that fails on alternate commits."""
    b = _break_at(world, test, commit, sku)
    if b is not None:
        return b.text(rng)
    if commit in world.alternating.get((test, sku), ()):
        return timed_out(rng.randint(1, 99) if rng else 7)
    return None


def _held(world: World, sku: str, commit: int) -> dict[str, dict]:
    """What the quarantine file lists for this SKU when main is at `commit` (as the plugin copies an
    entry into its records: trunk/quarantine.py and plugin/collection.py)."""
    return {
        test: {
            "reason": f"red on main ({sku})",
            "since": world.commits[b.culprit],
            "sku": sku,
            "fingerprints": [fingerprint(b.text())],
            "blocks": True,
        }
        for (test, s), (b, entered) in world.quarantined.items()
        if s == sku and commit >= entered
    }


def _write(folder: Path, records: list[dict], manifest: dict) -> None:
    report = build_gate_report(records, manifest, [], group_of)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "gate-report.json").write_text(json.dumps(report))
    (folder / "manifest.json").write_text(json.dumps(manifest))


def run_main(
    world: World, run: MainRun, root: Path, rng: random.Random, clock: Clock, run_id: int
) -> Path:
    folder = root / f"main-{run_id}"
    folder.mkdir(parents=True)
    prov = main_event(world, run, folder, run_id)
    plan = {}
    for test in world.tests:
        node = world.nodeid(test, run.commit)
        if node is None:
            continue
        truth = _fails_on_main(world, test, run.commit, run.sku, rng)
        if run.event == "ejected" and test == TESTS[0]:
            truth = "AssertionError: a break only the ejected candidate had"
        first = Attempt(truth, xfail=truth is None and _xfails(world, test, run.commit))
        if run.commit in world.flakes.get((test, run.sku), ()) and truth is None:
            first = Attempt(RACE)
        if world.bad_node == (run.sku, test) and run.runner == f"node-bad-{run.sku}":
            first = Attempt(HSA, infra=True)
        plan[node] = _attempts(first, truth, rerun=True)
    records = _records(plan, _held(world, run.sku, run.commit), clock.at(run.hour).timestamp())
    _write(folder, records, _manifest(run.sku, run.runner, prov, clock.at(run.hour)))
    return folder


def main_break(world: World, pr: PR, test: str) -> Break | None:
    """Main's break of the test in the PR's code (its base holds it, and the PR does not fix it)."""
    if test in pr.fixes or test in pr.own or test in pr.unlucky:
        return None
    return _break_at(world, test, pr.base, pr.sku)


def pr_failure(world: World, pr: PR, test: str) -> str | None:
    """What the PR's code fails the test with (main's break without its jitter), None: it passes."""
    if world.nodeid(test, pr.base) is None:  # its code has no such test
        return None
    if test in pr.unlucky:
        return RACE
    if test in pr.own:
        return pr.own[test]
    if test == ALTERNATES and pr.alternates:
        return timed_out(10 + pr.number)
    b = main_break(world, pr, test)
    return b.text() if b else None


def run_pr(world: World, pr: PR, root: Path, rng: random.Random, clock: Clock, run_id: int) -> Path:
    folder = root / f"pr-{pr.number}"
    folder.mkdir(parents=True)
    prov = pr_event(world, pr, folder, run_id)
    plan = {}
    for test in world.tests:
        node = world.nodeid(test, pr.base)
        if node is None:
            continue
        b = main_break(world, pr, test)
        truth = b.text(rng) if b else pr_failure(world, pr, test)
        first = Attempt(truth, xfail=truth is None and _xfails(world, test, pr.base))
        if test in pr.flaky and truth is None:
            first = Attempt(RACE)
        if test in pr.infra:
            first = Attempt(HSA, infra=True)
        plan[node] = _attempts(first, truth, rerun=True)
    hour = pr.published + 0.9
    records = _records(plan, _held(world, pr.sku, pr.published), clock.at(hour).timestamp())
    _write(folder, records, _manifest(pr.sku, f"node-{pr.sku}-pr", prov, clock.at(hour)))
    return folder


# the oracle ---------------------------------------------------------------------------------------


def _seen(world: World, sku: str, upto: int, commits) -> list[MainRun]:
    """Main runs of the SKU the trunk state at `upto` reads (landed commits only)."""
    return [
        r
        for r in world.main_runs
        if r.sku == sku and r.commit <= upto and r.event != "ejected" and r.commit in commits
    ]


def _informative(world: World, run: MainRun, test: str) -> str | None:
    """What a main run says of a test: fail, pass (an xfail as declared too), flaky, or nothing
    (infra, or its code has no such test)."""
    if world.nodeid(test, run.commit) is None:
        return None
    fails = _fails_on_main(world, test, run.commit, run.sku) is not None
    if world.bad_node == (run.sku, test) and run.runner == f"node-bad-{run.sku}":
        return "fail" if fails else None
    if fails:
        return "fail"
    return "flaky" if run.commit in world.flakes.get((test, run.sku), ()) else "pass"


def _shape(message: str | None) -> str:
    """The kind of a failure message, as the harness makes them: one shape each."""
    if message is None:
        return ""
    if message.startswith("AssertionError: gsm8k accuracy"):
        return "accuracy"
    return {XPASS: "xpass", RACE: "race", OWN: "own"}.get(message, "timed out")


def _says(world: World, runs: list[MainRun], test: str) -> list[tuple[int, str, str]]:
    """(commit, what main said of the test there, the shape of its failure there) per tested
    commit, oldest first, as the trunk state folds a commit's runs (trunk/state.py): flaky where a
    run was flaky or runs disagreed. Of the test under every id it had (a moved file's test is one
    test)."""
    by_commit: dict[int, list[str]] = {}
    for run in sorted(runs, key=lambda r: r.hour):
        said = _informative(world, run, test)
        if said is not None:
            by_commit.setdefault(run.commit, []).append(said)
    out = []
    for commit in sorted(by_commit):
        said = set(by_commit[commit])
        shape = _shape(_fails_on_main(world, test, commit, runs[0].sku))
        out.append(
            (commit, "flaky" if "flaky" in said or said == {"fail", "pass"} else said.pop(), shape)
        )
    return out


def _flaky_by_rule(said: list[tuple[int, str, str]]) -> set[int]:
    """The commits issue 58's rule calls flaky, written apart from history/flakes.py: every commit
    that flaked, and, for a failure shape that main failed on at least three commits alone (the
    commits said before and after it did not fail, and one was said before it), every commit it
    failed on alone."""
    alone: dict[str, list[tuple[int, bool]]] = {}
    for i, (commit, outcome, shape) in enumerate(said):
        if outcome != "fail":
            continue
        neighbours = [said[j][1] for j in (i - 1, i + 1) if 0 <= j < len(said)]
        if "fail" not in neighbours:
            alone.setdefault(shape, []).append((commit, i > 0))
    flaky = {commit for commit, outcome, _ in said if outcome == "flaky"}
    for found in alone.values():
        if sum(after_one for _, after_one in found) >= 3:
            flaky |= {commit for commit, _ in found}
    return flaky


def _knowable(world: World, runs: list[MainRun], test: str) -> list[tuple[int, str]]:
    """(commit, what main's state can say the test was there) per tested commit, oldest first: what
    main said, a commit the flake rule counts as a flake said `flaky`."""
    said = _says(world, runs, test)
    flaky = _flaky_by_rule(said)
    return [(c, "flaky" if c in flaky else outcome) for c, outcome, _ in said]


def _flaky_shapes(world: World, runs: list[MainRun], test: str) -> set[str]:
    """The failure shapes main's state counts as flakes of the test by the rule of alternating
    failures."""
    said = _says(world, runs, test)
    flaky = _flaky_by_rule(said)
    return {shape for c, outcome, shape in said if c in flaky and outcome == "fail"}


def _shown_alike(world: World, seen: list[MainRun], test: str, b: Break, pr: PR) -> bool:
    """Main showed the PR's failure by another break that fails the test the same way (a re-land of
    the change, a break before a revert), over a streak whose span holds the PR's base (from the
    pass main showed before it to the one after): nothing main knows tells them apart, so the
    failure is main's to know."""
    said = _knowable(world, seen, test)
    for i, (commit, outcome) in enumerate(said):
        other = _break_at(world, test, commit, pr.sku)
        if outcome != "fail" or other is None or other.text() != b.text():
            continue
        before = max((c for c, o in said[:i] if o == "pass"), default=-1)
        after = min((c for c, o in said[i + 1 :] if o == "pass"), default=len(world.commits))
        if before < pr.base < after:
            return True
    return False


def _history_of(world: World, seen: list[MainRun], test: str, base: int) -> list[MainRun]:
    """The main runs whose results main's state holds under the id the code based on `base` has:
    all of them, but for a moved test that no complete main run has run under its new id yet
    (main's state cannot know yet that the two ids are one test), those of that id only."""
    if test not in world.renamed:
        return seen
    moved = world.renamed[test][1]
    roll = max((r.commit for r in seen if r.complete), default=None)
    if roll is not None and roll >= moved:
        return seen
    return [r for r in seen if (r.commit < moved) == (base < moved)]


def expected_class(
    world: World, pr: PR, test: str, judged_at: int | None = None
) -> tuple[tuple[str, ...], bool]:
    """(the classes, any of them right, that the trunk state when main was at `judged_at` (default:
    the PR's publish time) must give a failure of the test, whether it is main's failure and no
    main run had shown it yet)."""
    mine = pr_failure(world, pr, test)
    held = _held(world, pr.sku, pr.published).get(test)  # the quarantine file the run read
    if held and any(same_failure(fingerprint(mine), f) for f in held["fingerprints"]):
        return (judgement.QUARANTINED,), False  # excused by the quarantine: never blocking
    at = pr.published if judged_at is None else judged_at
    seen = _history_of(world, _seen(world, pr.sku, at, range(len(world.commits))), test, pr.base)
    if mine == RACE:
        # a race main lost on a commit of this SKU is the flake, whether main breaks the test or not
        shown = any(said == "flaky" for _, said, _ in _says(world, seen, test))
        return ((judgement.FLAKY_ON_MAIN if shown else judgement.NEW),), False
    # main fails the test on alternate commits this way: its flake (main's state, failing now,
    # may say it is its current failure: either excuses it)
    flaked = _shape(mine) in _flaky_shapes(world, seen, test)
    b = main_break(world, pr, test)
    if b is None:
        if test == ALTERNATES and pr.alternates:  # made only where main shows it flaky
            return (judgement.FLAKY_ON_MAIN, judgement.PRE_EXISTING), False
        return ((judgement.FLAKY_ON_MAIN if flaked else judgement.NEW),), False
    # main's own break, in the code that ran: known once a main run of a commit that holds it
    # showed it
    shown = any(
        c >= b.culprit and b.at(c, pr.sku) and said == "fail"
        for c, said, _ in _says(world, seen, test)
    ) or _shown_alike(world, seen, test, b, pr)
    if flaked:
        wants = (
            (judgement.FLAKY_ON_MAIN, judgement.PRE_EXISTING)
            if shown
            else (judgement.FLAKY_ON_MAIN,)
        )
        return wants, False
    return ((judgement.PRE_EXISTING,), False) if shown else ((judgement.NEW,), True)


@dataclass
class Verdicts:
    histories: int = 0
    checks: int = 0  # judgements compared with the oracle
    disagreements: list[str] = field(default_factory=list)
    unknowable_blocks: int = (
        0  # failures blocked as new: main's break, no main run had shown it yet
    )
    still_unknowable: int = 0  # of those, still unshown by main's newest state (the sweep's)
    own_regressions: int = 0
    own_blocked: int = 0

    def expect(self, ok: bool, what: str) -> None:
        self.checks += 1
        if not ok:
            self.disagreements.append(what)


def _trunk(conn, world: World, sku: str, upto: int, clock: Clock) -> dict:
    """The trunk state the dashboard workflow would have made once main was at `upto`."""
    generated = clock.at(upto + 0.85).isoformat()
    return state.build(conn, sku, commits=world.commits[: upto + 1], generated=generated)


def judge(world: World, found: Verdicts | None = None) -> Verdicts:
    found = found or Verdicts()
    found.histories += 1
    rng = random.Random(world.seed)
    clock = Clock(len(world.commits))
    with tempfile.TemporaryDirectory(prefix="truth-") as scratch:
        root = Path(scratch)
        conn = store.connect(root / "history.db")
        events = [(r.hour, "main", r) for r in world.main_runs]
        events += [(pr.published + 0.9, "pr", pr) for pr in world.prs]
        for run_id, (_, kind, item) in enumerate(sorted(events, key=lambda e: (e[0], e[1])), 1):
            if kind == "main":
                folder = run_main(world, item, root, rng, clock, run_id)
                item.complete = json.loads((folder / "gate-report.json").read_text())["complete"]
                sha = json.loads((folder / "manifest.json").read_text())["provenance"]["tested_sha"]
                store.ingest(conn, folder, "manifest", str(run_id), sha)
                continue
            pr = item
            folder = run_pr(world, pr, root, rng, clock, run_id)
            store.ingest(conn, folder, "pr", str(run_id))
            trunks = [_trunk(conn, world, sku, pr.published, clock) for sku in SKUS]
            for t in trunks:
                found.expect(
                    schema_error(t, "trunk") is None,
                    f"seed {world.seed}: trunk invalid: {schema_error(t, 'trunk')}",
                )
            _check_pr(world, pr, folder, trunks, clock, found)
        last = len(world.commits) - 1
        final = [_trunk(conn, world, sku, last, clock) for sku in SKUS]
        for pr in world.prs:  # the sweep: every check judged again against main's newest state
            _check_pr(world, pr, root / f"pr-{pr.number}", final, clock, found, judged_at=last)
        _check_main(world, conn, final, found)
        conn.close()
    return found


def _check_pr(
    world: World,
    pr: PR,
    folder: Path,
    trunks: list[dict],
    clock: Clock,
    found: Verdicts,
    judged_at: int | None = None,
) -> None:
    """The PR's check against the trunk states of main at `judged_at` (default: its publish time;
    later: as the sweep publishes it again against a newer state)."""
    results = read_results(folder)
    base_sha, base_date = world.commits[pr.base], clock.at(pr.base)
    content = checks.build(
        results, "rocm-gate / X", trunk=trunks, base_sha=base_sha, base_date=base_date
    )
    attribution, used = checks._against_trunk(results, trunks, [], base_sha, base_date)
    where = (
        f"seed {world.seed} PR {pr.number} ({pr.sku}, base c{pr.base}, published at c{pr.published}"
    )
    where += f", judged again at c{judged_at})" if judged_at is not None else ")"
    found.expect(used is not None and used["sku"] == pr.sku, f"{where}: no trunk state used")
    if attribution is None:
        return
    tests = results.report["tests"]
    new = []
    for test in world.tests:
        node = world.nodeid(test, pr.base)
        if node is None or tests[node]["verdict"] not in ("regression", "unconfirmed"):
            continue
        wants, unknowable = expected_class(world, pr, test, judged_at)
        if wants == (judgement.QUARANTINED,):
            found.expect(
                node not in attribution.classes,
                f"{where}: {node} quarantined for this failure but blocking",
            )
            found.expect(
                node in _section(content.summary, "Quarantined"),
                f"{where}: {node} not listed as quarantined",
            )
            continue
        got = attribution.classes.get(node)
        found.expect(
            got in wants,
            f"{where}: {node} is {got}, the truth says {' or '.join(wants)} "
            f"({attribution.reasons.get(node)})",
        )
        if test in pr.own and pr_failure(world, pr, test) == pr.own[test] and judged_at is None:
            found.own_regressions += 1
            found.own_blocked += got == judgement.NEW
        if wants == (judgement.NEW,):
            new.append(node)
            if judged_at is None:
                found.unknowable_blocks += unknowable
            else:
                found.still_unknowable += unknowable
            found.expect(
                node in _section(content.summary, "Regressions (blocking)"),
                f"{where}: {node} new but not listed as blocking",
            )
        elif wants == (judgement.PRE_EXISTING,):
            found.expect(
                node in _section(content.summary, "Pre-existing on main"),
                f"{where}: {node} not listed as pre-existing",
            )
    held = _held(world, pr.sku, pr.published)
    infra = any(
        t in pr.infra and pr_failure(world, pr, t) is None and t not in held for t in world.tests
    )
    excused = any(
        pr_failure(world, pr, t) is not None
        and set(expected_class(world, pr, t, judged_at)[0])
        <= {judgement.PRE_EXISTING, judgement.FLAKY_ON_MAIN}
        for t in world.tests
    )
    conclusion = "failure" if new else "neutral" if (excused or infra) else "success"
    found.expect(
        content.conclusion == conclusion,
        f"{where}: concluded {content.conclusion}, the truth says {conclusion}: {content.summary[:300]}",
    )
    if new:  # the reason counts only the new ones
        why = re.search(r"Why: `+ (\d+) blocking gate\(s\) regressed", content.summary)
        count = int(why.group(1)) if why else -1
        found.expect(count == len(new), f"{where}: the reason counts {count}, {len(new)} are new")
    # "fixed by this PR" only where the code held main's break (or main's failures of a test that
    # fails on alternate commits, that the flake rule cannot tell from a break yet)
    seen = _seen(
        world, pr.sku, pr.published if judged_at is None else judged_at, range(len(world.commits))
    )
    for test in attribution.fixed:
        b = next(
            (
                b
                for b in world.breaks
                if b.test == world.logical(test) and pr.sku in b.skus and b.culprit <= pr.base
            ),
            None,
        )
        logical = world.logical(test)
        since = _failing_since(
            _knowable(world, _history_of(world, seen, logical, pr.base), logical)
        )
        found.expect(
            b is not None or (since is not None and since <= pr.base),
            f"{where}: {test} said fixed by this PR, but its base c{pr.base} predates main's break",
        )


def _section(summary: str, title: str) -> str:
    """The text of the summary's section whose heading starts with `title`."""
    start = summary.find(f"### {title}")
    if start < 0:
        return ""
    end = summary.find("\n### ", start + 4)
    return summary[start : end if end > 0 else len(summary)]


def _excused_on_main(world: World, run: MainRun, test: str) -> bool:
    """Whether the quarantine excused the test's failure in a main run: it lists the test, for the
    failure it was entered with."""
    held = _held(world, run.sku, run.commit).get(test)
    b = next((b for b in world.breaks if b.test == test and b.at(run.commit, run.sku)), None)
    return bool(held and b) and same_failure(fingerprint(b.text()), held["fingerprints"][0])


def _check_main(world: World, conn: sqlite3.Connection, final: list[dict], found: Verdicts) -> None:
    n = len(world.commits)
    landed = frozenset(world.commits)  # as `rocm-gate dashboard --repo` reads them
    suspects = queries.suspects(conn, landed=landed)
    health = {(h["sku"], h["group"]): h for h in trunk_health(conn, landed=landed)}
    flaky = {f["test"]: f for f in queries.flaky(conn, landed=landed)["flaky"]}
    for doc in final:
        sku = doc["sku"]
        where = f"seed {world.seed} main on {sku}"
        found.expect(schema_error(doc, "trunk") is None, f"{where}: the trunk state is invalid")
        seen = _seen(world, sku, n - 1, range(n))
        for test in world.tests:
            _check_test(world, doc, seen, test, flaky, found)
        # trunk health: the newest main run of each group
        newest = max(
            (r for r in world.main_runs if r.sku == sku and r.event != "ejected"),
            key=lambda r: r.hour,
            default=None,
        )
        if newest is not None:
            for group in GROUPS:
                members = [t for t in world.tests if group_of(t) == group]
                failing = [t for t in members if _informative(world, newest, t) == "fail"]
                held = [t for t in failing if _excused_on_main(world, newest, t)]
                cell = judgement.health_cell(len(failing) - len(held), len(held))
                got = health.get((sku, group), {}).get("state")
                found.expect(
                    got == cell, f"{where}: trunk health of {group} is {got}, the truth says {cell}"
                )
        _check_tracker(doc, suspects, where, found)
        _check_quarantine(world, conn, doc, seen, where, found)


def _check_test(
    world: World, doc: dict, seen: list[MainRun], test: str, flaky: dict, found: Verdicts
) -> None:
    """One test's entry in main's final trunk state of a SKU: its state, its streak (since, last
    green, the suspects between), under the id main runs now (a moved test continues its old id's
    history, and the old id is gone), and the flaky list."""
    where = f"seed {world.seed} main on {doc['sku']}"
    # the roll call: the newest commit with a complete main run says which ids main runs now
    newest = max((r.commit for r in seen if r.complete), default=None)
    moved = world.renamed[test][1] if test in world.renamed else None
    if moved is not None and (newest is None or newest < moved):
        # main has not run the new id in a complete run yet: each id is its own test, its own runs
        seen = [r for r in seen if r.commit < moved]
        newest = max((r.commit for r in seen), default=None)
    said = _knowable(world, seen, test)
    node = world.nodeid(test, newest) if newest is not None else test
    want = {"fail": "failing", "pass": "passing", "flaky": "flaky"}[said[-1][1]] if said else None
    entry = doc["tests"].get(node) if node else None
    if node is not None:
        got = entry["state"] if entry else ("passing" if said else None)
        found.expect(
            got == want, f"{where}: {node} is {got} in the trunk state, the truth says {want}"
        )
    if entry is not None and want == "failing":
        _check_streak(world, entry, said, f"{where}: {node}", found)
    if moved is not None and newest is not None and newest >= moved:
        if any(r.commit < moved for r in seen):  # main ran it under its old id here
            _check_gone(world, doc, seen, test, said, found)
    names = {world.nodeid(test, r.commit) for r in seen} - {None}
    flaked = any(s == "flaky" for _, s in said)
    listed = any(doc["sku"] in flaky.get(name, {}).get("skus", []) for name in names)
    found.expect(
        flaked == listed,
        f"{where}: {test} flaky on main is {flaked}, the flaky list says "
        f"{[flaky.get(name) for name in names]}",
    )


def _failing_since(said: list[tuple[int, str]]) -> int | None:
    """The oldest commit of the newest failing streak, where main's state is failing."""
    if not said or said[-1][1] != "fail":
        return None
    since = None
    for commit, outcome in reversed(said):
        if outcome == "pass":
            break
        if outcome == "fail":
            since = commit
    return since


def _check_streak(
    world: World, entry: dict, said: list[tuple[int, str]], where: str, found: Verdicts
) -> None:
    """A failing entry's streak: since its oldest failing commit of the newest streak (flakes
    between are no break of it), the pass before it its last green, the commits between them the
    suspects."""
    since = green = None
    for commit, outcome in reversed(said):
        if outcome == "pass":
            green = commit
            break
        if outcome == "fail":
            since = commit
    c = world.commits
    found.expect(
        (entry["since"] or {}).get("sha") == c[since],
        f"{where}: failing since {(entry['since'] or {}).get('sha', '')[:12]}, the truth says "
        f"c{since} {c[since][:12]}",
    )
    found.expect(
        (entry["last_green"] or {}).get("sha") == (c[green] if green is not None else None),
        f"{where}: last green {entry['last_green']}, the truth says c{green}",
    )
    found.expect(
        entry.get("suspects") == (c[green + 1 : since + 1] if green is not None else None),
        f"{where}: suspects {entry.get('suspects')}, the truth says c{green}..c{since}",
    )


def _check_gone(
    world: World, doc: dict, seen: list[MainRun], test: str, said: list, found: Verdicts
) -> None:
    """A test whose file moved (or was deleted) before main's newest run of the SKU: its old id is
    gone (never failing), from the first commit a main run ran without it, and, where it has an
    entry (main failed or flaked it in the window), continues as its new id."""
    old, moved, new = world.renamed[test]
    where = f"seed {world.seed} main on {doc['sku']}: {old}"
    entry = doc["tests"].get(old)
    expected = any(s != "pass" for _, s in said)
    found.expect(
        (entry is not None) == expected and (entry is None or entry["state"] == "gone"),
        f"{where}: {entry and entry['state']} in the trunk state after its move at c{moved}, the "
        f"truth says {'gone' if expected else 'no entry'}",
    )
    if entry is None or entry["state"] != "gone":
        return
    first = world.commits[min(r.commit for r in seen if r.commit >= moved and r.complete)]
    found.expect(entry["gone"]["sha"] == first, f"{where}: gone since {entry['gone']}, not {first}")
    found.expect(entry["moved_to"] == new, f"{where}: moved to {entry['moved_to']}, not {new}")
    if new is not None and new in doc["tests"]:
        found.expect(
            doc["tests"][new].get("moved_from") == [old],
            f"{where}: {new} continues {doc['tests'][new].get('moved_from')}",
        )


def _check_tracker(doc: dict, suspects: list[dict], where: str, found: Verdicts) -> None:
    """The tracker issue of this SKU: its failing and gone tests, and no other SKU's suspects."""
    _, body = tracker.render(doc, "vllm", suspects)
    for test, entry in doc["tests"].items():
        if entry["state"] in ("failing", "gone"):
            found.expect(test in body, f"{where}: the tracker misses {entry['state']} {test}")
    for s in suspects:
        if s["sku"] != doc["sku"]:
            found.expect(
                s["reason"] not in body,
                f"{where}: the tracker lists {s['sku']}'s suspect {s['test']}",
            )


def _check_quarantine(
    world: World, conn, doc: dict, seen: list[MainRun], where: str, found: Verdicts
) -> None:
    """The quarantine file: every failing test entered, with the fingerprint main fails with (the
    shape of a failure whose count changes from run to run)."""
    sku = doc["sku"]
    doc_q, added, _ = quarantine.update(conn, quarantine.empty(), doc, after_hours=0)
    found.expect(
        schema_error(doc_q, "quarantine") is None, f"{where}: the quarantine file is invalid"
    )
    for test, entry in doc["tests"].items():
        if entry["state"] != "failing":
            continue
        listed = [e for e in doc_q["tests"] if e["test"] == test and e["sku"] == sku]
        last = _says(world, seen, world.logical(test))[-1][0]
        message = _fails_on_main(world, world.logical(test), last, sku)
        found.expect(
            bool(listed)
            and message is not None
            and (
                among(fingerprint(message), listed[0]["fingerprints"], shape_only=True)
                if _shape(message) == "timed out"
                else any(same_failure(f, fingerprint(message)) for f in listed[0]["fingerprints"])
            ),
            f"{where}: quarantine of {test}: {listed}",
        )
