"""Shared helpers of the project's tests: where the vendored data is, and running pytest-rocm as a
user does."""

import itertools
import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
# Real captured tool outputs and upstream data, vendored with their origins (tests/data/README.md).
DATA = Path(__file__).resolve().parent / "data"
SAMPLES = DATA / "samples"
UPSTREAM = DATA / "upstream"
# Trees shaped like upstream checkouts, for the adoption guide: data, not tests of this project.
collect_ignore = ["data"]


@pytest.fixture(autouse=True)
def _no_platform_from_environment(monkeypatch):
    """Tests choose their platform explicitly; a value exported in the shell must not leak in."""
    monkeypatch.delenv("PYTEST_ROCM_PLATFORM", raising=False)


# The end of a stub server script (tests/test_server_lifecycle.py, tests/test_start_ahead.py): serves
# /health on `port` (the script defines it, and imports http.server) until killed.
STUB_HEALTH_SERVER = """
class Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if self.path == "/health" else 404)
        self.end_headers()

    def log_message(self, *args):
        pass

http.server.HTTPServer(("127.0.0.1", port), Health).serve_forever()
"""


def processes_with(text: str) -> list[int]:
    """The processes whose command line (NUL-separated arguments) contains `text`."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if text.encode() in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                pass  # gone meanwhile, or not ours to read
    return found


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]


def read_report(folder: Path) -> dict:
    return json.loads((Path(folder) / "gate-report.json").read_text())


@pytest.fixture(scope="session")
def model_cache(tmp_path_factory) -> Path:
    """One tiny-model cache for every test of this run (xdist workers share the base temp's
    parent)."""
    folder = tmp_path_factory.getbasetemp().parent / "tiny-models"
    folder.mkdir(exist_ok=True)
    return folder


def copy_suites(pytester) -> None:
    """The gate suites, as shipped, into pytester's folder (`suites/`), to run or to break on
    purpose."""
    shutil.copytree(
        REPO / "suites",
        pytester.path / "suites",
        ignore=shutil.ignore_patterns("upstream", "__pycache__"),
    )


def run_suites(pytester, model_cache: Path, *args) -> dict:
    """The copied suites run as the main job runs them (on the CPU, the shared tiny-model cache, a
    health probe that always passes); returns the gate report."""
    pytester.runpytest_subprocess(
        "-c",
        "suites/pytest.ini",
        "--rootdir",
        "suites",
        *args,
        "--rocm-platform=cpu",
        "--rocm-report-dir=out",
        f"--rocm-model-cache={model_cache}",
        "--rocm-health-probe=true",
        "-p",
        "no:cacheprovider",
    )
    return read_report(pytester.path / "out")


@pytest.fixture
def run_gates(pytester):
    """`run_gates(*args, platform="mi300x-8", dir="out")`: pytest with pytest-rocm in a subprocess,
    as a user runs it; returns (RunResult, gate report or None)."""

    def run(*args, platform: str = "mi300x-8", report_dir: str = "out"):
        result = pytester.runpytest_subprocess(
            f"--rocm-platform={platform}",
            f"--rocm-report-dir={report_dir}",
            "-p",
            "no:cacheprovider",
            *args,
        )
        folder = pytester.path / report_dir
        return result, (read_report(folder) if (folder / "gate-report.json").exists() else None)

    return run


# The tracking issue the tests' known gaps name.
GAP = "https://github.com/vllm-project/vllm/issues/777"


# Module fixtures that build many runs or follow a whole guide (15 to 25 s each, once per xdist
# worker that needs them): every test that uses one is in the slow tier (`-m "not slow"` is the fast
# one).
SLOW_FIXTURES = {"trunk", "nightly", "served_site", "followed"}


def pytest_collection_modifyitems(items):
    for item in items:
        if SLOW_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)


# --- PostgreSQL, for the history store's cases ---------------------------------------------------

# A server's URL (a superuser's: the tests make a database per test, and roles); .ci/run and
# scripts/run-tests.sh start one with scripts/postgres.sh and give it here.
POSTGRES_URL = "ROCM_GATE_TEST_POSTGRES"
# 1: where no server can be had the PostgreSQL cases fail, naming what is missing (CI never skips them)
REQUIRE_POSTGRES = "ROCM_GATE_REQUIRE_POSTGRES"
_databases = itertools.count()


def _no_postgres(why: str):
    if os.environ.get(REQUIRE_POSTGRES) == "1":
        pytest.fail(f"{REQUIRE_POSTGRES}=1 and no PostgreSQL for the history store's tests: {why}")
    pytest.skip(f"no PostgreSQL for the history store's tests: {why}")


@pytest.fixture(scope="session")
def postgres_server():
    """A PostgreSQL server's superuser URL: $ROCM_GATE_TEST_POSTGRES, else one this process starts
    in a temporary folder (scripts/postgres.sh: initdb from PATH or /usr/lib/postgresql) and stops at
    the end. Each xdist worker starts its own; where none can be had the cases skip with the reason
    (fail under ROCM_GATE_REQUIRE_POSTGRES=1)."""
    try:
        import psycopg
    except ImportError:
        _no_postgres("psycopg is not installed (pip install 'rocm-gate[postgres]')")
    url = os.environ.get(POSTGRES_URL)
    folder = None
    if not url:
        script = REPO / "scripts" / "postgres.sh"
        if subprocess.run(["bash", str(script), "available"]).returncode != 0:
            _no_postgres(
                f"{POSTGRES_URL} is not set and PostgreSQL's initdb is neither on PATH nor in "
                "/usr/lib/postgresql/*/bin (or, as root, there is no `postgres` user to run it)"
            )
        folder = tempfile.mkdtemp(prefix="rocm-gate-pg-", dir="/tmp")
        started = subprocess.run(
            ["bash", str(script), "start", folder], capture_output=True, text=True, timeout=120
        )
        if started.returncode != 0:
            shutil.rmtree(folder, ignore_errors=True)
            _no_postgres(f"scripts/postgres.sh could not start one: {started.stderr.strip()}")
        url = started.stdout.strip()
    try:
        psycopg.connect(url, connect_timeout=10).close()
    except psycopg.Error as exc:
        _no_postgres(f"{POSTGRES_URL} {url}: {' '.join(str(exc).split())}")
    yield url
    if folder is not None:
        subprocess.run(["bash", str(REPO / "scripts" / "postgres.sh"), "stop", folder], timeout=120)
        shutil.rmtree(folder, ignore_errors=True)


def fresh_database(server: str) -> str:
    """A new empty database on the server (per xdist worker and process: two workers never share
    one); its URL."""
    import psycopg

    from rocm_gate.history.backends import with_database

    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    name = f"rocm_gate_test_{worker}_{os.getpid()}_{next(_databases)}"
    with psycopg.connect(server, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}" TEMPLATE template0')
    return with_database(server, name)


def drop_database(server: str, url: str) -> None:
    import psycopg

    name = url.split("?", 1)[0].rsplit("/", 1)[1]
    with psycopg.connect(server, autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def postgres_url(postgres_server):
    """A fresh, empty PostgreSQL database for one test, dropped after it."""
    url = fresh_database(postgres_server)
    yield url
    drop_database(postgres_server, url)


@pytest.fixture(params=["sqlite", "postgresql"])
def history_target(request, tmp_path):
    """A history store that does not exist yet, on each backend: a SQLite file's path, or a fresh
    PostgreSQL database's URL."""
    if request.param == "sqlite":
        return tmp_path / "history.db"
    return request.getfixturevalue("postgres_url")
