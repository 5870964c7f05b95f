"""Main's state, live, through the shipped workflow files (examples/upstream/ calling .github/workflows/,
played by tests/actions.py against the loopback GitHub): every main run reaches the next PR check at its
publish, a check published before main showed its failure is judged again by the main run that shows it,
the schedule path counts as main, a fork's base is GitHub's, the embedded store is carried as the
default branch's own artifact and nothing else's, and a store that cannot be read makes the check say so.
"""

from __future__ import annotations

import io
import sqlite3
import tempfile
import zipfile
from pathlib import Path

import pytest
import test_trigger_chain as chain
from upstream_repo import APP_ID, GATE_PIN, REGRESSION, checks, set_gate_input

# the upstream repository and the loopback GitHub of the trigger chain's tests
github, upstream = chain.github, chain.upstream

pytestmark = pytest.mark.slow  # each event runs the workflows' jobs: real git, real pytest

BROKEN = "tests/kernels/attention/test_paged.py::test_paged_attention"


def summary(check: dict) -> str:
    return check["output"]["summary"]


def carried_store(github) -> Path:
    """The newest `rocm-gate-history` artifact's store, unzipped."""
    newest = max(
        (i for i, a in github.artifacts.items() if a["name"] == "rocm-gate-history"), default=None
    )
    assert newest is not None, "no rocm-gate-history artifact was uploaded"
    folder = Path(tempfile.mkdtemp())
    zipfile.ZipFile(io.BytesIO(github.artifacts[newest]["data"])).extractall(folder)
    return folder / "history.db"


def stored_runs(path: Path) -> list[tuple]:
    with sqlite3.connect(path) as conn:
        return conn.execute("SELECT origin, gh_run_id, digest FROM runs ORDER BY id").fetchall()


def test_a_main_run_is_main_state_at_the_next_pr_check(upstream, github):
    """A break lands on main; main's push run shows it. A clean PR based on that commit, published
    40 minutes later, is not blocked by it: no dashboard, no sweep in between."""
    main_run = upstream.push(REGRESSION, "a break lands on main")
    [main_check] = checks(github, upstream.main())
    assert main_check["conclusion"] == "failure", summary(main_check)  # main is red
    upstream.advance(40)
    pull = upstream.open_pull(131, {"vllm/model.py": "x = 31\n"}, fork=False, author="maintainer")
    upstream.pull_request(pull, "opened", "maintainer")
    [check] = checks(github, pull.head)
    text = summary(check)
    assert check["conclusion"] == "neutral", text
    assert "Pre-existing on main (not blocking) (1)" in text and BROKEN in text
    assert "1 main run(s)" in text and "the history store" in text, text
    assert "main's commits from GitHub (first parent)" in text, text
    # the main run joined the carried store under its origin and its GitHub run
    rows = stored_runs(carried_store(github))
    assert ("main", None, f"main:run:{main_run.id}-1/rocm-gate-results-mi300x-8") in [
        (o, None, d) for o, _, d in rows
    ], rows


def test_a_blocked_check_is_judged_again_by_the_main_run_that_shows_its_failure(upstream, github):
    """A clean PR is based on a commit that broke main before any main run tested it: its check
    blocks (nothing can know yet). The next main run shows the break: its own publish judges the
    blocked check again at once, so the PR is no longer blocked, without waiting for a sweep. (The
    base experiment would settle it at once: off here, as a repository may set it.)"""
    set_gate_input(upstream, "base-check-minutes", "0")
    upstream.commit(REGRESSION, "a break lands, no main run yet")
    pull = upstream.open_pull(132, {"vllm/model.py": "x = 32\n"}, fork=False, author="maintainer")
    upstream.pull_request(pull, "opened", "maintainer")
    [blocked] = checks(github, pull.head)
    assert blocked["conclusion"] == "failure", summary(blocked)
    upstream.advance(35)
    main_run = upstream.push({"docs/notes.md": "next\n"}, "the next commit on main")
    assert main_run is not None
    [check] = checks(github, pull.head)
    assert check["id"] == blocked["id"] and check["conclusion"] == "neutral", summary(check)
    publish = [j for r in main_run.triggered for j in r.jobs if j.name.endswith("/ publish")]
    said = "\n".join(s["output"] for j in publish for s in j.steps)
    assert "judged again: run" in said, said


def test_a_break_no_main_run_showed_yet_is_settled_by_the_base_experiment(upstream, github):
    """The same PR with the base experiment on (the default): its failure, run again on the PR's
    base, fails there too: not the PR's, at its own publish, and the check says what decided it."""
    upstream.commit(REGRESSION, "a break lands, no main run yet")
    pull = upstream.open_pull(138, {"vllm/model.py": "x = 38\n"}, fork=False, author="maintainer")
    upstream.pull_request(pull, "opened", "maintainer")
    [check] = checks(github, pull.head)
    text = summary(check)
    assert check["conclusion"] == "neutral", text
    assert f"run again on the base {pull.base[:12]}: failed in 2 of 2 attempt(s)" in text, text


