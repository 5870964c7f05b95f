"""rocm-gate: the CI service beside the pytest-rocm plugin.

It turns what the plugin writes (gate reports, records) into merge-blocking GitHub checks, keeps main's
state and the history store, runs blame by experiment, accepts nodes (preflight), and reports CUDA
parity and the dashboard. Its command is `rocm-gate` (`rocm_gate.cli`). It imports the plugin's
shared artifact schemas and facts (`pytest_rocm.schemas`, `pytest_rocm.hw`, `pytest_rocm.results`);
the plugin never imports it. docs/architecture.md describes the parts as built.
"""

from pytest_rocm import installed_version


def __getattr__(name: str) -> str:
    """`__version__`, looked up when asked (reading the distribution's metadata costs ms)."""
    if name != "__version__":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return installed_version("rocm-gate")
