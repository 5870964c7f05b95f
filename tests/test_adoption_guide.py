"""The adoption guide (docs/adoption.md) runs as written: every `bash` block as a command, every
`diff` block applied with `git apply`, in order, on trees shaped like vLLM's and SGLang's checkouts
(vLLM's a git checkout whose history changes the files vLLM's real 3,000 commits changed, with a
kernel test that calls a compiled CUDA op at import, as vLLM's do); then the artifacts the guide
promises are checked, and the files it changed pass vLLM's pre-commit checks. A guide step that stops
working fails here.

This machine is a maintainer's box: no GPU, a CPU build. A block the guide marks as needing the GPU
runner (```` ```bash gpu ````) runs here too, and must end as the guide says it ends on a CPU build
(its exit status is not the guide's promise; its reports are checked below)."""

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
BLOCK = re.compile(r"^```(\w+)([^\n]*)\n(.*?)^```", re.S | re.M)

# `pip install` in the guide: nothing is downloaded in tests, so each thing it names must already be
# here (a distribution installed in this environment, or a folder with a pyproject.toml): a guide
# that names a package the tree does not need, or misses one it needs, fails either here or when the
# tree collects.
PIP_CHECK = textwrap.dedent("""
    pip() {
        [ "$1" = install ] || { echo "guide uses pip $1" >&2; return 1; }
        shift
        "$PYTHON" - "$@" <<'PY'
    import importlib.metadata, pathlib, sys
    args = iter(sys.argv[1:])
    for arg in args:
        if arg == "-r":  # a requirements file: each name in it must be installed here
            for line in pathlib.Path(next(args)).read_text().splitlines():
                if line.strip() and not line.startswith("#"):
                    importlib.metadata.version(line.split("#")[0].strip())
            continue
        if arg.startswith("-"):
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
    for language, info, body in BLOCK.findall(GUIDE.read_text()):
        if language == "bash" and "gpu" in info.split():
            parts.append(f"set +e\n{body}set -e")  # the GPU runner's step, on a CPU build
        elif language == "bash":
            parts.append(body)
        elif language == "diff":
            parts.append(f"git apply --verbose <<'GUIDE_DIFF'\n{body}GUIDE_DIFF")
    return "\n".join(parts)


def vllm_checkout(tree: Path) -> None:
    """Make the vLLM-shaped tree a git checkout whose history is vLLM's: one commit per commit of
    the vendored history (oldest first, the files it changed, empty), then the tree itself
    (everything else removed), which is `origin/main`; the guide's changes are then the working
    tree's."""
    git = ["git", "-C", str(tree), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q", "-b", "main"], check=True)
    commits = [
        json.loads(line)
        for line in (DATA / "upstream" / "vllm-main-history.jsonl").read_text().splitlines()
    ]
    stream = []
    for number, commit in enumerate(reversed(commits), start=1):
        # the commit's id as the content of every file it changed: a change git sees each time
        stream += [
            "blob",
            f"mark :{2 * number - 1}",
            f"data {len(commit['sha'])}",
            commit["sha"],
            "commit refs/heads/main",
            f"mark :{2 * number}",
            "committer t <t@t> 1700000000 +0000",
            f"data {len(commit['sha'])}",
            commit["sha"],
        ]
        stream += (
            ([f"from :{2 * number - 2}"] if number > 1 else [])
            + [f"M 100644 :{2 * number - 1} {f}" for f in commit["files"]]
            + [""]
        )
    files = sorted(
        p for p in tree.rglob("*") if p.is_file() and ".git" not in p.relative_to(tree).parts
    )
    stream += [
        "commit refs/heads/main",
        "committer t <t@t> 1700000001 +0000",
        "data 8",
        "checkout",
        f"from :{2 * len(commits)}",
        "deleteall",
    ]
    for path in files:
        data = path.read_bytes()
        stream += [f"M 100644 inline {path.relative_to(tree).as_posix()}", f"data {len(data)}"]
        stream.append(data.decode())
    subprocess.run(
        [*git, "fast-import", "--quiet"], input="\n".join(stream) + "\n", text=True, check=True
    )
    subprocess.run([*git, "reset", "-q", "--hard", "main"], check=True)
    subprocess.run([*git, "update-ref", "refs/remotes/origin/main", "main"], check=True)


@pytest.fixture(scope="module")
def followed(tmp_path_factory):
    """The guide followed once from a fresh `work/` folder: (work folder, completed process)."""
    work = tmp_path_factory.mktemp("work")
    for tree in ("vllm", "sglang"):
        shutil.copytree(DATA / "adoption" / tree, work / tree)
    vllm_checkout(work / "vllm")
    (work / "pytest-rocm").symlink_to(REPO)
    bin_dir = str(Path(sys.executable).parent)
    env = {
        **os.environ,
        "PATH": bin_dir + os.pathsep + os.environ.get("PATH", ""),
        "PYTHON": sys.executable,
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    env.pop("PYTEST_ROCM_PLATFORM", None)
    env.pop("PYTEST_ADDOPTS", None)
    done = subprocess.run(
        ["bash", "-c", guide_script()],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    return work, done


def test_the_readmes_first_run_works_as_written_on_a_vllm_shaped_tree(tmp_path):
    """Issue 60: the README's first screen failed as written (`pip install pytest-rocm` found no
    package; `pytest tests` was the whole-tree run the guide tells vLLM not to do). Its first block
    now runs, in a vLLM-shaped checkout with the guide's gates (the test stands in for `git clone`:
    nothing is downloaded here), to a gate report of the gated tests alone."""
    readme = (REPO / "README.md").read_text()
    first = readme[readme.index("## First run") :]
    language, _, body = BLOCK.search(first).groups()
    assert language == "bash" and "pip install -e ../pytest-rocm" in body
    assert "pip install pytest-rocm " not in body and "pytest tests " not in body
    shutil.copytree(DATA / "adoption" / "vllm", tmp_path / "vllm")
    vllm_checkout(tmp_path / "vllm")
    (tmp_path / "pytest-rocm").symlink_to(REPO)
    gates = BLOCK.findall(GUIDE.read_text())
    diff = next(b for lang, _, b in gates if lang == "diff" and "rocm_gate" in b)
    clone = 'git() { if [ "$1" = clone ]; then return 0; fi; command git "$@"; }\n'
    script = "\n".join(
        ["set -euo pipefail", PIP_CHECK, clone, f"git apply <<'GUIDE_DIFF'\n{diff}GUIDE_DIFF", body]
    )
    env = {**os.environ, "PATH": str(Path(sys.executable).parent) + os.pathsep + os.environ["PATH"]}
    env.update(PYTHON=sys.executable, PYTHONDONTWRITEBYTECODE="1")
    env.pop("PYTEST_ROCM_PLATFORM", None)
    env.pop("PYTEST_ADDOPTS", None)
    done = subprocess.run(
        ["bash", "-c", script],
        cwd=tmp_path / "vllm",
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = json.loads((tmp_path / "out/first/gate-report.json").read_text())
    assert report["conclusion"] == "success", report["conclusion_reason"]
    assert "tests/kernels/attention/test_attention.py" not in json.dumps(report["tests"])
    assert "conclusion: success" in done.stdout and "SIMULATED" in done.stdout


def test_the_guide_runs_from_start_to_end(followed):
    work, done = followed
    assert done.returncode == 0, f"{done.stdout[-4000:]}\n{done.stderr[-4000:]}"


SCHEDULER = "tests/v1/core/test_scheduler.py"
ATTENTION = "tests/kernels/attention/test_attention.py"


def test_vllm_steps_give_the_promised_reports(followed):
    work, done = followed
    out = work / "out"
    # step 3: the sorting, from the tree and from pytest --collect-only, with the shipped map by
    # name (in pyproject.toml); on this CPU build the kernel test that calls a compiled op at import
    # is listed as failing to collect
    assert (
        f"group map: {REPO / 'pytest_rocm/maps/vllm.toml'} (paths read from vllm-project/vllm@9aaf83ef"
        in done.stdout
    )
    sorted_by_pytest = done.stdout[
        done.stdout.index("pytest-rocm: how the collected tests sort into groups") :
    ]
    assert "files that failed to collect" in sorted_by_pytest
    assert f"  {ATTENTION}" in sorted_by_pytest
    # step 5: the first gated run holds the gated tests and the known gap, on a platform it says is
    # simulated, and the CUDA reference of the same files
    first = json.loads((out / "first" / "gate-report.json").read_text())
    assert first["conclusion"] == "success", first["conclusion_reason"]
    ran = {t: v["status"] for t, v in first["tests"].items() if v["status"] != "deselected"}
    assert ran == {
        f"{SCHEDULER}::test_add_requests": "passed",
        f"{SCHEDULER}::test_schedule[False]": "passed",
        f"{SCHEDULER}::test_schedule[True]": "passed",
        f"{SCHEDULER}::test_schedule_fp8_kv_cache": "known_gap",
    }
    assert sorted(t for t, v in first["tests"].items() if v["blocking"]) == [
        f"{SCHEDULER}::test_add_requests",
        f"{SCHEDULER}::test_schedule[False]",
        f"{SCHEDULER}::test_schedule[True]",
    ]
    assert "pytest-rocm on mi300x-8, SIMULATED (8 x MI300X)" in done.stdout
    reference = json.loads((out / "first-cuda" / "gate-report.json").read_text())
    assert reference["tests"][f"{SCHEDULER}::test_schedule_fp8_kv_cache"]["status"] == "passed"
    # step 6, the GPU runner's, on this CPU build: incomplete, the kernel test named as the
    # installed build's, never the change's; the rest grouped by the map
    rocm = json.loads((out / "rocm" / "gate-report.json").read_text())
    assert (
        rocm["conclusion"] == "incomplete" and rocm["manifest"]["platform"]["profile"] == "mi300x-8"
    )
    [error] = rocm["collection_errors"]
    assert error["nodeid"] == ATTENTION and error["cause"] == "infra"
    assert (
        "torch.ops._C_cuda_utils.get_max_shared_memory_per_block_device_attribute"
        in error["detail"]
        and "the GPU runner" in error["detail"]
    )
    assert "defect of the change" not in rocm["conclusion_reason"]
    tests = rocm["tests"]
    assert tests[f"{SCHEDULER}::test_add_requests"]["blocking"] is True
    assert tests[f"{SCHEDULER}::test_schedule_fp8_kv_cache"]["status"] == "known_gap"
    assert tests[f"{SCHEDULER}::test_preemption"]["group"] == "engine"
    assert (
        tests["tests/entrypoints/test_chat_utils.py::test_chat_template_renders_a_message"]["group"]
        == "api"
    )
    # step 7: the verdict of the first run, rebuilt offline
    assert "wrote ../out/first/gate-report.json" in done.stdout
    # step 8: parity of the first run against its CUDA reference
    parity = json.loads((out / "parity" / "parity.json").read_text())
    engine = parity["groups"]["engine"]
    assert (engine["reference_passing"], engine["both_passing"], engine["known_gap"]) == (4, 3, 1)
    assert parity["gating"]["blocking_tests"] == 3
    assert parity["gating"]["partly_blocking_groups"] == ["engine"]
    assert parity["unmatched"] == []
    assert (
        "fp8 KV cache is not supported by this ROCm build"
        in (out / "parity" / "parity.md").read_text()
    )
    # step 9: selection from vLLM's own history, each link with its count
    selected = done.stdout[done.stdout.index("engine: vllm/v1/core/sched/scheduler.py") :]
    assert re.match(
        r"engine: vllm/v1/core/sched/scheduler\.py: co-changed with tests/\S+ \(vllm/v1/core/sched/"
        r"scheduler\.py changed with tests/\S+ in \d+ of \d+ commits that changed it with tests",
        selected,
    )
    assert re.search(
        r"^  run tests/v1/core/  \(vllm/v1/core/sched/scheduler\.py: co-changed .*, 1 test file\(s\)\)$",
        selected,
        re.M,
    )
    assert "everything" not in selected.split("\n\n")[0]


def test_the_files_the_guide_changes_pass_vllms_pre_commit_checks(followed):
    """vLLM's hooks on what the guide touched: every Python file carries vLLM's SPDX header and is
    as `ruff format` writes it under the tree's own settings; pyproject.toml still parses, with
    vLLM's markers kept."""
    import tomllib

    work, _ = followed
    tree = work / "vllm"
    changed = subprocess.run(
        ["git", "-C", str(tree), "status", "--porcelain", "--untracked-files=all"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    paths = sorted(line[3:] for line in changed if not line[3:].startswith(".pytest_cache"))
    assert paths == ["pyproject.toml", SCHEDULER], paths
    for path in (p for p in paths if p.endswith(".py")):
        head = (tree / path).read_text().splitlines()[:2]
        assert head == [
            "# SPDX-License-Identifier: Apache-2.0",
            "# SPDX-FileCopyrightText: Copyright contributors to the vLLM project",
        ], path
    ruff = subprocess.run(
        [
            sys.executable,
            "-m",
            "ruff",
            "format",
            "--check",
            *[p for p in paths if p.endswith(".py")],
        ],
        cwd=tree,
        capture_output=True,
        text=True,
    )
    assert ruff.returncode == 0, ruff.stdout + ruff.stderr
    ini = tomllib.loads((tree / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    assert ini["rocm_group_map"] == "vllm"  # the one place of the map (step 2)
    markers = ini["markers"]
    assert (
        markers[:9]
        == tomllib.loads((DATA / "adoption/vllm/pyproject.toml").read_text())["tool"]["pytest"][
            "ini_options"
        ]["markers"]
    )
    assert [m.split("(")[0] for m in markers[9:]] == ["rocm_gate", "hardware", "rocm_known_gap"]


def test_sglang_steps_run_unittest_files_as_gated_items_and_combine_coverage(followed):
    work, _ = followed
    out = work / "out"
    rocm = json.loads((out / "sglang-rocm" / "gate-report.json").read_text())
    groups = {nodeid: t["group"] for nodeid, t in rocm["tests"].items()}
    assert (
        groups[
            "test/registered/attention/test_triton_attention_backend.py::TestTritonAttentionBackend::"
            "test_decode"
        ]
        == "attention"
    )
    assert (
        groups["test/registered/spec/test_eagle_infer.py::TestEagleInfer::test_acceptance_length"]
        == "spec_decode"
    )
    assert (
        groups[
            "test/registered/openai_server/basic/test_openai_server.py::TestOpenAIServer::test_completion"
        ]
        == "api"
    )
    sglang = json.loads((out / "sglang-parity" / "parity.json").read_text())["sglang"]
    assert (sglang["cuda"], sglang["amd"], sglang["amd_disabled_registrations"]) == (4, 2, 1)
    executed = sglang["executed"]
    assert executed["declared_and_passing"] == [
        "test/registered/attention/test_triton_attention_backend.py"
    ]
    # the EAGLE file's AMD registration is disabled
    assert executed["passing_not_declared"] == [
        "test/registered/debug_utils/test_dump_loader.py",
        "test/registered/openai_server/basic/test_openai_server.py",
        "test/registered/spec/test_eagle_infer.py",
    ]
    assert (
        "Pass on the candidate without an AMD registration"
        in (out / "sglang-parity" / "parity.md").read_text()
    )


def test_the_markers_the_guide_registers_are_the_plugins_user_markers():
    from pytest_rocm.plugin.markers import MARKER_HELP, SERVER_MARKERS, VARIANT_MARKERS
    from rocm_gate.adoption.markers import USER_MARKERS

    assert set(USER_MARKERS) == set(MARKER_HELP) - set(SERVER_MARKERS) - set(VARIANT_MARKERS)


def test_lanes_without_the_plugin_accept_the_guides_tree_under_strict_markers(followed):
    """After the guide, vLLM's CUDA lanes, which do not install pytest-rocm, collect the marked
    tests under --strict-markers with no marker warning; the map's line in pyproject.toml is one
    PytestConfigWarning, as the guide says (vLLM's lanes do not run --strict-config). The kernel
    tests need the GPU lanes' build: on this CPU build they are left out."""
    work, _ = followed
    env = {
        k: v for k, v in os.environ.items() if k not in ("PYTEST_ROCM_PLATFORM", "PYTEST_ADDOPTS")
    }
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:rocm",
            "--strict-markers",
            "-W",
            "error::pytest.PytestUnknownMarkWarning",
            "-p",
            "no:cacheprovider",
            "tests",
            "--ignore=tests/kernels",
            "-q",
        ],
        cwd=work / "vllm",
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    said = done.stdout + done.stderr
    assert " passed" in said
    warned = [line for line in said.splitlines() if "Warning: " in line]
    assert warned and all(
        "PytestConfigWarning: Unknown config option: rocm_group_map" in line for line in warned
    ), warned
    assert "PytestUnknownMarkWarning" not in said


def test_the_guides_tree_and_paths_are_vllms_real_ones():
    """Issue 49: the guide named `requirements/test.txt`, gone from vLLM since April 2026, and its
    toy tree still had it, so its test stayed green. Every file of the guide's vLLM tree and every
    path under tests/ the guide names is one of vLLM's real tree at 9aaf83ef
    (tests/data/upstream/vllm-tests-tree.txt), and the requirements file it installs is where vLLM
    keeps it now: a file vLLM moves breaks this test."""
    real = set((DATA / "upstream" / "vllm-tests-tree.txt").read_text().split())
    folders = {str(Path(p).parent) + "/" for p in real}
    tree = DATA / "adoption" / "vllm"
    for path in (p.relative_to(tree).as_posix() for p in (tree / "tests").rglob("*.py")):
        assert path in real, f"{path} is not in vLLM's tree: use a real path"
    guide = GUIDE.read_text()
    vllm_part = guide[guide.index("## vLLM") : guide.index("## SGLang")]
    named = set(re.findall(r"(?<![\w/])tests/[\w/.-]*[\w/]", vllm_part)) - {"tests/"}
    for path in named:
        assert path in real or path in folders or any(p.startswith(path) for p in real), path
    installed = re.findall(r"pip install -r (\S+)", vllm_part)
    assert installed == ["requirements/test/rocm.txt"]
    assert (tree / installed[0]).is_file()
    assert "requirements/test.txt" not in vllm_part