def test_a_scheduled_main_run_counts_as_main(upstream, github):
    """A `schedule` payload names no repository: whether its run is main's comes from GitHub's
    listing and the repository's default branch (the API), never from the payload."""
    upstream.commit(REGRESSION, "a break lands, no push run")
    nightly = upstream.schedule("rocm-gate.yml")
    assert nightly is not None and nightly.conclusion == "success", nightly.report()
    upstream.advance(31)
    pull = upstream.open_pull(133, {"vllm/model.py": "x = 33\n"}, fork=False, author="maintainer")
    upstream.pull_request(pull, "opened", "maintainer")
    [check] = checks(github, pull.head)
    assert check["conclusion"] == "neutral", summary(check)


def test_a_fork_prs_base_is_the_merge_commits_first_parent(upstream, github):
    """GitHub lists no PR on a fork's run: its base comes from the tested merge commit itself, so the
    check names it and main's state can place it."""
    upstream.push(REGRESSION, "a break lands on main")
    upstream.advance(31)
    pull = upstream.open_pull(134, {"vllm/model.py": "x = 34\n"}, fork=True)
    upstream.pull_request(pull, "labeled", "maintainer", label="rocm-ci-approved")
    [check] = checks(github, pull.head)
    text = summary(check)
    assert f"this run's code is based on ` {pull.base[:12]} `" in text, text
    assert check["conclusion"] == "neutral", text


def test_a_fork_head_approved_by_a_dispatch_is_based_where_it_forked(upstream, github):
    """A dispatch gates the fork's head itself (no merge commit): its base is where the head forked
    from main, as GitHub's compare computes it, never "unknown"."""
    upstream.push(REGRESSION, "a break lands on main")
    upstream.advance(31)
    pull = upstream.open_pull(137, {"vllm/model.py": "x = 37\n"}, fork=True)
    upstream.dispatch("rocm-gate.yml", {"sha": pull.head, "pr": "137"}, "maintainer")
    [check] = [c for c in checks(github, pull.head) if c["status"] == "completed"][-1:]
    text = summary(check)
    assert f"this run's code is based on ` {pull.base[:12]} `" in text, text
    assert check["conclusion"] == "neutral", text


def test_the_carried_store_is_only_ever_the_default_branchs_own(upstream, github):
    """A PR's run can upload an artifact named `rocm-gate-history` (a store that excuses its own
    regression): it is never read. The check stays blocked by the PR's regression."""
    pull = upstream.open_pull(135, REGRESSION, fork=False, author="maintainer")
    # a store the PR's author made, claiming main fails the PR's test the same way
    forged = Path(tempfile.mkdtemp()) / "history.db"
    sqlite3.connect(forged).close()
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.write(forged, "history.db")
    run = upstream.pull_request(pull, "opened", "maintainer")
    github.artifacts[max(github.artifacts) + 1] = {
        "run_id": run.id,
        "attempt": 1,
        "name": "rocm-gate-history",
        "data": buffer.getvalue(),
        "created_at": "2100-01-01T00:00:00Z",  # the newest
    }
    from rocm_gate.github import api
    from rocm_gate.knowledge import carry

    app = api.connect(
        github.url, app_id=str(APP_ID), private_key=github.private_key, installation_id="77"
    )
    client = api.Client(app, upstream.repo, backoff=0.0, settle_s=0.0, pace_s=0.0, app_id=APP_ID)
    found = carry.newest(client)
    assert found is None or found.run_id != run.id
    [check] = checks(github, pull.head)
    assert check["conclusion"] == "failure"


def test_a_store_that_cannot_be_read_is_said_and_never_excuses(upstream, github, tmp_path):
    """The database is down: the check says main's state was unavailable and judges the run alone
    (its regression blocks); nothing crashes, and the check is written."""
    from rocm_gate.github import api
    from rocm_gate.github.publishing import Options, publish_run
    from rocm_gate.knowledge.live import LiveState

    upstream.undelivered.add("completed")
    pull = upstream.open_pull(136, REGRESSION, fork=False, author="maintainer")
    run = upstream.pull_request(pull, "opened", "maintainer")
    upstream.undelivered.clear()
    app = api.connect(
        github.url, app_id=str(APP_ID), private_key=github.private_key, installation_id="77"
    )
    client = api.Client(app, upstream.repo, backoff=0.0, settle_s=0.0, pace_s=0.0, app_id=APP_ID)
    down = LiveState(
        "postgresql://rocm:secret@127.0.0.1:9/history?connect_timeout=2",
        client,
        "rocm-gate.yml",
        GATE_PIN,
        {"mi300x-8": "rocm-mi300x-8"},
    )
    options = Options("mi300x-8", GATE_PIN, "rocm-mi300x-8", main_state=down)
    outcome = publish_run(client, {"id": run.id}, "completed", options)
    [check] = checks(github, pull.head)
    text = summary(check)
    assert check["conclusion"] == "failure" and "main's state was unavailable" in text, text
    assert "secret" not in text and "secret" not in "\n".join(down.log + outcome.recorded)


