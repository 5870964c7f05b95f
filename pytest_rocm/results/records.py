"""Crash-safe per-process records: one JSON line per test outcome, appended and flushed as it
happens.

Every process (the controller and each xdist worker) writes its own
`records-<worker>.jsonl`, so no two processes share a file and a process that
dies loses nothing it already wrote (at worst one half-written last line,
which the reader reports and skips).

A test whose setup, call and teardown each pass with nothing to add (no GPUs,
no measurements, no xfail: most tests) is one record, `when:
"setup+call+teardown"` with the three `durations` and its setup's time `t`,
written at its teardown; any other test has a record per phase, written when
pytest reports it (its plain phases that waited, first) (docs/architecture.md,
"Artifacts"). Until a test's record is written, its setup record waits in
`records-<worker>.running`, a file mapped into memory and overwritten for each
test: a store into memory, not a system call, yet the kernel keeps it when the
process is killed, so the readers still name the test it was running. Every
line is read with json.loads and checked (`record_problem`). Records of schema
`record/1` (a record per phase) and `record/2` (a plain pass's setup, then its
call and teardown as one record, `when: "call+teardown"`) are read the same
way; a record of a newer format than this reads is named by its version
(`newer_formats`), never taken for a run that did not finish.

A full disk loses nothing written before it: a write the filesystem refuses for
space (ENOSPC, EDQUOT) is not an error of the test that wrote it; the writer
keeps what it had, counts what it could not write and says where and how much
space was left (`RecordWriter.full`), and the run concludes `incomplete` naming
it (the controller: plugin/controller.py). A line cut short by the full disk is
ended before the next one, so it costs that one record only.
"""

from __future__ import annotations

import errno
import json
import math
import mmap
import os
import re
import shutil
import stat
import struct
import time
from dataclasses import dataclass, field
from pathlib import Path

from pytest_rocm.schemas.artifacts import schema

RECORD_SCHEMA = schema("record", 3)
# earlier versions' records (record/1: a record per phase; record/2: a plain pass's call and
# teardown in one record, its setup in another): read as they are
READ_SCHEMAS = frozenset({schema("record", 1), schema("record", 2), RECORD_SCHEMA})
# the `when` of a test whose setup, call and teardown each passed with nothing to add: one record
PLAIN_PASS = "setup+call+teardown"
# record/2's `when` of a call and teardown that both passed with nothing to add
CALL_TEARDOWN = "call+teardown"
# the `when`s of a record that stands for several phases -> how many (its `durations`)
COMBINED = {PLAIN_PASS: 3, CALL_TEARDOWN: 2}
# the running test's slot starts this big (a setup record is a few hundred bytes); a longer one
# grows it
SLOT_BYTES = 4096
FAILURE_HEAD_CHARS = 4000
OUTPUT_TAIL_CHARS = 4000


# what a filesystem answers a write it has no room for: no space, or the user's quota
DISK_FULL = frozenset({errno.ENOSPC, errno.EDQUOT})


def free_space(folder: Path) -> str:
    """How much room the filesystem of `folder` has left, as a message says it."""
    try:
        usage = shutil.disk_usage(folder)
    except OSError:
        return "its free space unknown"
    return f"{_size(usage.free)} free of {_size(usage.total)}"


def _size(count: float) -> str:
    unit = "bytes"
    for larger in ("KiB", "MiB", "GiB", "TiB"):
        if count < 1024:
            break
        count, unit = count / 1024, larger
    return f"{count:.0f} bytes" if unit == "bytes" else f"{count:.1f} {unit}"


