"""Every value a setting takes is checked by its kind's validator (pytest_rocm/schemas/values.py):
generated over the plugin's option table and over the `rocm-gate` commands' number options, each
given an empty, NaN, infinite, negative, huge and garbage value, refuses it by name, without a
traceback, before any work is done (issue 63)."""

import argparse
import math

import pytest

from pytest_rocm.plugin.option_table import SETTINGS
from pytest_rocm.schemas import values

HUGE_WHOLE = "9" * 40
NUMBER_KINDS = {"whole", "number", "seconds", "hours", "share"}
# what each kind of value must refuse (the values any number must refuse, any text the empty one)
HOSTILE = {
    "number": ["", "nan", "inf", "-1", "1e400", HUGE_WHOLE, "garbage"],
    "text": [""],
    "command": ["", "python -c 'unbalanced"],
    "arguments": ["--flag 'unbalanced"],
    "choice": ["", "garbage"],
    "bool": ["", "garbage", "nan"],
}
# the ini keys that are lists of lines, and the lines each must refuse (a list set to nothing is
# no lines: `rocm_groups =` adds no group; rocm_baselines' paths are read when the gates run)
LINES = {
    "rocm_timeouts": [f"api={v}" for v in HOSTILE["number"]],
    "rocm_infra_signatures": ["x=bad(", "=nothing"],
}


def _kind(setting) -> str | None:
    if setting.value is not None:
        return "number" if setting.value.kind in NUMBER_KINDS else setting.value.kind
    if "choices" in setting.kwargs:
        return "choice"
    return None


def _option_cases():
    for setting in SETTINGS:
        kind = _kind(setting)
        if setting.flag and setting.takes_value and kind is not None:
            for value in HOSTILE[kind]:
                yield pytest.param(setting.flag, value, id=f"{setting.flag}={value[:12]}")


def _ini_cases():
    for setting in SETTINGS:
        if not setting.ini:
            continue
        if setting.ini_type == "linelist":
            for line in LINES.get(setting.ini, []):
                yield pytest.param(setting.ini, f"\n    {line}", id=f"{setting.ini}:{line[:14]}")
            continue
        kind = _kind(setting) or ("bool" if setting.kwargs.get("action") == "store_true" else None)
        assert kind is not None, f"{setting.ini}: no kind of value to check it by"
        for value in HOSTILE[kind]:
            yield pytest.param(setting.ini, f" {value}", id=f"{setting.ini}={value[:12]}")


def test_every_setting_that_takes_a_value_says_what_it_takes():
    """A row whose option takes a value has a validator, choices, or is the controller's own
    (`--rocm-rerun-helper`); a number never reaches argparse as a bare int or float."""
    for setting in SETTINGS:
        assert setting.kwargs.get("type") not in (int, float), setting.flag
        if setting.flag and setting.takes_value and setting.help != argparse.SUPPRESS:
            assert _kind(setting) is not None, f"{setting.flag}: no validator"


def _refused(result, name: str) -> str:
    output = result.stdout.str() + result.stderr.str()
    assert "Traceback" not in output and "INTERNALERROR" not in output, output
    assert result.ret == pytest.ExitCode.USAGE_ERROR, output
    assert name in output, output
    return output


@pytest.mark.parametrize("flag, value", list(_option_cases()))
def test_a_plugin_option_refuses_a_hostile_value_by_name(pytester, flag, value):
    pytester.makepyfile(test_a="def test_a(): pass")
    args = [f"{flag}={value}"] + ([] if flag == "--rocm-platform" else ["--rocm-platform=cpu"])
    _refused(pytester.runpytest_inprocess(*args, "-p", "no:cacheprovider"), flag)


@pytest.mark.parametrize("key, value", list(_ini_cases()))
def test_a_plugin_ini_key_refuses_a_hostile_value_by_name(pytester, key, value):
    pytester.makeini(f"[pytest]\n{key} ={value}\n")
    pytester.makepyfile(test_a="def test_a(): pass")
    _refused(pytester.runpytest_inprocess("--rocm-platform=cpu", "-p", "no:cacheprovider"), key)


def _number_options():
    """(argv to reach the parser, flag, the action) of every `rocm-gate` option whose type is a
    number's validator (or cli/blame.py's own `_positive`)."""
    from rocm_gate import cli

    def walk(parser, path):
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    yield from walk(sub, [*path, name])
            elif action.option_strings:
                kind = getattr(action.type, "kind", None)
                qualname = getattr(action.type, "__qualname__", "")
                if kind in NUMBER_KINDS or qualname.startswith("_positive"):
                    yield path, action.option_strings[-1], action

    found = {}
    for name in sorted(set(cli.COMMANDS.values())):
        parser = cli.build_parser(next(c for c, m in cli.COMMANDS.items() if m == name))
        for path, flag, action in walk(parser, []):
            found[(*path, flag)] = action
    return found


