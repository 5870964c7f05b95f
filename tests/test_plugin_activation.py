"""The plugin is inert until a run asks for it, and the report folder holds one run's files only
(through pytester).

Whether hardware detection ran is seen from outside: the GPU tools it calls (amd-smi, rocminfo,
rocm-smi, nvidia-smi) are replaced on PATH by scripts that log their name and fail, as on a host
without a driver.
"""

import json
import os
import stat

import pytest
from conftest import read_report

PLAIN = """
    def test_one():
        pass

    def test_two():
        assert 1 + 1 == 2
"""

MARKED = """
    import pytest

    def test_plain():
        pass

    @pytest.mark.hardware(gpus=1)
    def test_needs_a_gpu():
        pass
"""


@pytest.fixture
def tool_log(tmp_path_factory, monkeypatch):
    """GPU tools on PATH that log each call: the log stays empty unless something detects the
    hardware."""
    folder = tmp_path_factory.mktemp("fake-tools")
    log = folder / "calls.log"
    for name in ("amd-smi", "rocminfo", "rocm-smi", "nvidia-smi"):
        script = folder / name
        script.write_text(f"#!/bin/sh\necho {name} >> '{log}'\nexit 1\n")
        script.chmod(script.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ['PATH']}")
    return log


def calls(log) -> list[str]:
    return log.read_text().split() if log.exists() else []


@pytest.mark.parametrize(
    "args", [[], ["-n", "2"], ["--collect-only"]], ids=["alone", "xdist", "collect-only"]
)
def test_a_project_with_no_setting_and_no_marker_is_plain_pytest(pytester, tool_log, args):
    pytester.makepyfile(test_plain=PLAIN)
    result = pytester.runpytest_subprocess("--junitxml=junit.xml", "-p", "no:cacheprovider", *args)
    assert result.ret == 0, result.stdout.str()
    assert calls(tool_log) == [], "hardware detection ran in a run that never asked for the plugin"
    assert "pytest-rocm" not in result.stdout.str()
    if "--collect-only" not in args:
        result.assert_outcomes(passed=2)
        assert "rocm_" not in (pytester.path / "junit.xml").read_text()
    # pytester's own
    written = sorted(
        p.name
        for p in pytester.path.iterdir()
        if not p.name.startswith("runpytest") and p.name not in ("stdout", "stderr")
    )
    # pytest's JUnit file, written even by --collect-only
    assert written == ["junit.xml", "test_plain.py"]


def test_an_ini_setting_asks_for_the_plugin(pytester, tool_log):
    pytester.makepyfile(test_plain=PLAIN)
    pytester.makeini("[pytest]\nrocm_reruns = 1\n")
    result = pytester.runpytest_subprocess("--junitxml=junit.xml", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=2)
    assert "amd-smi" in calls(tool_log)  # the platform was detected
    assert 'name="rocm_sku"' in (pytester.path / "junit.xml").read_text()


@pytest.mark.parametrize("args", [[], ["-n", "2"]], ids=["alone", "xdist"])
def test_a_marked_test_wakes_the_plugin_without_any_setting(pytester, tool_log, args):
    pytester.makepyfile(test_marked=MARKED)
    result = pytester.runpytest_subprocess(
        "--junitxml=junit.xml", "-p", "no:cacheprovider", "-rs", *args
    )
    result.assert_outcomes(passed=1, skipped=1)
    # the marker was read against the real platform
    result.stdout.fnmatch_lines(["*not applicable: *GPU*"])
    assert calls(tool_log), "the hardware marker was judged without detecting the hardware"
    junit = (pytester.path / "junit.xml").read_text()
    # the platform, once per file, as in a run that asked
    assert 'name="rocm_sku" value="none"' in junit


def test_collect_only_never_touches_the_report_folder(pytester):
    pytester.makepyfile(test_plain=PLAIN)
    report = pytester.path / "report"
    pytester.runpytest_subprocess(
        "--rocm-platform=cpu", f"--rocm-report-dir={report}"
    ).assert_outcomes(passed=2)
    before = {p.name: p.stat().st_mtime_ns for p in report.iterdir()}
    assert "gate-report.json" in before
    listed = pytester.runpytest_subprocess(
        "--rocm-platform=cpu", f"--rocm-report-dir={report}", "--collect-only"
    )
    assert listed.ret == 0, listed.stdout.str()
    assert {p.name: p.stat().st_mtime_ns for p in report.iterdir()} == before
    missing = pytester.path / "never-made"
    pytester.runpytest_subprocess(
        "--rocm-platform=cpu", f"--rocm-report-dir={missing}", "--collect-only"
    )
    assert not missing.exists()