class RecordWriter:
    def __init__(self, directory: Path, worker: str):
        self.path = directory / f"records-{worker}.jsonl"
        self.worker = worker
        # What the full disk cost (`disk_full`): None while every record was written.
        self.full: str | None = None
        self.lost = 0  # records the filesystem had no room for
        self._cut = False  # the last line was cut short by the full disk: end it first
        self._common = "," + json.dumps({"schema": RECORD_SCHEMA, "worker": worker})[1:-1]
        self._running: RunningSlot | None = None  # made when a test first waits in it
        # One os.write per record on an O_APPEND descriptor: the line reaches the OS before the
        # next test starts, with no Python-level buffer that a dying process would lose.
        try:
            directory.mkdir(parents=True, exist_ok=True)
            self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        except OSError as exc:
            if exc.errno not in DISK_FULL:
                raise
            self._fd = -1
            self._disk_full(exc)

    def write(self, record: dict, encoded_extra: str = "", t: float | None = None) -> None:
        """Append one record. `encoded_extra` is fields already encoded as JSON (',"k":v,...'): a
        test's fixed fields are encoded once, not for each of its records. `t`: when it happened (a
        phase's: when pytest says it ended), default now; it orders records into attempts."""
        record["t"] = round(time.time() if t is None else t, 6)
        body = json.dumps(record, separators=(",", ":"), ensure_ascii=False, default=str)
        self.write_encoded(body[:-1] + self._common + encoded_extra + "}\n")

    def write_phase(
        self, encoded_nodeid: str, when: str, duration: float, t: float, encoded_extra: str
    ) -> None:
        """A phase that passed with nothing else to say; `t` is when pytest reported it."""
        line = phase_line(encoded_nodeid, when, duration, t, self._common, encoded_extra)
        self._write(line.encode())

    def write_plain_pass(
        self,
        encoded_nodeid: str,
        setup: float,
        call: float,
        teardown: float,
        t: float,
        encoded_extra: str,
    ) -> None:
        """The one record of a test whose setup, call and teardown each passed with nothing to add;
        `t` is its setup's, as in the setup's own record (the readers order tests by it)."""
        line = plain_pass_line(
            encoded_nodeid, setup, call, teardown, t, self._common, encoded_extra
        )
        self._write(line.encode())

    def set_running(
        self, encoded_nodeid: str, encoded_extra: str, duration: float, t: float
    ) -> None:
        """The setup record (as `write_phase` would write it) of the test this process now runs,
        not written yet: it names the test if the process dies."""
        try:
            if self._running is None:
                self._running = RunningSlot(running_path(self.path), self._common)
            self._running.set(encoded_nodeid.encode(), encoded_extra.encode(), duration, t)
        except OSError as exc:  # no room to grow the slot: the test's record is still written
            if exc.errno not in DISK_FULL:
                raise
            self._disk_full(exc)

    def write_encoded(self, line: str) -> None:
        self._write(line.encode("utf-8"))

    def _write(self, data: bytes) -> None:
        """Append one record whole, or count it lost where the filesystem has no room (a line cut
        short is ended before the next, which a reader then names and skips)."""
        if self._fd < 0:
            self.lost += 1
            return
        if self._cut:
            data = b"\n" + data
        written = 0
        try:
            while written < len(data):
                written += os.write(self._fd, data[written:])
        except OSError as exc:
            if exc.errno not in DISK_FULL:
                raise
            self._cut = written > 0 or self._cut
            self.lost += 1
            self._disk_full(exc)
            return
        self._cut = False

    def _disk_full(self, exc: OSError) -> None:
        if self.full is None:
            folder = self.path.parent
            self.full = (
                f"{folder} ran out of space ({exc.strerror}; {free_space(folder)}) writing "
                f"{self.path.name}"
            )

    def disk_full(self) -> str | None:
        """What the full disk cost this process, for the run's report; None where nothing was
        lost."""
        if self.full is None:
            return None
        return f"{self.full}: {self.lost} record(s) of this process lost"

    def close(self) -> None:
        """At the process's normal end: every record is written, no test is running."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        if self._running is not None:
            self._running.remove()
            self._running = None


def running_path(records: Path) -> Path:
    """The running-test slot beside a records file."""
    return records.with_suffix(".running")


def phase_line(
    encoded_nodeid: str, when: str, duration: float, t: float, common: str, encoded_extra: str
) -> str:
    """The record of a phase that passed with nothing else to say, as JSON text: the test's node id
    and fields (`encoded_extra`) already encoded, `common` the process's fields (schema, worker)."""
    return (
        f'{{"nodeid":{encoded_nodeid},"when":"{when}","outcome":"passed",'
        f'"duration":{duration:.6f},"t":{t:.6f}{common}{encoded_extra}}}\n'
    )


def plain_pass_line(
    encoded_nodeid: str,
    setup: float,
    call: float,
    teardown: float,
    t: float,
    common: str,
    encoded_extra: str,
) -> str:
    """The one record of a test whose setup, call and teardown each passed with nothing to add, as
    JSON text (as `phase_line`): its three durations and its setup's time `t`."""
    return (
        f'{{"nodeid":{encoded_nodeid},"when":"{PLAIN_PASS}","outcome":"passed",'
        f'"durations":[{setup:.6f},{call:.6f},{teardown:.6f}],"t":{t:.6f}'
        f"{common}{encoded_extra}}}\n"
    )


