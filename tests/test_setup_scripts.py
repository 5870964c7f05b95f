"""The set-up scripts' shared helpers (scripts/install-common.sh), run by bash as the scripts run
them: the checks before a first install (a path without whitespace, the free space), and pip's output on failure, a full
disk named as such."""

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

COMMON = Path(__file__).resolve().parent.parent / "scripts" / "install-common.sh"


def run_bash(script, cwd, env=None):
    return subprocess.run(
        ["bash", "-c", f"set -euo pipefail; source {COMMON}; {script}"],
        cwd=cwd,
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        timeout=60,
    )


def free_mb(path):
    return shutil.disk_usage(path).free // 2**20


def test_too_little_space_fails_before_installing_and_names_the_figures(tmp_path):
    too_much = free_mb(tmp_path) + 10_000
    result = run_bash(
        f"require_free_space setup-x {tmp_path / '.venv-x'} {too_much} 0; echo installing", tmp_path
    )
    assert result.returncode == 1
    assert "installing" not in result.stdout
    message = result.stderr
    assert "setup-x: not enough disk space to install" in message and ".venv-x" in message
    assert (
        f"{too_much} MB installed" in message
        and "MB free" in message
        and "nothing was installed" in message
    )


def test_what_an_environment_already_holds_is_not_needed_again(tmp_path):
    venv = tmp_path / ".venv-x"
    venv.mkdir()
    (venv / "lib.bin").write_bytes(os.urandom(3 * 2**20))
    # Installing 3 MB where 3 MB are already there needs nothing more, however full the disk.
    assert (
        run_bash(f"require_free_space setup-x {venv} 3 0; echo installing", tmp_path).stdout
        == "installing\n"
    )
    result = run_bash(f"require_free_space setup-x {venv} {free_mb(tmp_path) + 10_000} 0", tmp_path)
    assert result.returncode == 1
    already = re.search(r"(\d+) MB already there", result.stderr)
    assert already and int(already.group(1)) >= 3  # du counts whole blocks


def test_downloads_count_on_the_filesystem_of_pips_temporary_folder(tmp_path):
    elsewhere = Path("/dev/shm")
    if not elsewhere.is_dir() or os.stat(elsewhere).st_dev == os.stat(tmp_path).st_dev:
        pytest.skip(
            "needs a temporary folder on another filesystem than the checkout (/dev/shm here)"
        )
    # Downloads larger than the checkout's disk are fine when they go to another filesystem with
    # room...
    room = run_bash(
        f"require_free_space setup-x {tmp_path / 'v'} 0 {free_mb(elsewhere) - 1}",
        tmp_path,
        env={"TMPDIR": str(elsewhere)},
    )
    assert room.returncode == 0, room.stderr
    # ...and fail, naming that folder and TMPDIR, when that filesystem lacks the room.
    short = run_bash(
        f"require_free_space setup-x {tmp_path / 'v'} 0 {free_mb(elsewhere) + 10_000}",
        tmp_path,
        env={"TMPDIR": str(elsewhere)},
    )
    assert short.returncode == 1
    assert f"temporary folder {elsewhere}" in short.stderr and "TMPDIR" in short.stderr


PIP_ON_A_FULL_DISK = r"""
    for i in 1 2 3; do
        echo "WARNING: Location 'file:///opt/pypi/simple/p$i/' is ignored: it is neither a file nor a directory."
    done
    echo "ERROR: Could not install packages due to an OSError: [Errno 28] No space left on device"
    exit 1
"""


def test_a_full_disk_is_named_and_the_wheel_store_notes_are_left_out(tmp_path):
    (tmp_path / "pip.sh").write_text(PIP_ON_A_FULL_DISK)
    result = run_bash(
        "pip_logged setup-x 'the things into .venv-x' bash pip.sh; echo after", tmp_path
    )
    assert result.returncode == 1 and "after" not in result.stdout
    assert "is ignored" not in result.stderr
    assert "[Errno 28] No space left on device" in result.stderr
    assert "setup-x: installing the things into .venv-x failed: the disk filled up" in result.stderr


def test_other_failures_point_at_pips_output_and_success_shows_it(tmp_path):
    failed = run_bash(
        "pip_logged setup-x things bash -c 'echo ERROR: no matching distribution; exit 1'", tmp_path
    )
    assert failed.returncode == 1
    assert "ERROR: no matching distribution" in failed.stderr
    assert "setup-x: installing things failed (pip's output above)" in failed.stderr
    passed = run_bash(
        "pip_logged setup-x things bash -c \"echo 'WARNING: Location x is ignored'; echo done\"",
        tmp_path,
    )
    assert passed.returncode == 0 and passed.stdout == "done\n"


def test_a_checkout_path_with_a_space_is_refused_before_installing_naming_the_cause(tmp_path):
    spaced = tmp_path / "my checkout"
    spaced.mkdir()
    result = run_bash("require_plain_path setup-x; echo installing", spaced)
    assert result.returncode == 2 and "installing" not in result.stdout
    assert (
        f"'{spaced}'" in result.stderr
        and "without spaces" in result.stderr
        and "upstream" in result.stderr
    )
    assert (
        run_bash("require_plain_path setup-x; echo installing", tmp_path).stdout == "installing\n"
    )
