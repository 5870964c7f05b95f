"""The layout is the architecture: one package per job, each saying what it owns, with no import
cycle."""

import ast
import importlib
import pkgutil
import re
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest_rocm

ROOT = Path(pytest_rocm.__file__).resolve().parent
# running, not importing
MODULES = sorted(
    m.name
    for m in pkgutil.walk_packages([str(ROOT)], "pytest_rocm.")
    if not m.name.endswith(".__main__")
)


def imports_of(name: str) -> set[str]:
    """The project modules a module imports, at any depth of its code (imports inside functions
    too)."""
    spec = importlib.util.find_spec(name)
    tree = ast.parse(Path(spec.origin).read_text())
    found = set()
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.ImportFrom)
            and node.module
            and node.module.startswith("pytest_rocm")
        ):
            for alias in node.names:
                candidate = f"{node.module}.{alias.name}"
                found.add(candidate if candidate in MODULES else node.module)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("pytest_rocm"))
    return {m for m in found if m in MODULES and m != name}


def test_no_import_cycle_between_modules():
    graph = {name: imports_of(name) for name in MODULES}
    # A package's __init__ may list its modules; an edge into a package means its __init__.
    state: dict[str, int] = defaultdict(int)  # 0 new, 1 on the stack, 2 done
    stack: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in graph.get(node, ()):
            if state[nxt] == 1:
                cycle = stack[stack.index(nxt) :] + [nxt]
                raise AssertionError("import cycle: " + " -> ".join(cycle))
            if state[nxt] == 0:
                visit(nxt)
        stack.pop()
        state[node] = 2

    for name in MODULES:
        if state[name] == 0:
            visit(name)


def test_every_module_imports_alone_in_a_fresh_interpreter():
    code = (
        "import importlib, sys\n"
        "for name in sys.argv[1:]:\n"
        "    importlib.import_module(name)\n"
        "    for loaded in [m for m in sys.modules if m.startswith('pytest_rocm')]:\n"
        "        del sys.modules[loaded]\n"
    )
    done = subprocess.run([sys.executable, "-c", code, *MODULES], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_every_module_says_what_it_owns_and_every_package_has_a_public_surface():
    for name in MODULES:
        module = importlib.import_module(name)
        assert (module.__doc__ or "").strip(), f"{name} has no docstring"
        if hasattr(module, "__path__") and name.count(".") == 1:
            assert isinstance(getattr(module, "__all__", None), list), f"{name} has no __all__"


def test_pytest_and_xdist_internals_are_touched_in_two_modules():
    """`plugin/internals.py`, and the scheduler xdist drives through its worker objects; nothing
    else."""
    private = (
        r"dsession",
        r"\.sched\b",
        r"shuttingdown",
        r"\b_io\b",
        r"runtestprotocol",
        r"shutting_down",
        r"send_runtest",
        r"\.shutdown\(",
        r"\b_pytest\b",
        r"[\"']gw\d",
    )
    for name in MODULES:
        if name in ("pytest_rocm.plugin.internals", "pytest_rocm.scheduling.xdist_scheduler"):
            continue
        source = Path(importlib.util.find_spec(name).origin).read_text()
        for word in private:
            assert not re.search(word, source), (
                f"{name} uses {word!r}: keep internals in plugin/internals.py"
            )


def test_the_github_side_reads_artifacts_and_never_imports_the_plugin():
    """docs/architecture.md, "Parts": `github/` reads files (their schemas), not the plugin's Python
    objects or test code. The trunk attribution it uses reads the same artifacts (a gate report, a
    trunk state) and nothing else."""
    readers = ("pytest_rocm.github", "pytest_rocm.schemas", "pytest_rocm.trunk.attribution")
    for name in MODULES:
        if name.startswith("pytest_rocm.github"):
            outside = {m for m in imports_of(name) if not m.startswith(readers)}
            assert not outside, f"{name} imports {sorted(outside)}"
    outside = {
        m
        for m in imports_of("pytest_rocm.trunk.attribution")
        if not m.startswith(("pytest_rocm.schemas", "pytest_rocm.trunk.fingerprint"))
    }
    assert not outside, f"pytest_rocm.trunk.attribution imports {sorted(outside)}"
