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
import rocm_gate

# The two distributions' packages: the plugin (pytest-rocm, at the root) and the CI service
# (rocm-gate, in rocm-gate/), which imports the plugin and never the other way.
ROOT = Path(pytest_rocm.__file__).resolve().parent
SERVICE_ROOT = Path(rocm_gate.__file__).resolve().parent
PROJECT = ("pytest_rocm", "rocm_gate")
# running, not importing
MODULES = sorted(
    m.name
    for root, prefix in ((ROOT, "pytest_rocm."), (SERVICE_ROOT, "rocm_gate."))
    for m in pkgutil.walk_packages([str(root)], prefix)
    if not m.name.endswith(".__main__")
)


def imports_of(name: str) -> set[str]:
    """The project modules a module imports, at any depth of its code (imports inside functions
    too)."""
    spec = importlib.util.find_spec(name)
    tree = ast.parse(Path(spec.origin).read_text())
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith(PROJECT):
            for alias in node.names:
                candidate = f"{node.module}.{alias.name}"
                found.add(candidate if candidate in MODULES else node.module)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith(PROJECT))
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


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """A cycle of `graph` as the nodes along it (first repeated at the end), or None."""
    state: dict[str, int] = defaultdict(int)  # 0 new, 1 on the stack, 2 done
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state[nxt] == 1:
                return stack[stack.index(nxt) :] + [nxt]
            if state[nxt] == 0 and (found := visit(nxt)):
                return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if state[node] == 0 and (found := visit(node)):
            return found
    return None


def package_of(module: str) -> str:
    return ".".join(module.split(".")[:2])


def test_no_import_cycle_between_packages():
    """One package per job, layered: catalog -> parity -> scheduling -> results -> catalog went
    round through imports inside functions (the module graph had no cycle). Every import counts,
    at any depth."""
    graph: dict[str, set[str]] = defaultdict(set)
    for name in MODULES:
        for target in imports_of(name):
            if package_of(target) != package_of(name):
                graph[package_of(name)].add(package_of(target))
    cycle = find_cycle(graph)
    assert cycle is None, "package cycle: " + " -> ".join(cycle)
    # the test can fail: a cycle it is shown is found
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]


