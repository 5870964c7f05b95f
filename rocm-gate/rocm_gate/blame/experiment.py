"""The base experiment, whole: the run's blocking failures, the base's work tree, its install, the
attempts, within one budget, and base-check.json at the end (also when interrupted: what ran is
kept, the rest is named `interrupted`, and the interruption goes on up).

The budget bounds everything from the start (the work tree and the install included): no process
starts past it, and one still running at its end is stopped with its process group. A test whose
attempts did not all run says why (`not_run`).
"""

from __future__ import annotations

import datetime as dt
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from pytest_rocm.errors import BadInput
from pytest_rocm.schemas.artifacts import blocking_failures
from pytest_rocm.schemas.loader import load_artifact
from rocm_gate.blame import attempts as attempts_
from rocm_gate.blame import base as base_
from rocm_gate.blame import document, processes

__all__ = ["Plan", "blocking", "run"]


@dataclass
class Plan:
    """What `rocm-gate blame` was asked (its options)."""

    results: Path  # the run's results folder: gate-report.json in, base-check.json out
    checkout: Path = Path(".")  # the tested checkout, where the gates ran
    base: str | None = None  # default: the tested merge commit's first parent
    install: str | None = None  # run with `bash -c` in the base's work tree
    attempts: int = 2
    budget_s: float = 30 * 60.0
    max_tests: int = 50
    pytest_args: list[str] = field(default_factory=list)
    worktree: Path | None = None
    python: str = sys.executable
    say: Callable[[str], None] = print


class ResultsMissing(BadInput):
    """No gate report in the results folder (exit 2)."""


def blocking(results: Path) -> list[str]:
    """The run's blocking failures (schemas/artifacts.py: blocking_failures, the rule the
    conclusion applies: blocking gates that regressed or failed unconfirmed without an
    infrastructure signature), sorted; its gate report read through the strict loader."""
    path = Path(results) / "gate-report.json"
    if not Path(results).is_dir() or not (path.exists() or path.is_symlink()):
        raise ResultsMissing(
            f"{results}: no gate-report.json (the gates wrote no report: nothing to run on the base)"
        )
    report = load_artifact(path, "gate-report")
    return blocking_failures(report["tests"])


@dataclass
class _State:
    """What the experiment knows so far: enough to write the document at any point."""

    plan: Plan
    started: float
    when: str
    tested: str | None = None
    chosen: base_.Base = field(default_factory=lambda: base_.Base(None, "not chosen yet"))
    prepared: bool = False
    why: str | None = None
    install: dict | None = None
    tests: dict[str, dict] = field(default_factory=dict)

    def not_run(self, nodeids, why: str) -> None:
        """Say `why` of each test whose attempts did not all run and that says nothing yet (an
        absent test needs no attempt)."""
        for nodeid in nodeids:
            entry = self.tests.setdefault(nodeid, {"attempts": [], "not_run": None})
            absent = any(a["outcome"] == "absent" for a in entry["attempts"])
            if (
                entry["not_run"] is None
                and not absent
                and len(entry["attempts"]) < self.plan.attempts
            ):
                entry["not_run"] = why

    def document(self) -> dict:
        return document.build(
            {
                "base_sha": self.chosen.sha,
                "base_from": self.chosen.chosen,
                "tested_sha": self.tested,
                "prepared": self.prepared,
                "why": self.why,
                "install": self.install,
                "budget_s": self.plan.budget_s,
                "used_s": time.monotonic() - self.started,
                "attempts_per_test": self.plan.attempts,
                "pytest_args": list(self.plan.pytest_args),
                "started": self.when,
            },
            self.tests,
        )


