"""Measured test durations per platform, kept between runs: what the scheduler and `rocm-gate shard`
expect.

The store is one JSON file::

    {"schema": "pytest-rocm/durations/2",
     "platforms": {"MI300X": {"tests/x.py::test_a": [41.2, 39.8, 40.5]}},
     "server_starts": {"MI300X": {"tests/x.py": [310.0, 295.5]}}}

keeping the last `KEEP` measured durations per test and platform key (setup, call and teardown
together, less the time the test waited for GPUs or for servers to start), and apart from them the
seconds each module's servers took to start (`server_starts`: a real model's weights load for minutes
on a GPU runner, and the module pays that once, whichever of its tests comes first); expected values
are medians. The scheduler counts a module's server starts into its first test, so a module's
expected time is its tests plus its starts. A missing, unreadable or foreign store means "no
durations known", never an error: the run goes on with the fallback, and `problem` says why. A
`durations/1` store (no server starts) is read as one.

Fallback for a test never measured on this platform: the median of the measured tests of its file,
else of all measured tests, else `DEFAULT_SECONDS` (every test alike: longest first then keeps the
collection order). A module whose servers were never measured starts in no time.
"""

from __future__ import annotations

import json
import math
import statistics
from collections import defaultdict
from pathlib import Path

from pytest_rocm.schemas.artifacts import write_json_atomic

SCHEMA = "pytest-rocm/durations/2"
READABLE = (SCHEMA, "pytest-rocm/durations/1")
KEEP = 5
DEFAULT_SECONDS = 1.0


class DurationStore:
    def __init__(
        self,
        path: Path | None,
        platforms: dict[str, dict[str, list[float]]] | None = None,
        problem: str | None = None,
        server_starts: dict[str, dict[str, list[float]]] | None = None,
    ):
        self.path = path
        self.platforms = platforms or {}
        self.problem = problem
        self.server_starts = server_starts or {}  # platform -> module -> seconds its servers took

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
            or data.get("schema") not in READABLE
            or not isinstance(data.get("platforms"), dict)
        ):
            return cls(
                path,
                problem=f"duration store {path} is not a {SCHEMA} file; durations are unknown this run",
            )
        starts = data.get("server_starts")
        return cls(
            path,
            _samples(data["platforms"]),
            server_starts=_samples(starts if isinstance(starts, dict) else {}),
        )

    def measured(self, platform_key: str) -> dict[str, float]:
        """nodeid -> the median of its measured seconds on this platform (measured tests only)."""
        return {
            nodeid: statistics.median(samples)
            for nodeid, samples in self.platforms.get(platform_key, {}).items()
            if samples
        }

    def expected(self, platform_key: str):
        """nodeid -> expected seconds on this platform (with the stated fallback)."""
        measured = self.measured(platform_key)
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

    def module_starts(self, platform_key: str):
        """module -> expected seconds its servers take to start on this platform (0 if never
        measured)."""
        measured = {
            module: statistics.median(samples)
            for module, samples in self.server_starts.get(platform_key, {}).items()
            if samples
        }
        return lambda module: measured.get(module, 0.0)

    def add(
        self,
        platform_key: str,
        durations: dict[str, float],
        server_starts: dict[str, float] | None = None,
    ) -> None:
        for kept, measured in (
            (self.platforms, durations),
            (self.server_starts, server_starts or {}),
        ):
            table = kept.setdefault(platform_key, {})
            for name, seconds in measured.items():
                table[name] = (table.get(name, []) + [round(seconds, 3)])[-KEEP:]

    def save(self) -> None:
        """Atomically: a reader never sees half a file."""
        if self.path is not None:
            write_json_atomic(
                self.path,
                {
                    "schema": SCHEMA,
                    "platforms": self.platforms,
                    "server_starts": self.server_starts,
                },
            )


def _samples(table: dict) -> dict[str, dict[str, list[float]]]:
    """The well-formed part of a stored {platform: {name: [seconds, ...]}} table: numbers of
    seconds, finite and not negative (a hand-edited store's `true`, `Infinity` or a 400-digit
    integer is left out, never an error)."""
    return {
        key: {
            name: [seconds for s in samples if (seconds := _seconds(s)) is not None]
            for name, samples in entries.items()
            if isinstance(samples, list)
        }
        for key, entries in table.items()
        if isinstance(entries, dict)
    }


def _seconds(value) -> float | None:
    if type(value) not in (int, float):  # bool is an int subclass: not seconds
        return None
    try:
        seconds = float(value)
    except OverflowError:
        return None
    return seconds if math.isfinite(seconds) and seconds >= 0 else None


def add_run(
    path: Path,
    platform_key: str,
    durations: dict[str, float],
    server_starts: dict[str, float] | None = None,
) -> None:
    """Add one run's durations (and its modules' server starts) to the store at `path`. Two runs
    that end at once on one store both count: the read, the addition and the write happen under a
    lock file beside the store."""
    from filelock import FileLock

    path.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(path.with_name(f".{path.name}.lock")), timeout=60):
        store = DurationStore.load(path)
        store.add(platform_key, durations, server_starts)
        store.save()


def server_starts_from_records(records: list[dict]) -> dict[str, float]:
    """Each module's server start-up seconds in a run: the servers its fixtures and tests asked for
    (by the server records' node ids), started on demand or ahead, that became healthy."""
    starts: dict[str, float] = defaultdict(float)
    for record in records:
        if record.get("kind") != "server" or not record.get("nodeid"):
            continue
        seconds = record.get("healthy_after_s")
        if isinstance(seconds, (int, float)) and not isinstance(seconds, bool) and seconds >= 0:
            starts[record["nodeid"].split("::", 1)[0]] += seconds
    return dict(starts)


def durations_from_records(records: list[dict]) -> dict[str, float]:
    """Each test's duration in a run: setup, call and teardown of its first attempt (a rerun's is
    not what the scheduler plans for), less the time it waited for its GPUs and for servers to
    start (kept apart: `server_starts_from_records`), from the records (of any version: a plain
    pass's one record holds its phases' durations). A crashed attempt has no complete duration and
    is left out."""
    from pytest_rocm.results.records import COMBINED, WHENS, split_attempts

    phases: dict[str, list[dict]] = defaultdict(list)
    for record in records:
        if "kind" not in record and record.get("when") in WHENS:
            phases[record["nodeid"]].append(record)
    durations = {}
    for nodeid, ordered in phases.items():
        first = split_attempts(ordered)[0]
        if any(r.get("crashed") for r in first) or not all(
            isinstance(r.get("duration"), (int, float)) or r["when"] in COMBINED for r in first
        ):
            continue
        # the time its GPUs were held by other tests is the schedule's, not the test's; the time
        # its servers took to start is its module's (kept apart)
        # phase by phase, in order: the same float from a plain pass's one record as from a record
        # per phase (a plain pass waited for nothing)
        seconds = sum(
            phase
            for r in first
            for phase in (
                r["durations"]
                if r["when"] in COMBINED
                else (r["duration"] - r.get("gpu_wait_s", 0.0) - r.get("server_wait_s", 0.0),)
            )
        )
        durations[nodeid] = max(seconds, 0.0)
    return durations
