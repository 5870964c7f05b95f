"""A full disk under the report folder is an infrastructure fault that loses nothing: the run
concludes `incomplete` naming the folder and its free space, every record written before it is
kept, and pytest never stops with INTERNALERROR (issue 63). The real thing where the machine allows
it (a small tmpfs in a mount namespace of its own, `unshare -rm`), and the records writer with a
write that fails for space everywhere. Records of a newer format are named as such."""

import errno
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from pytest_rocm.results import records as records_mod
from pytest_rocm.results.records import RecordWriter, read_records

REPO = Path(__file__).resolve().parent.parent

FILL = textwrap.dedent(
    """
    import os, pytest

    @pytest.mark.parametrize("i", range(30))
    def test_before(i):
        pass

    def test_fill_the_disk():
        # another process fills the disk while the run goes on
        with open(os.path.join(os.environ["FILL_MOUNT"], "filler"), "wb") as out:
            try:
                while True:
                    out.write(b"x" * 65536)
                    out.flush()
            except OSError:
                pass

    @pytest.mark.parametrize("i", range(30))
    def test_after(i):
        assert i != 3
    """
)


def _can_mount_tmpfs(tmp_path: Path) -> bool:
    if shutil.which("unshare") is None:
        return False
    probe = tmp_path / "probe"
    probe.mkdir()
    done = subprocess.run(
        ["unshare", "-rm", "sh", "-c", f"mount -t tmpfs -o size=64k tmpfs {probe}"],
        capture_output=True,
        timeout=30,
    )
    return done.returncode == 0


def _run_on_tmpfs(
    tmp_path: Path, size: str, *args: str
) -> tuple[subprocess.CompletedProcess, dict]:
    """pytest on the FILL tests with the report folder on a tmpfs of `size`, in a mount namespace
    of its own; what the folder held before the namespace went away (it takes the tmpfs along)."""
    if not _can_mount_tmpfs(tmp_path):
        pytest.skip("no tmpfs can be mounted here (unshare -rm and mount -t tmpfs are refused)")
    mount, tests, kept = tmp_path / "mount", tmp_path / "tests", tmp_path / "kept"
    for folder in (mount, tests, kept):
        folder.mkdir()
    (tests / "test_fill.py").write_text(FILL)
    pytest_line = " ".join(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "test_fill.py",
            "--rocm-platform=mi300x-1",
            f"--rocm-report-dir={mount}/out",
            "--rocm-exit-by-conclusion",
            *args,
        ]
    )
    script = (
        f"mount -t tmpfs -o size={size} tmpfs {mount} || exit 97\n"
        f"cd {tests}\n"
        f"{pytest_line}\n"
        "status=$?\n"
        f"cp -r {mount}/out/. {kept}/ 2>/dev/null\n"
        "exit $status\n"
    )
    done = subprocess.run(
        ["unshare", "-rm", "sh", "-c", script],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "FILL_MOUNT": str(mount), "PYTHONPATH": str(REPO)},
    )
    assert done.returncode != 97, done.stderr
    return done, {p.name: p for p in kept.iterdir()}


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["serial", "xdist"])
def test_a_disk_that_fills_mid_run_makes_it_incomplete_and_keeps_every_record(tmp_path, workers):
    done, kept = _run_on_tmpfs(tmp_path, "6m", *workers)
    output = done.stdout + done.stderr
    assert "INTERNALERROR" not in output and "Traceback" not in output, output
    assert done.returncode == 3, output  # incomplete, by --rocm-exit-by-conclusion
    report = json.loads(kept["gate-report.json"].read_text())
    assert report["conclusion"] == "incomplete"
    [cause] = [c for c in report["incomplete_causes"] if "ran out of space" in c]
    assert f"{tmp_path}/mount/out ran out of space (No space left on device; " in cause
    assert (
        " free of 6.0 MiB) writing records-" in cause and "record(s) of this process lost" in cause
    )
    assert "ran out of space" in report["conclusion_reason"] and "ran out of space" in output
    # every test that ran before the disk filled is in the records, as it ran
    loaded = read_records(kept["gate-report.json"].parent)
    before = {r["nodeid"] for r in loaded.records if "test_before" in str(r.get("nodeid"))}
    assert len(before) == 30, sorted(before)
    assert {r["nodeid"] for r in loaded.records} >= {"test_fill.py::test_fill_the_disk"}
    assert ".pytest-rocm.reserve" not in kept  # given back once the report was written


def test_a_folder_without_room_for_the_run_is_refused_by_name(tmp_path):
    done, _ = _run_on_tmpfs(tmp_path, "1m")
    output = done.stdout + done.stderr
    assert done.returncode == pytest.ExitCode.USAGE_ERROR, output
    assert "INTERNALERROR" not in output and "Traceback" not in output, output
    assert f"--rocm-report-dir {tmp_path}/mount/out: no room for the run's records" in output
    assert "free of 1.0 MiB" in output


class FullDisk:
    """os.write as a filesystem that runs out of room: after `room` bytes it writes what fits of
    the write that meets the end, then refuses every write (ENOSPC) until `free()`."""

    def __init__(self, monkeypatch, room: int):
        self.room = room
        self.real = os.write
        monkeypatch.setattr(records_mod.os, "write", self.write)

    def write(self, fd, data):
        if self.room is None:
            return self.real(fd, data)
        if self.room <= 0:
            raise OSError(errno.ENOSPC, "No space left on device")
        part = bytes(data[: self.room])
        self.room -= len(part)
        return self.real(fd, part)

    def free(self):
        self.room = None


