"""What the dashboard shows, read from the history store in one step (`read`): history's queries
(`history/queries.py`) and trunk health (`trunk/health.py`) are each asked once, and their answers
kept as plain data (`SiteData`: dicts and lists, as the queries give them). Nothing after this step
touches the store: the pages are rendered from this data alone (`site`)."""

from __future__ import annotations

from dataclasses import dataclass

from rocm_gate.history import queries
from rocm_gate.history.backends import Connection
from rocm_gate.trunk.health import trunk_health

LATEST_RUNS = 20  # runs in the overview's list of the latest runs
GRID_RUNS = 40  # newest runs of each origin in the runs x groups grid
TEST_PAGES = 300  # tests that failed on main with a page of their own (the most recent)
ORIGINS = ("main", "pr", "other")


@dataclass(frozen=True)
class SiteData:
    """Every answer the site is built from; `landed` (main's commits, where given) was applied
    when reading."""

    parity_trend: list[dict]  # queries.parity_trend
    parity_now: dict[str, dict]  # queries.parity_now: SKU -> its newest parity figure
    latest: list[dict]  # queries.runs: the newest LATEST_RUNS runs, newest first
    grids: dict[str, dict]  # origin -> queries.grid of its newest GRID_RUNS runs
    health: list[dict]  # trunk_health: per SKU and group, from main runs
    failures: list[str]  # queries.main_failures: tests that failed on main, newest first
    test_runs: dict[str, list[dict]]  # each of `failures` -> queries.test_runs
    suspects: list[dict]  # queries.suspects
    flaky: dict  # queries.flaky: {"flaky": [...], "stopped": [...]}
    gaps: list[dict]  # queries.known_gaps
    accepted: dict[str, list[dict]]  # queries.accepted_stacks: SKU -> its accepted runs
    drift: list[dict]  # queries.drift

    @property
    def generated(self) -> str:
        """The newest run, as the footer names it."""
        if not self.latest:
            return "none yet"
        newest = self.latest[0]
        return newest["started"] or f"run {newest['id']}"


def read(conn: Connection, landed: frozenset | None = None) -> SiteData:
    """The site's data from the store. `landed`: main's commits (a merge queue's runs count where
    it holds their commit)."""
    failures = queries.main_failures(conn, TEST_PAGES, landed)
    return SiteData(
        parity_trend=queries.parity_trend(conn),
        # main runs say what a SKU's parity is (a PR's results are written by its own code);
        # without any, every run
        parity_now=queries.parity_now(conn, landed),
        latest=queries.runs(conn, LATEST_RUNS),
        grids={origin: queries.grid(conn, GRID_RUNS, origin, landed) for origin in ORIGINS},
        health=trunk_health(conn, landed=landed),
        failures=failures,
        test_runs={test: queries.test_runs(conn, test, landed=landed) for test in failures},
        suspects=queries.suspects(conn, landed=landed),
        flaky=queries.flaky(conn, landed=landed),
        gaps=queries.known_gaps(conn, landed),
        accepted=queries.accepted_stacks(conn),
        drift=queries.drift(conn),
    )
