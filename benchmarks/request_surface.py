"""The request surface of each engine, and which gates send and compare each parameter (issue 62).

For vLLM (this environment) and SGLang (its own, .venv-sglang) it lists every request parameter:
the fields of the engine's SamplingParams and of the OpenAI completions and chat requests its
server accepts. For each parameter it prints:
- compared: the gates that send it and compare its effect against a reference. Each test module
  declares what its tests compare (`COMPARES = {"test_name": ["param", ...]}`, a literal); this
  script checks every declared parameter against what the test sends;
- sent: how many gates send it without comparing its effect (a parameter set to make a request
  valid or short);
- gap: why no gate compares it; xfail: compared, but an expected failure on this framework, and why
  (both in `suites/request_surface.toml`).

What a gate sends is read from the suites' source, not from a run: the request fields named (as a
keyword or a string) in the test, in the fixtures it asks for, and in the suites' functions and
constants they use, followed through the suites' own modules. A test serves both frameworks when it
takes the `framework` (or `server`) fixture, SGLang alone when it takes an SGLang server fixture,
vLLM otherwise.

Exit status 1 when a parameter is neither compared nor a listed gap, when a declaration names a
parameter its test never sends, or when a listed gap is compared after all (the list is stale).

    .venv/bin/python benchmarks/request_surface.py [--framework vllm|sglang]
"""

from __future__ import annotations

import argparse
import ast
import json
import subprocess
import sys
import tomllib
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SUITES = REPO / "suites"
GAPS_FILE = SUITES / "request_surface.toml"
SGLANG_PYTHON = REPO / ".venv-sglang" / "bin" / "python"
SOURCES = {"S": "SamplingParams", "C": "completions request", "H": "chat request"}
# SGLang's SamplingParams names where its OpenAI requests (and the suites) use OpenAI's: a gate
# comparing the OpenAI name covers the SamplingParams field it becomes.
SGLANG_ALIASES = {
    "max_new_tokens": "max_tokens",
    "min_new_tokens": "min_tokens",
    "sampling_seed": "seed",
}
# Fields of SGLang's SamplingParams it fills itself (after its "internal fields" comment).
SGLANG_INTERNAL = {
    "stop_strs",
    "stop_regex_strs",
    "stop_str_max_len",
    "stop_regex_max_len",
    "is_normalized",
    "ebnf_full_assistant",
}
SERVER_FIXTURES = {
    "both": {"framework", "server"},
    "sglang": {"sglang_server", "sglang_server_factory"},
}

VLLM_SURFACE = """
import json
from vllm import __version__
from vllm.sampling_params import SamplingParams
from vllm.entrypoints.openai.completion.protocol import CompletionRequest
from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
print(json.dumps({
    "version": __version__,
    "S": [f for f in SamplingParams.__struct_fields__ if not f.startswith("_")],
    "C": list(CompletionRequest.model_fields),
    "H": list(ChatCompletionRequest.model_fields),
}))
"""
SGLANG_SURFACE = """
import json, warnings
warnings.simplefilter("ignore")
from sglang.version import __version__
from sglang.srt.sampling.sampling_params import SamplingParams
from sglang.srt.entrypoints.openai.protocol import CompletionRequest, ChatCompletionRequest
print(json.dumps({
    "version": __version__,
    "S": [f for f in SamplingParams.__struct_fields__ if not f.startswith("_")],
    "C": list(CompletionRequest.model_fields),
    "H": list(ChatCompletionRequest.model_fields),
}))
"""


@dataclass
class Gate:
    nodeid: str  # file::test, relative to suites/
    frameworks: set[str]
    sends: set[str]
    compares: set[str] = field(default_factory=set)


def surface(framework: str) -> tuple[str, dict[str, list[str]]] | None:
    """(version, parameter -> the sources that accept it), read in the framework's environment;
    None where it is not installed."""
    python = sys.executable if framework == "vllm" else str(SGLANG_PYTHON)
    if framework == "sglang" and not SGLANG_PYTHON.is_file():
        return None
    done = subprocess.run(
        [python, "-c", VLLM_SURFACE if framework == "vllm" else SGLANG_SURFACE],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=REPO,
    )
    if done.returncode != 0:
        sys.stderr.write(done.stderr[-2000:])
        return None
    data = json.loads(done.stdout.strip().splitlines()[-1])
    params: dict[str, list[str]] = defaultdict(list)
    for source in SOURCES:
        for name in data[source]:
            if framework == "sglang" and name in SGLANG_INTERNAL:
                continue
            params[name].append(source)
    return data["version"], dict(params)


