"""Main's state, live: what a publish or a sweep judges a check against, built at that moment.

At each check (`LiveState.knowledge`): the store (a SQLite file or a PostgreSQL URL) is caught up
with every main run GitHub lists as completed in the window (knowledge/sync.py), main's first-parent
commits are read from GitHub (github/commits.py), and the trunk state of the run's SKU is built from
them (trunk/state.py), generated now. So a PR check knows every main run that completed before it
was published, whichever job stored it, and says which knowledge judged it and how old it was. A
store that cannot be read makes the check say main's state was unavailable and judge the run alone:
never `success` by accident, never a crash that leaves the check running.

Once the check is written (`LiveState.record`), the run joins the store under the origin GitHub
gives it (github/runs.py). A main run whose results hold a failure or a flake may excuse checks
already published: the blocked checks of the window are judged again at once (github/sweep.py:
`rejudge`), so a break main shows stops blocking the PRs it did not come from within the main run's
own publish, not a sweep later.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from pathlib import Path

from pytest_rocm.results.fingerprint import of_test as fingerprint_of
from pytest_rocm.schemas import markdown as md
from pytest_rocm.schemas.artifacts import blocking_failures, manifest_stack
from rocm_gate.github import commits as github_commits
from rocm_gate.github import runs as github_runs
from rocm_gate.github.api import Client, PublishError
from rocm_gate.github.artifacts import Results
from rocm_gate.github.provenance import GateRun
from rocm_gate.github.publishing import MainKnowledge, Options
from rocm_gate.history import ledger, queries, store
from rocm_gate.knowledge import sync
from rocm_gate.trunk import evidence, state

__all__ = ["LiveState"]

# the main commits a walk of GitHub's commit list goes back for: the newest tested commits of a SKU
# (twice the window: main runs can land out of commit order), and a PR's base
NEEDED_FACTOR = 2


@dataclass
class LiveState:
    """Main's state for the checks of one job (see the module docstring)."""

    target: str  # a store: a SQLite file, or a postgresql:// URL
    client: Client
    workflow: str  # the gate's caller workflow file (rocm-gate.yml)
    gate_workflow: str  # the pin, OWNER/REPO/.github/workflows/rocm-gate.yml@<sha>
    groups: dict[str, str]  # runner class -> its runner group
    window: int = state.WINDOW
    catch_up_hours: float = 48.0
    allow_simulated: bool = False
    rejudge: bool = True  # a main run with failures judges the blocked checks again
    log: list[str] = field(default_factory=list)
    changed: bool = False  # the store took runs (the embedded store is then carried on)
    _conn: store.Connection | None = field(default=None, repr=False)
    _caught_up: set = field(default_factory=set, repr=False)

    def connection(self) -> store.Connection:
        if self._conn is None:
            if "://" not in self.target:  # a store file: its folder is made where missing
                Path(self.target).parent.mkdir(parents=True, exist_ok=True)
            self._conn = store.connect(self.target)
        return self._conn

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def catch_up(self, runner_classes: list[str], include_pr: bool, skip_run: int | None = None):
        now = dt.datetime.now(dt.UTC)
        done = sync.catch_up(
            self.connection(),
            self.client,
            self.workflow,
            [(c, self.groups[c]) for c in runner_classes],
            self.gate_workflow,
            now - dt.timedelta(hours=self.catch_up_hours),
            now,
            include_pr=include_pr,
            skip_run=skip_run,
            allow_simulated=self.allow_simulated,
        )
        self._note(done)
        return done

    def _note(self, done: sync.Synced) -> None:
        self.changed |= bool(done.added)
        self.log += [f"history: added {a}" for a in done.added]
        self.log += [f"history: not added: {r}" for r in done.refused]

    def knowledge(self, run: GateRun, results: Results, runner_class: str) -> MainKnowledge:
        sku = "/".join(manifest_stack(results.manifest)["skus"]) or "cpu"
        # a main run is judged against main before it: never against its own results (stored by a
        # catch-up before its check was written) or later ones
        before = run.head_sha if self._origin(run) == github_runs.MAIN else None
        try:
            self.catch_up([runner_class], include_pr=False, skip_run=run.run_id)
            trunk, said = self.trunk(sku, run.base_sha, before)
            trunk["other_prs"] = self.other_prs(trunk, run, results)
        except (store.HistoryError, PublishError, OSError) as exc:
            return MainKnowledge(None, [], f"{self.where()}: {exc}")
        except Exception as exc:  # noqa: BLE001 - a database driver's own errors: named, never a crash
            return MainKnowledge(None, [], f"{self.where()}: {type(exc).__name__}: {exc}"[:400])
        return MainKnowledge(trunk, said)

    def where(self) -> str:
        return store.describe(self.target)

    def trunk(
        self, sku: str, base: str | None = None, before: str | None = None
    ) -> tuple[dict, list[str]]:
        """The trunk state of `sku` now, and what a check says of it; `before`: a main commit whose
        runs, and those of every later commit, are left out (main as it was before it)."""
        conn = self.connection()
        runs, _ = state.main_runs(conn, sku)
        newest = sorted(
            (r for r in runs if r[5] != "merge_group"), key=lambda r: (r[2] or "", r[0])
        )
        needed = list(dict.fromkeys(r[1] for r in reversed(newest)))[: self.window * NEEDED_FACTOR]
        line = github_commits.first_parent(
            self.client,
            github_runs.default_branch(self.client),
            set(needed) | ({base} if base else set()),
        )
        commits = line.commits if line.complete else None
        if before is not None:
            # the commit list ends before it: a tested commit off the list is left out
            upto = line.commits.index(before) if before in line.commits else len(line.commits)
            commits = line.commits[:upto] or ["0" * 40]
        now = dt.datetime.now(dt.UTC)
        trunk = state.build(conn, sku, self.window, commits, now.isoformat(timespec="seconds"))
        return trunk, self._said(trunk, line, now)

    def other_prs(self, trunk: dict, run: GateRun, results: Results) -> dict[str, dict]:
        """What other PRs showed of this run's blocking failures (trunk/evidence.py)."""
        failures = {
            name: fingerprint_of(results.report["tests"][name])
            for name in blocking_failures(results.report["tests"])
        }
        if not failures:
            return {}
        conn = self.connection()
        since = dt.datetime.now(dt.UTC) - dt.timedelta(hours=self.catch_up_hours)
        rows = queries.pr_results(conn, trunk["sku"], sorted(failures), since.isoformat())
        runs, _ = state.main_runs(conn, trunk["sku"])
        return evidence.from_other_prs(
            failures,
            rows,
            f"{run.head_repository or '?'}:{run.head_branch}",
            run.base_sha,
            list(trunk.get("commits") or []),
            [r[1] for r in runs],
        )

    def _said(self, trunk: dict, line: github_commits.Mainline, now: dt.datetime) -> list[str]:
        newest = trunk.get("newest") or {}
        age = ""
        started = github_runs.when(newest.get("completed") or newest.get("started"))
        if started is not None:
            minutes = max(0, int((now - started).total_seconds() // 60))
            age = f", its newest main run ({md.code(str(newest.get('sha'))[:12])}) {minutes} min before this check"
        commits = (
            "main's commits from GitHub (first parent)"
            if line.complete
            else f"main's commits: the tested ones only (GitHub's list did not reach {len(line.missing)} of them)"
        )
        return [
            f"Main's state on {md.code(trunk['sku'])}, as of this check: the history store "
            f"{md.code(self.where())}, {trunk['main_runs']} main run(s) over {trunk['main_commits']} "
            f"commit(s){age}; {commits}."
        ]

    def _might_change(self, results: Results):
        """Whether main's results just added may change a PR run's check: they fail or flake on
        one of its blocking failures (a run the store lacks may: it is judged again)."""
        shown = {
            name
            for name, test in results.report["tests"].items()
            if test.get("verdict") in ("regression", "unconfirmed", "flaky")
        }
        default = github_runs.default_branch(self.client)

        def might_change(listing: dict, runner_class: str) -> bool:
            if github_runs.origin(listing, self.client.repo, default) != github_runs.PR:
                return False
            attempt = github_runs.attempt_of(listing)
            failing = ledger.failing(
                self.connection(), sync.run_key(listing["id"], attempt, runner_class)
            )
            return failing is None or bool(failing & shown)

        return might_change

    def newest_result(self, runner_class: str) -> dt.datetime | None:
        """When main's newest result on the class's SKU completed (after catching up with GitHub):
        a blocking check written before it was judged without it."""
        from rocm_gate.github.provenance import runner_class_of

        if runner_class not in self._caught_up:
            self.catch_up([runner_class], include_pr=False)
            self._caught_up.add(runner_class)
        return github_runs.when(
            ledger.newest_main(self.connection(), runner_class_of(runner_class)[0])
        )

    def _origin(self, run: GateRun) -> str:
        """Where the run comes from, by GitHub's facts (github/runs.py: origin)."""
        return github_runs.origin(
            {
                "event": run.event,
                "head_branch": run.head_branch,
                "head_repository": {"full_name": run.head_repository},
            },
            self.client.repo,
            github_runs.default_branch(self.client),
        )

    def record(self, run: GateRun, results: Results, options: Options) -> list[str]:
        """Add the published run to the store; a main run with failures judges the blocked checks
        of the window again. What was done, in lines."""
        kind = self._origin(run)
        before = len(self.log)
        try:
            done = sync.add_run(self.connection(), run, results, options.runner_class, kind)
        except Exception as exc:  # noqa: BLE001 - the check is written: a store that fails here is named, never a crash
            self.log.append(
                f"history: run {run.run_id} not added ({type(exc).__name__}: {str(exc)[:300]}); the "
                "next publish or sweep adds it from GitHub"
            )
            return self.log[before:]
        self._note(done)
        if self.rejudge and done.main_failures:
            from rocm_gate.github.sweep import rejudge

            again = rejudge(
                self.client,
                self.workflow,
                options,
                dt.datetime.now(dt.UTC) - dt.timedelta(hours=self.catch_up_hours),
                self._might_change(results),
            )
            self.log += [
                f"judged again: run {s.run_id} {s.runner_class}: {s.action}" for s in again
            ]
        return self.log[before:]
