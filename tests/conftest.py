"""Shared helpers of the project's tests: where the vendored data is, and running pytest-rocm as a
user does."""

import json
import shutil
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
