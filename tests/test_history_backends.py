"""The history store on its two backends, SQLite (a file) and PostgreSQL (a real server:
tests/conftest.py, `postgres_server`): the store's own behaviour on both (schema, migrations,
ingest, a run added once, a writer killed half-way, the test id cache), the same answers from both
for every question asked of the same runs, two writers at once on PostgreSQL, the roles, and the
errors a user acts on, through `rocm-gate` as a user runs it.

The runs are the truth harness's (tests/truth.py: the plugin's records through the real report
builder, main runs with GitHub's event payloads, PR runs, breaks, flakes, a bad node, a merge queue
and an ejected candidate, a quarantine), with known gaps, parity reports and stack changes added.
"""

from __future__ import annotations

import inspect
import json
import os
import random
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import truth
from conftest import REPO, drop_database, fresh_database

from rocm_gate.history import ledger, queries, store
from rocm_gate.history.backends import describe, to_psycopg, with_database

MAIN_JOB = REPO / "tests" / "data" / "main-job"
# a world with a bad node, a flaky test, a quarantine, a merge queue and an ejected candidate, and the
# shapes grown from upstream's history: a break reverted and re-landed, a test file moved, a test that
# fails on alternate commits, a strict xfail that starts to XPASS
SEED = 944


def rocm_gate(*args, timeout=120):
    return subprocess.run(
        [sys.executable, "-m", "rocm_gate.cli", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )


def one_line_naming(done, *names: str) -> None:
    """A command's error as a user must see it: exit 2, the names, no traceback."""
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert "Traceback" not in done.stderr, done.stderr
    for name in names:
        assert name in done.stderr, (name, done.stderr)


# --- a history with every kind of answer in it ----------------------------------------------------


def _gap_runs(root: Path) -> list[tuple]:
    """Three runs of a known gap (tests/test_main_runs.py): xfailed then passed on main, xfailed on
    a PR of old code."""
    gap = {"reason": "fp8", "issue": "https://github.com/o/r/issues/5", "mode": "xfail"}
    out = []
    for n, (origin, outcome) in enumerate(
        [("main", "xfailed"), ("main", "passed"), ("pr", "xfailed")]
    ):
        folder = root / f"gap-{n}"
        folder.mkdir(parents=True)
        sha = f"{n + 0xABC:040x}"
        prov = truth._event(
            folder,
            "push",
            {"after": sha, "before": "0" * 40, "repository": {"full_name": truth.REPO, "default_branch": "main"}},
            "refs/heads/main",
            sha,
            900 + n,
        )  # fmt: skip
        records = truth._records({t: [truth.Attempt(None)] for t in truth.TESTS}, {}, 1.0e9 + n)
        for r in records:
            if r.get("nodeid") == truth.TESTS[0]:
                r["known_gap"] = gap
        if outcome == "xfailed":
            [plain] = [r for r in records if r.get("nodeid") == truth.TESTS[0]]
            records.remove(plain)
            spec = {
                k: plain[k] for k in ("schema", "group", "blocking", "gate", "known_gap", "worker")
            }
            t = plain["t"]
            records += [
                {**spec, "nodeid": plain["nodeid"], "when": "setup", "outcome": "passed", "duration": 0.001, "t": t},
                {**spec, "nodeid": plain["nodeid"], "when": "call", "outcome": "skipped", "duration": 0.001, "wasxfail": "known gap: fp8", "t": t + 0.001},
                {**spec, "nodeid": plain["nodeid"], "when": "teardown", "outcome": "passed", "duration": 0.001, "t": t + 0.002},
            ]  # fmt: skip
        manifest = truth._manifest("MI300X", "node-1", prov, truth.Clock(4).at(n))
        truth._write(folder, records, manifest)
        out.append((folder, "manifest" if origin == "main" else "pr", f"9{n}", None))
    return out


def make_history(root: Path) -> dict:
    """Results folders, in the order they are added, with how each is added (origin, GitHub run,
    commit), and what the questions are asked about."""
    from rocm_gate import cli

    world = truth.world(random.Random(SEED), SEED)
    rng, clock = random.Random(SEED), truth.Clock(len(world.commits))
    events = [(r.hour, "main", r) for r in world.main_runs]
    events += [(pr.published + 0.9, "pr", pr) for pr in world.prs]
    runs, mains = [], []
    for run_id, (_, kind, item) in enumerate(sorted(events, key=lambda e: (e[0], e[1])), 1):
        if kind == "main":
            folder = truth.run_main(world, item, root, rng, clock, run_id)
            manifest = json.loads((folder / "manifest.json").read_text())
            # the stack moves on half-way, and one runner has another image
            manifest["packages"]["torch"] = "2.9.0" if run_id < 12 else "2.10.0"
            manifest["container_image"] = f"rocm/vllm@sha256:{'ab'[run_id % 5 == 0] * 64}"
            (folder / "manifest.json").write_text(json.dumps(manifest))
            mains.append(folder)
            runs.append((folder, "manifest", str(run_id), manifest["provenance"]["tested_sha"]))
        else:
            runs.append(
                (truth.run_pr(world, item, root, rng, clock, run_id), "pr", str(run_id), None)
            )
    # parity reports on two main runs, against a run of the other SKU
    for candidate in mains[-2:]:
        reference = next(m for m in mains if m.name != candidate.name)
        status = cli.main(
            [
                "parity",
                "--reference",
                str(reference / "gate-report.json"),
                "--candidate",
                str(candidate / "gate-report.json"),
                "--out",
                str(candidate),
            ]
        )
        assert status == 0 and (candidate / "parity.json").is_file()
    runs += _gap_runs(root)
    # a main run whose commit is no full SHA (left out of the trunk state), and the CPU main job
    short = root / "short-sha"
    shutil.copytree(mains[0], short)
    for name in ("manifest.json", "gate-report.json"):
        document = json.loads((short / name).read_text())
        (document.get("manifest") or document)["git_sha"] = "abc1234"
        (short / name).write_text(json.dumps(document))
    runs += [(short, "manifest", None, None), (MAIN_JOB, "manifest", None, None)]
    runs.append((_crafted(root), "manifest", None, None))
    return {"runs": runs, "world": world}


# names a locale sorts otherwise than their bytes do (en-US: case and punctuation last)
CRAFTED = ["tests/t.py::test_B", "tests/t.py::test_a", "tests/t.py::test_a:b", "tests/t.py::test_a_b", "tests/t.py::test_ab"]  # fmt: skip


def _crafted(root: Path) -> Path:
    """The CPU main job with five of its tests renamed to CRAFTED and failing."""
    folder = root / "crafted"
    shutil.copytree(MAIN_JOB, folder)
    report = json.loads((folder / "gate-report.json").read_text())
    tests = list(report["tests"].items())
    report["tests"] = dict(tests[len(CRAFTED) :])
    for name, (_, entry) in zip(reversed(CRAFTED), tests):
        report["tests"][name] = {
            **entry,
            "verdict": "regression",
            "status": "failed",
            "group": "engine",
        }
    (folder / "gate-report.json").write_text(json.dumps(report))
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest["started"] = "2099-01-01T00:00:00+00:00"  # the newest run: in every grid
    (folder / "manifest.json").write_text(json.dumps(manifest))
    return folder


def fill(target, history: dict):
    """The runs added as a publish adds them: a PR's run with GitHub's facts (where its head came
    from, when it completed), every third main run too."""
    conn = store.connect(target)
    for folder, origin, run, sha in history["runs"]:
        manifest = json.loads((folder / "manifest.json").read_text())
        facts = (
            {
                "head_ref": f"vllm-project/vllm:pr-{int(run or 0) % 7}",
                "completed": manifest.get("finished"),
                "base_sha": (manifest.get("provenance") or {}).get("base_sha"),
            }
            if origin == "pr" or int(run or 0) % 3 == 0
            else None
        )
        assert store.ingest(conn, folder, origin, run, sha, facts).added
    return conn


@pytest.fixture(scope="module")
def history(tmp_path_factory):
    return make_history(tmp_path_factory.mktemp("runs"))


@pytest.fixture(scope="module")
def module_database(postgres_server):
    url = fresh_database(postgres_server)
    yield url
    drop_database(postgres_server, url)


@pytest.fixture(scope="module")
def stores(history, module_database, tmp_path_factory):
    """The same runs added, in the same order, to a SQLite file and to a PostgreSQL database."""
    sqlite = fill(tmp_path_factory.mktemp("sqlite") / "history.db", history)
    postgresql = fill(module_database, history)
    yield {"sqlite": sqlite, "postgresql": postgresql, "url": module_database}
    sqlite.close()
    postgresql.close()


# --- every question, the same answer --------------------------------------------------------------

NOT_ASKED_OF_THE_STORE = {"seconds_between"}  # a function of two times, no store


def answers(conn, world, keys: list[str]) -> dict:
    """Every question of history/queries.py (each public function, with its options), main's state
    per SKU, trunk health and the quarantine, asked of one store."""
    from rocm_gate.trunk import quarantine, state
    from rocm_gate.trunk.health import trunk_health

    landed = frozenset(world.commits)
    ids = [r["id"] for r in queries.runs(conn)]
    tests = sorted(
        {world.nodeid(t, c) for t in world.tests for c in range(len(world.commits))} - {None}
    )
    out = {
        "runs": queries.runs(conn),
        "runs:main,3": queries.runs(conn, 3, "main"),
        "runs:main,3,landed": queries.runs(conn, 3, "main", landed),
        "runs:other,landed": queries.runs(conn, origin="other", landed=landed),
        "runs:pr": queries.runs(conn, origin="pr"),
        "names_in_runs": queries.names_in_runs(conn, ids[: len(ids) // 2]),
        "results_of_tests": queries.results_of_tests(conn, ids, tests[::2]),
        "parity_now": queries.parity_now(conn),
        "parity_now:landed": queries.parity_now(conn, landed),
        "suspects": queries.suspects(conn),
        "suspects:4,2,landed": queries.suspects(conn, 4, 2, landed),
        "flaky": queries.flaky(conn),
        "flaky:3,landed": queries.flaky(conn, 3, landed),
        "known_gaps": queries.known_gaps(conn),
        "known_gaps:landed": queries.known_gaps(conn, landed),
        "accepted_stacks": queries.accepted_stacks(conn),
        "drift": queries.drift(conn),
        "parity_trend": queries.parity_trend(conn),
        "grid": queries.grid(conn),
        "grid:5,main": queries.grid(conn, 5, "main"),
        "grid:5,main,landed": queries.grid(conn, 5, "main", landed),
        "group_health_rows": queries.group_health_rows(conn),
        "group_health_rows:landed": queries.group_health_rows(conn, landed),
        "results_of_tests_not_passing": queries.results_of_tests_not_passing(
            conn, ids, ("regression", "unconfirmed", "flaky", "infra")
        ),
        "tests_run": queries.tests_run(conn, ids[: len(ids) // 2]),
        "main_failures": queries.main_failures(conn),
        "main_failures:2": queries.main_failures(conn, 2),
        "main_failures:landed": queries.main_failures(conn, landed=landed),
        "health": trunk_health(conn),
        "health:5,landed": trunk_health(conn, 5, landed),
    }
    for sku in (*truth.SKUS, "cpu"):
        out[f"main_runs:{sku}"] = queries.main_runs(conn, sku)
        kinds = {"window 30, commits": (30, world.commits), "window 3": (3, None)}
        for name, (window, commits) in kinds.items():
            out[f"state.build:{sku}:{name}"] = state.build(
                conn, sku, window, commits, "2026-12-07T00:00:00+00:00"
            )
        trunk = out[f"state.build:{sku}:window 30, commits"]
        out[f"quarantine:{sku}"] = quarantine.update(
            conn, quarantine.empty(), trunk, 0.0, 2, "2026-12-07T00:00:00+00:00"
        )
        for test in tests:
            out[f"newest_main_verdicts:{sku}:{test}"] = queries.newest_main_verdicts(
                conn, test, sku, 3
            )
    for test in tests:
        out[f"test_runs:{test}"] = queries.test_runs(conn, test)
        out[f"test_runs:{test}:2"] = queries.test_runs(conn, test, 2)
        out[f"test_runs:{test}:landed"] = queries.test_runs(conn, test, landed=landed)
    for sku in truth.SKUS:
        out[f"pr_results:{sku}"] = queries.pr_results(conn, sku, tests, "2000-01-01")
        out[f"pr_results:{sku}:since"] = queries.pr_results(conn, sku, tests, "2026-12-03")
        out[f"ledger.newest_main:{sku}"] = ledger.newest_main(conn, sku)
    out["ledger.stored"] = sorted(ledger.stored(conn, [*keys, "999/rocm-gate-results-x"]))
    for key in keys:
        out[f"ledger.failing:{key}"] = ledger.failing(conn, key)
    return out


def test_every_question_has_the_same_answer_on_both_backends(stores, history, tmp_path):
    keys = [f"{run}/{folder.name}" for folder, _, run, _ in history["runs"] if run]
    sqlite = answers(stores["sqlite"], history["world"], keys)
    postgresql = answers(stores["postgresql"], history["world"], keys)
    asked = {key.split(":")[0] for key in sqlite}
    public = {
        name
        for name, f in inspect.getmembers(queries, inspect.isfunction)
        if f.__module__ == queries.__name__ and not name.startswith("_")
    }
    assert public - NOT_ASKED_OF_THE_STORE <= asked, "a question no comparison asks"
    different = [key for key in sqlite if sqlite[key] != postgresql[key]]
    assert different == [], {k: (sqlite[k], postgresql[k]) for k in different[:3]}
    # the answers say something: a comparison of empty answers would prove nothing
    for key in ("suspects", "flaky", "known_gaps", "accepted_stacks", "drift", "parity_trend"):
        assert sqlite[key], key
    assert sqlite["flaky"]["flaky"] and sqlite["state.build:MI300X:window 30, commits"]["tests"]
    assert any(sqlite[f"pr_results:{sku}"] for sku in truth.SKUS)
    assert len(sqlite["ledger.stored"]) == len(keys) and any(
        sqlite[f"ledger.failing:{key}"] for key in keys
    )
    assert any(v["left_out_runs"] for k, v in sqlite.items() if k.startswith("state.build"))
    assert sum(1 for k, v in sqlite.items() if k.startswith("state.build") and v["tests"]) >= 2


def test_the_dashboard_is_the_same_site_from_both_backends(stores, history, tmp_path):
    from rocm_gate.dashboard import site

    sites = {}
    for backend in ("sqlite", "postgresql"):
        out = tmp_path / backend
        site.build(stores[backend], out, frozenset(history["world"].commits))
        sites[backend] = {p.name: p.read_text() for p in sorted(out.iterdir())}
    assert sites["sqlite"].keys() == sites["postgresql"].keys()
    assert [n for n in sites["sqlite"] if sites["sqlite"][n] != sites["postgresql"][n]] == []
    assert len(sites["sqlite"]) > 6  # pages per test that failed on main


def test_text_sorts_by_its_bytes_whatever_the_databases_locale(stores):
    """A database made with the cluster's default collation (scripts/postgres.sh: ICU's en-US
    where the server has it) sorts `test_a_b` before `test_a:b` and ignores case first; the
    store's text columns are collated "C": the failing tests of a grid cell are in SQLite's order
    (the bytes', Python's) on PostgreSQL too."""
    conn = stores["postgresql"]
    by_locale = [
        row[0]
        for row in conn.execute(
            "SELECT x FROM (VALUES "
            + ", ".join("(CAST(? AS TEXT))" for _ in CRAFTED)
            + ") AS v(x) ORDER BY x",
            CRAFTED,
        )
    ]
    failing = [
        f["test"]
        for cell in queries.grid(conn)["cells"].values()
        for f in cell["failing"]
        if f["test"] in CRAFTED
    ]
    assert failing == sorted(CRAFTED)
    if by_locale == sorted(CRAFTED):
        pytest.skip("this server's default collation is byte order already: nothing was at stake")


# --- the store itself, on both ---------------------------------------------------------------------


def test_a_new_store_has_the_schema_at_its_version_on_both(history_target):
    conn = store.connect(history_target)
    assert store.version(conn) == store.VERSION
    conn.close()
    again = store.connect(history_target)  # connecting again changes nothing
    assert store.version(again) == store.VERSION
    columns = {
        table: [r[0] for r in again.execute(f"SELECT * FROM {table} LIMIT 0").description]
        for table in ("runs", "tests", "results", "parity", "schema_version")
    }
    assert columns["results"][:3] == ["run_id", "test_id", "blocking"]
    assert "quarantined" in columns["results"] and "origin" in columns["runs"]
    again.execute("INSERT INTO runs (digest, source, vendor, sku, conclusion, complete) VALUES ('x', 's', 'amd', 'X', 'success', 1)")  # fmt: skip
    again.execute(
        "INSERT INTO results (run_id, test_id, blocking, status, verdict, duration, attempts) "
        "VALUES (1, 1, 1, 'passed', 'pass', ?, 1)",
        (1 / 3,),
    )
    # a duration keeps its 8 bytes (PostgreSQL's REAL would keep 4)
    assert again.execute("SELECT duration FROM results").fetchone()[0] == 1 / 3
    again.close()


def test_a_store_newer_than_the_code_is_refused_by_name(history_target):
    conn = store.connect(history_target)
    conn.execute("UPDATE schema_version SET version = ?", (store.VERSION + 1,))
    conn.close()
    with pytest.raises(store.HistoryError, match="newer than this pytest-rocm") as caught:
        store.connect(history_target)
    assert describe(history_target) in str(caught.value)


def test_a_store_of_schema_version_1_is_migrated_on_both(history_target):
    """The migrations' statements, translated where the engines differ, on a store made at
    version 1 (as the oldest stores were)."""
    conn = store.connect(history_target)
    for table in ("parity", "results", "tests", "runs", "schema_version"):
        conn.execute(f"DROP TABLE {table}")
    for entry in store.MIGRATIONS[1]:
        conn.execute(store.statement(entry, conn.dialect))
    conn.execute("UPDATE schema_version SET version = 1")
    conn.execute(
        "INSERT INTO runs (digest, source, started, vendor, sku, git_sha, conclusion, complete) "
        "VALUES ('d', 's', '2026-01-01T00:00:00+00:00', 'amd', 'MI300X', ?, 'success', 1)",
        ("a" * 40,),
    )
    conn.close()
    migrated = store.connect(history_target)
    assert store.version(migrated) == store.VERSION
    assert [r[0] for r in migrated.execute("SELECT digest FROM runs")] == ["other:d"]
    assert [r["origin"] for r in queries.runs(migrated)] == ["other"]
    assert store.ingest(migrated, MAIN_JOB).added


def test_a_run_is_added_once_and_its_answers_are_the_same(history_target):
    conn = store.connect(history_target)
    first = store.ingest(conn, MAIN_JOB)
    again = store.ingest(conn, MAIN_JOB)
    assert first.added and not again.added and again.run_id == first.run_id
    assert conn.execute("SELECT COUNT(*) FROM results").fetchone()[0] == first.tests == 33
    [run] = queries.runs(conn)
    assert (run["sku"], run["conclusion"], run["seconds"], run["complete"]) == (
        "cpu",
        "success",
        217,
        True,
    )
    other = store.connect(history_target)  # a second writer, its own cache: still once
    assert not store.ingest(other, MAIN_JOB).added


def test_a_rolled_back_ingest_leaves_no_test_id_behind(history_target, tmp_path, monkeypatch):
    """A run whose ingest fails after its new test names were added: the names go with the
    transaction, and so must the connection's cache of their ids (SQLite gives the next names the
    same ids; a stale cache would file another run's results under them)."""
    conn = store.connect(history_target)
    report, manifest, parity, digest = store.read_run(MAIN_JOB)
    renamed = {f"other/{name}": t for name, t in report["tests"].items()}
    real = store._result_rows

    def failing(*args):
        yield from list(real(*args))[:5]
        raise RuntimeError("the disk went away")

    monkeypatch.setattr(store, "_result_rows", failing)
    with pytest.raises(RuntimeError):
        store.insert_run(conn, report, manifest, parity, digest, "first")
    monkeypatch.setattr(store, "_result_rows", real)
    assert conn.execute("SELECT COUNT(*) FROM tests").fetchone()[0] == 0
    store.insert_run(conn, {**report, "tests": renamed}, manifest, parity, "other", "second")
    store.insert_run(conn, report, manifest, parity, digest, "first")
    names = {
        row[0]
        for row in conn.execute(
            "SELECT t.name FROM results r JOIN tests t ON t.id = r.test_id JOIN runs u ON u.id = r.run_id "
            "WHERE u.source = 'first'"
        )
    }
    assert names == set(report["tests"])


def test_text_with_a_nul_is_kept_the_same_way_on_both(history_target):
    """PostgreSQL's text holds no NUL; a report may carry one: it is U+FFFD on both engines."""
    conn = store.connect(history_target)
    report, manifest, parity, digest = store.read_run(MAIN_JOB)
    name = next(iter(report["tests"]))
    report["tests"][f"{name}\x00[x]"] = {
        **report["tests"][name],
        "verdict": "regression",
        "status": "failed",
    }
    manifest = {**manifest, "runner": "vm\x00evil"}
    assert store.insert_run(conn, report, manifest, parity, digest, "s").added
    assert store.insert_run(conn, report, manifest, parity, digest + "2", "s").added  # cached id
    assert queries.runs(conn)[0]["runner"] == "vm\ufffdevil"
    assert f"{name}\ufffd[x]" in {t for (t,) in conn.execute("SELECT name FROM tests")}
    assert len(queries.test_runs(conn, f"{name}\ufffd[x]")) == 2


KILLER = """
import sys, time
from rocm_gate.history import store

real = store._result_rows

def rows(*args):
    for number, row in enumerate(real(*args)):
        if number == 20:
            print("half-way", flush=True)
            time.sleep(120)
        yield row

store._result_rows = rows
store.ingest(store.connect(sys.argv[1]), sys.argv[2], "manifest", "77")
"""


def test_a_writer_killed_half_way_leaves_the_store_as_it_was(history_target):
    conn = store.connect(history_target)
    assert store.ingest(conn, MAIN_JOB).added
    before = (
        queries.runs(conn),
        queries.grid(conn),
        conn.execute("SELECT COUNT(*) FROM results").fetchone(),
    )
    writer = subprocess.Popen(
        [sys.executable, "-c", KILLER, str(history_target), str(MAIN_JOB)],
        env={**os.environ, "PYTHONPATH": str(REPO)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert writer.stdout.readline().strip() == "half-way", writer.stderr.read()
    finally:
        writer.send_signal(signal.SIGKILL)
        writer.wait(timeout=30)
    after = store.connect(history_target)
    assert (
        queries.runs(after),
        queries.grid(after),
        after.execute("SELECT COUNT(*) FROM results").fetchone(),
    ) == before
    # the killed run's identity was never stored: it lands whole now
    done = store.ingest(after, MAIN_JOB, "manifest", "77")
    assert done.added
    assert after.execute("SELECT COUNT(*) FROM results").fetchone()[0] == 2 * done.tests


# --- PostgreSQL: two writers at once ----------------------------------------------------------------


@pytest.mark.slow
def test_two_writers_adding_main_runs_at_once_lose_nothing_and_count_nothing_twice(
    history, postgres_url, tmp_path
):
    """Two `rocm-gate history add` processes on one PostgreSQL store at the same time: one adds
    every main run in order, the other the same runs backwards and some of its own. Each run is
    stored once, with all its results; main's state is what one writer alone makes."""
    mains = [(f, run, sha) for f, origin, run, sha in history["runs"] if run and sha]
    common, own = mains[:-4], mains[-4:]

    def command(part):
        args = [sys.executable, "-m", "rocm_gate.cli", "history", "add", "--db", postgres_url]
        return [args + ["--run", run, "--sha", sha, str(folder)] for folder, run, sha in part]

    def writer(commands):
        script = "import subprocess, sys, json\nfor c in json.loads(sys.argv[1]):\n    subprocess.run(c, check=True)\n"
        return subprocess.Popen(
            [sys.executable, "-c", script, json.dumps(commands)],
            env={**os.environ, "PYTHONPATH": str(REPO)},
            stderr=subprocess.PIPE,
            text=True,
        )

    first = writer(command(common))
    second = writer(command(list(reversed(common)) + own))
    for proc in (first, second):
        assert proc.wait(timeout=300) == 0, proc.stderr.read()
    conn = store.connect(postgres_url)
    expected = sum(
        json.loads((f / "gate-report.json").read_text())["tests"].__len__() for f, _, _ in mains
    )
    assert conn.execute("SELECT COUNT(*) FROM runs").fetchone()[0] == len(mains)
    assert conn.execute("SELECT COUNT(*) FROM results").fetchone()[0] == expected
    names = {
        n for f, _, _ in mains for n in json.loads((f / "gate-report.json").read_text())["tests"]
    }
    assert conn.execute("SELECT COUNT(*) FROM tests").fetchone()[0] == len(names)
    alone = store.connect(tmp_path / "alone.db")
    for folder, run, sha in mains:
        store.ingest(alone, folder, "manifest", run, sha)
    for sku in truth.SKUS:
        both = state_tests(conn, sku, history["world"].commits)
        assert both == state_tests(alone, sku, history["world"].commits) and both


def state_tests(conn, sku, commits):
    from rocm_gate.trunk import state

    document = state.build(conn, sku, 30, commits, "2026-12-07T00:00:00+00:00")
    return document["tests"], document["main_runs"], document["green"]


# --- PostgreSQL: roles -------------------------------------------------------------------------------


@pytest.fixture
def roles(postgres_server):
    """A fresh database and two role names of this worker's own (roles are the server's, not the
    database's), dropped after the test."""
    import psycopg

    url = fresh_database(postgres_server)
    suffix = url.split("?")[0].rsplit("/", 1)[1].removeprefix("rocm_gate_test_")
    names = {"writer": f"rg_writer_{suffix}", "reader": f"rg_reader_{suffix}"}
    yield url, names
    drop_database(postgres_server, url)
    with psycopg.connect(postgres_server, autocommit=True) as admin:
        for role in names.values():
            admin.execute(f'DROP ROLE IF EXISTS "{role}"')


def as_role(url: str, role: str) -> str:
    parts = url.split("://", 1)[1].split("@", 1)[1]
    return f"postgresql://{role}@{parts}"


def test_the_reader_may_only_read_and_the_writer_adds(roles, history):
    url, names = roles
    assert rocm_gate("history", "add", "--db", url).returncode == 0  # the owner creates the store
    granted = rocm_gate(
        "history", "grant", "--db", url, "--writer", names["writer"], "--reader", names["reader"]
    )
    assert granted.returncode == 0, granted.stderr
    assert f"created role {names['reader']}" in granted.stdout
    writer, reader = as_role(url, names["writer"]), as_role(url, names["reader"])
    added = rocm_gate("history", "add", "--db", writer, MAIN_JOB)
    assert added.returncode == 0 and "added" in added.stdout, added.stderr
    refused = rocm_gate("history", "add", "--db", reader, history["runs"][0][0])
    one_line_naming(refused, describe(reader), "may only read", "writer's role")
    assert rocm_gate("history", "suspects", "--db", reader, "--json").returncode == 0
    conn = store.connect(url)
    assert conn.execute("SELECT COUNT(*) FROM runs").fetchone()[0] == 1
    # granting again is the same grant, and a SQLite file has no roles
    assert (
        rocm_gate(
            "history",
            "grant",
            "--db",
            url,
            "--writer",
            names["writer"],
            "--reader",
            names["reader"],
        ).returncode
        == 0
    )
    one_line_naming(
        rocm_gate("history", "add", "--db", reader, history["runs"][1][0]), "may only read"
    )
    # a run stored already is found by reading: nothing to refuse
    assert "already in the store" in rocm_gate("history", "add", "--db", reader, MAIN_JOB).stdout


def test_grant_refuses_a_sqlite_file_and_a_bad_role_name(tmp_path):
    db = tmp_path / "h.db"
    bad = rocm_gate(
        "history", "grant", "--db", db, "--writer", 'w"; DROP TABLE runs; --', "--reader", "r"
    )
    assert bad.returncode == 2 and "--writer" in bad.stderr and "role name" in bad.stderr
    one_line_naming(
        rocm_gate("history", "grant", "--db", db, "--writer", "w", "--reader", "r"),
        str(db),
        "no roles",
    )


# --- errors a user acts on ----------------------------------------------------------------------------


def test_every_command_that_takes_a_store_takes_a_url(postgres_url, history, tmp_path):
    folders = [str(f) for f, origin, run, sha in history["runs"][:6]]
    assert rocm_gate("history", "add", "--db", postgres_url, *folders).returncode == 0
    assert json.loads(rocm_gate("history", "suspects", "--db", postgres_url, "--json").stdout)
    trunk = rocm_gate(
        "history", "trunk", "--db", postgres_url, "--sku", "MI300X", "--out", tmp_path / "t.json"
    )
    assert trunk.returncode == 0, trunk.stderr
    held = rocm_gate(
        "history",
        "quarantine",
        "--db",
        postgres_url,
        "--sku",
        "MI300X",
        "--file",
        tmp_path / "q.json",
    )
    assert held.returncode == 0, held.stderr
    site = rocm_gate("dashboard", "--db", postgres_url, "--out", tmp_path / "site")
    assert site.returncode == 0 and (tmp_path / "site" / "index.html").is_file(), site.stderr


def test_an_unreachable_server_is_named_with_its_password_masked(tmp_path):
    pytest.importorskip(
        "psycopg", reason="psycopg is not installed (pip install 'rocm-gate[postgres]')"
    )
    url = f"postgresql://gate:s3cret@/history?host={tmp_path}/no-server-here"
    done = rocm_gate("history", "add", "--db", url, MAIN_JOB)
    one_line_naming(
        done,
        f"postgresql://gate:***@/history?host={tmp_path}/no-server-here",
        "cannot reach the server",
    )
    assert "s3cret" not in done.stderr + done.stdout
    site = rocm_gate("dashboard", "--db", url, "--out", tmp_path / "site")
    one_line_naming(site, "gate:***@", "cannot reach the server")


def test_bad_credentials_are_named_not_echoed(postgres_server, postgres_url):
    """The throwaway server asks the members of `rocm_gate_password_users` for a password
    (scripts/postgres.sh); any other server given is not known to."""
    import psycopg

    assert rocm_gate("history", "add", "--db", postgres_url).returncode == 0  # the owner's store
    role = "rg_pw_" + postgres_url.split("?")[0].rsplit("/", 1)[1].removeprefix("rocm_gate_test_")
    with psycopg.connect(postgres_server, autocommit=True) as admin:
        if not admin.execute(
            "SELECT 1 FROM pg_roles WHERE rolname = 'rocm_gate_password_users'"
        ).fetchone():
            pytest.skip("the server given does not ask for passwords (scripts/postgres.sh's does)")
        admin.execute(
            f"CREATE ROLE \"{role}\" LOGIN PASSWORD 'right' IN ROLE rocm_gate_password_users"
        )
    try:
        wrong = as_role(postgres_url, f"{role}:wrong-horse")
        done = rocm_gate("history", "add", "--db", wrong, MAIN_JOB)
        one_line_naming(done, f"{role}:***@", "refused these credentials")
        assert "wrong-horse" not in done.stderr
        # the right password gets in (no grant, so the store itself says so, by name)
        denied = rocm_gate("history", "suspects", "--db", as_role(postgres_url, f"{role}:right"))
        one_line_naming(denied, f"{role}:***@", "permission denied for table")
    finally:
        drop_database(postgres_server, postgres_url)
        with psycopg.connect(postgres_server, autocommit=True) as admin:
            admin.execute(f'DROP ROLE IF EXISTS "{role}"')


def test_a_missing_psycopg_is_named_with_the_install(tmp_path):
    blocked = (
        "import sys; sys.modules['psycopg'] = None\n"
        "from rocm_gate.cli import main\n"
        "sys.exit(main(sys.argv[1:]))\n"
    )
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            blocked,
            "history",
            "add",
            "--db",
            "postgres://gate:pw@db.example/h",
            str(MAIN_JOB),
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    one_line_naming(
        done,
        "postgres://gate:***@db.example/h",
        "psycopg is not installed",
        "rocm-gate[postgres]",
    )
    # SQLite needs nothing beyond the standard library
    sqlite = subprocess.run(
        [
            sys.executable,
            "-c",
            blocked,
            "history",
            "add",
            "--db",
            str(tmp_path / "h.db"),
            str(MAIN_JOB),
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert sqlite.returncode == 0 and "added" in sqlite.stdout, sqlite.stderr


def test_another_scheme_and_a_damaged_file_are_named(tmp_path):
    one_line_naming(
        rocm_gate("history", "add", "--db", "mysql://root:hunter2@db/h", MAIN_JOB),
        "mysql://root:***@db/h",
        "not a history store",
        "postgresql://",
    )
    damaged = tmp_path / "h.db"
    damaged.write_bytes(b"SQLite format 3\x00" + b"\xff" * 4000)
    for args in (
        ["history", "add", "--db", damaged, MAIN_JOB],
        ["history", "suspects", "--db", damaged],
        ["dashboard", "--db", damaged, "--out", tmp_path / "s"],
    ):
        one_line_naming(rocm_gate(*args), str(damaged), "not a usable history database")


def test_urls_are_described_without_their_password_and_sql_is_written_once():
    assert describe("postgresql://u:p@h:5/d?sslmode=require&password=x") == (
        "postgresql://u:***@h:5/d?sslmode=require&password=***"
    )
    assert describe("postgresql://u@/d?host=/tmp/s") == "postgresql://u@/d?host=/tmp/s"
    assert describe(Path("/a/b.db")) == "/a/b.db"
    assert with_database("postgresql://u@/d?host=/tmp/s", "e") == "postgresql://u@/e?host=/tmp/s"
    assert to_psycopg("SELECT '?', 5 % 2 FROM t WHERE a = ? AND b LIKE 'x%'") == (
        "SELECT '?', 5 %% 2 FROM t WHERE a = %s AND b LIKE 'x%%'"
    )
    assert store.statement(store.MIGRATIONS[1][0], "postgresql").startswith(
        "CREATE TABLE runs (\n            id INTEGER GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY"
    )
    results = store.statement(store.MIGRATIONS[1][2], "postgresql")
    assert "WITHOUT ROWID" not in results and "DOUBLE PRECISION" and "REFERENCES" not in results
    assert 'verdict TEXT COLLATE "C" NOT NULL' in results


def test_the_plugin_and_the_embedded_store_need_no_database_driver(tmp_path):
    """psycopg is rocm-gate's `postgres` extra, imported only for a PostgreSQL URL: neither the
    pytest plugin nor rocm-gate's base install pulls a driver, and a SQLite store's whole life
    imports none."""
    import tomllib

    plugin = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    service = tomllib.loads((REPO / "rocm-gate" / "pyproject.toml").read_text())["project"]
    assert not [d for d in plugin["dependencies"] + service["dependencies"] if "psycopg" in d]
    assert service["optional-dependencies"]["postgres"] == ["psycopg[binary]>=3.2,<4"]
    assert "rocm-gate[github,postgres,dashboard]" in (REPO / "scripts/setup-env.sh").read_text()
    code = (
        "import sys\n"
        "import pytest_rocm.plugin.hooks\n"
        "from rocm_gate.history import queries, store\n"
        "from rocm_gate.trunk import state\n"
        "conn = store.connect(sys.argv[1]); store.ingest(conn, sys.argv[2])\n"
        "state.build(conn, 'cpu'); queries.suspects(conn)\n"
        "assert 'psycopg' not in sys.modules, 'psycopg imported'\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / "h.db"), str(MAIN_JOB)],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert done.returncode == 0, done.stderr
