"""pytest-rocm: the pytest plugin that gates upstream LLM frameworks on AMD Instinct GPUs.

The plugin is `pytest_rocm.plugin.hooks` (entry point `rocm`): markers, hardware detection, GPU
allocation, serving, gates and verdicts, and the artifacts' schemas they are written in. The CI service
and its `rocm-gate` command are another distribution, rocm-gate (`rocm_gate`), which imports this one
and never the other way. docs/architecture.md describes the parts as built and the formats they write.
"""

from pytest_rocm import moved as _moved

_moved.install()  # the old import paths of what moved to rocm-gate in 0.2.0 (pytest_rocm/moved.py)


def installed_version(distribution: str) -> str:
    """The installed version of `distribution` (this one, or rocm-gate), "0+unknown" for a source
    tree that was never installed."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(distribution)
    except PackageNotFoundError:
        return "0+unknown"


def __getattr__(name: str) -> str:
    """`__version__`, looked up when asked: every pytest process imports this package, and reading
    the installed distribution's metadata costs about 17 ms."""
    if name != "__version__":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return installed_version("pytest-rocm")
