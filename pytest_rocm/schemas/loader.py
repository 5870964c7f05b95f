"""The strict loader of results artifacts (gate report, manifest, parity report): what a reader may
believe.

Everything a job that ran a PR's code wrote is untrusted input (docs/architecture.md, "Threat
model"). A reader gets a document only after: it is a plain file (not a link, folder or device)
under a size cap, valid UTF-8 JSON with no NaN or Infinity, nested no deeper than MAX_DEPTH, and
valid against its published JSON Schema, which types every field the readers use. Anything else is
an `ArtifactError` naming the file and the field, so a command says what is wrong (exit 2) instead
of failing with a traceback halfway through.
"""

from __future__ import annotations

import json
import math
import stat
from pathlib import Path
from typing import Any

from pytest_rocm.errors import BadInput
from pytest_rocm.schemas.artifacts import schema_error

__all__ = [
    "ArtifactError",
    "MAX_DEPTH",
    "MAX_FILE_BYTES",
    "check_document",
    "load_artifact",
    "read_json_file",
]

MAX_FILE_BYTES = 64 * 1024 * 1024  # a gate report of 100,000 tests is about 40 MB
MAX_DEPTH = 64  # the artifacts nest about 8 deep; the JSON Schema validator recurses per level


class ArtifactError(BadInput):
    """An artifact that cannot be believed; the message names the file and what is wrong."""


def _reject_constant(name: str):
    raise ValueError(f"{name} is not a JSON number")


def _depth_over(data: Any, limit: int) -> bool:
    """Whether `data` nests deeper than `limit` (iteratively: a recursive walk would fail the way it
    guards)."""
    stack = [(data, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > limit:
            return True
        if isinstance(node, dict):
            stack.extend((value, depth + 1) for value in node.values())
        elif isinstance(node, list):
            stack.extend((value, depth + 1) for value in node)
    return False


def _finite(node: Any) -> bool:
    return not isinstance(node, float) or math.isfinite(node)


def parse(raw: bytes, where: str) -> Any:
    """JSON from untrusted bytes, bounded in nesting, without NaN or Infinity."""
    try:
        data = json.loads(raw.decode("utf-8"), parse_constant=_reject_constant)
    except UnicodeDecodeError as exc:
        raise ArtifactError(f"{where}: not UTF-8 text (byte {exc.start})") from None
    except RecursionError:
        raise ArtifactError(f"{where}: JSON nested too deep (at most {MAX_DEPTH} levels)") from None
    except ValueError as exc:
        raise ArtifactError(f"{where}: not JSON ({str(exc)[:200]})") from None
    if _depth_over(data, MAX_DEPTH):
        raise ArtifactError(f"{where}: JSON nested deeper than {MAX_DEPTH} levels")
    # 1e999 parses as inf without parse_constant
    if any(not _finite(value) for value in _leaves(data)):
        raise ArtifactError(f"{where}: a number that is not finite")
    return data


def _leaves(data: Any):
    stack = [data]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
        else:
            yield node


def check_document(data: Any, kind: str, where: str) -> dict:
    """`data` if it is a valid `kind` document, else ArtifactError naming `where` and the field."""
    try:
        problem = schema_error(data, kind)
    except RecursionError:
        raise ArtifactError(f"{where}: nested too deep to validate") from None
    if problem is not None:
        raise ArtifactError(f"{where}: not a valid {kind} artifact at {problem[0]}: {problem[1]}")
    return data


def load_artifact(path: str | Path, kind: str, max_bytes: int = MAX_FILE_BYTES) -> dict:
    """The `kind` document in `path` (record, gate-report, manifest, parity), checked as the module
    says."""
    return check_document(read_json_file(path, max_bytes), kind, str(path))


def read_json_file(path: str | Path, max_bytes: int = MAX_FILE_BYTES) -> Any:
    """The JSON in `path`, a plain file under `max_bytes`, parsed as `parse` does; not yet checked
    against a schema (for a reader that learns the kind from the document, such as
    `rocm-gate drain`)."""
    path = Path(path)
    try:
        info = path.lstat()
    except OSError as exc:
        raise ArtifactError(f"{path}: cannot read it ({exc.strerror or exc})") from None
    if not stat.S_ISREG(info.st_mode):
        raise ArtifactError(f"{path}: not a plain file (a link, folder or device is refused)")
    if info.st_size > max_bytes:
        raise ArtifactError(
            f"{path}: {info.st_size:,} bytes, over the {max_bytes:,}-byte cap for one artifact"
        )
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ArtifactError(f"{path}: cannot read it ({exc.strerror or exc})") from None
    return parse(raw, str(path))
