"""The rules of the verdict belong to the default branch (plugin/rules.py): under `--rocm-rules` a
PR's own tree, its `addopts` and the caller's command line change no rule; what the tree sets
otherwise is listed, and the check names it."""

import json
from pathlib import Path

import pytest
from conftest import read_report

from pytest_rocm.plugin import rules
from rocm_gate.github.artifacts import Results
from rocm_gate.github.checks import build

# A regression: fails on 5 attempts of 6 (`count` counts them), so 5 reruns would call it flaky.
TEST = """
import pathlib
import pytest

@pytest.mark.rocm_gate(group="engine")
def test_regressed():
    count = pathlib.Path("count")
    seen = int(count.read_text()) if count.exists() else 0
    count.write_text(str(seen + 1))
    assert seen >= 5, "wrong tokens"
"""
QUARANTINE = {
    "schema": "pytest-rocm/quarantine/1",
    "tests": [{"test": "test_gate.py::test_regressed", "reason": "broken on main", "sku": None}],
}
# what a PR's tree can set to make that regression pass the check, each alone
ATTACKS = {
    "quarantine": "rocm_quarantine = quarantine.json\n",
    "signatures": "rocm_infra_signatures =\n    anything=.\nrocm_health_probe = false\n",
    "reruns": "rocm_reruns = 5\n",
    "addopts": "addopts = --rocm-reruns=5 --rocm-quarantine=quarantine.json\n",
}


def trees(pytester, attack: str) -> tuple[Path, Path]:
    """The default branch's checkout (`rules/`: an ini file with no rule set) and the PR's (`pr/`,
    the same tree with one attack)."""
    base, pr = pytester.mkdir("rules"), pytester.mkdir("pr")
    for tree, extra in ((base, ""), (pr, ATTACKS[attack])):
        (tree / "pytest.ini").write_text("[pytest]\n" + extra)
        (tree / "test_gate.py").write_text(TEST)
    (pr / "quarantine.json").write_text(json.dumps(QUARANTINE))
    return base, pr


def run(pytester, tree: Path, *args: str) -> dict:
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(tree)
        pytester.runpytest_subprocess(
            "--rocm-platform=mi300x-2", "--rocm-report-dir=out", "-p", "no:cacheprovider", *args
        )
    (tree / "count").unlink(missing_ok=True)
    return read_report(tree / "out")


@pytest.mark.slow
@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_a_pr_that_changes_a_rule_gets_the_default_branchs(pytester, attack):
    base, pr = trees(pytester, attack)
    alone = run(pytester, pr)
    assert alone["conclusion"] != "failure"  # what the attack did without the rules
    report = run(pytester, pr, f"--rocm-rules={base}")
    assert report["conclusion"] == "failure", report["conclusion_reason"]
    assert report["tests"]["test_gate.py::test_regressed"]["verdict"] == "regression"
    config = report["manifest"]["verdict_config"]
    assert config["reruns"] == 1 and config["rules"]["from"] == str(base / "pytest.ini")
    changed = {c["setting"] for c in config["rules"]["changed"]}
    assert changed, config["rules"]
    if attack != "addopts":
        assert changed <= set(rules.RULES)
    # the check names the change, and the rules it ran with
    results = Results(report=report, manifest=report["manifest"], parity=None, folder=pr / "out")
    summary = build(results, "rocm-gate / MI300X-2").summary
    assert "this PR changes the rules of the verdict" in summary
    for setting in changed:
        assert setting in summary


@pytest.mark.slow
def test_the_rules_files_are_the_default_branchs_and_an_edit_is_named(pytester):
    """Both trees name the same quarantine file; the PR edits it to list its own regression."""
    base, pr = pytester.mkdir("rules"), pytester.mkdir("pr")
    for tree in (base, pr):
        (tree / "pyproject.toml").write_text(
            '[tool.pytest.ini_options]\nrocm_quarantine = "ci/quarantine.json"\n'
        )
        (tree / "test_gate.py").write_text(TEST)
        (tree / "ci").mkdir()
    (base / "ci/quarantine.json").write_text(json.dumps({**QUARANTINE, "tests": []}))
    (pr / "ci/quarantine.json").write_text(json.dumps(QUARANTINE))
    report = run(pytester, pr, f"--rocm-rules={base}")
    assert report["conclusion"] == "failure"
    assert "quarantine" not in report["tests"]["test_gate.py::test_regressed"]
    assert report["manifest"]["verdict_config"]["rules"]["changed"] == [
        {"setting": "rocm_quarantine", "file": "ci/quarantine.json", "tree": "changed", "rules": ""}
    ]


@pytest.mark.parametrize(
    "name,text",
    [
        (
            "pytest.ini",
            "[pytest]\nrocm_reruns = 3\nrocm_infra_signatures =\n    a=b\n    !gpu_hang\n",
        ),
        (
            "tox.ini",
            "[tox]\n[pytest]\nrocm_reruns = 3\nrocm_infra_signatures = a=b\n    !gpu_hang\n",
        ),
        (
            "setup.cfg",
            "[tool:pytest]\nrocm_reruns = 3\nrocm_infra_signatures =\n    a=b\n    !gpu_hang\n",
        ),
        (
            "pyproject.toml",
            '[tool.pytest.ini_options]\nrocm_reruns = "3"\nrocm_infra_signatures = ["a=b", "!gpu_hang"]\n',
        ),
        (
            "pyproject.toml",
            '[tool.pytest]\nrocm_reruns = 3\nrocm_infra_signatures = ["a=b", "!gpu_hang"]\n',
        ),
        (
            "pytest.toml",
            '[pytest]\nrocm_reruns = 3\nrocm_infra_signatures = ["a=b", "!gpu_hang"]\n',
        ),
    ],
)
def test_the_rules_are_read_from_every_kind_of_ini_file(tmp_path, name, text):
    (tmp_path / name).write_text(text)
    assert rules.rules_values(tmp_path / name) == {
        "rocm_reruns": "3",
        "rocm_infra_signatures": ["a=b", "!gpu_hang"],
    }


def test_a_rule_that_is_not_set_anywhere_is_no_change():
    assert rules.changes({}, {}, {}, {}) == []
    assert rules.changes({"rocm_reruns": "2"}, {}, {}, {}) == [
        {"setting": "rocm_reruns", "tree": "2", "rules": "(default)"}
    ]
    assert rules.changes({}, {}, {"rocm_baselines": {"b.toml": "1"}}, {"rocm_baselines": {}}) == [
        {"setting": "rocm_baselines", "file": "b.toml", "tree": "added", "rules": ""}
    ]


def test_the_rules_folder_must_exist(pytester):
    pytester.makepyfile("def test_x(): pass")
    result = pytester.runpytest_subprocess("--rocm-rules=nowhere", "--rocm-platform=cpu")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--rocm-rules*nowhere is not a folder*"])