NUMBER_OPTIONS = _number_options()


def test_the_commands_number_options_are_found():
    names = {key[-1] for key in NUMBER_OPTIONS}
    for flag in ("--pace", "--attempts", "--timeout", "--backoff", "--settle", "--trunk-max-age"):
        assert flag in names
    for flag in ("--catch-up-hours", "--hours", "--stuck-after", "--after-hours", "--window"):
        assert flag in names
    for flag in ("--runners", "--index", "--min-parity", "--expect-gpus", "--app-id"):
        assert flag in names


def test_no_command_takes_a_bare_int_or_float():
    from rocm_gate import cli

    def walk(parser):
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for sub in action.choices.values():
                    yield from walk(sub)
            else:
                yield action

    bare = [
        f"{name} {'/'.join(action.option_strings)}"
        for name in cli.COMMANDS
        for action in walk(cli.build_parser(name))
        if action.type in (int, float)
    ]
    assert bare == []


@pytest.mark.parametrize("key", sorted(NUMBER_OPTIONS), ids=" ".join)
@pytest.mark.parametrize("value", HOSTILE["number"])
def test_a_commands_number_option_refuses_a_hostile_value_by_name(key, value, capsys):
    from rocm_gate import cli

    *path, flag = key
    with pytest.raises(SystemExit) as exited:
        cli.build_parser(path[0]).parse_args([*path, f"{flag}={value}"])
    err = capsys.readouterr().err
    assert exited.value.code == 2 and f"argument {flag}" in err and "Traceback" not in err, err


@pytest.mark.parametrize("command", ["publish", "sweep", "trust", "rerun", "tracker"])
def test_a_bad_pace_in_the_environment_is_named_and_never_breaks_help(command, monkeypatch, capsys):
    from rocm_gate import cli

    monkeypatch.setenv("ROCM_GATE_PACE", "abc")
    with pytest.raises(SystemExit) as shown:
        cli.main([command, "--help"])
    assert shown.value.code == 0
    capsys.readouterr()
    with pytest.raises(SystemExit) as refused:
        cli.build_parser(command).parse_args([command])
    err = capsys.readouterr().err
    assert refused.value.code == 2 and "$ROCM_GATE_PACE: 'abc' is not a number" in err, err


def test_the_pace_comes_from_the_option_else_the_environment(monkeypatch):
    from rocm_gate import cli

    tracker = ["tracker", "--trunk", "t.json", "--framework", "vllm"]
    monkeypatch.setenv("ROCM_GATE_PACE", "abc")
    assert cli.build_parser("tracker").parse_args([*tracker, "--pace", "0"]).pace == 0.0
    monkeypatch.setenv("ROCM_GATE_PACE", "0.5")
    assert cli.build_parser("tracker").parse_args(tracker).pace == 0.5
    monkeypatch.delenv("ROCM_GATE_PACE")
    assert cli.build_parser("tracker").parse_args(tracker).pace == 1.0


@pytest.mark.parametrize(
    "given, canonical",
    [("7", "7-1"), ("007-1", "7-1"), ("7-1", "7-1"), ("7-01", "7-1"), ("12345-3", "12345-3")],
)
def test_a_github_run_has_one_canonical_form(given, canonical):
    assert values.github_run(given) == canonical


@pytest.mark.parametrize(
    "given, says",
    [
        ("7-0", "attempts are numbered from 1"),
        ("0", "run id is a whole number from 1"),
        ("", "is not a GitHub run"),
        ("7-1; rm -rf /", "is not a GitHub run"),
        ("9" * 30, "run id is a whole number from 1"),
    ],
)
def test_a_github_run_that_is_none_is_refused_by_name(given, says):
    with pytest.raises(values.BadValue, match="--run") as raised:
        values.github_run(given, "--run")
    assert says in str(raised.value)


def test_the_validators_put_each_value_in_one_form():
    assert values.seconds(" 2.5 ", high=60) == 2.5 and values.seconds(1, high=60) == 1.0
    assert values.hours("48", high=2160) == 48.0
    assert values.count("+4", low=0, high=9) == 4
    assert values.share("0.5") == 0.5
    for bad in ("1_000", "3.0", "1e3", "0x10", "", True):
        with pytest.raises(values.BadValue):
            values.count(bad, low=0, high=10**6)
    for bad in (math.nan, math.inf, -math.inf, "NaN", "-inf", "infinity"):
        with pytest.raises(values.BadValue, match="not a finite number"):
            values.hours(bad, "--trunk-max-age", high=2160)


