"""Measured test durations per platform, kept between runs: what the scheduler and `rocm-gate shard`
expect.

The store is one JSON file::

    {"schema": "pytest-rocm/durations/1",
     "platforms": {"MI300X": {"tests/x.py::test_a": [41.2, 39.8, 40.5]}}}

keeping the last `KEEP` measured durations (setup, call and teardown together) per test and platform
key; the expected duration is their median. A missing, unreadable or foreign store means "no
durations known", never an error: the run goes on with the fallback, and `problem` says why.

Fallback for a test never measured on this platform: the median of the measured tests of its file,
else of all measured tests, else `DEFAULT_SECONDS` (every test alike: longest first then keeps the
collection order).
"""

from __future__ import annotations

import json
import statistics
from collections import defaultdict
from pathlib import Path

from pytest_rocm.schemas.artifacts import write_json_atomic

SCHEMA = "pytest-rocm/durations/1"
KEEP = 5
DEFAULT_SECONDS = 1.0


class DurationStore:
    def __init__(
        self,
        path: Path | None,
        platforms: dict[str, dict[str, list[float]]] | None = None,
        problem: str | None = None,
    ):
        self.path = path
        self.platforms = platforms or {}
        self.problem = problem

    @classmethod
    def load(cls, path: Path | None) -> DurationStore:
        if path is None or not path.exists():
            return cls(path)
        try:
            data = json.loads(path.read_bytes().decode("utf-8"))
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            return cls(
                path,
                problem=f"duration store {path} is unreadable ({exc}); durations are unknown this run",
            )
        if (
            not isinstance(data, dict)
            or data.get("schema") != SCHEMA
            or not isinstance(data.get("platforms"), dict)
        ):
            return cls(
                path,
                problem=f"duration store {path} is not a {SCHEMA} file; durations are unknown this run",
            )
        platforms = {}
        for key, tests in data["platforms"].items():
            if isinstance(tests, dict):
                platforms[key] = {
                    nodeid: [float(s) for s in samples if isinstance(s, (int, float)) and s >= 0]
                    for nodeid, samples in tests.items()
                    if isinstance(samples, list)
                }
        return cls(path, platforms)

    def expected(self, platform_key: str):
        """nodeid -> expected seconds on this platform (with the stated fallback)."""
        measured = {
            nodeid: statistics.median(samples)
            for nodeid, samples in self.platforms.get(platform_key, {}).items()
            if samples
        }
        by_file: dict[str, list[float]] = defaultdict(list)
        for nodeid, seconds in measured.items():
            by_file[nodeid.partition("::")[0]].append(seconds)
        file_median = {path: statistics.median(values) for path, values in by_file.items()}
        overall = statistics.median(measured.values()) if measured else DEFAULT_SECONDS

        def seconds(nodeid: str) -> float:
            if nodeid in measured:
                return measured[nodeid]
            return file_median.get(nodeid.partition("::")[0], overall)

        return seconds

    def add(self, platform_key: str, durations: dict[str, float]) -> None:
        tests = self.platforms.setdefault(platform_key, {})
        for nodeid, seconds in durations.items():
            tests[nodeid] = (tests.get(nodeid, []) + [round(seconds, 3)])[-KEEP:]

    def save(self) -> None:
        """Atomically: a reader never sees half a file."""
        if self.path is not None:
            write_json_atomic(self.path, {"schema": SCHEMA, "platforms": self.platforms})


def add_run(path: Path, platform_key: str, durations: dict[str, float]) -> None:
    """Add one run's durations to the store at `path`. Two runs that end at once on one store both
    count: the read, the addition and the write happen under a lock file beside the store."""
    from filelock import FileLock

    path.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(path.with_name(f".{path.name}.lock")), timeout=60):
        store = DurationStore.load(path)
        store.add(platform_key, durations)
        store.save()


def durations_from_records(records: list[dict]) -> dict[str, float]:
    """Each test's duration in a run: setup, call and teardown of its first attempt (a rerun's is
    not what the scheduler plans for), less the time it waited for its GPUs, from the records. A
    crashed attempt has no complete duration and is left out."""
    from pytest_rocm.results.records import PLAIN_PASS, WHENS, split_attempts

    phases: dict[str, list[dict]] = defaultdict(list)
    for record in records:
        if "kind" not in record and record.get("when") in WHENS:
            phases[record["nodeid"]].append(record)
    durations = {}
    for nodeid, ordered in phases.items():
        first = split_attempts(ordered)[0]
        if any(r.get("crashed") for r in first) or not all(
            isinstance(r.get("duration"), (int, float)) or "durations" in r for r in first
        ):
            continue
        # the time its GPUs were held by other tests is the schedule's, not the test's
        phases = (
            d
            for r in first
            for d in (
                r["durations"]
                if r["when"] == PLAIN_PASS
                else (r["duration"] - r.get("gpu_wait_s", 0.0),)
            )
        )
        durations[nodeid] = max(sum(phases), 0.0)
    return durations
