"""The old import paths of the modules that moved to rocm-gate in pytest-rocm 0.2.0.

`pytest_rocm.github`, `pytest_rocm.cli`, `pytest_rocm.history` and the other CI-service packages are
`rocm_gate.*` now, in the rocm-gate distribution. For one minor version an import by the old name
still works where rocm-gate is installed: it is the same module object as the new name's (so a
monkeypatch or an isinstance check sees one module), with a DeprecationWarning naming the new path;
`python -m pytest_rocm.cli` runs `rocm_gate.cli`. Without rocm-gate installed the import fails,
naming the distribution to install. Nothing of the plugin imports an old path
(`tests/test_architecture.py`): the redirect is looked up only when someone asks for one. Remove
in 0.3.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import warnings
from types import ModuleType

MOVED = frozenset(
    {
        "adoption",
        "blame",
        "cli",
        "dashboard",
        "github",
        "history",
        "knowledge",
        "parity",
        "preflight",
        "selection",
        "trunk",
    }
)
OLD = "pytest_rocm."
NEW = "rocm_gate."


def new_name(fullname: str) -> str | None:
    """The new name of a moved module (`rocm_gate.` and the rest), else None."""
    if not fullname.startswith(OLD):
        return None
    rest = fullname[len(OLD) :]
    return NEW + rest if rest.split(".")[0] in MOVED else None


class _Alias(importlib.abc.Loader):
    """Loads an old name as the module its new name already is."""

    def __init__(self, module: ModuleType) -> None:
        self.module = module
        self.spec = module.__spec__

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        return self.module

    def exec_module(self, module: ModuleType) -> None:
        """The module ran under its new name; nothing runs twice. The import system has set the
        alias's spec on it: its own comes back (find_spec of the new name reads it)."""
        module.__spec__ = self.spec


class MovedFinder(importlib.abc.MetaPathFinder):
    """Finds `pytest_rocm.<moved>...` as `rocm_gate.<moved>...`."""

    def find_spec(self, fullname, path=None, target=None):  # type: ignore[no-untyped-def]
        new = new_name(fullname)
        if new is None:
            return None
        if importlib.util.find_spec("rocm_gate") is None:
            raise ModuleNotFoundError(
                f"{fullname} moved to {new}, in the rocm-gate distribution, which is not installed: "
                "pip install ./rocm-gate from a checkout of pytest-rocm",
                name=fullname,
            )
        warnings.warn(
            f"{fullname} moved to {new} (the rocm-gate distribution); the old name goes in 0.3",
            DeprecationWarning,
            stacklevel=2,
        )
        if fullname.endswith(".__main__"):
            # `python -m pytest_rocm.cli`: runpy runs the file's code under the name it asked for
            found = importlib.util.find_spec(new)
            return (
                None
                if found is None
                else importlib.util.spec_from_file_location(fullname, found.origin)
            )
        module = importlib.import_module(new)
        spec = importlib.util.spec_from_loader(
            fullname, _Alias(module), is_package=hasattr(module, "__path__")
        )
        if spec is not None and hasattr(module, "__path__"):
            spec.submodule_search_locations = list(module.__path__)
        return spec


def install() -> None:
    """Once per interpreter (pytest_rocm/__init__.py calls it)."""
    if not any(isinstance(f, MovedFinder) for f in sys.meta_path):
        # first: the path finder would find an old name's submodule in the new package's folder
        # and run its code a second time, as another module
        sys.meta_path.insert(0, MovedFinder())