def test_a_bad_value_is_bad_input_and_an_argparse_error_alike():
    from pytest_rocm.errors import BadInput

    assert issubclass(values.BadValue, BadInput)
    assert issubclass(values.BadValue, argparse.ArgumentTypeError)


def test_a_folder_is_never_a_file(tmp_path):
    (tmp_path / "f").write_text("x")
    with pytest.raises(values.BadValue, match="a file, not a folder"):
        values.folder("f", "--rocm-report-dir", base=tmp_path)
    with pytest.raises(values.BadValue, match="does not exist"):
        values.folder("missing", "--rocm-golden", base=tmp_path, exists=True)
    assert values.folder("new", "--rocm-report-dir", base=tmp_path) == tmp_path / "new"


def test_a_misspelt_setting_is_named_with_the_one_meant():
    known = {"rocm_reruns", "rocm_report_dir"}
    assert "did you mean rocm_report_dir?" in values.setting_name("rocm_report_dri", known)
    assert "did you mean rocm_reruns?" in values.setting_name("ROCM-RERUNS", known)
    assert values.setting_name("addopts", known) is None
    assert values.setting_name("rocm_reruns", known) is None


def test_an_environment_default_is_read_only_where_the_option_is_not_given(monkeypatch):
    monkeypatch.delenv("ROCM_GATE_TEST_VALUE", raising=False)
    assert values.environment("ROCM_GATE_TEST_VALUE", "1") == "1"
    monkeypatch.setenv("ROCM_GATE_TEST_VALUE", "  ")
    assert values.environment("ROCM_GATE_TEST_VALUE", "1") == "1"  # set to nothing: the default
    monkeypatch.setenv("ROCM_GATE_TEST_VALUE", "x")
    found = values.environment("ROCM_GATE_TEST_VALUE", "1")
    assert found == "x" and found.variable == "ROCM_GATE_TEST_VALUE"
    option = values.Option(values.seconds, high=60)
    with pytest.raises(values.BadValue, match=r"^\$ROCM_GATE_TEST_VALUE: 'x' is not a number"):
        option(found)


def test_the_rules_folder_is_refused_empty_and_as_the_tree_itself(pytester):
    """`--rocm-rules=` was taken as not given (the PR's own quarantine then excused its regression,
    `success`); `--rocm-rules=.` from the PR's checkout is its own tree."""
    pytester.makepyfile(test_a="def test_a(): pass")
    (pytester.path / ".git").mkdir()
    for given, says in (("--rocm-rules=", "empty"), ("--rocm-rules=.", "in the tree under test")):
        result = pytester.runpytest_subprocess("--rocm-platform=cpu", given)
        assert says in _refused(result, "--rocm-rules")


def test_the_rules_variable_set_to_nothing_is_refused(pytester, monkeypatch):
    pytester.makepyfile(test_a="def test_a(): pass")
    monkeypatch.setenv("PYTEST_ROCM_RULES", "")
    _refused(pytester.runpytest_subprocess("--rocm-platform=cpu"), "$PYTEST_ROCM_RULES: empty")


def test_a_misspelt_key_in_the_rules_own_file_is_refused(pytester, monkeypatch):
    """The same typo the PR's file is refused for was ignored in the default branch's own."""
    rules = pytester.mkdir("rules")
    (rules / "pytest.ini").write_text("[pytest]\nrocm_quarantine_file = q.json\n")
    tree = pytester.mkdir("tree")
    (tree / ".git").mkdir()
    (tree / "test_a.py").write_text("def test_a(): pass\n")
    monkeypatch.chdir(tree)
    result = pytester.runpytest_subprocess(
        "--rocm-platform=cpu", f"--rocm-rules={rules}", str(tree)
    )
    output = _refused(result, "rocm_quarantine_file is not a pytest-rocm setting")
    assert "(did you mean rocm_quarantine?)" in output and "fix it on the default branch" in output


def test_an_ini_key_set_to_nothing_is_refused_but_a_list_of_nothing_is_none(pytester):
    pytester.makeini("[pytest]\nrocm_reruns =\n")
    pytester.makepyfile(test_a="def test_a(): pass")
    _refused(pytester.runpytest_subprocess("--rocm-platform=cpu"), "rocm_reruns: set to nothing")
    pytester.makeini("[pytest]\nrocm_groups =\n")
    assert pytester.runpytest_subprocess("--rocm-platform=cpu").ret == 0
