"""Crash-safe per-process records: one JSON line per test outcome, appended and flushed as it
happens.

Every process (the controller and each xdist worker) writes its own
`records-<worker>.jsonl`, so no two processes share a file and a process that
dies loses nothing it already wrote (at worst one half-written last line,
which the reader reports and skips).

A test's setup is written when pytest reports it, so a run killed in a test's
body still names the test it was running. Where the call and the teardown then
pass with nothing to add (no GPUs, no measurements, no xfail: most tests), they
are one record, `when: "call+teardown"` with both `durations`, written at the
teardown; otherwise each phase is its own record (docs/architecture.md,
"Artifacts"). Records of schema `record/1` (a record per phase for every test)
are read the same way.
"""

from __future__ import annotations

import errno
import json
import os
import stat
import time
from dataclasses import dataclass, field
from pathlib import Path

from pytest_rocm.schemas.artifacts import schema

RECORD_SCHEMA = schema("record", 2)
# an earlier version's records (a phase record for every phase): read as they are
READ_SCHEMAS = frozenset({schema("record", 1), RECORD_SCHEMA})
# the `when` of a test's call and teardown that both passed with nothing to add, in one record
PLAIN_PASS = "call+teardown"
FAILURE_HEAD_CHARS = 4000
OUTPUT_TAIL_CHARS = 4000


class RecordWriter:
    def __init__(self, directory: Path, worker: str):
        directory.mkdir(parents=True, exist_ok=True)
        self.path = directory / f"records-{worker}.jsonl"
        self.worker = worker
        # One os.write per record on an O_APPEND descriptor: the line reaches the OS before the
        # next test starts, with no Python-level buffer that a dying process would lose.
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self._common = "," + json.dumps({"schema": RECORD_SCHEMA, "worker": worker})[1:-1]

    def write(self, record: dict, encoded_extra: str = "") -> None:
        """Append one record. `encoded_extra` is fields already encoded as JSON (',"k":v,...'): a
        test's fixed fields are encoded once, not for each of its phases (this runs 3 times per
        test)."""
        record["t"] = round(time.time(), 6)  # orders records of several processes into attempts
        body = json.dumps(record, separators=(",", ":"), ensure_ascii=False, default=str)
        self.write_encoded(body[:-1] + self._common + encoded_extra + "}\n")

    def write_phase(
        self,
        encoded_nodeid: str,
        when: str,
        duration: float,
        t: float,
        encoded_extra: str,
    ) -> None:
        """A phase that passed with nothing else to say, formatted directly; `t` is when pytest
        reported it."""
        os.write(
            self._fd,
            (
                f'{{"nodeid":{encoded_nodeid},"when":"{when}","outcome":"passed",'
                f'"duration":{duration:.6f},"t":{t:.6f}{self._common}{encoded_extra}}}\n'
            ).encode(),
        )

    def write_plain_pass(
        self, encoded_nodeid: str, call: float, teardown: float, encoded_extra: str
    ) -> None:
        """The one record of a test's call and teardown that both passed with nothing to add."""
        os.write(
            self._fd,
            (
                f'{{"nodeid":{encoded_nodeid},"when":"{PLAIN_PASS}","outcome":"passed",'
                f'"durations":[{call:.6f},{teardown:.6f}],"t":{time.time():.6f}'
                f"{self._common}{encoded_extra}}}\n"
            ).encode(),
        )

    def write_encoded(self, line: str) -> None:
        os.write(self._fd, line.encode("utf-8"))

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


@dataclass
class LoadedRecords:
    records: list[dict] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # unreadable lines, named by file and line
    files: list[str] = field(default_factory=list)
    # records-*.jsonl names that are no records file (a folder, a link that loops or leads nowhere):
    # each names the path and the fix; also in `problems`, so a run's own report says it
    unreadable: list[str] = field(default_factory=list)


def record_files(directory: Path) -> list[Path]:
    return sorted(directory.glob("records-*.jsonl"))


def clear_records(directory: Path) -> None:
    """Start a run with no records of an earlier run in the same folder."""
    for path in record_files(directory):
        path.unlink()


def unreadable_file(path: Path) -> str | None:
    """Why `path` (named like a records file) cannot be read as one, with the fix; None when it is a
    plain file."""
    try:
        mode = path.stat().st_mode  # through links: a link to a records file is read
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            why = "a symbolic link that loops back on itself"
        elif exc.errno == errno.ENOENT and path.is_symlink():
            why = f"a symbolic link to {os.readlink(path)!r}, which does not exist"
        else:
            why = f"cannot be read ({exc.strerror or exc})"
    else:
        if stat.S_ISREG(mode):
            return None
        why = (
            "a folder, not a records file"
            if stat.S_ISDIR(mode)
            else "not a plain file (a pipe, socket or device)"
        )
    return (
        f"{path}: {why}; a records file is the JSON lines one process of the run wrote there: put the run's own "
        f"file in its place, or move this out of the folder"
    )