def test_the_records_writer_loses_only_what_the_full_disk_refused(tmp_path, monkeypatch):
    writer = RecordWriter(tmp_path, "gw0")
    record = {"nodeid": "t.py::test_a", "when": "setup", "outcome": "passed", "duration": 0.1}
    writer.write(dict(record))
    disk = FullDisk(monkeypatch, room=40)  # the next record is cut after 40 bytes
    for name in ("b", "c", "d"):
        writer.write({**record, "nodeid": f"t.py::test_{name}"})
    disk.free()
    writer.write({**record, "nodeid": "t.py::test_e"})
    writer.close()
    loaded = read_records(tmp_path)
    assert [r["nodeid"] for r in loaded.records] == ["t.py::test_a", "t.py::test_e"]
    # the line the full disk cut is named and skipped, and costs no other record
    assert len(loaded.problems) == 1 and "records-gw0.jsonl:2: not JSON" in loaded.problems[0]
    said = writer.disk_full()
    assert said.startswith(f"{tmp_path} ran out of space (No space left on device; ")
    assert said.endswith("writing records-gw0.jsonl: 3 record(s) of this process lost")


def test_a_records_file_the_full_disk_would_not_create_is_no_error(tmp_path, monkeypatch):
    real = os.open

    def refused(path, *args, **kwargs):
        if str(path).endswith(".jsonl"):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(path, *args, **kwargs)

    monkeypatch.setattr(records_mod.os, "open", refused)
    writer = RecordWriter(tmp_path, "gw1")
    writer.write({"nodeid": "t.py::test_a", "when": "setup", "outcome": "passed"})
    writer.close()
    assert writer.disk_full().endswith(
        "writing records-gw1.jsonl: 1 record(s) of this process lost"
    )


def test_a_full_disk_through_the_plugin_concludes_incomplete(pytester, monkeypatch):
    """The writer of a pytest run refusing for space from the fifth record on (through a conftest:
    any machine): the run finishes, concludes incomplete naming the folder, and says so."""
    pytester.makeconftest(
        """
        import errno, os, types
        from pytest_rocm.results import records

        count = [0]

        def write(fd, data):
            count[0] += 1
            if 5 <= count[0] <= 12:
                raise OSError(errno.ENOSPC, "No space left on device")
            return os.write(fd, data)

        # the records module's os, whose write fails for space
        records.os = types.SimpleNamespace(**{**vars(os), "write": write})
        """
    )
    pytester.makepyfile(
        test_a="import pytest\n@pytest.mark.parametrize('i', range(20))\ndef test_a(i): pass\n"
    )
    result = pytester.runpytest_subprocess(
        "--rocm-platform=cpu",
        "--rocm-report-dir=out",
        "--rocm-exit-by-conclusion",
        "-p",
        "no:cacheprovider",
    )
    output = result.stdout.str() + result.stderr.str()
    assert "INTERNALERROR" not in output and "Traceback" not in output, output
    assert result.ret == 3, output
    report = json.loads((pytester.path / "out" / "gate-report.json").read_text())
    assert report["conclusion"] == "incomplete"
    assert any(
        f"{pytester.path / 'out'} ran out of space" in c and "8 record(s) of this process lost" in c
        for c in report["incomplete_causes"]
    ), report["incomplete_causes"]


def _records(folder: Path, schema: str) -> Path:
    folder.mkdir()
    lines = [
        {"schema": schema, "worker": "controller", "nodeid": "t.py::test_a", "when": "setup+call+teardown",
         "outcome": "passed", "durations": [0.1, 0.1, 0.1], "t": 1.0},
        {"schema": schema, "worker": "controller", "nodeid": "", "kind": "session", "exitstatus": 0,
         "collection_errors": [], "collected": ["t.py::test_a"], "t": 2.0},
    ]  # fmt: skip
    (folder / "records-controller.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    return folder


def test_records_of_a_newer_format_are_named_by_their_version(tmp_path):
    """Records a newer pytest-rocm wrote were read as a run whose controller was killed."""
    folder = _records(tmp_path / "run", "pytest-rocm/record/4")
    done = subprocess.run(
        [sys.executable, "-m", "rocm_gate.cli", "verdict", folder],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 3, done.stdout + done.stderr
    report = json.loads((folder / "gate-report.json").read_text())
    causes = report["incomplete_causes"]
    assert causes[0].startswith(
        "records of a newer format (pytest-rocm/record/4) than this pytest-rocm reads (up to "
        "pytest-rocm/record/3) were left out: rebuild the verdict with the pytest-rocm that "
        "wrote them"
    )
    assert not any("controller was killed" in c for c in causes), causes
    assert "a record of pytest-rocm/record/4, a newer format" in report["record_problems"][0]
    # the format this reads is read as before
    same = _records(tmp_path / "now", "pytest-rocm/record/3")
    subprocess.run([sys.executable, "-m", "rocm_gate.cli", "verdict", same], timeout=120)
    assert json.loads((same / "gate-report.json").read_text())["complete"] is True
