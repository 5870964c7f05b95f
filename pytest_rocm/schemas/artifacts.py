"""The JSON artifacts: their schema names and published JSON Schemas, checking a document against
one, the stack a manifest names (for the readers of artifacts: publish, history), and writes that
never leave a file half-written (a temporary file, then a rename; docs/architecture.md,
"Artifacts")."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

# <kind>.schema.json: the JSON Schema of each artifact
SCHEMA_FILES = Path(__file__).resolve().parent


def schema(kind: str, version: int = 1) -> str:
    return f"pytest-rocm/{kind}/{version}"


GATE_REPORT_SCHEMA = schema("gate-report")
# a gate report test's status: of its last attempt (gate-report.schema.json)
STATUSES = (
    "passed",
    "failed",
    "error",
    "crashed",
    "interrupted",
    "skipped",
    "xfailed",
    "xpassed",
    "known_gap",
    "not_applicable",
)


def schema_document(kind: str) -> dict:
    """The published JSON Schema of an artifact kind (record, gate-report, manifest, parity)."""
    return json.loads((SCHEMA_FILES / f"{kind}.schema.json").read_text(encoding="utf-8"))


def schema_error(data: Any, kind: str) -> tuple[str, str] | None:
    """(where, what) of the most relevant way `data` breaks the published schema of `kind`, or None
    when valid. `where` is the path in the document ("(top level)" for the root)."""
    import jsonschema  # only readers of untrusted artifacts need it

    error = jsonschema.exceptions.best_match(
        jsonschema.Draft202012Validator(schema_document(kind)).iter_errors(data)
    )
    if error is None:
        return None
    return "/".join(str(p) for p in error.absolute_path) or "(top level)", error.message[:300]


def manifest_stack(manifest: dict) -> dict:
    """The pinned stack a run manifest names: vendor, SKUs and GPU count, ROCm/HIP and CUDA, driver,
    torch, the framework packages (vllm*, sglang*), the container image."""
    platform = manifest.get("platform") or {}
    versions = platform.get("versions") or {}
    packages = manifest.get("packages") or {}
    gpus = platform.get("gpus") or []
    framework = ", ".join(
        f"{name} {packages[name]}"
        for name in sorted(packages)
        if name.split("-")[0] in ("vllm", "sglang")
    )
    return {
        "vendor": platform.get("vendor") or "unknown",
        "description": platform.get("description"),
        "skus": sorted({g.get("sku") or g.get("arch") or "?" for g in gpus}),
        "gpu_count": len(gpus),
        "rocm": versions.get("rocm") or versions.get("hip"),
        "cuda": versions.get("cuda"),
        "driver": versions.get("driver"),
        "torch": packages.get("torch") or versions.get("torch"),
        "framework": framework or None,
        "image": manifest.get("container_image"),
    }


def write_json_atomic(path: str | Path, data: Any) -> Path:
    # One compact line: json's C encoder only runs without `indent`, and a gate report of
    # thousands of tests took a quarter of a second with it. `python -m json.tool` pretty-prints.
    return write_text_atomic(
        path, json.dumps(data, ensure_ascii=False, separators=(",", ":")) + "\n"
    )


def write_text_atomic(path: str | Path, text: str) -> Path:
    """Write the whole text or nothing: a temporary file beside it, synced, then renamed over it
    (line endings kept as given)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "w", encoding="utf-8", newline="") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        # a failed write (disk full, the path is a folder) leaves no half file
        tmp.unlink(missing_ok=True)
        raise
    return path


def blocking_failures(tests: dict[str, dict]) -> list[str]:
    """The tests of a gate report whose failure makes its conclusion `failure`
    (results/conclusion.py): blocking gates that regressed, and blocking gates that failed, were
    never rerun and carry no infrastructure signature. Here, with the artifact, so readers that may
    not import the plugin (github/, trunk/) apply the same rule."""
    return sorted(
        n
        for n, t in tests.items()
        if t["blocking"]
        and (
            t["verdict"] == "regression"
            or (
                t["verdict"] == "unconfirmed" and not any(a.get("signature") for a in t["attempts"])
            )
        )
    )


def describe_reference(side: dict) -> str:
    """A parity report's reference (`inputs.reference`) as a reader must see it: its label, SKU,
    commit and date; each one the report does not record is said to be missing."""
    commit = side.get("commit") if isinstance(side.get("commit"), str) else None
    date = side.get("date") if isinstance(side.get("date"), str) else None
    parts = [
        str(side.get("sku") or "SKU not recorded"),
        f"commit {commit[:12]}" if commit else "commit not recorded",
        date[:19] if date else "date not recorded",
    ]
    return f"{side.get('label') or 'reference'} ({', '.join(parts)})"
