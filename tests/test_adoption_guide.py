"""The adoption guide (docs/adoption.md) runs as written: every `bash` block as a command, every `diff` block
applied with `git apply`, in order, on trees shaped like vLLM's and SGLang's checkouts; then the artifacts the
guide promises are checked. A guide step that stops working fails here."""

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import DATA, REPO

GUIDE = REPO / "docs" / "adoption.md"
BLOCK = re.compile(r"^```(\w+)[^\n]*\n(.*?)^```", re.S | re.M)

# `pip install` in the guide: nothing is downloaded in tests, so each thing it names must already be here (a
# distribution installed in this environment, or a folder with a pyproject.toml): a guide that names a package
# the tree does not need, or misses one it needs, fails either here or when the tree collects.
PIP_CHECK = textwrap.dedent("""
    pip() {
        [ "$1" = install ] || { echo "guide uses pip $1" >&2; return 1; }
        shift
        "$PYTHON" - "$@" <<'PY'
    import importlib.metadata, pathlib, sys
    for arg in sys.argv[1:]:
        if arg.startswith("-") :
            continue
        if "/" in arg or arg == ".":
            assert (pathlib.Path(arg) / "pyproject.toml").is_file(), f"pip install {arg}: no project there"
        else:
            importlib.metadata.version(arg)  # PackageNotFoundError: the guide names what is not installed
    PY
    }
""")


def guide_script() -> str:
    """The guide's bash and diff blocks as one script, in the guide's order."""
    parts = ["set -euo pipefail", PIP_CHECK]
    for language, body in BLOCK.findall(GUIDE.read_text()):
        if language == "bash":
            parts.append(body)
        elif language == "diff":
            parts.append(f"git apply --verbose <<'GUIDE_DIFF'\n{body}GUIDE_DIFF")
    return "\n".join(parts)


@pytest.fixture(scope="module")
def followed(tmp_path_factory):
    """The guide followed once from a fresh `work/` folder: (work folder, completed process)."""
    work = tmp_path_factory.mktemp("work")
    for tree in ("vllm", "sglang"):
        shutil.copytree(DATA / "adoption" / tree, work / tree)
    (work / "pytest-rocm").symlink_to(REPO)
    bin_dir = str(Path(sys.executable).parent)
    env = {**os.environ, "PATH": bin_dir + os.pathsep + os.environ.get("PATH", ""), "PYTHON": sys.executable,
           "PYTHONDONTWRITEBYTECODE": "1"}
    env.pop("PYTEST_ROCM_PLATFORM", None)
    env.pop("PYTEST_ADDOPTS", None)
    done = subprocess.run(["bash", "-c", guide_script()], cwd=work, env=env, capture_output=True, text=True,
                          timeout=600)
    return work, done


def test_the_guide_runs_from_start_to_end(followed):
    work, done = followed
    assert done.returncode == 0, f"{done.stdout[-4000:]}\n{done.stderr[-4000:]}"


def test_vllm_steps_give_the_promised_reports(followed):
    work, done = followed
    out = work / "out"
    # step 4: the sorting, from the tree and from pytest --collect-only
    assert "group map: ../pytest-rocm/suites/upstream/vllm.toml" in done.stdout
    assert "pytest-rocm: how the collected tests sort into groups" in done.stdout
    # step 6: the ROCm run, with the gates, the known gap and the map's groups
    rocm = json.loads((out / "rocm" / "gate-report.json").read_text())
    assert rocm["conclusion"] == "success" and rocm["manifest"]["platform"]["profile"] == "mi300x-8"
    tests = rocm["tests"]
    assert tests["tests/kernels/attention/test_attention.py::test_paged_attention[64]"]["blocking"] is True
    assert tests["tests/kernels/attention/test_attention.py::test_fp8_kv_cache"]["status"] == "known_gap"
    assert tests["tests/v1/core/test_scheduler.py::test_preemption"]["group"] == "engine"
    assert tests["tests/kernels/attention/test_attention.py::test_long_context_sweep"]["status"] == "skipped"
    # step 8: parity, with tests/cuda/ counted once, as not applicable
    parity = json.loads((out / "parity" / "parity.json").read_text())
    assert parity["groups"]["attention"]["reference_passing"] == 3
    assert parity["groups"]["attention"]["both_passing"] == 2 and parity["groups"]["attention"]["known_gap"] == 1
    assert parity["gating"]["blocking_tests"] == 2 and parity["gating"]["partly_blocking_groups"] == ["attention"]
    assert [e["tests"] for e in parity["not_applicable"]] == [["tests/cuda/test_cuda_context.py::test_cuda_context"]]
    assert parity["unmatched"] == []
    assert "fp8 KV cache is not supported by this ROCm build" in (out / "parity" / "parity.md").read_text()


