"""The failing tests on the base: each attempt a fresh pytest process in the base's work tree, its
outcome per test read back from that process's own gate report.

Node ids are as the gate report has them: relative to the run's rootdir. `locate` finds that folder
in the tested checkout (where the gates ran, else the one under the checkout where every failing
test's file is), and each attempt runs there in the base's work tree with `--rootdir` set to it, so
the base's report names the tests the same way. A node id the base does not have is `absent`: its
file is not in the base's tree, or pytest cannot find it (a usage error naming it), after which a
`--collect-only` probe says exactly which of the rest the base collects.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from pytest_rocm.results.fingerprint import fingerprint, of_test
from pytest_rocm.schemas.loader import ArtifactError, load_artifact, read_json_file
from rocm_gate.blame import processes
from rocm_gate.blame.base import BaseError, NotPrepared, git

__all__ = ["Attempts", "OUTCOMES", "locate", "outcome_of", "path_of", "usable"]

OUTCOMES = ("passed", "failed", "error", "skipped", "absent", "crashed", "interrupted")
FAILED = ("failed", "error", "crashed")
# a gate report's status -> the outcome of the attempt
_OUTCOME = {
    "passed": "passed",
    "xpassed": "passed",
    "failed": "failed",
    "error": "error",
    "crashed": "crashed",
    "interrupted": "interrupted",
    "skipped": "skipped",
    "xfailed": "skipped",
    "known_gap": "skipped",
    "not_applicable": "skipped",
}
USAGE_ERROR = 4  # pytest's exit status for a node id it cannot find (unless it exits by conclusion)
NOT_FOUND = re.compile(r"^ERROR: (?:file or directory )?not found: ", re.M)
PROBE_LOG_BYTES = 32 * 1024 * 1024


def path_of(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def usable(nodeid: str) -> bool:
    """Whether a node id from the (untrusted) gate report may be given to pytest: a relative path
    inside the tree, no option, no control character."""
    path = path_of(nodeid)
    return (
        bool(path)
        and not nodeid.startswith("-")
        and not path.startswith("/")
        and ".." not in Path(path).parts
        and not any(ord(c) < 32 for c in nodeid)
    )


def locate(top: Path, checkout: Path, nodeids: list[str]) -> Path:
    """The folder of the tested checkout the node ids are relative to (the run's rootdir), relative
    to the checkout's top: `checkout` itself when every test's file is there, else the shortest
    folder of the tree where every one is."""
    files = sorted({path_of(n) for n in nodeids})
    here = Path(checkout).resolve().relative_to(top)
    if all((top / here / f).is_file() for f in files):
        return here
    listed = git(top, "ls-files", "-z").stdout.split("\0")
    first = files[0]
    candidates = {
        Path(name[: -len(first)]) for name in listed if name == first or name.endswith("/" + first)
    }
    for folder in sorted(candidates, key=lambda p: (len(p.parts), str(p))):
        if all((top / folder / f).is_file() for f in files):
            return folder
    raise BaseError(
        f"{checkout}: the failing tests' files ({', '.join(files[:3])}) are not in this checkout; "
        "give the checkout the gates ran in (--checkout)"
    )


def outcome_of(entry: dict) -> dict:
    """One attempt's outcome of a test, from its process's gate report entry: its first failure in
    that process (attempts after a device fault there prove nothing and are set aside), else its
    first attempt's status; with the verdict the process gave it."""
    runs = [a for a in entry.get("attempts") or () if not a.get("after_fault")]
    failing = [a for a in runs if a.get("status") in FAILED]
    deciding = failing[0] if failing else (runs[0] if runs else {"status": entry.get("status")})
    outcome = _OUTCOME.get(str(deciding.get("status")), "error")
    signature = deciding.get("signature") or {}
    return {
        "outcome": outcome,
        "fingerprint": of_test(entry) or None if outcome in FAILED else None,
        "seconds": round(max(float(entry.get("duration") or 0.0), 0.0), 3),
        "verdict": entry.get("verdict"),
        "signature": str(signature.get("name"))[:200] if signature.get("name") else None,
    }


def _absent() -> dict:
    return {"outcome": "absent", "fingerprint": None, "seconds": 0.0, "verdict": None}


def _usage_error(exit_status: int | None, report: dict | None) -> bool:
    """Whether pytest stopped at its command line (a node id it cannot find, an option it does not
    take) and ran nothing: its exit status, or the report's cause where it exits by conclusion."""
    if report is not None and report.get("tests"):
        return False
    causes = [str(c) for c in (report or {}).get("incomplete_causes") or ()]
    return exit_status == USAGE_ERROR or any("usage error" in c for c in causes)


@dataclass
class Attempts:
    """The attempts of the failing tests in the base's work tree `tree`, within `deadline`."""

    tree: Path  # the base's work tree
    rootdir: Path  # relative to the tree: where the node ids are from
    python: str
    pytest_args: list[str]
    work: Path  # a scratch folder: each process's report folder and log
    deadline: float  # time.monotonic()
    say: Callable[[str], None] = print
    tests: dict[str, dict] = field(default_factory=dict)  # node id -> {"attempts", "not_run"}
    processes: int = 0
    last_log: Path | None = None

    @property
    def folder(self) -> Path:
        return self.tree / self.rootdir

    def run(self, nodeids: list[str], attempts: int) -> None:
        """Run `nodeids` `attempts` times, each time in a fresh process; fills `tests`."""
        for nodeid in nodeids:
            self.tests.setdefault(nodeid, {"attempts": [], "not_run": None})
        present = []
        for nodeid in nodeids:
            if (self.folder / path_of(nodeid)).is_file():
                present.append(nodeid)
            else:
                self.tests[nodeid]["attempts"] = [_absent()]
        probed = stopped = False
        number = 1
        while present and number <= attempts and time.monotonic() < self.deadline:
            exit_status, report, stopped = self._process(present, number)
            mismatch = (report or {}).get("stack_mismatch")
            if mismatch:
                # the tests imported another build than the base's (no install, or one that did not
                # take): what they did says nothing of the base
                raise NotPrepared(
                    f"the tests on the base did not run the base's build: {str(mismatch)[:800]}"
                )
            usage = _usage_error(exit_status, report)
            if usage and not probed and self._not_found(number):
                probed = True
                present = self._probe(present)
                continue  # the same attempt again, without what the base lacks
            if usage:  # an option the base's pytest does not take: no attempt can run
                last = processes.tail(self.last_log, lines=5, limit=800) if self.last_log else ""
                raise NotPrepared(
                    "pytest refused the command line on the base (a usage error): "
                    + (
                        " | ".join(line.strip() for line in last.splitlines() if line.strip())
                        or "no output"
                    )
                )
            self._record(present, report, stopped, exit_status)
            if stopped:
                break
            number += 1
        for nodeid in present:
            ran = self.tests[nodeid]["attempts"]
            done = len(ran)
            cut = stopped and bool(ran) and ran[-1]["outcome"] == "interrupted"
            if (done < attempts or cut) and self.tests[nodeid]["not_run"] is None:
                self.tests[nodeid]["not_run"] = (
                    f"over budget: attempt {number} of {attempts} was stopped at the budget's end"
                    if stopped
                    else f"over budget: {done} of {attempts} attempts ran before the budget ended"
                )

    def _command(self, nodeids: list[str], report_dir: Path) -> list[str]:
        return [
            self.python,
            "-m",
            "pytest",
            *nodeids,
            f"--rocm-report-dir={report_dir}",
            "-p",
            "no:cacheprovider",
            "--rocm-reruns=0",
            f"--rootdir={self.folder}",
            *self.pytest_args,
        ]

    def _process(self, nodeids: list[str], number: int) -> tuple[int | None, dict | None, bool]:
        """One fresh pytest process: (its exit status, its gate report or None, whether the budget
        stopped it)."""
        self.processes += 1
        label = f"{self.processes}-attempt-{number}"
        report_dir = self.work / label
        self.say(f"attempt {number}: {len(nodeids)} test(s) on the base, in a fresh pytest process")
        finished = processes.run(
            self._command(nodeids, report_dir),
            self.folder,
            self.deadline,
            self.work / f"{label}.log",
        )
        self.last_log = finished.log
        report = None
        if (report_dir / "gate-report.json").is_file():
            try:
                report = load_artifact(report_dir / "gate-report.json", "gate-report")
            except ArtifactError as exc:
                self.say(f"attempt {number}: its gate report does not load ({exc})")
        return finished.exit, report, finished.stopped

    def _not_found(self, number: int) -> bool:
        if self.last_log is None:
            return False
        found = bool(NOT_FOUND.search(processes.tail(self.last_log, lines=400, limit=200_000)))
        if found:
            self.say(f"attempt {number}: pytest did not find some tests on the base; probing")
        return found

    def _probe(self, nodeids: list[str]) -> list[str]:
        """Which of `nodeids` the base collects (`--collect-only` of their files); the rest are
        absent. A test of a file that fails to collect stays: its attempts show the error."""
        self.processes += 1
        label = f"{self.processes}-probe"
        files = sorted({path_of(n) for n in nodeids})
        command = self._command(files, self.work / label)
        command[3 : 3 + len(files)] = ["--collect-only", "-q", *files]
        finished = processes.run(command, self.folder, self.deadline, self.work / f"{label}.log")
        if finished.stopped:
            return nodeids  # the budget ended: what was not found is said by the attempt's absence
        try:
            with open(finished.log, "rb") as handle:
                text = handle.read(PROBE_LOG_BYTES).decode("utf-8", errors="replace")
        except OSError:
            return nodeids
        listed = set(text.splitlines())
        broken = set()
        try:
            probe_report = read_json_file(self.work / label / "gate-report.json")
            broken = {
                path_of(str(e.get("nodeid")))
                for e in probe_report.get("collection_errors") or ()
                if isinstance(e, dict)
            }
        except (ArtifactError, AttributeError):
            pass
        kept = [n for n in nodeids if n in listed or path_of(n) in broken]
        for nodeid in nodeids:
            if nodeid not in kept:
                self.tests[nodeid]["attempts"] = [_absent()]
        return kept

    def _record(
        self, nodeids: list[str], report: dict | None, stopped: bool, exit_status: int | None
    ) -> None:
        tests = (report or {}).get("tests") or {}
        errors = [e for e in (report or {}).get("collection_errors") or () if e.get("nodeid")]
        for nodeid in nodeids:
            entry = tests.get(nodeid)
            if entry is not None:
                attempt = outcome_of(entry)
            else:
                attempt = self._missing(nodeid, report, errors, stopped, exit_status)
            self.tests[nodeid]["attempts"].append(attempt)

    @staticmethod
    def _missing(
        nodeid: str, report: dict | None, errors: list[dict], stopped: bool, exit_status
    ) -> dict:
        """The outcome of a test its process's report does not list."""
        broken = [
            e
            for e in errors
            if nodeid == e["nodeid"] or nodeid.startswith(str(e["nodeid"]).rstrip(":") + "::")
        ]
        if broken:
            message = fingerprint(str(broken[0].get("detail") or ""), "a collection error")
            return {"outcome": "error", "fingerprint": message or None, "seconds": 0.0}
        if stopped:
            return {"outcome": "interrupted", "fingerprint": None, "seconds": 0.0}
        if report is None:
            why = f"the pytest process ended (exit status {exit_status}) without a gate report"
            return {"outcome": "crashed", "fingerprint": fingerprint(None, why), "seconds": 0.0}
        causes = [str(c) for c in report.get("incomplete_causes") or ()]
        if report.get("complete") is False and causes:  # an internal error, a session cut short
            why = f"the pytest process did not run it: {causes[0]}"
            return {"outcome": "error", "fingerprint": fingerprint(None, why), "seconds": 0.0}
        return {"outcome": "absent", "fingerprint": None, "seconds": 0.0}
