"""Nothing a PR's tree writes changes what the check compares (plugin/default_branch.py): every
pytest-rocm setting (option_table.SETTINGS) and every pytest setting that changes what a run selects,
runs or counts (default_branch.PYTEST_SETTINGS), set in a PR's ini file and in its `addopts` under
`--rocm-rules`, is ignored (the default branch's value applies) and named in the manifest and on the
check; a blocking gate the run itself deselects makes it `incomplete`, never `success`.

The per-row tests are generated from the two tables: a new row is covered without editing this file
(its value is made from the row; `ATTACKS` only sharpens some rows into a real attack)."""

import argparse
import json
import shlex

import pytest

from pytest_rocm.gates.golden import GOLDEN_SCHEMA, golden_path
from pytest_rocm.plugin import default_branch, rules
from pytest_rocm.plugin.option_table import SETTINGS
from rocm_gate.github.artifacts import Results
from rocm_gate.github.checks import build

REGRESSED = "tests/test_gate.py::test_regressed"
GOLDEN = "tests/test_gate.py::test_golden"
# Two blocking gates: a regression that fails 5 attempts of 6 (so 5 reruns, of any plugin, would
# call it flaky), and a golden comparison a broken kernel fails (token 4 where the reference has 3).
GATES = """
import pathlib
import pytest

@pytest.mark.rocm_gate(group="engine")
def test_regressed():
    count = pathlib.Path("count")
    seen = int(count.read_text()) if count.exists() else 0
    count.write_text(str(seen + 1))
    assert seen >= 5, "wrong tokens"

@pytest.mark.rocm_gate(group="engine")
def test_golden(golden):
    golden.check("tokens", [[1, 2, 4]], [[{1: -0.1}, {2: -0.1}, {4: -0.1}]])
"""
OTHER = "def test_other():\n    pass\n"
# The default branch's settings: its report folder and golden outputs (relative to its ini file:
# the report folder is applied to the tree under test, the golden outputs are the default branch's).
RULES_INI = {"rocm_report_dir": "out", "rocm_golden_dir": "golden"}
# pytest's cache as a PR can commit it: the last run's failures, for --last-failed
LAST_FAILED = {"tests/test_other.py::test_other": True}
# Rows made into real attacks: each alone drops or passes the failing gates without --rocm-rules.
ATTACKS = {
    "-k": "-k nothing_matches",
    "-m": '-m "not rocm_gate"',
    "--deselect": f"--deselect={REGRESSED} --deselect={GOLDEN}",
    "--ignore": "--ignore=tests/test_gate.py",
    "--ignore-glob": "--ignore-glob=*test_gate*",
    "test paths": "tests/test_other.py",
    "--last-failed": "--last-failed",
    "--last-failed-no-failures": "--last-failed --last-failed-no-failures=none",
    "--reruns": "--reruns=5",
    "--force-reruns": "--force-reruns=5",
    "--rocm-golden-record": "--rocm-golden-record=.scratch",
    "testpaths": "tests/test_other.py",
    "python_files": "nothing_*.py",
    "python_functions": "nothing_*",
    "norecursedirs": "tests",
    "reruns": "5",
    "rocm_reruns": "5",
}
PR_VALUE = "pr-setting"


def _ini_text(settings: dict[str, str]) -> str:
    return "[pytest]\n" + "".join(f"{key} = {value}\n" for key, value in settings.items())


def _option_tokens(setting) -> str:
    """The row's option in a PR's `addopts`, with a value argparse accepts (it parses `addopts`
    before any plugin could set them aside)."""
    if setting.flag in ATTACKS:
        return ATTACKS[setting.flag]
    if not setting.takes_value:
        return setting.flag
    return f"{setting.flag}={_accepted(setting.kwargs)}"


def _accepted(kwargs: dict) -> str:
    """A value the option's parser accepts: its last choice, else the first of a few plain values
    its `type` (a validator of schemas/values.py, or int) takes, else any text."""
    if "choices" in kwargs:
        return str(kwargs["choices"][-1])
    parse = kwargs.get("type")
    for candidate in ("5", "1", "0.5", PR_VALUE):
        try:
            if parse is None or parse(candidate) is not None:
                return candidate
        except (ValueError, TypeError, argparse.ArgumentTypeError):
            continue
    return PR_VALUE


def _ini_value(setting) -> str:
    """The row's ini value in a PR's `pytest.ini`."""
    if setting.ini in ATTACKS:
        value = ATTACKS[setting.ini]
    elif setting.flag and not setting.takes_value:
        value = "true"
    elif setting.flag:
        value = _accepted(setting.kwargs)
    else:
        value = PR_VALUE
    return f"\n    {value}" if setting.ini_type == "linelist" else value


