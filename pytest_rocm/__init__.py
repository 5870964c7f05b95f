"""pytest-rocm: gate upstream LLM frameworks on AMD Instinct GPUs.

The pytest plugin is `pytest_rocm.plugin.hooks` (entry point `rocm`); the `rocm-gate` command is
`pytest_rocm.cli`. docs/architecture.md describes the parts as built and the formats they write.
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("pytest-rocm")
except PackageNotFoundError:  # imported from a source tree that was never installed
    __version__ = "0+unknown"
