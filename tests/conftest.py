import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
# ../shared/ beside the checkout holds the real captured samples (read-only).
SHARED = Path(os.environ.get("PYTEST_ROCM_SHARED", Path(__file__).resolve().parents[2] / "shared"))
SAMPLES = SHARED / "samples"


@pytest.fixture(autouse=True)
def _no_platform_from_environment(monkeypatch):
    """Tests choose their platform explicitly; a value exported in the shell must not leak in."""
    monkeypatch.delenv("PYTEST_ROCM_PLATFORM", raising=False)


def pytest_configure(config):
    if not SAMPLES.is_dir():
        raise pytest.UsageError(f"the real samples folder {SAMPLES} is missing: the tests read the captured "
                                "outputs of AMD tools there (it sits beside the checkout, as ../shared/)")