# A running slot: a state byte (`_RUNNING`: a whole setup record is there), then at `_HEADER_AT`
# the setup's seconds, the time it was reported and the lengths (UTF-8 bytes) of the process's
# fields, the node id and the test's fields, whose JSON texts follow from `_TEXT_AT` in that order.
_SLOT_HEADER = struct.Struct("<ddIII")
_HEADER_AT = 8
_TEXT_AT = _HEADER_AT + _SLOT_HEADER.size
_RUNNING = 3  # (this layout came with record/3)


class RunningSlot:
    """The setup record of the test a process is running, in a file mapped into memory: writing it
    is a copy into memory, not a system call, and a killed process's stores stay in the kernel's
    page cache, where any reader of the file sees them (Linux keeps one copy of a file's pages for
    mappings and reads alike). The numbers are stored as they are and formatted by the reader
    (`running_record`), which makes the very line `write_phase` would have written. The state byte
    is cleared before the rest changes and set last, so a process killed halfway leaves no record,
    never a mixed one. The slot is not cleared when the test's record is written: a reader drops a
    slot whose record is already in the records file (the same test and time)."""

    def __init__(self, path: Path, common: str):
        self.path = path
        self._common = common.encode()
        self._text_at = _TEXT_AT + len(self._common)  # where the node id starts
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        self._map: mmap.mmap | None = None

    def set(self, nodeid: bytes, extra: bytes, duration: float, t: float) -> None:
        start = self._text_at
        end = start + len(nodeid) + len(extra)
        memory = self._map
        if memory is None or end > len(memory):
            memory = self._grow(end)
        memory[0] = 0
        _SLOT_HEADER.pack_into(
            memory, _HEADER_AT, duration, t, len(self._common), len(nodeid), len(extra)
        )
        memory[start:end] = nodeid + extra
        memory[0] = _RUNNING

    def _grow(self, size: int) -> mmap.mmap:
        if self._map is not None:
            self._map[0] = 0
            self._map.close()
        length = max(SLOT_BYTES, 1 << size.bit_length())
        # its pages allocated now: a store into a mapped page a full filesystem cannot back kills
        # the process (SIGBUS), where this raises ENOSPC
        try:
            os.posix_fallocate(self._fd, 0, length)
        except OSError as exc:
            if exc.errno not in (errno.EOPNOTSUPP, errno.EINVAL):
                raise
            os.ftruncate(self._fd, length)
        memory = self._map = mmap.mmap(self._fd, length)
        memory[_TEXT_AT : self._text_at] = self._common  # the process's fields never change
        return memory

    def remove(self) -> None:
        if self._map is not None:
            self._map.close()
        os.close(self._fd)
        self.path.unlink(missing_ok=True)


@dataclass
class LoadedRecords:
    records: list[dict] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # unreadable lines, named by file and line
    files: list[str] = field(default_factory=list)
    # records-*.jsonl names that are no records file (a folder, a link that loops or leads nowhere):
    # each names the path and the fix; also in `problems`, so a run's own report says it
    unreadable: list[str] = field(default_factory=list)
    by_file: dict[str, list[dict]] = field(default_factory=dict)  # file name -> its records


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
        records = _parse_lines(path, text, loaded.problems)
        running = running_record(path, records, loaded.problems)
        if running is not None:
            records.append(running)
        loaded.by_file[path.name] = records
        loaded.records += records
    return loaded


# seconds a record may lie outside its manifest's started..finished (both written to the second)
RUN_WINDOW_SLACK_S = 5.0


def other_runs(
    by_file: dict[str, list[dict]], started: float | None, finished: float | None
) -> list[str]:
    """Why the records of one folder are not all one run's, or [] when they are. One run writes
    one records file per process, named for it (`records-gw0.jsonl` holds gw0's records), one
    `session` record (its controller's) and one `collection` record per process, all between its
    manifest's start and finish. A folder that holds two runs' files (copied or renamed together)
    would otherwise judge one run's tests by the other's results."""
    problems = []
    sessions = [
        name for name, records in by_file.items() for r in records if r.get("kind") == "session"
    ]
    if len(sessions) > 1:
        problems.append(
            f"{len(sessions)} session records ({', '.join(sorted(set(sessions)))}): one run writes one"
        )
    for name, records in sorted(by_file.items()):
        worker = name.removeprefix("records-").removesuffix(".jsonl")
        others = sorted(
            {str(r.get("worker")) for r in records if r.get("worker") not in (None, worker)}
        )
        if others:
            problems.append(f"{name} holds the records of {', '.join(others)}, not of {worker}")
        collections = sum(1 for r in records if r.get("kind") == "collection")
        if collections > 1:
            problems.append(
                f"{name} holds {collections} collection records: one process writes one"
            )
        times = [r["t"] for r in records if isinstance(r.get("t"), int | float)]
        if times and started is not None and min(times) < started - RUN_WINDOW_SLACK_S:
            problems.append(f"{name} has records from before the manifest's start")
        if times and finished is not None and max(times) > finished + RUN_WINDOW_SLACK_S:
            problems.append(f"{name} has records from after the manifest's finish")
    return problems