def read_records(directory: Path) -> LoadedRecords:
    loaded = LoadedRecords()
    for path in record_files(directory):
        problem = unreadable_file(path)
        if problem is None:
            try:
                text = path.read_text(encoding="utf-8", errors="replace")
            except OSError as exc:  # it went away, or this user may not read it
                problem = (
                    f"{path}: cannot be read ({exc.strerror or exc}); make it readable to this user, or "
                    "move it out of the folder"
                )
        if problem is not None:
            loaded.unreadable.append(problem)
            loaded.problems.append(f"{problem}; skipped")
            continue
        loaded.files.append(path.name)
        lines = text.split("\n")
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                last = number == len(lines) and not text.endswith("\n")
                why = (
                    "truncated last line (the process died while writing it)"
                    if last
                    else f"not JSON ({exc.msg})"
                )
                loaded.problems.append(f"{path}:{number}: {why}; skipped")
                continue
            problem = record_problem(record)
            if problem is not None:
                loaded.problems.append(f"{path}:{number}: {problem}; skipped")
                continue
            loaded.records.append(record)
    return loaded


PHASES = ("setup", "call", "teardown")
WHENS = (*PHASES, PLAIN_PASS)
OUTCOMES = ("passed", "failed", "skipped")
# Records about the run rather than one attempt of a test; `probe` belongs to a test but is not a
# phase.
RUN_KINDS = ("preflight", "server", "collection", "session")
KINDS = ("probe", *RUN_KINDS)


def record_problem(record) -> str | None:
    """Why a parsed line is not a record the report can use, or None (the checks are those of
    schemas/record.schema.json, written out: they run for every line of every run)."""
    if not isinstance(record, dict) or record.get("schema") not in READ_SCHEMAS:
        return f"not a {RECORD_SCHEMA} record"
    if not isinstance(record.get("nodeid"), str):
        return "no `nodeid` string"
    if not isinstance(record.get("t", 0.0), (int, float)) or isinstance(record.get("t"), bool):
        return f"`t` must be a number, got {record.get('t')!r}"
    kind = record.get("kind")
    if kind is not None:
        return None if kind in KINDS else f"unknown `kind` {kind!r}"
    when = record.get("when")
    if when == PLAIN_PASS:
        durations = record.get("durations")
        if record.get("outcome") != "passed":
            return f"a `when: {PLAIN_PASS}` record must say passed, got {record.get('outcome')!r}"
        if (
            not isinstance(durations, list)
            or len(durations) != 2
            or not all(isinstance(d, (int, float)) and not isinstance(d, bool) for d in durations)
        ):
            return f"`durations` must be 2 numbers (call, teardown), got {durations!r}"
        return None
    if when not in PHASES:
        return f"`when` must be one of {', '.join(WHENS)}, got {when!r}"
    if record.get("outcome") not in OUTCOMES:
        return f"`outcome` must be one of {', '.join(OUTCOMES)}, got {record.get('outcome')!r}"
    if not isinstance(record.get("duration", 0.0), (int, float)):
        return f"`duration` must be a number, got {record.get('duration')!r}"
    return None


def phase_seconds(records: list[dict]):
    """The phase durations of a test's records, in order: a `call+teardown` record gives two. Summed
    with `sum`, the same float as from a record per phase."""
    for record in records:
        if record.get("when") == PLAIN_PASS:
            yield from record["durations"]
        else:
            yield record.get("duration", 0.0)


def ends_attempt(record: dict) -> bool:
    """The record that says a test's attempt ran to its end (its teardown, or a plain pass)."""
    return record.get("when") in ("teardown", PLAIN_PASS)


def split_attempts(records: list[dict]) -> list[list[dict]]:
    """Records of one test (in time order) into attempts: a setup starts one, a crash ends one."""
    attempts: list[list[dict]] = []
    current: list[dict] | None = None
    for record in records:
        if record.get("crashed"):
            if current is None:
                # the worker died before it wrote anything for this attempt
                attempts.append([record])
            else:
                current.append(record)
            current = None
        elif record["when"] == "setup" or current is None:
            current = [record]
            attempts.append(current)
        else:
            current.append(record)
    return attempts


def collected_specs(directory: Path) -> dict:
    """nodeid -> {group, blocking, gate} from the run's collection record in `directory` (written
    before any test ran), or {} where there is none."""
    for path in record_files(directory):
        try:
            with path.open(encoding="utf-8", errors="replace") as handle:
                for line in handle:
                    if '"collection"' not in line[:60]:  # its first key: skip the test records
                        continue
                    record = json.loads(line)
                    if record_problem(record) is None and record.get("kind") == "collection":
                        specs = record.get("specs")
                        return specs if isinstance(specs, dict) else {}
        except (OSError, json.JSONDecodeError, AttributeError):
            continue
    return {}


def last_attempt_records(path: Path, nodeid: str) -> list[dict]:
    """What one process wrote for `nodeid` in its last attempt: a dead worker's file survives it."""
    if not path.exists():
        return []
    mine = []
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        if (
            isinstance(record, dict)
            and record.get("nodeid") == nodeid
            and record_problem(record) is None
            and "kind" not in record
        ):
            mine.append(record)
    attempts = split_attempts(mine)
    return attempts[-1] if attempts else []
