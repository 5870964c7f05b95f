"""The JSON artifacts: their schema names and published JSON Schemas, and writes that never leave a file
half-written (a temporary file, then a rename; DESIGN section 5)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

SCHEMA_FILES = Path(__file__).resolve().parent  # <kind>.schema.json: the JSON Schema of each artifact


def schema(kind: str, version: int = 1) -> str:
    return f"pytest-rocm/{kind}/{version}"


def schema_document(kind: str) -> dict:
    """The published JSON Schema of an artifact kind (record, gate-report, manifest, parity)."""
    return json.loads((SCHEMA_FILES / f"{kind}.schema.json").read_text(encoding="utf-8"))


def write_json_atomic(path: str | Path, data: Any) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    # One compact line: json's C encoder only runs without `indent`, and a gate report of
    # thousands of tests took a quarter of a second with it. `python -m json.tool` pretty-prints.
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":")) + "\n"
    with open(tmp, "w", encoding="utf-8") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)
    return path