def test_two_jobs_catching_up_at_once_store_each_run_once(upstream, github, history_target):
    """Two jobs (two runner pools' publishes, a publish and the sweep) add the same completed runs to
    one store at the same moment: every run lands, none twice, on either backend."""
    import os
    import subprocess
    import sys

    from rocm_gate.history import queries, store

    upstream.undelivered.add("completed")  # no publish stored them
    mains = [upstream.push({"docs/n.md": f"{n}\n"}, f"main {n}") for n in range(3)]
    pull = upstream.open_pull(139, {"vllm/model.py": "x = 39\n"}, fork=False, author="maintainer")
    upstream.pull_request(pull, "opened", "maintainer")
    upstream.undelivered.clear()
    environ = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("GITHUB_", "ROCM_GATE_"))},
        "GITHUB_API_URL": github.url,
        "GITHUB_REPOSITORY": upstream.repo,
        "ROCM_GATE_APP_ID": str(APP_ID),
        "ROCM_GATE_APP_PRIVATE_KEY": github.private_key,
        "ROCM_GATE_APP_INSTALLATION_ID": "77",
        "ROCM_GATE_PACE": "0",
    }
    command = [
        sys.executable, "-m", "rocm_gate.cli", "history", "sync", "--db", str(history_target),
        "--gate-workflow", GATE_PIN, "--class", "mi300x-8=rocm-mi300x-8",
    ]  # fmt: skip
    store.connect(history_target).close()  # created once, as the first publish would
    jobs = [
        subprocess.Popen(command, env=environ, stdout=subprocess.PIPE, text=True) for _ in (1, 2)
    ]
    said = [job.communicate(timeout=240)[0] for job in jobs]
    assert all(job.returncode == 0 for job in jobs), said
    with store.connect(history_target) as conn:
        stored = queries.runs(conn)
    assert sorted(r["origin"] for r in stored) == ["main"] * 3 + ["pr"], stored
    assert len(stored) == 4 and sum(s.count("added: ") for s in said) == 4, said
    assert all(f"added: run {m.id}-1 mi300x-8 (main)" in "".join(said) for m in mains), said


def test_the_sweep_judges_a_blocked_check_again_once_a_main_run_shows_its_failure(upstream, github):
    """The main run's own publish never ran (its `completed` event was lost): the scheduled sweep
    publishes the main run, whose results join the store and judge the blocked check again against
    main's state now."""
    import datetime as dt

    set_gate_input(upstream, "base-check-minutes", "0")
    upstream.commit(REGRESSION, "a break lands, no main run yet")
    pull = upstream.open_pull(140, {"vllm/model.py": "x = 40\n"}, fork=False, author="maintainer")
    upstream.pull_request(pull, "opened", "maintainer")
    [blocked] = checks(github, pull.head)
    assert blocked["conclusion"] == "failure", summary(blocked)
    upstream.undelivered.add("completed")
    # a main run that started a little before now and completed after the blocked check was written
    upstream.clock = dt.datetime.now(dt.UTC).replace(microsecond=0) - dt.timedelta(minutes=10)
    upstream.push({"docs/notes.md": "next\n"}, "the next commit on main")
    upstream.undelivered.clear()
    swept = upstream.schedule("rocm-gate-sweep.yml")
    said = swept.job("/ sweep").steps[-1]["output"]
    [check] = checks(github, pull.head)
    assert check["id"] == blocked["id"] and check["conclusion"] == "neutral", said
    # the sweep published the main run (its check was missing), whose results judged the blocked
    # check again at once
    assert "judged again: run" in said and "published: neutral" in said, said


def test_a_main_run_is_never_judged_against_its_own_results(upstream, github, tmp_path):
    """A main run's check published again (by the sweep, after a lost publish) when the store
    already holds the run: main before it judges it, so a red main stays red."""
    from rocm_gate.github import api
    from rocm_gate.github.publishing import Options, publish_run
    from rocm_gate.knowledge.live import LiveState

    main_run = upstream.push(REGRESSION, "a break lands on main")
    sha = upstream.main()
    [check] = checks(github, sha)
    assert check["conclusion"] == "failure"
    app = api.connect(
        github.url, app_id=str(APP_ID), private_key=github.private_key, installation_id="77"
    )
    client = api.Client(app, upstream.repo, backoff=0.0, settle_s=0.0, pace_s=0.0, app_id=APP_ID)
    live = LiveState(
        str(tmp_path / "h.db"), client, "rocm-gate.yml", GATE_PIN, {"mi300x-8": "rocm-mi300x-8"}
    )
    live.catch_up(["mi300x-8"], include_pr=False)  # the store holds the main run now
    assert any(f"run {main_run.id}-1" in line for line in live.log), live.log
    options = Options("mi300x-8", GATE_PIN, "rocm-mi300x-8", main_state=live)
    publish_run(client, {"id": main_run.id}, "completed", options)
    [check] = checks(github, sha)
    assert check["conclusion"] == "failure", summary(check)