def _pytest_tokens(pytester, setting) -> str:
    """pytest's option in a PR's `addopts`, with a value its parser accepts."""
    if setting.flag in ATTACKS:
        return ATTACKS[setting.flag]
    config = pytester.parseconfig()
    action = next(a for a in config._parser.optparser._actions if a.dest == setting.dest)
    if action.nargs == 0:
        return setting.flag
    value = action.choices[-1] if action.choices else 5 if action.type in (int, float) else PR_VALUE
    return f"{setting.flag}={value}"


def _rows() -> list:
    return [pytest.param(s, id=s.flag or s.ini) for s in SETTINGS] + [
        pytest.param(s, id=f"pytest {s.flag or s.ini}") for s in default_branch.PYTEST_SETTINGS
    ]


def trees(pytester, pr_settings: dict[str, str]):
    """The default branch's checkout (`rules/`) and the PR's (`pr/`): the same tests and golden
    outputs, the PR's `pytest.ini` with `pr_settings` over the default branch's."""
    base, pr = pytester.mkdir("rules"), pytester.mkdir("pr")
    for tree, ini in ((base, RULES_INI), (pr, {**RULES_INI, **pr_settings})):
        (tree / "pytest.ini").write_text(_ini_text(ini))
        (tree / "tests").mkdir()
        (tree / "tests/test_gate.py").write_text(GATES)
        (tree / "tests/test_other.py").write_text(OTHER)
        reference = golden_path(tree / "golden", GOLDEN, "tokens")
        reference.parent.mkdir(parents=True)
        reference.write_text(
            json.dumps(
                {
                    "schema": GOLDEN_SCHEMA,
                    "token_ids": [[1, 2, 3]],
                    "logprobs": [[[[1, -0.1]], [[2, -0.1]], [[3, -0.1]]]],
                }
            )
        )
    cache = pr / ".pytest_cache/v/cache"
    cache.mkdir(parents=True)
    (cache / "lastfailed").write_text(json.dumps(LAST_FAILED))
    return base, pr


def run(pytester, tree, *args: str, rules_dir=None) -> tuple[pytest.RunResult, dict | None]:
    """pytest in `tree` on a simulated platform, and with the default branch's checkout, given by
    the environment, so that the command line sets nothing a PR's tree could set."""
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(tree)
        patch.setenv("PYTEST_ROCM_PLATFORM", "mi300x-2")
        if rules_dir is not None:
            patch.setenv(rules.ENVIRONMENT, str(rules_dir))
        result = pytester.runpytest_subprocess(*args)
    (tree / "count").unlink(missing_ok=True)
    report = tree / "out/gate-report.json"
    return result, json.loads(report.read_text()) if report.is_file() else None


def check_summary(report: dict, folder) -> str:
    results = Results(report=report, manifest=report["manifest"], parity=None, folder=folder)
    return build(results, "rocm-gate / MI300X-2").summary


def assert_judged_and_named(report: dict | None, result, names: list[str]) -> None:
    """The failing gates ran and were judged with the default branch's settings, and each setting
    the PR set is named."""
    assert report is not None, result.stdout.str()[-3000:] + result.stderr.str()[-3000:]
    assert report["conclusion"] == "failure", report["conclusion_reason"]
    assert report["tests"][REGRESSED]["verdict"] == "regression"
    assert report["tests"][GOLDEN]["verdict"] == "regression"  # compared, not recorded
    changed = report["manifest"]["verdict_config"]["rules"]["changed"]
    texts = [f"{c['setting']} {c['tree']}" for c in changed]
    for name in names:
        assert any(name in text for text in texts), (name, changed)


@pytest.mark.slow
@pytest.mark.parametrize("setting", _rows())
def test_a_setting_in_the_prs_tree_is_ignored_and_named(pytester, setting):
    """Each row set both ways a PR's tree can: its ini key in `pytest.ini`, its option in
    `addopts`."""
    if isinstance(setting, default_branch.PytestSetting):
        option = _pytest_tokens(pytester, setting) if setting.flag else None
        value = ATTACKS.get(setting.ini, PR_VALUE) if setting.ini else None
    else:
        option = _option_tokens(setting) if setting.flag else None
        value = _ini_value(setting) if setting.ini else None
    pr_settings = {setting.ini: value} if setting.ini else {}
    base, pr = trees(pytester, {**pr_settings, **({"addopts": option} if option else {})})
    result, report = run(pytester, pr, rules_dir=base)
    # a rule is named by its ini key, however the PR set it (rules.changes)
    rule = getattr(setting, "rule", False)
    names = [n for n in (setting.flag if option and not rule else None, setting.ini) if n]
    assert_judged_and_named(report, result, names)
    summary = check_summary(report, pr / "out")
    assert "this PR changes the rules of the verdict" in summary
    for name in names:
        assert name in summary