class SuiteModules:
    """The suites' modules parsed once: their top-level definitions by name, and what each imports
    from the others."""

    def __init__(self, root: Path):
        self.root = root
        self.trees = {
            p: ast.parse(p.read_text(), str(p))
            for p in sorted(root.rglob("*.py"))
            if "__pycache__" not in p.parts
        }
        self.by_stem: dict[str, list[Path]] = defaultdict(list)
        for path in self.trees:
            self.by_stem[path.stem].append(path)

    def definitions(self, path: Path) -> dict[str, ast.AST]:
        found: dict[str, ast.AST] = {}
        for node in self.trees[path].body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                found[node.name] = node
            elif isinstance(node, (ast.Assign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for target in targets:
                    if isinstance(target, ast.Name):
                        found[target.id] = node
        return found

    def imports(self, path: Path) -> dict[str, Path]:
        """Names this module imports from another suites module -> that module's file (the one
        beside it first, as pytest's rootdir-relative import finds it)."""
        found = {}
        for node in self.trees[path].body:
            if isinstance(node, ast.ImportFrom) and node.module in self.by_stem:
                candidates = self.by_stem[node.module]
                here = [c for c in candidates if c.parent == path.parent]
                module = (here or [c for c in candidates if c.parent == self.root] or candidates)[0]
                for alias in node.names:
                    found[alias.asname or alias.name] = module
        return found

    def words(
        self, path: Path, node: ast.AST, fixtures: dict[str, tuple[Path, ast.AST]]
    ) -> set[str]:
        """The strings and keyword names in `node` and in everything of the suites it uses."""
        seen: set[tuple[Path, str]] = set()
        words: set[str] = set()
        pending: list[tuple[Path, ast.AST]] = [(path, node)]
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for arg in node.args.args:
                if arg.arg in fixtures and ("fixture", arg.arg) not in seen:
                    seen.add((Path("fixture"), arg.arg))
                    pending.append(fixtures[arg.arg])
        while pending:
            where, current = pending.pop()
            imported = self.imports(where)
            for child in ast.walk(current):
                if isinstance(child, ast.Constant) and isinstance(child.value, str):
                    words.add(child.value)
                elif isinstance(child, ast.keyword) and child.arg:
                    words.add(child.arg)
                elif isinstance(child, ast.Name):
                    for home, name in ((where, child.id), (imported.get(child.id), child.id)):
                        if home is None or (home, name) in seen:
                            continue
                        definition = self.definitions(home).get(name)
                        if definition is not None and definition is not current:
                            seen.add((home, name))
                            pending.append((home, definition))
                            break
        return words

    def fixtures(self, path: Path) -> dict[str, tuple[Path, ast.AST]]:
        """The fixtures a test in `path` can ask for: its module's and its folders' conftest's."""
        found: dict[str, tuple[Path, ast.AST]] = {}
        chain = [p / "conftest.py" for p in reversed(path.relative_to(self.root).parents)]
        for module in [self.root / c for c in chain] + [path]:
            if module not in self.trees:
                continue
            for node in self.trees[module].body:
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and any(
                    "fixture" in ast.unparse(d) for d in node.decorator_list
                ):
                    found[node.name] = (module, node)
        return found


def gates(modules: SuiteModules) -> tuple[list[Gate], list[str]]:
    """Every test of the suites with what it sends and what its module declares it compares; and
    the problems with those declarations."""
    found, problems = [], []
    for path, tree in modules.trees.items():
        if not path.name.startswith("test_"):
            continue
        declared = _declared(tree)
        fixtures = modules.fixtures(path)
        tests = {
            node.name: node
            for node in tree.body
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            and node.name.startswith("test_")
        }
        for name in set(declared) - set(tests):
            problems.append(
                f"{path.relative_to(SUITES)}: COMPARES names {name}, which is not a test"
            )
        for name, node in tests.items():
            args = _fixture_closure(node, fixtures)
            if args & SERVER_FIXTURES["both"]:
                frameworks = {"vllm", "sglang"}
            elif args & SERVER_FIXTURES["sglang"]:
                frameworks = {"sglang"}
            else:
                frameworks = {"vllm"}
            gate = Gate(
                f"{path.relative_to(SUITES)}::{name}",
                frameworks,
                modules.words(path, node, fixtures),
            )
            gate.compares = set(declared.get(name, ()))
            for param in gate.compares - gate.sends:
                problems.append(
                    f"{gate.nodeid}: declared to compare {param!r}, which it never sends"
                )
            found.append(gate)
    return found, problems


def _fixture_closure(node, fixtures: dict[str, tuple[Path, ast.AST]]) -> set[str]:
    """The fixtures a test asks for, with those they ask for in turn (the suites' own; a module's
    `client` follows its `module_server`, which may be the framework's `server`)."""
    names: set[str] = set()
    pending = [a.arg for a in node.args.args]
    while pending:
        name = pending.pop()
        if name in names:
            continue
        names.add(name)
        if name in fixtures:
            pending.extend(a.arg for a in fixtures[name][1].args.args if a.arg != "request")
    return names


def _declared(tree: ast.Module) -> dict[str, list[str]]:
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "COMPARES" for t in node.targets
        ):
            return ast.literal_eval(node.value)
    return {}


def listed(framework: str, kind: str) -> dict[str, str]:
    """parameter -> reason, for this framework: `gap` (no gate compares it) or `fails` (its gate is
    an expected failure there)."""
    data = tomllib.loads(GAPS_FILE.read_text())
    found = {}
    for group in data.get(kind, []):
        for name in group.get("both", []) + group.get(framework, []):
            found[name] = group["reason"]
    return found


def report(
    framework: str, version: str, params: dict[str, list[str]], all_gates: list[Gate]
) -> int:
    """Print the framework's table; return the number of problems."""
    gaps, fails = listed(framework, "gap"), listed(framework, "fails")
    mine = [g for g in all_gates if framework in g.frameworks]
    counts = {s: sum(s in sources for sources in params.values()) for s in SOURCES}
    print(
        f"== {framework} {version}: {len(params)} request parameters ("
        + ", ".join(f"{SOURCES[s]} {n}" for s, n in counts.items())
        + "; where: S C H)"
    )
    tally: dict[str, int] = defaultdict(int)
    problems = 0
    for name in sorted(params):
        names = {name, SGLANG_ALIASES.get(name, name)} if framework == "sglang" else {name}
        compared = sorted(g.nodeid for g in mine if g.compares & names)
        sent = [g for g in mine if g.sends & names and not g.compares & names]
        where = "".join(s if s in params[name] else "." for s in SOURCES)
        if compared:
            status = "xfail" if name in fails else "compared"
            detail = _list(compared) + (
                f" -- expected to fail here: {fails[name]}" if name in fails else ""
            )
            if name in gaps:
                status, problems = "STALE GAP", problems + 1
                detail += f" (listed as a gap: {gaps[name]})"
        elif name in fails:
            status, problems = "STALE", problems + 1
            detail = f"listed as an expected failure, but no gate compares it: {fails[name]}"
        elif name in gaps:
            status = "gap"
            detail = gaps[name] + (f" [sent by {len(sent)} gates]" if sent else "")
        else:
            status, problems = "UNCOVERED", problems + 1
            detail = f"sent by {len(sent)} gates, compared by none" if sent else "no gate sends it"
        tally[status] += 1
        print(f"  {name:34} {where} {status:9} {detail}")
    print(
        f"   {framework}: "
        + ", ".join(f"{n} {s}" for s, n in sorted(tally.items()))
        + f" of {len(params)}"
    )
    return problems


def _list(nodeids: list[str]) -> str:
    tests = sorted({n.split("::")[1] for n in nodeids})
    shown = "; ".join(tests[:3])
    return shown + (f" (+{len(tests) - 3})" if len(tests) > 3 else "")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--framework", choices=("vllm", "sglang"), action="append")
    args = parser.parse_args()
    all_gates, problems = gates(SuiteModules(SUITES))
    for problem in problems:
        print(f"DECLARATION: {problem}")
    total = len(problems)
    for framework in args.framework or ("vllm", "sglang"):
        found = surface(framework)
        if found is None:
            print(f"== {framework}: not installed here, its surface is not listed")
            continue
        total += report(framework, *found, all_gates)
    print(f"request surface: {'complete' if not total else f'{total} problems'}")
    return 1 if total else 0


if __name__ == "__main__":
    sys.exit(main())
