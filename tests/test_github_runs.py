"""What GitHub lists, read as main's state needs it (against the loopback GitHub, which holds its
answers to GitHub's OpenAPI description): every run of a window past the 1,000-result cap of a filtered
search, where a run comes from by GitHub's facts alone, and main's first-parent commits."""

from __future__ import annotations

import datetime as dt

import pytest
from github_api import FakeGitHub

from rocm_gate.github import api, commits, runs

REPO = "vllm-project/vllm"


@pytest.fixture
def fake():
    with FakeGitHub(token="ghs_t") as server:
        yield server
        assert server.errors == [], "the fake sent a response GitHub's description does not allow"


def client(fake) -> api.Client:
    return api.Client(
        api.connect(fake.url, token="ghs_t"), REPO, backoff=0.0, settle_s=0.0, pace_s=0.0
    )


def add_run(fake, run_id: int, created: dt.datetime, **fields) -> None:
    stamp = created.strftime("%Y-%m-%dT%H:%M:%SZ")
    fake.workflow_runs[run_id] = {
        "repo": REPO,
        "id": run_id,
        "name": "rocm-gate",
        "event": "push",
        "status": "completed",
        "conclusion": "success",
        "head_sha": f"{run_id:040x}",
        "head_branch": "main",
        "head_repository": REPO,
        "path": ".github/workflows/rocm-gate.yml",
        "display_title": "push",
        "run_attempt": 1,
        "referenced_workflows": [],
        "created_at": stamp,
        "updated_at": stamp,
        **fields,
    }


def test_every_run_of_a_busy_window_is_listed_past_the_search_cap(fake):
    """2,500 runs in a day: GitHub's filtered search reaches 1,000 of them; the window is cut in
    slices until each fits, so the oldest runs of the window are seen too."""
    start = dt.datetime(2026, 12, 1, tzinfo=dt.UTC)
    for n in range(2500):
        add_run(fake, 10_000 + n, start + dt.timedelta(seconds=30 * n))
    seen = runs.listed(client(fake), "rocm-gate.yml", start, start + dt.timedelta(days=1))
    assert len(seen) == 2500 and len({r["id"] for r in seen}) == 2500
    # the cap is real: one search of the whole window reaches only 1,000
    body = client(fake).get(
        f"/repos/{REPO}/actions/workflows/rocm-gate.yml/runs",
        {"created": "2026-12-01T00:00:00Z..2026-12-02T00:00:00Z", "per_page": 100, "page": 11},
    )
    assert body["total_count"] == 2500 and body["workflow_runs"] == []


@pytest.mark.parametrize(
    ("fields", "origin"),
    [
        ({"event": "push"}, "main"),
        ({"event": "schedule"}, "main"),
        ({"event": "merge_group", "head_branch": "gh-readonly-queue/main/pr-7-abc"}, "main"),
        ({"event": "push", "head_branch": "feature"}, "pr"),
        ({"event": "push", "head_repository": "someone/vllm-fork"}, "pr"),  # a fork's own main
        ({"event": "pull_request", "head_branch": "main"}, "pr"),
        ({"event": "workflow_dispatch"}, "pr"),  # names a commit a writer approved
        ({"event": "merge_group", "head_branch": "gh-readonly-queue/release/pr-7"}, "pr"),
        ({"event": "schedule", "head_branch": "release"}, "pr"),
    ],
)
def test_where_a_run_comes_from_is_githubs(fake, fields, origin):
    add_run(fake, 1, dt.datetime(2026, 12, 1, tzinfo=dt.UTC), **fields)
    listed = client(fake).get(f"/repos/{REPO}/actions/runs/1")
    assert runs.origin(listed, REPO, runs.default_branch(client(fake))) == origin


def test_the_default_branch_is_the_repositorys(fake):
    fake.default_branch = "trunk"
    runs._DEFAULT_BRANCH.clear()
    try:
        assert runs.default_branch(client(fake)) == "trunk"
    finally:
        runs._DEFAULT_BRANCH.clear()


def test_main_is_walked_by_first_parent(fake):
    """A merge commit on main brings a branch's commits into GitHub's list: the first-parent walk
    keeps main's own line, and stops once every commit asked for is behind it."""
    day = dt.datetime(2026, 12, 1, tzinfo=dt.UTC)

    def commit(name: str, parents: list[str], hour: int) -> str:
        sha = name * 40
        fake.commits[sha] = [p * 40 for p in parents]
        fake.commit_dates[sha] = (day + dt.timedelta(hours=hour)).strftime("%Y-%m-%dT%H:%M:%SZ")
        return sha

    commit("a", [], 0)
    commit("b", ["a"], 1)
    commit("x", ["b"], 2)  # a branch commit
    commit("c", ["b"], 3)
    commit("d", ["c", "x"], 4)  # the merge
    fake.branches["main"] = commit("e", ["d"], 5)
    line = commits.first_parent(client(fake), "main", {"b" * 40})
    assert line.commits == ["b" * 40, "c" * 40, "d" * 40, "e" * 40] and line.complete
    assert line.dates["e" * 40] == "2026-12-01T05:00:00Z"
    # a commit that is not on main (a queue candidate never landed) is never reached: said
    lost = commits.first_parent(client(fake), "main", {"f" * 40})
    assert not lost.complete and lost.missing == ["f" * 40]
    assert lost.commits[0] == "a" * 40  # walked to the root, and no further