def test_a_reused_report_folder_keeps_nothing_of_the_earlier_run(pytester):
    """The second run has one test, no JUnit file and no proposals: nothing of the first may be read
    with it."""
    pytester.makepyfile(
        test_first="""
        import pytest

        @pytest.mark.rocm_gate(group="engine")
        def test_old_gate():
            assert False
    """
    )
    report = pytester.path / "report"
    first = pytester.runpytest_subprocess(
        "--rocm-platform=cpu",
        f"--rocm-report-dir={report}",
        f"--junitxml={report / 'junit.xml'}",
        "-n",
        "2",
    )
    first.assert_outcomes(failed=1)
    (report / "servers").mkdir(exist_ok=True)
    (report / "servers" / "vllm-1.log").write_text("an earlier run's server log\n")
    assert (report / "junit.xml").exists()
    (pytester.path / "test_first.py").unlink()
    pytester.makepyfile(
        test_second="""
        import pytest

        @pytest.mark.rocm_gate(group="attention")
        def test_new_gate():
            pass
    """
    )
    second = pytester.runpytest_subprocess("--rocm-platform=cpu", f"--rocm-report-dir={report}")
    second.assert_outcomes(passed=1)
    names = sorted(p.name for p in report.iterdir() if not p.name.startswith("."))
    assert "junit.xml" not in names and "servers" not in names, names
    gate = read_report(report)
    assert gate["conclusion"] == "success"
    text = json.dumps(gate) + "".join(p.read_text() for p in report.glob("records-*.jsonl"))
    assert "test_old_gate" not in text


def test_a_folder_with_files_of_its_own_is_refused_and_left_as_it_was(pytester):
    pytester.makepyfile(test_plain=PLAIN)
    pytester.makefile(".txt", **{"notes": "a maintainer's notes"})
    result = pytester.runpytest_subprocess(
        "--rocm-platform=cpu", f"--rocm-report-dir={pytester.path}"
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            f"*--rocm-report-dir {pytester.path} holds files pytest-rocm did not write*"
            "notes.txt*give a new or empty folder*"
        ]
    )
    assert (pytester.path / "notes.txt").read_text() == "a maintainer's notes"
    assert (pytester.path / "test_plain.py").exists()


def test_every_setting_of_the_table_is_an_option_or_ini_key_pytest_knows(pytester):
    """plugin/option_table.py is the one declaration: pytest's help lists each row's option and
    ini key, and each option's help that names an ini key names its own row's."""
    import re

    from pytest_rocm.plugin.option_table import SETTINGS

    shown = pytester.runpytest("--help").stdout.str()
    for setting in SETTINGS:
        if setting.flag and setting.help != "==SUPPRESS==":
            assert setting.flag in shown, setting.flag
        if setting.ini:
            assert re.search(rf"^\s+{setting.ini}\b", shown, re.M), setting.ini
        for named in re.findall(r"\bini (rocm_\w+)", setting.help):
            assert named == setting.ini, (
                f"{setting.flag}'s help names {named}, its ini is {setting.ini}"
            )


@pytest.mark.parametrize("option", ["--rocm-model", "--rocm-model-dir", "--rocm-golden-record"])
def test_a_path_option_typed_with_a_space_that_moves_the_rootdir_is_refused(pytester, option):
    """Every path option of the table, not only the report folder's: its value, taken by pytest
    for a test path too, would choose another rootdir and change every node id."""
    pytester.makeini("[pytest]\nrocm_reruns = 1\n")
    pytester.makepyfile(test_one="def test_one():\n    pass\n")
    elsewhere = pytester.path.parent / f"elsewhere-{option.strip('-')}"
    elsewhere.mkdir()
    (elsewhere / "pytest.ini").write_text("[pytest]\n")
    result = pytester.runpytest(option, str(elsewhere), "test_one.py")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*{option} {elsewhere}: pytest takes this path for a test path*"])