def test_every_module_imports_alone_in_a_fresh_interpreter():
    code = (
        "import importlib, sys\n"
        "for name in sys.argv[1:]:\n"
        "    importlib.import_module(name)\n"
        "    for loaded in [m for m in sys.modules if m.startswith(('pytest_rocm', 'rocm_gate'))]:\n"
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
    trunk state) and nothing else; its errors derive from the one base (errors.py imports nothing)."""
    readers = (
        "pytest_rocm.errors",
        "rocm_gate.github",
        "pytest_rocm.schemas",
        "rocm_gate.trunk.attribution",
        "rocm_gate.trunk.judgement",
        "pytest_rocm.results.fingerprint",
    )
    for name in MODULES:
        if name.startswith("rocm_gate.github"):
            outside = {m for m in imports_of(name) if not m.startswith(readers)}
            assert not outside, f"{name} imports {sorted(outside)}"
    for name in ("rocm_gate.trunk.attribution", "rocm_gate.trunk.judgement"):
        outside = {
            m
            for m in imports_of(name)
            if not m.startswith(
                (
                    "pytest_rocm.schemas",
                    "pytest_rocm.results.fingerprint",
                    "rocm_gate.trunk.judgement",
                )
            )
        }
        assert not outside, f"{name} imports {sorted(outside)}"


REPOSITORY = ROOT.parent
SUBPACKAGES = sorted(
    p.name for root in (ROOT, SERVICE_ROOT) for p in root.iterdir() if (p / "__init__.py").is_file()
)
# a path into a package or a sibling folder of the checkout, as prose names it
NAMED_PATH = re.compile(
    r"(?<![\w./-])((?:\.\./shared/|pytest_rocm/|rocm-gate/|(?:"
    + "|".join(SUBPACKAGES)
    + r")/)[\w./-]*\w/?)"
)
NAMED_MODULE = re.compile(r"\b(?:pytest_rocm|rocm_gate)(?:\.\w+)+")
# a command as a user types it: in a code span, a shell line, a quoted string, "run ..."
NAMED_COMMAND = re.compile(r"(?:`|^\s*|\$ |\brun |\"|')rocm-gate ([a-z][a-z-]*)", re.M)
NOT_COMMANDS = {"dispatch"}  # `rocm-gate dispatch <sha>`: the run-name of a dispatched gate run


def _texts() -> list[tuple[Path, str]]:
    """What names paths, modules and commands to a reader: the README and docs, the package's
    sources (docstrings, comments, help and error text) and its schemas and maps. The changelog
    tells history, in the names of its day."""
    files = [*REPOSITORY.glob("*.md"), *(REPOSITORY / "docs").glob("*.md")]
    files += [*(REPOSITORY / "rocm-gate").glob("*.md")]
    files += [*(REPOSITORY / "suites").rglob("*.md"), *(REPOSITORY / "runners").rglob("*.md")]
    files += [
        p
        for root in (ROOT, SERVICE_ROOT)
        for ext in ("py", "json", "toml")
        for p in root.rglob(f"*.{ext}")
    ]
    # the changelogs tell history; moved.py names the old paths it keeps
    skip = {"CHANGELOG.md", "moved.py"}
    return [(f, f.read_text(encoding="utf-8")) for f in files if f.name not in skip]


def _named_module_exists(name: str) -> bool:
    from pytest_rocm import moved

    if moved.new_name(name):
        return (
            False  # an old name kept for a while (pytest_rocm/moved.py): the docs use the new one
        )
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            found = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attribute in parts[cut:]:
            if not hasattr(found, attribute):
                return False
            found = getattr(found, attribute)
        return True
    return False


def stale_names(texts) -> list[tuple[str, str, str]]:
    """(file, kind, name) of each path, module or command named that does not exist (a path under
    ../shared is never there in a clone: the test data is copied into tests/data)."""
    from rocm_gate.cli import COMMANDS

    found = set()
    for path, text in texts:
        where = str(path.relative_to(REPOSITORY)) if path.is_relative_to(REPOSITORY) else str(path)
        for hit in NAMED_PATH.finditer(text):
            named = hit.group(1).rstrip(".")
            tail = named.rstrip("/").rsplit("/", 1)[-1]
            if "." in tail and not tail.endswith((".py", ".toml", ".json", ".md", ".yml", ".sh")):
                continue  # a dotted name, not a file (`results/report.py:func` is cut at the colon)
            if named.startswith("../shared/") or not (
                (REPOSITORY / named).exists()
                or (ROOT / named).exists()
                or (SERVICE_ROOT / named).exists()
            ):
                found.add((where, "path", named))
        for hit in NAMED_MODULE.finditer(text):
            if not _named_module_exists(hit.group(0)):
                found.add((where, "module", hit.group(0)))
        for hit in NAMED_COMMAND.finditer(text):
            if hit.group(1) not in COMMANDS and hit.group(1) not in NOT_COMMANDS:
                found.add((where, "command", hit.group(1)))
    return sorted(found)


def test_every_path_module_and_command_named_exists():
    """A name in the docs, a docstring or help text that no longer exists sends a reader nowhere
    (`rocm-gate quarantine`, `pytest_rocm/baselines.py`, `pytest_rocm.plugin.session_old` were)."""
    assert stale_names(_texts()) == []
    # the check can fail
    planted = [(REPOSITORY / "x.md", "run `rocm-gate quarantine` on pytest_rocm/baselines.py")]
    assert [kind for _, kind, _ in stale_names(planted)] == ["command", "path"]


# No function of the package over 100 lines (the goal, met: the option table is data in
# plugin/option_table.py, the long deciders and readers are split into steps).
LONGEST_FUNCTION = 100


def test_no_function_grows_past_the_longest():
    found = []
    for name in MODULES:
        tree = ast.parse(Path(importlib.util.find_spec(name).origin).read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = node.end_lineno - node.lineno + 1
                if lines > LONGEST_FUNCTION:
                    found.append(f"{name}.{node.name}: {lines} lines")
    assert found == [], f"longer than {LONGEST_FUNCTION} lines: split them"


def test_only_history_speaks_sql():
    """docs/architecture.md, "Parts": history/ owns the store's tables; trunk/, the dashboard and
    the commands ask its query functions, so a change of schema is one package's."""
    speaking = sorted(
        name
        for name in MODULES
        if not name.startswith("rocm_gate.history")
        and re.search(
            r"\.execute(?:many)?\(", Path(importlib.util.find_spec(name).origin).read_text()
        )
    )
    assert speaking == []


# What the plugin's code may import from outside the standard library: pytest and its plugins, what
# the artifacts' checks and the lock of the GPU ledger need, and the tiny models' libraries (loaded
# only by the serving fixtures).
PLUGIN_THIRD_PARTY = {
    "_pytest",
    "execnet",
    "filelock",
    "jsonschema",
    "pytest",
    "pytest_timeout",
    "safetensors",
    "tokenizers",
    "tomli_w",
    "torch",
    "transformers",
    "xdist",
}