def _parse_lines(path: Path, text: str, problems: list[str]) -> list[dict]:
    """The records of one file's text; each line that is none is named in `problems` (its file,
    its line number and why), and the lines around it are kept."""
    records = []
    lines = text.split("\n")
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except RecursionError:  # a crafted line nested 100,000 deep: no record is
            problems.append(f"{path}:{number}: not a record (nested too deep); skipped")
            continue
        except json.JSONDecodeError as exc:
            last = number == len(lines) and not text.endswith("\n")
            why = (
                "truncated last line (the process died while writing it)"
                if last
                else f"not JSON ({exc.msg})"
            )
            problems.append(f"{path}:{number}: {why}; skipped")
            continue
        problem = record_problem(record)
        if problem is not None:
            problems.append(f"{path}:{number}: {problem}; skipped")
            continue
        records.append(record)
    return records


def running_record(path: Path, written: list[dict], problems: list[str]) -> dict | None:
    """The setup record of the test the process writing `path` was running when it ended, from its
    running slot (`RunningSlot`): None when there is no slot (the process ended normally), no whole
    record in it, or a record `written` (that file's records) already holds."""
    slot = running_path(path)
    try:
        data = slot.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        problems.append(f"{slot}: cannot be read ({exc.strerror or exc}); skipped")
        return None
    if len(data) < _TEXT_AT or data[0] != _RUNNING:
        return None  # no test named, or the process died while naming one
    duration, t, *lengths = _SLOT_HEADER.unpack_from(data, _HEADER_AT)
    texts, at = [], _TEXT_AT
    for length in lengths:
        texts.append(data[at : at + length].decode("utf-8", errors="replace"))
        at += length
    common, encoded_nodeid, encoded_extra = texts
    line = phase_line(encoded_nodeid, "setup", duration, t, common, encoded_extra)
    try:
        record = json.loads(line)
    except json.JSONDecodeError as exc:
        problems.append(f"{slot}: not a setup record ({exc.msg}); skipped")
        return None
    problem = record_problem(record)
    if problem is not None:
        problems.append(f"{slot}: {problem}; skipped")
        return None
    nodeid, t = record["nodeid"], record["t"]
    for earlier in reversed(written):  # its own record, when written, is among the last
        if earlier.get("t") == t and earlier.get("nodeid") == nodeid:
            return None
    return record


PHASES = ("setup", "call", "teardown")
WHENS = (*PHASES, *COMBINED)
OUTCOMES = ("passed", "failed", "skipped")
# Records about the run rather than one attempt of a test; `probe` and `deferred` (a test a process
# a device fault had poisoned did not run, for a fresh process to run: results/poisoning.py) belong
# to a test but are not a phase.
RUN_KINDS = ("preflight", "server", "collection", "session")
KINDS = ("probe", "deferred", *RUN_KINDS)


_NEWER = re.compile(r"pytest-rocm/record/([0-9]{1,6})")
# how a record of a newer format is named in a problem (`newer_formats` finds it there)
_NEWER_PROBLEM = re.compile(r"a record of (pytest-rocm/record/[0-9]+), a newer format")


def _newer(schema_name) -> str | None:
    """`schema_name` where it is a record format newer than this reads, else None."""
    found = _NEWER.fullmatch(schema_name) if isinstance(schema_name, str) else None
    return schema_name if found and int(found[1]) > int(RECORD_SCHEMA.rsplit("/", 1)[1]) else None


def newer_formats(problems: list[str]) -> list[str]:
    """The newer record formats `problems` (a read's) name, each once, in order."""
    return list(dict.fromkeys(m[1] for p in problems if (m := _NEWER_PROBLEM.search(p))))


