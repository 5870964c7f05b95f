"""SGLang's CI registrations as written: the `register_<backend>_ci(...)` calls of each file under
`test/registered/`, read with `ast` from a checkout (never importing the files) or from a JSONL of the same
calls (`{"path": ..., "registrations": {"cuda": [{...}], "amd": [{...}]}}`), with each suite's stage and GPU
count. What a test tree holds, as catalog/sources.py reads it; parity/sglang_registry.py makes declared
parity of it, scheduling the jobs.
"""

from __future__ import annotations

import ast
import json
import re
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from pytest_rocm.errors import BadInput

REGISTER_CALL = re.compile(r"^register_(\w+)_ci$")
# register_<backend>_ci(est_time, suite, ...)
POSITIONAL = ("est_time", "suite", "nightly", "disabled")
_GPUS = re.compile(r"(\d+)-gpu")


class RegistryError(BadInput):
    pass


@dataclass
class RegisteredFile:
    path: str
    registrations: dict[str, list[dict]] = field(default_factory=dict)  # backend -> calls

    def __post_init__(self):
        for calls in self.registrations.values():
            for call in calls:
                with_suite(call)

    def enabled(self, backend: str) -> list[dict]:
        return [r for r in self.registrations.get(backend, []) if not r.get("disabled")]


def with_suite(call: dict) -> dict:
    """A call of the newer form names its suite by `stage` and `runner_config` (keyword-only;
    `suite` optional): SGLang's `CIRegistry.effective_suite` is `{stage}-test-{runner_config}` when
    both are given, else `suite`. Set as `suite`, which every reader here uses."""
    stage, runner = call.get("stage"), call.get("runner_config")
    if isinstance(stage, str) and isinstance(runner, str) and stage and runner:
        call["suite"] = f"{stage}-test-{runner}"
    return call


def _value(node: ast.expr):
    try:
        return ast.literal_eval(node)
    except ValueError:
        return ast.unparse(node)  # a name or expression: keep its text


def calls_in_source(source: str, filename: str) -> dict[str, list[dict]]:
    try:
        tree = ast.parse(source, filename=filename)
    except SyntaxError as exc:
        raise RegistryError(f"{filename}:{exc.lineno}: not valid Python ({exc.msg})") from exc
    found: dict[str, list[dict]] = defaultdict(list)
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        name = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", "")
        match = REGISTER_CALL.match(name or "")
        if not match:
            continue
        args = {POSITIONAL[i]: _value(a) for i, a in enumerate(node.args[: len(POSITIONAL)])}
        args.update({k.arg: _value(k.value) for k in node.keywords if k.arg})
        found[match.group(1)].append(args)
    return dict(found)


def read_checkout(root: Path) -> list[RegisteredFile]:
    """Every file under `test/registered/` of an SGLang checkout (or that folder itself)."""
    base = root / "test" / "registered" if (root / "test" / "registered").is_dir() else root
    if not base.is_dir():
        raise RegistryError(
            f"{root}: neither an SGLang checkout (no test/registered/) nor a folder"
        )
    files = []
    for path in sorted(base.rglob("*.py")):
        relative = (
            path.relative_to(base.parent.parent)
            if base.name == "registered"
            else path.relative_to(base)
        )
        try:
            source = path.read_bytes().decode("utf-8")
        except UnicodeDecodeError as exc:
            raise RegistryError(
                f"{path}: not UTF-8 text (byte {exc.object[exc.start]:#04x} at offset {exc.start})"
            ) from None
        files.append(RegisteredFile(str(relative), calls_in_source(source, str(path))))
    return files


def read_jsonl(path: Path) -> list[RegisteredFile]:
    files = []
    for number, raw in enumerate(path.read_bytes().splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            row = json.loads(raw.decode("utf-8"))
            registrations = row.get("registrations", {})
            if (
                not isinstance(row["path"], str)
                or not isinstance(registrations, dict)
                or not all(
                    isinstance(calls, list) and all(isinstance(c, dict) for c in calls)
                    for calls in registrations.values()
                )
            ):
                raise TypeError(
                    "`path` must be a string and `registrations` an object of backend -> list of calls"
                )
            files.append(RegisteredFile(row["path"], registrations))
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise RegistryError(f"{path}:{number}: not a registration line ({exc})") from None
    return files


def read_registry(source: str | Path) -> list[RegisteredFile]:
    source = Path(source)
    if source.is_file():
        return read_jsonl(source)
    if source.is_dir():
        return read_checkout(source)
    raise RegistryError(f"{source}: no such file or folder")


def stage_of(suite: str, call: dict | None = None) -> str:
    """The CI stage of a suite; a call of the newer form names its own (`stage`)."""
    if call and isinstance(call.get("stage"), str) and call.get("runner_config"):
        return call["stage"]
    for stage in ("stage-a", "stage-b", "stage-c", "nightly", "weekly", "stress", "per-commit"):
        if suite.startswith(stage):
            return stage
    return "other"


def gpus_of(suite: str) -> int:
    match = _GPUS.search(suite)
    return int(match.group(1)) if match else 1