@pytest.mark.slow
@pytest.mark.parametrize(
    "settings,conclusion,verdicts",
    [
        ({"addopts": "--rocm-golden-record=.scratch"}, "failure", {GOLDEN: "pass"}),
        ({"addopts": f"--deselect={REGRESSED} --deselect={GOLDEN}"}, "incomplete", {}),
        ({"addopts": "--reruns=5"}, "failure", {REGRESSED: "flaky"}),
        ({"python_files": "nothing_*.py"}, "skipped", {}),
    ],
    ids=["golden-record", "deselect", "rerunfailures", "python_files"],
)
def test_without_the_rules_each_attack_passes_or_drops_a_gate(
    pytester, settings, conclusion, verdicts
):
    """What the attacks do without `--rocm-rules`: a gate passes (recorded, or rerun until it
    passed once), or never runs (a deselection is now `incomplete`, never `success`)."""
    _, pr = trees(pytester, settings)
    _, report = run(pytester, pr)
    assert report["conclusion"] == conclusion, report["conclusion_reason"]
    for nodeid, verdict in verdicts.items():
        assert report["tests"][nodeid]["verdict"] == verdict
    if conclusion == "incomplete":
        assert set(report["deselected"]) == {REGRESSED, GOLDEN}


@pytest.mark.slow
@pytest.mark.parametrize(
    "args,how",
    [
        ((f"--deselect={REGRESSED}",), "deselected"),
        (("-k", "not regressed"), "deselected"),
        (("-m", "not slow", "-p", "tests.dropper"), "dropped"),
    ],
    ids=["--deselect", "-k", "a-hook-drops-it"],
)
def test_a_blocking_gate_the_run_deselects_makes_it_incomplete(pytester, args, how):
    """The caller's command line applies (it names what the run covers), and a conftest's or a
    plugin's hook is code: the blocking gate they drop is named and the run is `incomplete`."""
    base, pr = trees(pytester, {})
    for tree in (base, pr):  # the golden gate passes here: only the dropped gate is missing
        reference = golden_path(tree / "golden", GOLDEN, "tokens")
        reference.write_text(reference.read_text().replace("[[1, 2, 3]]", "[[1, 2, 4]]"))
        reference.write_text(reference.read_text().replace("[[3, -0.1]]", "[[4, -0.1]]"))
    (pr / "tests/dropper.py").write_text(
        "def pytest_collection_modifyitems(items):\n"
        "    items[:] = [i for i in items if 'regressed' not in i.name]\n"
    )
    (pr / "tests/__init__.py").write_text("")
    result, report = run(pytester, pr, f"--rocm-rules={base}", *args)
    assert report is not None, result.stdout.str()[-3000:]
    assert report["conclusion"] == "incomplete", report["conclusion_reason"]
    assert report["deselected"] == {REGRESSED: how}
    assert report["manifest"]["deselected"] == {REGRESSED: how}
    assert REGRESSED in report["conclusion_reason"]
    assert REGRESSED in check_summary(report, pr / "out")


@pytest.mark.parametrize(
    "name,plain,section",
    [
        (
            "pyproject.toml",
            '[project]\nname = "x"\n',
            '[tool.pytest.ini_options]\nrocm_reruns = "5"\n',
        ),
        ("setup.cfg", "[metadata]\nname = x\n", "[tool:pytest]\nrocm_reruns = 5\n"),
        ("tox.ini", "[tox]\n", "[pytest]\nrocm_reruns = 5\n"),
    ],
)
def test_the_rules_file_is_found_by_content_not_by_place(pytester, name, plain, section):
    """The default branch has `name` without a pytest section and its settings in `pytest.ini`;
    the PR moves its own into `name`: the rules are still the default branch's `pytest.ini`."""
    base, pr = pytester.mkdir("rules"), pytester.mkdir("pr")
    (base / "pytest.ini").write_text("[pytest]\nrocm_reruns = 0\n")
    (base / name).write_text(plain)
    (pr / name).write_text(plain + section)
    (pr / "test_x.py").write_text("def test_x():\n    pass\n")
    config = pytester.parseconfig(pr / "test_x.py", f"--rocm-rules={base}")
    found = rules.find_rules_file(config, base)
    assert found.path == base / "pytest.ini"
    assert rules.rules_values(found.path) == {"rocm_reruns": "0"}
    assert default_branch.file_change(pr, config.inipath, found) == [
        {"setting": "pytest configuration file", "tree": name, "rules": "pytest.ini"}
    ]


