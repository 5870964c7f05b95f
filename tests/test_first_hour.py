"""Issue 60: a maintainer's first hour, as they run it. What was counted on vLLM's real tree: a
command-line group map the rules dropped without a word, a run stopped by Ctrl-C that concluded
`failure` without saying it was interrupted, a 15-column table of zeros, a simulated platform that
read like a detected one, a misspelt shipped map answered with "no such file", and `rocm-gate --help`
listing every command in one paragraph."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from conftest import read_report

from rocm_gate.cli import main as rocm_gate

GATE = "import pytest\n\n@pytest.mark.rocm_gate(group='engine', blocking=True)\ndef test_gate():\n    pass\n"


def checkouts(pytester, default_branch_ini: str):
    """The default branch's checkout (`rules/`) and the maintainer's (`work/`), the same test."""
    base, work = pytester.mkdir("rules"), pytester.mkdir("work")
    for tree, ini in ((base, default_branch_ini), (work, "[pytest]\n")):
        (tree / "pytest.ini").write_text(ini)
        (tree / "tests").mkdir()
        (tree / "tests/test_engine.py").write_text(GATE)
    return base, work


def run_in(pytester, tree, *args):
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(tree)
        patch.delenv("PYTEST_ROCM_PLATFORM", raising=False)
        return pytester.runpytest_subprocess("--rocm-platform=cpu", "-p", "no:cacheprovider", *args)


def test_a_group_map_on_the_command_line_that_the_rules_override_is_said_in_the_terminal(pytester):
    """The shipped workflow always passes --rocm-rules, under which the map is a rule read from the
    default branch's ini file alone: the `--rocm-group-map=vllm` a maintainer typed was ignored with
    no word. It is said at the start and at the end, naming the setting and where the rule came
    from; the check names it too (the manifest's `verdict_config.rules.changed`)."""
    base, work = checkouts(pytester, "[pytest]\n")
    result = run_in(
        pytester, work, f"--rocm-rules={base}", "--rocm-group-map=vllm", "--rocm-report-dir=out"
    )
    warning = (
        "pytest-rocm: warning: --rocm-group-map=vllm on the command line is ignored: under "
        f"--rocm-rules rocm_group_map is a rule of the verdict, read only from the default branch's "
        f"{base / 'pytest.ini'}, where it is (not set); set it there"
    )
    assert result.stdout.str().count(warning) == 2, result.stdout.str()
    assert result.stdout.lines.index(warning) < result.stdout.lines.index("collected 1 item")
    report = read_report(work / "out")
    changed = report["manifest"]["verdict_config"]["rules"]["changed"]
    assert {"setting": "rocm_group_map", "tree": "vllm", "rules": "(default)"} in changed


def test_the_map_in_the_default_branchs_ini_file_is_the_one_place_both_agree_on(pytester):
    """The guide's one place: `rocm_group_map = vllm` in the ini file, merged on the default branch.
    The shipped workflow's run (--rocm-rules) and a maintainer's own run read the same map, with no
    warning."""
    base, work = checkouts(pytester, "[pytest]\nrocm_group_map = vllm\n")
    (work / "pytest.ini").write_text("[pytest]\nrocm_group_map = vllm\n")
    (work / "tests/test_plain.py").write_text("def test_plain():\n    pass\n")
    for tree in (base, work):
        (tree / "tests/v1/core").mkdir(parents=True)
        (tree / "tests/v1/core/test_scheduler.py").write_text(
            "def test_add_requests():\n    pass\n"
        )
    ruled = run_in(pytester, work, f"--rocm-rules={base}", "--rocm-report-dir=out")
    assert "warning" not in ruled.stdout.str()
    groups = {n: t["group"] for n, t in read_report(work / "out")["tests"].items()}
    assert groups["tests/v1/core/test_scheduler.py::test_add_requests"] == "engine"
    plain = run_in(pytester, work, "--rocm-report-dir=out2")
    assert (
        read_report(work / "out2")["tests"]["tests/v1/core/test_scheduler.py::test_add_requests"][
            "group"
        ]
        == "engine"
    )
    assert "warning" not in plain.stdout.str()


def test_a_setting_the_tree_under_test_sets_otherwise_is_said_in_the_terminal_too(pytester):
    base, work = checkouts(pytester, "[pytest]\nrocm_reruns = 0\n")
    (work / "pytest.ini").write_text("[pytest]\nrocm_reruns = 5\n")
    result = run_in(pytester, work, f"--rocm-rules={base}", "--rocm-report-dir=out")
    result.stdout.fnmatch_lines(
        [
            "pytest-rocm: warning: rocm_reruns: 5 in the tree under test is ignored under "
            "--rocm-rules (the default branch's: 0); it applies after merge"
        ]
    )


SLOW_COLLECTION = """
import time
time.sleep(60)  # a whole tree's collection: the maintainer stops it
"""


def test_an_interrupted_run_says_so_first_and_never_concludes_on_what_it_did_not_run(pytester):
    """`pytest tests` on vLLM's whole tree, stopped after 10 minutes with 0 tests run, concluded
    `failure` and did not say it was interrupted."""
    pytester.makepyfile(
        test_a=GATE,
        test_b="from vllm_gone import thing\n",
        test_slow=SLOW_COLLECTION,
    )
    environment = {k: v for k, v in os.environ.items() if k != "PYTEST_ROCM_PLATFORM"}
    process = subprocess.Popen(
        [sys.executable, "-m", "pytest", "--rocm-platform=cpu", "--rocm-report-dir=out"]
        + ["-p", "no:cacheprovider", "--continue-on-collection-errors"],
        cwd=pytester.path,
        env=environment,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not (pytester.path / "test_slow.py").exists():
        time.sleep(0.1)
    time.sleep(4)  # inside test_slow's import
    process.send_signal(signal.SIGINT)
    output, _ = process.communicate(timeout=60)
    report = read_report(pytester.path / "out")
    assert report["interrupted"] == "Ctrl-C (KeyboardInterrupt)", output
    assert report["conclusion"] == "incomplete"
    assert report["conclusion_reason"].startswith(
        "interrupted (Ctrl-C (KeyboardInterrupt)) after 0 test(s) ran"
    ), report["conclusion_reason"]
    summary = output[output.index("pytest-rocm on") :].splitlines()
    assert summary[1].startswith("run interrupted (Ctrl-C (KeyboardInterrupt)):"), summary


def test_the_conclusion_of_an_interrupted_run_names_the_interruption_first():
    from pytest_rocm.results.conclusion import conclusion

    run = {
        "complete": False,
        "incomplete_causes": ["interrupted (Ctrl-C) after 3 test(s) ran"],
        "collection_errors": [{"nodeid": "t.py", "cause": "change", "detail": "SyntaxError"}],
        "interrupted": "Ctrl-C",
    }
    verdict, why = conclusion({}, run)
    assert verdict == "failure" and why.startswith(
        "interrupted before its end (Ctrl-C): 1 test file"
    )


def test_a_simulated_platform_is_marked_as_such(pytester):
    pytester.makepyfile(test_a=GATE)
    simulated = pytester.runpytest_subprocess("--rocm-platform=mi300x-8", "--rocm-report-dir=out")
    simulated.stdout.fnmatch_lines(
        ["=*pytest-rocm on mi300x-8, SIMULATED (8 x MI300X): the tests ran on this machine*="]
    )


@pytest.mark.parametrize(
    "given,nearest", [("vlm", "vllm"), ("sglng", "sglang"), ("pytest_rocm:vlm", "pytest_rocm:vllm")]
)
def test_a_misspelt_shipped_map_is_answered_with_the_nearest_name(tmp_path, capsys, given, nearest):
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(tmp_path)
        with pytest.raises(SystemExit) as stopped:
            rocm_gate(["groups", "--map", given, "."])
    assert stopped.value.code == 2
    error = capsys.readouterr().err
    assert f"did you mean {nearest!r}?" in error, error


def test_a_misspelt_shipped_map_given_to_pytest_is_answered_too(pytester):
    pytester.makepyfile(test_a=GATE)
    result = pytester.runpytest_subprocess("--rocm-group-map=vlm", "--rocm-platform=cpu")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*did you mean 'vllm'?*"])


def test_rocm_gate_help_lists_a_maintainers_commands_first(capsys):
    with pytest.raises(SystemExit):
        rocm_gate(["--help"])
    text = capsys.readouterr().out
    maintainer = text.index("adopting pytest-rocm")
    operators = text.index("running the gate")
    for command in ("groups", "verdict", "parity", "select", "register-markers", "doctor"):
        assert maintainer < text.index(f"\n  {command} ") < operators, command
    for command in ("publish", "sweep", "trust", "preflight", "drain", "history", "blame"):
        assert text.index(f"\n  {command} ") > operators, command
    assert "{doctor,verdict" not in text
    from rocm_gate.cli import ALIASES, AUDIENCES, COMMANDS

    listed = [name for _, names in AUDIENCES for name in names] + list(ALIASES)
    assert sorted(listed) == sorted(COMMANDS)


def test_the_collect_only_table_points_at_what_lists_everything(pytester):
    """Step 3's output pointed at a `--json` pytest does not have."""
    for n in range(25):
        pytester.makepyfile(**{f"stray/test_{n}.py": "def test_a():\n    pass\n"})
    pytester.makefile(
        ".toml",
        groups='schema = "pytest-rocm/groups/1"\n[[rule]]\ngroup = "engine"\npaths = ["core/"]\n',
    )
    result = pytester.runpytest_subprocess("--collect-only", "-q", "--rocm-group-map=groups.toml")
    text = result.stdout.str()
    assert "--json lists all" not in text
    assert "more (`rocm-gate groups --map MAP . --json` lists all)" in text, text[-2000:]


def test_verdict_prints_the_compact_table_and_marks_the_simulated_platform(pytester, capsys):
    pytester.makepyfile(test_a=GATE)
    pytester.runpytest_subprocess("--rocm-platform=mi300x-8", "--rocm-report-dir=out")
    capsys.readouterr()
    assert rocm_gate(["verdict", str(pytester.path / "out")]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == (
        "pytest-rocm on mi300x-8, SIMULATED (8 x MI300X): the tests ran on this machine"
    )
    assert lines[1].split() == ["group", "gates", "blocking", "passed", "total"]
    assert lines[2].split() == ["engine", "1", "1", "1", "1"]
    assert json.loads((pytester.path / "out/gate-report.json").read_text())["interrupted"] is None