def closure(root: str) -> dict[str, str]:
    """Every project module `root` may import, at any depth of any function, with the module that
    imports it (a module's packages' __init__ come with it)."""
    parent = {root: ""}
    todo = [root]
    while todo:
        name = todo.pop()
        parts = name.split(".")
        packages = [".".join(parts[:i]) for i in range(2, len(parts))]
        for target in [*imports_of(name), *(p for p in packages if p in MODULES)]:
            if target not in parent:
                parent[target] = name
                todo.append(target)
    return parent


def third_party_of(name: str) -> set[str]:
    tree = ast.parse(Path(importlib.util.find_spec(name).origin).read_text())
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
        elif isinstance(node, ast.Import):
            found.update(a.name.split(".")[0] for a in node.names)
    return found - set(sys.stdlib_module_names) - set(PROJECT)


def test_the_plugin_reaches_no_ci_service_code_and_no_service_library():
    """Issue 64: `pytest -p rocm` must not pull the CI service into an upstream project's test runs
    (the plugin's quarantine filter once imported the history store's queries). The closure is
    read from the source, imports inside functions included, so a lazy import counts too."""
    parents = closure("pytest_rocm.plugin.hooks")

    def chain(name: str) -> str:
        links = [name]
        while parents[links[-1]]:
            links.append(parents[links[-1]])
        return " <- ".join(links)

    service = [m for m in parents if m.startswith("rocm_gate")]
    assert not service, "the plugin imports CI service code:\n" + "\n".join(map(chain, service))
    libraries = {lib: m for m in parents for lib in third_party_of(m) - PLUGIN_THIRD_PARTY}
    assert not libraries, "the plugin imports libraries outside its own: " + ", ".join(
        f"{lib} ({chain(m)})" for lib, m in sorted(libraries.items())
    )
    assert "pytest_rocm.plugin.collection" in parents  # the closure is walked, not empty


def test_imports_go_one_way_from_the_service_to_the_plugin():
    """Two distributions: rocm-gate depends on pytest-rocm (the artifacts' schemas, the hardware
    facts, the verdict rules), so no module of pytest-rocm may import rocm_gate, at any depth and
    in no function: installed alone, the plugin would fail there."""
    backwards = {
        name: sorted(t for t in imports_of(name) if t.startswith("rocm_gate"))
        for name in MODULES
        if name.startswith("pytest_rocm")
    }
    assert {k: v for k, v in backwards.items() if v} == {}
    assert any(t.startswith("pytest_rocm") for t in imports_of("rocm_gate.cli.verdict"))


# The service's libraries: what `pip install pytest-rocm` must never pull, and what `pytest -p rocm`
# must never load.
SERVICE_LIBRARIES = (
    "github3",
    "psycopg",
    "jinja2",
    "markupsafe",
    "tomlkit",
    "requests",
    "rocm_gate",
)


def test_the_plugins_distribution_declares_no_service_library():
    import tomllib

    plugin = tomllib.loads((REPOSITORY / "pyproject.toml").read_text())["project"]
    service = tomllib.loads((REPOSITORY / "rocm-gate" / "pyproject.toml").read_text())["project"]
    names = [re.split(r"[\s\[<>=!~;]", d, maxsplit=1)[0].lower() for d in plugin["dependencies"]]
    assert plugin["name"] == "pytest-rocm" and "pytest" in names
    assert not {n.replace("-", "_").split(".")[0] for n in names} & set(SERVICE_LIBRARIES)
    assert "rocm-gate" not in plugin.get("scripts", {})
    assert service["scripts"] == {"rocm-gate": "rocm_gate.cli:main"}
    assert any(d.startswith("pytest-rocm") for d in service["dependencies"])
    assert {"github", "postgres", "dashboard"} <= set(service["optional-dependencies"])
    assert not {"github", "postgres", "dashboard"} & set(plugin["optional-dependencies"])


def test_a_plugin_run_loads_no_service_module(pytester):
    """What the static closure promises, seen in a real run: pytest with the plugin, xdist workers
    included, has none of the service's modules or libraries in sys.modules."""
    pytester.makepyfile(
        test_x=f"""
        import sys, pytest

        @pytest.mark.rocm_gate(group="engine", blocking=True)
        def test_loaded():
            loaded = sorted(m for m in sys.modules if m.split(".")[0] in {SERVICE_LIBRARIES!r})
            assert loaded == []
        """
    )
    pytester.makeconftest(
        f"""
        import sys

        def pytest_sessionfinish(session):
            loaded = sorted(m for m in sys.modules if m.split(".")[0] in {SERVICE_LIBRARIES!r})
            assert loaded == [], loaded
        """
    )
    done = pytester.runpytest_subprocess("-p", "rocm", "-n", "2", "--rocm-report-dir=out")
    done.assert_outcomes(passed=1)
    assert "INTERNALERROR" not in done.stdout.str() + done.stderr.str()
