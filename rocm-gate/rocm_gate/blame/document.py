"""base-check.json: what the base experiment found, as one document (its JSON Schema:
pytest_rocm/schemas/base-check.schema.json), every string bounded, written whole (a temporary file,
then a rename) after it was checked against its own schema.
"""

from __future__ import annotations

from pathlib import Path

from pytest_rocm.schemas.artifacts import schema, schema_error, write_json_atomic

__all__ = ["BASE_CHECK_SCHEMA", "FILE_NAME", "MAX_TESTS_LISTED", "on_base", "write"]

BASE_CHECK_SCHEMA = schema("base-check")
FILE_NAME = "base-check.json"
MAX_TESTS_LISTED = 5000  # the schema's maxProperties: the rest are counted in `left_out`
# field -> the most characters it keeps (the schema's maxLength)
LIMITS = {"base_from": 500, "why": 2000, "not_run": 2000, "command": 2000, "tail": 4000}
MAX_NODEID = 4000
MAX_ARGS = 100
MAX_ARG = 1000


def _cut(text: str | None, limit: int) -> str | None:
    if text is None:
        return None
    text = str(text)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def on_base(attempts: list[dict]) -> str:
    """The attempts in one word (the schema's `on_base`). A failure with an infrastructure
    signature is evidence of neither (the runner's, maybe); an attempt its own process judged
    `flaky` (it failed, then passed on that process's rerun under the rules' reruns) is both."""
    outcomes = [a["outcome"] for a in attempts]
    failed = sum(
        a["outcome"] in ("failed", "error", "crashed") and not a.get("signature") for a in attempts
    )
    passed = outcomes.count("passed") + sum(a.get("verdict") == "flaky" for a in attempts)
    if "absent" in outcomes:
        return "absent"
    if failed and passed:
        return "mixed"
    if failed:
        return "fails"
    if passed:
        return "passes"
    if outcomes and all(o == "skipped" for o in outcomes):
        return "skipped"
    return "unknown"


def _test(entry: dict) -> dict:
    attempts = [
        {
            **a,
            "fingerprint": _cut(a.get("fingerprint"), 1000),
            "seconds": min(max(float(a.get("seconds") or 0.0), 0.0), 1e6),
        }
        for a in entry["attempts"][:10]
    ]
    return {
        "attempts": attempts,
        "not_run": _cut(entry.get("not_run"), LIMITS["not_run"]),
        "on_base": on_base(attempts),
    }


def build(fields: dict, tests: dict[str, dict]) -> dict:
    """The document: `fields` (base_sha, base_from, tested_sha, prepared, why, install, budget_s,
    used_s, attempts_per_test, pytest_args, started) and each test's attempts, bounded."""
    install = fields.get("install")
    if install is not None:
        install = {
            "command": _cut(install["command"], LIMITS["command"]),
            "exit": install["exit"],
            "seconds": round(min(max(install["seconds"], 0.0), 1e6), 3),
            "tail": _cut(install["tail"], LIMITS["tail"]),
        }
    names = [n for n in tests if len(n) <= MAX_NODEID][:MAX_TESTS_LISTED]
    document = {
        "schema": BASE_CHECK_SCHEMA,
        **fields,
        "base_from": _cut(fields["base_from"], LIMITS["base_from"]),
        "why": _cut(fields.get("why"), LIMITS["why"]),
        "install": install,
        "budget_s": round(min(max(fields["budget_s"], 0.0), 1e6), 3),
        "used_s": round(min(max(fields["used_s"], 0.0), 1e6), 3),
        "pytest_args": [_cut(a, MAX_ARG) for a in fields["pytest_args"][:MAX_ARGS]],
        "tests": {n: _test(tests[n]) for n in names},
    }
    if len(names) < len(tests):
        document["left_out"] = len(tests) - len(names)
    return document


def write(folder: Path, document: dict) -> Path:
    """Check `document` against its schema, then write it whole into `folder`."""
    problem = schema_error(document, "base-check")
    if problem is not None:
        raise RuntimeError(
            f"the base check does not meet its own schema at {problem[0]}: {problem[1]} (a bug)"
        )
    return write_json_atomic(Path(folder) / FILE_NAME, document)