def test_the_rules_file_is_found_from_the_tests_place_as_pytest_finds_it(pytester):
    """A nested configuration file of the default branch holds for the tests under it; nothing
    above the rules' folder is read; none at all is said."""
    base, pr = pytester.mkdir("main") / "rules", pytester.mkdir("pr")
    (pytester.path / "main/pytest.ini").write_text("[pytest]\nrocm_reruns = 7\n")  # above it
    for tree in (base, pr):
        (tree / "sub").mkdir(parents=True)
        (tree / "sub/test_x.py").write_text("def test_x():\n    pass\n")
    (base / "sub/tox.ini").write_text("[pytest]\nrocm_reruns = 0\n")
    (pr / ".git").mkdir()
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(pr)
        config = pytester.parseconfig("sub/test_x.py", f"--rocm-rules={base}")
    assert rules.find_rules_file(config, base).path == base / "sub/tox.ini"
    (base / "sub/tox.ini").unlink()
    found = rules.find_rules_file(config, base)
    assert found.path is None and "no pytest configuration file" in found.describe()
    (base / "pyproject.toml").write_text('[project]\nname = "x"\n')
    found = rules.find_rules_file(config, base)
    assert found.path == base / "pyproject.toml" and "no pytest table" in found.describe()


def test_a_broken_rules_file_is_named(pytester):
    base, pr = pytester.mkdir("rules"), pytester.mkdir("pr")
    (base / "setup.cfg").write_text("[pytest]\nrocm_reruns = 0\n")
    (pr / "test_x.py").write_text("def test_x():\n    pass\n")
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(pr)
        result = pytester.runpytest_subprocess(f"--rocm-rules={base}", "--rocm-platform=cpu")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*setup.cfg*pytest cannot read*[tool:pytest]*fix it*"])


@pytest.mark.parametrize("given", ["rules", "link", "link/../rules", "{pr}/rules", "{top}"])
def test_a_rules_folder_the_pr_could_commit_is_refused(pytester, given):
    """Relative to the PR's checkout, `rules` is the PR's own folder; a symlink there is the PR's
    too; a folder that holds the tree under test is no checkout of the default branch."""
    base, pr = pytester.mkdir("rules"), pytester.mkdir("pr")
    (pr / ".git").mkdir()
    (pr / "rules").mkdir()
    (pr / "link").symlink_to(base)
    (pr / "test_x.py").write_text("def test_x():\n    pass\n")
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(pr)
        result = pytester.runpytest_subprocess(
            "--rocm-rules=" + given.format(pr=pr, top=pytester.path), "--rocm-platform=cpu"
        )
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--rocm-rules*tree under test*absolute path*GITHUB_WORKSPACE*"])


def test_a_relative_rules_folder_outside_the_tree_is_resolved_once(pytester):
    base, pr = pytester.mkdir("rules"), pytester.mkdir("pr")
    (base / "pytest.ini").write_text("[pytest]\nrocm_reruns = 0\n")
    (pr / "test_x.py").write_text("def test_x():\n    pass\n")
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(pr)
        config = pytester.parseconfig("--rocm-rules=../rules")
    assert rules.rules_dir(config) == base.resolve()


@pytest.mark.parametrize("row", [s for s in SETTINGS if s.flag], ids=lambda s: s.flag)
def test_every_option_has_a_place_under_the_rules(row):
    """Generated from the table: what a run under --rocm-rules takes for each option, given the
    default branch's addopts and the command line (`given`) and the command line alone
    (`typed`)."""
    given, typed = {row.dest: "from-default-branch"}, {row.dest: "from-command-line"}
    wanted = default_branch.wanted_options(given, typed)[row.dest]
    expected = {
        "rule": None,  # from the default branch's file and addopts, as ini values
        "set aside": None,
        "command line": "from-command-line",
        "default branch": "from-default-branch",
    }[row.under_rules]
    assert wanted == expected
    if row.records:
        assert row.under_rules == "set aside" and row.effect


def test_a_change_names_where_the_pr_set_it_and_what_it_does():
    wanted = {"rocm_golden_record": None, "keyword": "x", "rocm_reruns": None}
    before = {"rocm_golden_record": ".scratch", "keyword": "y", "rocm_reruns": 5}
    where = {"ini": "pytest.ini", "addopts": "addopts in pytest.ini"}
    typed = type("Namespace", (), {"rocm_golden_record": None})()
    assert default_branch.option_changes(before, wanted, where, typed) == [
        {
            "setting": "--rocm-golden-record (golden outputs recorded instead of compared)",
            "tree": ".scratch (addopts in pytest.ini)",
            "rules": "(not set)",
        },
        {
            "setting": "-k (runs only the tests whose names match)",
            "tree": "y (addopts in pytest.ini)",
            "rules": "x",
        },
    ]  # the rules' own are named by rules.changes


def test_the_addopts_of_the_default_branch_are_split_as_pytest_splits_them():
    found = rules.RulesFile(None, None, {"addopts": '-m "not slow" --rocm-reruns=0'})
    assert default_branch._addopts(found) == shlex.split('-m "not slow" --rocm-reruns=0')