def run(plan: Plan) -> dict:
    """Run the experiment `plan` asks for; returns the document it wrote into the results folder.
    BadInput (exit 2) for a results folder without a gate report or a base that is no commit."""
    state = _State(plan, time.monotonic(), dt.datetime.now(dt.UTC).isoformat(timespec="seconds"))
    failing = blocking(plan.results)
    top = base_.top_of(plan.checkout)
    state.tested, state.chosen = base_.choose_base(top, plan.base)
    if not failing:
        state.why = "no blocking failures: nothing to run on the base"
        return _finish(state)
    for nodeid in failing:
        state.tests[nodeid] = {"attempts": [], "not_run": None}
    usable = [n for n in failing if attempts_.usable(n)]
    state.not_run(
        [n for n in failing if n not in usable],
        "not a test node id of the checkout (an option, an absolute path, or a control character)",
    )
    chosen, rest = usable[: plan.max_tests], usable[plan.max_tests :]
    state.not_run(rest, f"over the limit of {plan.max_tests} tests per base check (--max-tests)")
    if state.chosen.sha is None or state.chosen.missing:
        state.why = state.chosen.missing or "no base"
        state.not_run(chosen, f"not prepared: {state.why}")
        return _finish(state)
    rootdir = attempts_.locate(top, plan.checkout, chosen) if chosen else Path(".")
    try:
        _experiment(state, top, state.chosen.sha, rootdir, chosen)
    except KeyboardInterrupt:
        state.not_run(chosen, "interrupted: the experiment was stopped (a cancelled job?)")
        if not state.prepared:
            state.why = state.why or "interrupted while the base was prepared"
        _finish(state)
        raise
    return _finish(state)


def _finish(state: _State) -> dict:
    made = state.document()
    try:
        path = document.write(state.plan.results, made)
    except OSError as exc:
        raise BadInput(
            f"{state.plan.results}: cannot write {document.FILE_NAME} ({exc.strerror or exc}); "
            "give a writable results folder"
        ) from None
    state.plan.say(f"wrote {path}")
    return made


def _experiment(state: _State, top: Path, sha: str, rootdir: Path, nodeids: list[str]) -> None:
    plan = state.plan
    deadline = state.started + plan.budget_s
    with tempfile.TemporaryDirectory(prefix="rocm-gate-blame-") as scratch:
        work = Path(scratch)
        try:
            with base_.work_tree(top, sha, plan.worktree) as tree:
                plan.say(f"the base {sha[:12]} is checked out in {tree}")
                if plan.install and not _install(state, tree, deadline, work):
                    state.not_run(nodeids, f"not prepared: {state.why}")
                    return
                state.prepared = True
                attempts_.Attempts(
                    tree,
                    rootdir,
                    plan.python,
                    plan.pytest_args,
                    work,
                    deadline,
                    say=plan.say,
                    tests=state.tests,
                ).run(nodeids, plan.attempts)
                state.not_run(nodeids, "over budget: the budget ended before its attempts ran")
        except base_.NotPrepared as exc:
            state.prepared, state.why = False, str(exc)
            for nodeid in nodeids:  # what ran in a tree that is not the base's proves nothing
                entry = state.tests[nodeid]
                entry["attempts"] = [a for a in entry["attempts"] if a["outcome"] == "absent"]
                entry["not_run"] = None
            state.not_run(nodeids, f"not prepared: {state.why}")


def _install(state: _State, tree: Path, deadline: float, work: Path) -> bool:
    """Run the install command in the base's work tree; False (and `state.why`) when it failed or
    the budget ended first."""
    command = state.plan.install or ""
    if time.monotonic() >= deadline:
        state.why = "over budget before the install started"
        return False
    state.plan.say(f"installing the base: bash -c {command!r}")
    finished = processes.run(["bash", "-c", command], tree, deadline, work / "install.log")
    tail = processes.tail(finished.log)
    state.install = {
        "command": command,
        "exit": finished.exit,
        "seconds": finished.seconds,
        "tail": tail,
    }
    if finished.stopped:
        state.why = (
            f"the install did not finish within the budget ({state.plan.budget_s / 60:g} min); "
            f"its last lines: {_last_lines(tail)}"
        )
        return False
    if finished.exit != 0:
        state.why = (
            f"the install failed (exit status {finished.exit}); its last lines: {_last_lines(tail)}"
        )
        return False
    return True


def _last_lines(tail: str, count: int = 5) -> str:
    lines = [line.strip() for line in tail.splitlines() if line.strip()][-count:]
    return " | ".join(lines)[-1200:] or "(no output)"