def test_sglang_steps_run_unittest_files_as_gated_items_and_combine_coverage(followed):
    work, _ = followed
    out = work / "out"
    rocm = json.loads((out / "sglang-rocm" / "gate-report.json").read_text())
    groups = {nodeid: t["group"] for nodeid, t in rocm["tests"].items()}
    assert groups["test/registered/attention/test_triton_attention_backend.py::TestTritonAttentionBackend::"
                  "test_decode"] == "attention"
    assert groups["test/registered/spec/test_eagle_infer.py::TestEagleInfer::test_acceptance_length"] == "spec_decode"
    assert groups["test/registered/openai_server/basic/test_openai_server.py::TestOpenAIServer::test_completion"] == "api"
    sglang = json.loads((out / "sglang-parity" / "parity.json").read_text())["sglang"]
    assert (sglang["cuda"], sglang["amd"], sglang["amd_disabled_registrations"]) == (4, 2, 1)
    executed = sglang["executed"]
    assert executed["declared_and_passing"] == ["test/registered/attention/test_triton_attention_backend.py"]
    assert executed["passing_not_declared"] == [
        "test/registered/debug_utils/test_dump_loader.py", "test/registered/openai_server/basic/test_openai_server.py",
        "test/registered/spec/test_eagle_infer.py"]  # the EAGLE file's AMD registration is disabled
    assert "Pass on the candidate without an AMD registration" in (out / "sglang-parity" / "parity.md").read_text()


def marker_lines(section: str) -> list[str]:
    """The marker lines of the guide's conftest snippet or its pyproject `markers` list."""
    text = GUIDE.read_text()
    if section == "conftest":
        block = text.split("+++ b/conftest.py", 1)[1].split("```", 1)[0]
        return re.findall(r'^\+    "((?:rocm_gate|hardware|rocm_known_gap)\(.*)",$', block, re.M)
    block = next(body for language, body in BLOCK.findall(text) if language == "toml")
    return re.findall(r'^    "(.*)",$', block, re.M)


def test_the_guides_marker_and_setting_names_are_the_plugins(pytester):
    """The snippets name exactly the plugin's markers (those users write on tests) and ini settings."""
    help_text = pytester.runpytest("--help").stdout.str()
    settings = set(re.findall(r"^  (rocm_\w+) \(", help_text, re.M))
    snippet = (GUIDE.read_text().split("+++ b/conftest.py", 1)[1].split("```", 1)[0])
    named = set(re.findall(r'"(rocm_\w+)"', snippet))
    assert settings and named == settings
    from pytest_rocm.plugin.markers import MARKER_HELP, SERVER_MARKERS

    users = set(MARKER_HELP) - set(SERVER_MARKERS)
    for section in ("conftest", "pyproject"):
        assert {line.split("(")[0] for line in marker_lines(section)} == users, section


MARKED = """
    import pytest

    @pytest.mark.rocm_gate(group="attention", blocking=True)
    @pytest.mark.hardware(sku="MI300X", gpus=2)
    @pytest.mark.rocm_known_gap(reason="gap", issue="https://github.com/vllm-project/vllm/issues/777")
    def test_marked():
        pass
"""


@pytest.mark.parametrize("form", ["conftest", "pyproject"])
def test_lanes_without_the_plugin_accept_the_markers_and_settings(pytester, form):
    pytester.makepyfile(test_x=MARKED)
    if form == "conftest":
        snippet = GUIDE.read_text().split("+++ b/conftest.py", 1)[1].split("```", 1)[0]
        pytester.makeconftest("\n".join(line[1:] for line in snippet.splitlines() if line.startswith("+")))
        pytester.makepyprojecttoml('[tool.pytest.ini_options]\nrocm_group_map = "map.toml"\n'
                                   'rocm_timeouts = ["attention=60"]\n')
    else:
        markers = "\n".join(f'    "{line}",' for line in marker_lines("pyproject"))
        pytester.makepyprojecttoml(f"[tool.pytest.ini_options]\nmarkers = [\n{markers}\n]\n")
    strict = ("--strict-markers", "--strict-config", "-W", "error", "-p", "no:cacheprovider")
    without = pytester.runpytest_subprocess("-p", "no:rocm", *strict)
    without.assert_outcomes(passed=1)
    assert "Unknown" not in without.stdout.str() + without.stderr.str()
    # with the plugin the markers keep their meaning: the known gap applies on a simulated MI300X runner
    pytester.makefile(".toml", map='schema = "pytest-rocm/groups/1"\n[[rule]]\ngroup = "engine"\npaths = ["t/"]\n')
    with_plugin = pytester.runpytest_subprocess("--rocm-platform=mi300x-8", "-rs", *strict)
    with_plugin.assert_outcomes(skipped=1)
    with_plugin.stdout.fnmatch_lines(["SKIPPED*known gap: gap (https://github.com/vllm-project/vllm/issues/777)*"])