def record_problem(record) -> str | None:
    """Why a parsed line is not a record the report can use, or None (the checks are those of
    schemas/record.schema.json, written out: they run for every line of every run)."""
    if not isinstance(record, dict) or record.get("schema") not in READ_SCHEMAS:
        newer = _newer(record.get("schema")) if isinstance(record, dict) else None
        if newer is not None:
            return (
                f"a record of {newer}, a newer format than this pytest-rocm reads (up to "
                f"{RECORD_SCHEMA}): read the run with the pytest-rocm that wrote it, or a newer one"
            )
        return f"not a {RECORD_SCHEMA} record"
    if not isinstance(record.get("nodeid"), str):
        return "no `nodeid` string"
    if not _finite(record.get("t", 0.0)):
        return f"`t` must be a finite number, got {record.get('t')!r}"
    kind = record.get("kind")
    if kind is not None:
        return None if kind in KINDS else f"unknown `kind` {kind!r}"
    when = record.get("when")
    if when in COMBINED:
        durations = record.get("durations")
        if record.get("outcome") != "passed":
            return f"a `when: {when}` record must say passed, got {record.get('outcome')!r}"
        if (
            not isinstance(durations, list)
            or len(durations) != COMBINED[when]
            or not all(_finite(d) for d in durations)
        ):
            return (
                f"`durations` must be {COMBINED[when]} finite numbers ({when.replace('+', ', ')}), "
                f"got {durations!r}"
            )
        return None
    if when not in PHASES:
        return f"`when` must be one of {', '.join(WHENS)}, got {when!r}"
    if record.get("outcome") not in OUTCOMES:
        return f"`outcome` must be one of {', '.join(OUTCOMES)}, got {record.get('outcome')!r}"
    if not _finite(record.get("duration", 0.0)):
        return f"`duration` must be a finite number, got {record.get('duration')!r}"
    return None


def _finite(value) -> bool:
    """A JSON number the report can write back: json.loads reads `NaN` and `Infinity`, which the
    strict loader then refuses in the report."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def phase_seconds(records: list[dict]):
    """The phase durations of a test's records, in order: a `setup+call+teardown` record gives
    three, a `call+teardown` two. Summed with `sum`, the same float as from a record per phase."""
    for record in records:
        if record.get("when") in COMBINED:
            yield from record["durations"]
        else:
            yield record.get("duration", 0.0)


# the `when`s of the record that says a test's attempt ran to its end
_ENDS = frozenset({"teardown", *COMBINED})
# the `when`s of the record that starts an attempt (a plain pass is a whole attempt)
_STARTS = frozenset({"setup", PLAIN_PASS})


def ends_attempt(record: dict) -> bool:
    """The record that says a test's attempt ran to its end (its teardown, or a plain pass)."""
    return record.get("when") in _ENDS


def starts_attempt(record: dict) -> bool:
    """The record that starts a test's attempt (its setup, or a plain pass)."""
    return record.get("when") in _STARTS


def split_attempts(records: list[dict]) -> list[list[dict]]:
    """Records of one test (in time order) into attempts: a setup (or a plain pass, which holds
    one) starts one, a crash ends one."""
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
        elif record["when"] in _STARTS or current is None:
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
        except (OSError, json.JSONDecodeError, RecursionError, AttributeError):
            continue
    return {}


def process_records(path: Path) -> list[dict]:
    """What one process wrote (`path`, its records file), with the setup its running slot holds: a
    dead worker's files survive it. Unreadable lines are left out."""
    if not path.exists():
        return []
    records = _parse_lines(path, path.read_text(encoding="utf-8", errors="replace"), [])
    running = running_record(path, records, [])
    if running is not None:
        records.append(running)
    return records


def last_attempts(records: list[dict]) -> dict[str, list[dict]]:
    """nodeid -> the records of its last attempt, from one process's records (in the order it wrote
    them)."""
    by_test: dict[str, list[dict]] = {}
    for record in records:
        if "kind" not in record:
            by_test.setdefault(record["nodeid"], []).append(record)
    return {nodeid: split_attempts(mine)[-1] for nodeid, mine in by_test.items()}


def last_attempt_records(path: Path, nodeid: str) -> list[dict]:
    """What one process wrote for `nodeid` in its last attempt, with the setup its running slot
    holds: a dead worker's files survive it."""
    return last_attempts(process_records(path)).get(nodeid, [])
