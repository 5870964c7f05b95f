"""PR test selection (`rocm-gate select`) and sharding (`rocm-gate shard`): on vLLM's real history
and SGLang's real registrations, and on the inputs a maintainer gets wrong."""

import json
import subprocess
import sys

import pytest
from conftest import REPO, UPSTREAM

from pytest_rocm.catalog.groups import load_group_map
from rocm_gate.selection.cochange import (
    COVER,
    MAX_COMMIT_FILES,
    CoChange,
    is_test_file,
    is_test_path,
    read_history,
)
from rocm_gate.selection.select import select

VLLM_MAP = REPO / "pytest_rocm" / "maps" / "vllm.toml"
FORK_COMMITS = 53  # the newest commits of the history are a fork's (tests/data/upstream/README.md)


def rocm_gate(*args, stdin=None, cwd=None):
    return subprocess.run(
        [sys.executable, "-m", "rocm_gate.cli", *map(str, args)],
        input=stdin,
        capture_output=True,
        text=True,
        cwd=cwd,
    )


MAP = """
schema = "pytest-rocm/groups/1"

[[rule]]
group = "attention"
paths = ["tests/kernels/attention/"]
sources = ["vllm/attention/"]

[[rule]]
group = "engine"
paths = ["tests/v1/"]

[selection]
everything = ["setup.py"]
ignore = ["docs/"]
"""
HISTORY = [
    {"sha": "c3", "files": ["vllm/v1/core/sched.py", "tests/v1/core/test_sched.py"]},
    {"sha": "c2", "files": ["vllm/v1/core/kv.py", "tests/v1/core/test_kv.py"]},
    {"sha": "c1", "files": ["vllm/v1/core/sched.py", "tests/v1/core/test_sched.py"]},
]


def git_repo(repo) -> list[str]:
    """A git repository made at `repo`; the command that runs git in it, with an author."""
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q", "-b", "main"], check=True)
    return git


def commit(git: list[str], message: str) -> None:
    """Everything in the tree, added, changed or deleted, as one commit."""
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", message], check=True)


@pytest.fixture
def small(tmp_path):
    (tmp_path / "map.toml").write_text(MAP)
    (tmp_path / "history.jsonl").write_text("\n".join(json.dumps(c) for c in HISTORY) + "\n")
    return tmp_path


def test_each_kind_of_change_says_why(small):
    group_map = load_group_map(small / "map.toml")
    history = CoChange.learn(read_history(small / "history.jsonl"))
    chosen = select(
        [
            "vllm/attention/ops.py",
            "vllm/v1/core/new_policy.py",
            "docs/a.md",
            "tests/v1/core/test_kv.py",
            "tests/v1/conftest.py",
        ],
        group_map,
        history,
    )
    assert not chosen.everything
    assert set(chosen.groups) == {"attention", "engine"}
    assert any("rule `sources` of group attention" in r for r in chosen.groups["attention"])
    assert any(
        "co-changed with tests/v1/core/ (vllm/v1/core/ changed with tests/v1/core/ in 3 of 3 commits"
        in r
        for r in chosen.groups["engine"]
    )
    assert "tests/v1/core/test_kv.py" in chosen.tests
    assert chosen.tests["tests/v1/"] == [
        "tests/v1/conftest.py changed (not a test: the tests under tests/v1/ use it)"
    ]
    assert chosen.ignored == ["docs/a.md"]
    assert (
        select(["setup.py"], group_map, history).why_everything
        == "setup.py is in the map's `[selection] everything`"
    )
    unknown = select(["vllm/never_seen.py"], group_map, history)
    assert unknown.everything and unknown.why_everything == (
        "vllm/never_seen.py: no rule's `sources` names it and history has too little on it: it (or a folder of it) "
        "changed together with tests in 0 of the 3 commits that changed sources and tests together "
        "(3 commits read), fewer than 2"
    )
    without_history = select(["vllm/v1/core/new_policy.py"], group_map, None)
    assert without_history.everything and without_history.why_everything.endswith(
        "no history was given to learn co-change from (--history FILE or --learn-from-git N)"
    )
    assert select(["docs/only.md"], group_map, history).groups == {}
    helper = select(["tests/kernels/utils.py"], group_map, history)  # kernels/attention is under it
    assert set(helper.groups) == {"attention", "ungrouped"} and "tests/kernels/" in helper.tests
    assert (
        select(["tests/conftest.py"], group_map, history).why_everything
        == "tests/conftest.py is shared by the whole test tree"
    )


def test_the_cli_from_a_file_and_from_git(small):
    (small / "changed.txt").write_text("vllm/attention/ops.py\n")
    done = rocm_gate(
        "select", "--map", small / "map.toml", "--changed-files", small / "changed.txt", "--json"
    )
    assert done.returncode == 0, done.stderr
    assert set(json.loads(done.stdout)["groups"]) == {"attention"}
    repo = small / "repo"
    repo.mkdir()
    git = git_repo(repo)
    (repo / "setup.py").write_text("x = 1\n")
    commit(git, "base")
    (repo / "setup.py").write_text("x = 2\n")
    commit(git, "change")
    done = rocm_gate(
        "select", "--map", small / "map.toml", "--base", "HEAD~1", "--head", "HEAD", "--repo", repo
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("everything: setup.py is in the map's `[selection] everything`")
    # learning from the checkout's own history: the file changed with tests before, so only its
    # tests run
    (repo / "vllm").mkdir()
    (repo / "tests/v1/core").mkdir(parents=True)
    for number in range(3):
        (repo / "vllm/sched.py").write_text(f"x = {number}\n")
        (repo / "tests/v1/core/test_sched.py").write_text(f"def test(): assert {number} >= 0\n")
        commit(git, f"sched {number}")
    (repo / "vllm/sched.py").write_text("x = 9\n")
    commit(git, "change sched")
    done = rocm_gate(
        "select",
        "--map",
        small / "map.toml",
        "--base",
        "HEAD~1",
        "--head",
        "HEAD",
        "--repo",
        repo,
        "--learn-from-git",
        50,
        "--json",
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["tests"] == {
        "tests/v1/core/": [
            "vllm/sched.py: co-changed (vllm/sched.py changed with tests/v1/core/ in 3 of 3 commits that changed it with "
            "tests)"
        ]
    }
    done = rocm_gate(
        "select", "--map", small / "map.toml", "--base", "nope", "--head", "HEAD", "--repo", repo
    )
    assert (
        done.returncode == 2
        and "--base 'nope' is no commit of" in done.stderr
        and "Traceback" not in done.stderr
    )
    assert done.stdout.startswith("everything: could not decide: --base 'nope' is no commit of")
    # issue 60: a range the wrong way round, or one commit twice, names the mistake (it changes
    # nothing, which read as "no changed file was given")
    for base, head, said in (
        (
            "HEAD",
            "HEAD~1",
            "--head HEAD~1 is an ancestor of --base HEAD: the range is the wrong way",
        ),
        ("HEAD", "HEAD", "--base HEAD and --head HEAD are the same commit"),
    ):
        done = rocm_gate(
            "select", "--map", small / "map.toml", "--base", base, "--head", head, "--repo", repo
        )
        assert done.returncode == 2 and said in done.stderr, done.stderr
        assert done.stdout.startswith(f"everything: could not decide: {said}")
    assert (
        "swap them (--base HEAD~1 --head HEAD)"
        in rocm_gate(
            "select",
            "--map",
            small / "map.toml",
            "--base",
            "HEAD",
            "--head",
            "HEAD~1",
            "--repo",
            repo,
        ).stderr
    )


def _repo_with_a_change(small):
    repo = small / "repo"
    repo.mkdir()
    git = git_repo(repo)
    (repo / "docs").mkdir()
    (repo / "docs/a.md").write_text("a\n")
    commit(git, "base")
    (repo / "docs/a.md").write_text("b\n")
    commit(git, "docs")
    return repo


def test_what_runs_exists_in_the_head_and_holds_tests(small):
    """A change that deletes a test file and edits a helper in a folder of helpers only: the deleted
    file was selected (pytest refuses a path that does not exist, and the whole run with it), and
    the helpers' folder, where pytest collects nothing. Both now run the tests beside them."""
    repo = small / "repo"
    core = repo / "tests/v1/core"
    (core / "helpers").mkdir(parents=True)
    for name in ("test_sched.py", "test_kv.py"):
        (core / name).write_text("def test_a(): pass\n")
    (core / "helpers/util.py").write_text("X = 1\n")
    git = git_repo(repo)
    commit(git, "base")
    (core / "test_kv.py").unlink()
    (core / "helpers/util.py").write_text("X = 2\n")
    commit(git, "delete a test, change a helper")
    done = rocm_gate(
        "select",
        "--map",
        small / "map.toml",
        "--base",
        "HEAD~1",
        "--head",
        "HEAD",
        "--repo",
        repo,
        "--json",
    )
    assert done.returncode == 0, done.stderr
    chosen = json.loads(done.stdout)
    assert list(chosen["tests"]) == ["tests/v1/core/"]
    assert "tests/v1/core/test_kv.py deleted" in chosen["groups"]["engine"]
    # the same list given as a file, from the checkout
    (small / "changed.txt").write_text("tests/v1/core/test_kv.py\ntests/v1/core/helpers/util.py\n")
    done = rocm_gate(
        "select",
        "--map",
        small / "map.toml",
        "--changed-files",
        small / "changed.txt",
        "--json",
        cwd=repo,
    )
    assert list(json.loads(done.stdout)["tests"]) == ["tests/v1/core/"]


@pytest.mark.parametrize(
    "base, why",
    [
        ("", "--base is empty (an unset workflow variable?)"),
        ("   ", "--base is empty (an unset workflow variable?)"),
        (
            "--output=written.txt",
            "--base '--output=written.txt' is not a commit: it starts with '-'",
        ),
        ("HEAD~1 --output=written.txt", "is no commit of"),
        ("0" * 40, "is no commit of"),
    ],
)
def test_a_base_it_cannot_trust_selects_everything_and_fails(small, base, why):
    """An unset workflow variable, or an option where the commit goes, never reads as "nothing to
    run"."""
    repo = _repo_with_a_change(small)
    done = rocm_gate(
        "select",
        "--map",
        small / "map.toml",
        f"--base={base}",
        "--head",
        "HEAD",
        "--repo",
        repo,
        "--json",
        cwd=repo,
    )
    assert done.returncode == 2 and why in done.stderr and "Traceback" not in done.stderr
    printed = json.loads(done.stdout)
    assert printed["everything"] is True and why in printed["why_everything"]
    assert not (repo / "written.txt").exists()  # never handed to git as an option
    # the same change with a real base is decided: only documentation, nothing to run
    done = rocm_gate(
        "select", "--map", small / "map.toml", "--base", "HEAD~1", "--head", "HEAD", "--repo", repo
    )
    assert done.returncode == 0 and done.stdout.startswith(
        "nothing to run: every changed file is ignored"
    )


def test_an_empty_change_or_an_unreadable_list_selects_everything(small):
    (small / "empty.txt").write_text("\n")
    done = rocm_gate(
        "select", "--map", small / "map.toml", "--changed-files", small / "empty.txt", "--json"
    )
    assert done.returncode == 0 and json.loads(done.stdout)["everything"] is True
    done = rocm_gate(
        "select", "--map", small / "map.toml", "--changed-files", small / "missing.txt", "--json"
    )
    assert done.returncode == 2 and "missing.txt" in done.stderr
    assert json.loads(done.stdout)["everything"] is True


def test_one_coincidence_links_nothing_and_a_root_test_file_is_not_the_whole_tree(small):
    group_map = load_group_map(small / "map.toml")
    # vllm/worker/ changed with tests in 16 commits; once with tests/kernels/, every time with a
    # root test file
    commits = [{"files": ["vllm/worker/runner.py", "tests/test_sequence.py"]} for _ in range(15)]
    commits.append(
        {"files": ["vllm/worker/runner.py", "tests/test_sequence.py", "tests/kernels/test_x.py"]}
    )
    chosen = select(["vllm/worker/runner.py"], group_map, CoChange.learn(commits))
    assert not chosen.everything
    assert set(chosen.tests) == {"tests/test_sequence.py"}  # the file, not tests/ (every test)
    assert chosen.tests["tests/test_sequence.py"] == [
        "vllm/worker/runner.py: co-changed (vllm/worker/runner.py changed with tests/test_sequence.py in 16 of 16 "
        "commits that changed it with tests)"
    ]
    # the coincidence is the tail of its history: only a cover of all of it runs it
    everything_seen = select(["vllm/worker/runner.py"], group_map, CoChange.learn(commits, cover=1))
    assert set(everything_seen.tests) == {"tests/test_sequence.py", "tests/kernels/"}
    # coincidences only, every folder once: no link, as unknown as never seen
    scattered = CoChange.learn(
        [{"files": ["vllm/lora/a.py", f"tests/t{n}/test_x.py"]} for n in range(5)]
    )
    unlinked = select(["vllm/lora/a.py"], group_map, scattered)
    assert unlinked.everything and unlinked.why_everything.endswith(
        "history links it to no test folder often enough (it changed with tests in 5 commits; a "
        "link needs 2 of them)"
    )


def test_cover_takes_the_fewest_folders_that_account_for_more_than_it():
    """A path's test folders, most often changed with it first, until they account for more than
    `cover` of its test-folder changes: the knob of the recall/GPU-time curve."""
    # vllm/lora/x.py changed with tests in 8 commits: tests/a/ in 6, tests/b/ in 3, tests/c/ and
    # tests/e/ in 2, tests/d/ in 1
    commits = (
        [{"files": ["vllm/lora/x.py", "tests/a/test_1.py", "tests/b/test_1.py"]}] * 3
        + [{"files": ["vllm/lora/x.py", "tests/a/test_1.py", "tests/c/test_1.py"]}] * 2
        + [{"files": ["vllm/lora/x.py", "tests/a/test_1.py", "tests/d/test_1.py"]}]
        + [{"files": ["vllm/lora/x.py", "tests/e/test_1.py"]}] * 2
    )
    history = CoChange.learn(commits)
    assert history.cover == COVER == 0.5
    taken = {}
    for cover in (0, 0.25, 0.5, 0.6, 0.8, 1):
        history.cover = cover
        taken[cover] = list(history.tests_for("vllm/lora/x.py"))
    # 14 folder changes: a 6, b 3, c 2, e 2, d 1 (c and e changed with as many commits overall:
    # by name)
    assert taken == {
        0: ["tests/a/"],
        0.25: ["tests/a/"],
        0.5: ["tests/a/", "tests/b/"],  # 6 is not more than 7; 9 is
        0.6: ["tests/a/", "tests/b/"],
        0.8: ["tests/a/", "tests/b/", "tests/c/", "tests/e/"],
        1: ["tests/a/", "tests/b/", "tests/c/", "tests/e/", "tests/d/"],
    }
    history.cover = 0.5
    assert history.tests_for("vllm/lora/x.py")["tests/b/"] == (
        "vllm/lora/x.py changed with tests/b/ in 3 of 8 commits that changed it with tests"
    )
    with pytest.raises(ValueError, match="cover is a share from 0 to 1, got 1.5"):
        CoChange(cover=1.5)


def test_of_equal_folders_the_more_specific_goes_first():
    """tests/distributed/ changes with everything; tests/lora/ only with LoRA: for a LoRA file that
    changed with each twice, tests/lora/ is the better sign."""
    commits = [
        {"files": ["vllm/lora/a.py", "tests/distributed/test_x.py"]},
        {"files": ["vllm/lora/a.py", "tests/lora/test_x.py"]},
    ] * 2 + [{"files": [f"vllm/other{n}/b.py", "tests/distributed/test_x.py"]} for n in range(5)]
    history = CoChange.learn(commits, cover=0)
    assert list(history.tests_for("vllm/lora/a.py")) == ["tests/lora/"]


def test_too_little_history_and_too_large_commits_teach_nothing(small):
    group_map = load_group_map(small / "map.toml")
    once = [{"files": ["vllm/lora/a.py", "tests/lora/test_a.py"]}]
    unknown = select(["vllm/lora/a.py"], group_map, CoChange.learn(once))
    assert unknown.everything and unknown.why_everything.endswith(
        "changed together with tests in 1 of the 1 commits that changed sources and tests together "
        "(1 commits read), fewer than 2"
    )
    twice = CoChange.learn(once * 2)
    assert set(select(["vllm/lora/a.py"], group_map, twice).tests) == {"tests/lora/"}
    # a commit of more files than MAX_COMMIT_FILES (a mass rename) links nothing
    mass = {
        "files": ["vllm/lora/a.py", "tests/lora/test_a.py"]
        + [f"vllm/renamed/f{n}.py" for n in range(MAX_COMMIT_FILES - 1)]
    }
    assert CoChange.learn([mass] * 2).commits == 0
    assert CoChange.learn([{"files": mass["files"][:-1]}] * 2).commits == 2


def test_another_platforms_files_select_nothing_on_the_vllm_map():
    group_map = load_group_map(VLLM_MAP)
    history = CoChange.learn(read_history(UPSTREAM / "vllm-main-history.jsonl"))
    xpu_only = [
        "vllm/platforms/xpu.py",
        "vllm/v1/worker/xpu_worker.py",
        "vllm/v1/worker/xpu_model_runner.py",
        "vllm/distributed/device_communicators/xpu_communicator.py",
        "requirements/xpu.txt",
        ".buildkite/scripts/hardware_ci/run-xpu-test.sh",
        "vllm/lora/punica_wrapper/punica_xpu.py",
    ]
    chosen = select(xpu_only, group_map, history)
    assert not chosen.everything and chosen.groups == {} and chosen.ignored == xpu_only
    # and the names that only look alike still count
    assert select(["vllm/v1/engine/output_processor.py"], group_map, history).groups


def test_files_the_tests_load_select_them_an_example_program_does_not():
    """`examples/` was ignored whole, but tests/tool_use/ starts servers with
    `--chat-template examples/tool_chat_template_*.jinja`: a change to a template ran nothing."""
    group_map = load_group_map(VLLM_MAP)
    template = select(["examples/tool_chat_template_hermes.jinja"], group_map, None)
    assert set(template.groups) == {"api"} and "tests/tool_use/" in template.tests
    # ROCm's paged attention kernel: history alone linked it to the quantization kernels' tests
    history = CoChange.learn(read_history(UPSTREAM / "vllm-main-history.jsonl"))
    kernel = select(["csrc/rocm/attention.cu"], group_map, history)
    assert "attention" in kernel.groups and "tests/kernels/attention/" in kernel.tests
    program = select(["examples/online_serving/openai_chat_client.py"], group_map, None)
    assert program.groups == {} and program.ignored == [
        "examples/online_serving/openai_chat_client.py"
    ]


@pytest.mark.parametrize(
    "args, message",
    [
        ([], "give --changed-files FILE, or --base SHA and --head SHA"),
        (["--base", "a"], "give --changed-files FILE, or --base SHA and --head SHA"),
        (["--changed-files", "bin.txt"], "not UTF-8 text"),
        (
            ["--changed-files", "changed.txt", "--history", "bad.jsonl"],
            "bad.jsonl:2: not a commit line",
        ),
        (
            ["--changed-files", "changed.txt", "--learn-from-git", "0"],
            "give a number of commits, 1 or more, got 0",
        ),
        (
            ["--changed-files", "changed.txt", "--history", "bad.jsonl", "--learn-from-git", "5"],
            "not both",
        ),
        (["--changed-files", "changed.txt", "--cover", "1.5"], "expected a fraction from 0 to 1"),
        (["--changed-files", "changed.txt", "--cover", "nan"], "expected a fraction from 0 to 1"),
        (["--changed-files", "changed.txt", "--cover", "half"], "expected a fraction from 0 to 1"),
        # empty: a bad value like any other, never a usage message (issue 63)
        (["--changed-files", "changed.txt", "--cover", ""], "--cover: empty; expected a fraction"),
        (
            ["--changed-files", "changed.txt", "--learn-from-git", ""],
            "--learn-from-git: empty; expected a whole number of commits",
        ),
        (
            ["--changed-files", "changed.txt", "--learn-from-git", "1e9"],
            "--learn-from-git: '1e9' is not a whole number",
        ),
    ],
)
def test_bad_input_is_named(small, args, message):
    """Each fails closed, as the command's help says: everything printed, exit 2."""
    (small / "bin.txt").write_bytes(b"\xff\xfevllm")
    (small / "changed.txt").write_text("vllm/a.py\n")
    (small / "bad.jsonl").write_text('{"files": ["a"]}\n{"files": "not a list"}\n')
    done = rocm_gate("select", "--map", small / "map.toml", *args, cwd=small)
    assert done.returncode == 2 and message in done.stderr and "Traceback" not in done.stderr
    assert done.stdout.startswith("everything: could not decide: "), done.stdout


RENAME_MAP = """
schema = "pytest-rocm/groups/1"

[[rule]]
group = "attention"
paths = ["tests/kernels/attention/"]
sources = ["csrc/rocm/"]

[selection]
ignore = ["docs/", "csrc/cpu/"]
"""


def test_a_rename_is_a_change_to_both_its_paths(tmp_path):
    """Issue 63: a ROCm kernel moved to another platform's folder (ignored) selected nothing: git
    diff names a rename by its new path only. Its old path's rule selects its tests."""
    (tmp_path / "map.toml").write_text(RENAME_MAP)
    repo = tmp_path / "repo"
    (repo / "csrc/rocm").mkdir(parents=True)
    (repo / "tests/kernels/attention").mkdir(parents=True)
    (repo / "csrc/rocm/attention.cu").write_text("// the kernel\n" * 50)
    (repo / "tests/kernels/attention/test_attention.py").write_text("def test(): pass\n")
    git = git_repo(repo)
    commit(git, "base")
    (repo / "csrc/cpu").mkdir()
    subprocess.run([*git, "mv", "csrc/rocm/attention.cu", "csrc/cpu/attention.cu"], check=True)
    commit(git, "move the kernel")
    done = rocm_gate(
        "select", "--map", tmp_path / "map.toml", "--base", "HEAD~1", "--head", "HEAD",
        "--repo", repo, "--json",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    chosen = json.loads(done.stdout)
    assert chosen["changed"] == ["csrc/cpu/attention.cu", "csrc/rocm/attention.cu"]
    assert list(chosen["tests"]) == ["tests/kernels/attention/"]
    assert chosen["ignored"] == ["csrc/cpu/attention.cu"]


def test_selection_grows_with_the_change_not_its_square():
    """10,000 changed test files of a 20,000-file tree took 33 s of CPU (every selected path
    matched against every file); each path is now found by bisection."""
    import time

    tree = {f"tests/d{i % 200}/s{i % 7}/test_{i}.py" for i in range(20_000)}
    changed = sorted(tree)[:10_000] + ["tests/d1/", "tests/d3/s2/helper.py"]
    group_map = load_group_map(VLLM_MAP)
    start = time.process_time()
    chosen = select(changed, group_map, None, tree)
    spent = time.process_time() - start
    assert spent < 5.0, f"{spent:.1f} s"
    assert not chosen.everything and len(chosen.tests) == 10_002
    assert chosen.sizes["tests/d1/"] == 100 and chosen.sizes["tests/d3/s2/"] == 14
    assert chosen.sizes["tests/d0/s0/test_0.py"] == 1


def test_the_cli_cover_moves_along_the_curve(small):
    """--cover: 0 the top folder of each file, 1 every folder that changed with it; the default
    the help names is the one the selection uses."""
    # tests/lora/ in 2 commits, tests/models/ and tests/kernels/ in 1 each: half is not more than half
    commits = [{"files": ["vllm/lora/a.py", "tests/lora/test_a.py"]}] * 2 + [
        {"files": ["vllm/lora/a.py", f"tests/{folder}/test_a.py"]}
        for folder in ("models", "kernels")
    ]
    (small / "h.jsonl").write_text("\n".join(json.dumps(c) for c in commits) + "\n")
    (small / "changed.txt").write_text("vllm/lora/a.py\n")
    tests = {}
    for cover in ([], ["--cover", "0"], ["--cover", "1"]):
        done = rocm_gate(
            "select",
            "--map",
            small / "map.toml",
            "--changed-files",
            small / "changed.txt",
            "--history",
            small / "h.jsonl",
            "--json",
            *cover,
        )
        assert done.returncode == 0, done.stderr
        tests[" ".join(cover)] = sorted(json.loads(done.stdout)["tests"])
    assert tests == {
        "": ["tests/kernels/", "tests/lora/"],
        "--cover 0": ["tests/lora/"],
        "--cover 1": ["tests/kernels/", "tests/lora/", "tests/models/"],
    }
    assert f"default {COVER}:" in rocm_gate("select", "--help").stdout


def test_recall_on_vllms_held_out_history_stays_above_0_96():
    """Learn from the older 2,000 upstream commits, check the newer ones: a commit that changes
    tests of group G with source files must select G from its source files alone
    (benchmarks/selection.py adds the GPU time)."""
    group_map = load_group_map(VLLM_MAP)
    commits = read_history(UPSTREAM / "vllm-main-history.jsonl")[::-1][:-FORK_COMMITS]
    history = CoChange.learn(commits[:2000])
    hits = pairs = 0
    for commit in commits[2000:]:
        sources = [f for f in commit["files"] if not is_test_path(f)]
        truth = {group_map.group_of(f) for f in commit["files"] if is_test_file(f)} - {None}
        if sources and truth:
            pairs += len(truth)
            hits += len(truth & set(select(sources, group_map, history).groups))
    # 0.9641 with the defaults, saving 73.9% of the GPU time (benchmarks/selection.py); vLLM's own
    # AMD rules reach 0.9475 and save 71.8%
    assert pairs > 300 and hits / pairs >= 0.96


# --- sharding -------------------------------------------------------------------------------------


def test_shards_are_disjoint_complete_deterministic_and_balanced():
    registry = UPSTREAM / "sglang-ci-registrations.jsonl"
    suite = "stage-b-test-1-gpu-small-amd"
    shards = []
    for index in range(4):
        done = rocm_gate("shard", "--runners", 4, "--index", index, "--suite", suite, registry)
        assert done.returncode == 0, done.stderr
        shards.append(done.stdout.split())
        assert (
            done.stdout
            == rocm_gate(
                "shard", "--runners", 4, "--index", index, "--suite", suite, registry
            ).stdout
        )
    everything = [p for s in shards for p in s]
    assert len(everything) == len(set(everything)) == 88
    balance = json.loads(
        rocm_gate(
            "shard", "--runners", 4, "--index", 0, "--suite", suite, registry, "--json"
        ).stdout
    )
    assert balance["balance"]["slowest_to_ideal"] <= 1.05


def test_shard_uses_measured_durations(tmp_path):
    from pytest_rocm.scheduling.durations import DurationStore

    store = DurationStore(tmp_path / "d.json")
    store.add("MI300X", {"t.py::slow": 100.0, "t.py::a": 1.0, "t.py::b": 1.0, "t.py::c": 1.0})
    store.save()
    ids = "t.py::slow\nt.py::a\nt.py::b\nt.py::c\n\n4 tests collected in 0.01s\n"
    first = rocm_gate(
        "shard", "--runners", 2, "--index", 0, "--durations", tmp_path / "d.json", "-", stdin=ids
    )
    second = rocm_gate(
        "shard", "--runners", 2, "--index", 1, "--durations", tmp_path / "d.json", "-", stdin=ids
    )
    assert first.stdout.split() == ["t.py::slow"] and second.stdout.split() == [
        "t.py::a",
        "t.py::b",
        "t.py::c",
    ]


def _shards_with_starts(path, durations, starts, runners, ids):
    """Every shard of `ids` (rocm-gate shard --json) with a duration store at `path` that holds
    `durations` and the modules' server `starts`."""
    from pytest_rocm.scheduling.durations import DurationStore

    store = DurationStore(path)
    store.add("MI300X", durations, starts)
    store.save()
    done = rocm_gate(
        "shard", "--runners", runners, "--index", 0, "--durations", path,
        "--json", "-", stdin="\n".join(ids) + "\n",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout), done.stderr


def test_a_module_whose_servers_take_time_to_start_stays_on_one_shard(tmp_path):
    ids = [f"{module}::t{n}" for module in ("a.py", "b.py") for n in range(4)]
    durations = dict.fromkeys(ids, 1.0)
    # without a measured start, longest first deals each module's tests to both shards
    spread, _ = _shards_with_starts(tmp_path / "unmeasured.json", durations, {}, 2, ids)
    assert all({n.split("::")[0] for n in s} == {"a.py", "b.py"} for s in spread["shards"])
    # a server that starts in 100 s: each module on one shard, which pays that start once
    together, stderr = _shards_with_starts(
        tmp_path / "measured.json", durations, {"a.py": 100.0, "b.py": 100.0}, 2, ids
    )
    assert sorted(together["shards"]) == [ids[:4], ids[4:]]
    assert together["balance"]["gpu_seconds"] == [104.0, 104.0]
    assert together["balance"]["server_starts"] == [1, 1]
    assert "server starts per shard [1, 1]" in stderr


def test_a_served_module_that_outweighs_a_shard_is_cut_into_consecutive_pieces(tmp_path):
    ids = [f"big.py::t{n}" for n in range(8)] + ["small.py::t0"]
    shards, _ = _shards_with_starts(
        tmp_path / "d.json", dict.fromkeys(ids, 50.0), {"big.py": 100.0}, 2, ids
    )
    pieces = sorted(shards["shards"])
    # (8 x 50 s + the start) over two shards: four tests each, in order, and each pays the start
    assert [p for p in pieces[0] if p.startswith("big")] == ids[:4]
    assert [p for p in pieces[1] if p.startswith("big")] == ids[4:8]
    assert sorted(p for s in pieces for p in s) == sorted(ids)
    assert shards["balance"]["server_starts"] == [1, 1]
    assert sorted(shards["balance"]["gpu_seconds"]) == [300.0, 350.0]


def test_two_pieces_of_a_module_never_share_a_shard_and_loads_count_each_start_once(tmp_path):
    ids = ["m0.py::t0", "m0.py::t1", "m1.py::t0"]
    shards, _ = _shards_with_starts(
        tmp_path / "d.json",
        {"m0.py::t0": 100.0, "m0.py::t1": 100.0, "m1.py::t0": 50.0},
        {"m0.py": 10.0, "m1.py": 100.0},
        2,
        ids,
    )
    assert sorted(shards["shards"]) == [["m0.py::t0", "m0.py::t1"], ["m1.py::t0"]]
    assert sorted(shards["balance"]["gpu_seconds"]) == [150.0, 210.0]
    assert shards["balance"]["server_starts"] == [1, 1]


def test_small_starts_do_not_keep_modules_whole_at_the_cost_of_the_makespan(tmp_path):
    ids = [f"m{m}.py::t{n}" for m in range(3) for n in range(10)]
    shards, _ = _shards_with_starts(
        tmp_path / "d.json", dict.fromkeys(ids, 10.0), {f"m{m}.py": 5.0 for m in range(3)}, 2, ids
    )
    # whole modules would make 210 and 105; spread, each shard pays three 5 s starts
    assert shards["balance"]["gpu_seconds"] == [165.0, 165.0]


def test_an_empty_shard_says_to_run_nothing(tmp_path):
    ids = ["m.py::t0", "m.py::t1"]
    store = tmp_path / "d.json"
    _shards_with_starts(store, dict.fromkeys(ids, 10.0), {"m.py": 1000.0}, 2, ids)
    done = rocm_gate(
        "shard", "--runners", 2, "--index", 1, "--durations", store, "-", stdin="\n".join(ids)
    )
    # loading the model twice to save 10 s of 1,020 is no gain: one runner runs both
    assert done.returncode == 0 and done.stdout == ""
    assert "shard 1 has no tests" in done.stderr and "run nothing on this runner" in done.stderr


def test_a_hand_edited_store_with_odd_numbers_is_read_without_them(tmp_path):
    store = tmp_path / "d.json"
    store.write_text(
        '{"schema": "pytest-rocm/durations/2", "platforms": {"MI300X": {"a.py::t": [2.0, true]}},'
        ' "server_starts": {"MI300X": {"a.py": [Infinity, NaN, -1, true, 1' + "0" * 400 + "]}}}"
    )
    done = rocm_gate(
        "shard", "--runners", 1, "--index", 0, "--durations", store, "--json", "-",
        stdin="a.py::t\n",
    )  # fmt: skip

    def refuse(constant):
        raise AssertionError(f"{constant} in the output: not JSON")

    assert done.returncode == 0 and "Traceback" not in done.stderr
    balance = json.loads(done.stdout, parse_constant=refuse)["balance"]
    assert balance["gpu_seconds"] == [2.0] and balance["server_starts"] == [0]


def test_server_starts_alone_choose_the_platform(tmp_path):
    (tmp_path / "d.json").write_text(
        json.dumps(
            {
                "schema": "pytest-rocm/durations/2",
                "platforms": {},
                "server_starts": {"MI300X": {"a.py": [100.0], "b.py": [100.0]}},
            }
        )
    )
    ids = [f"{module}::t{n}" for module in ("a.py", "b.py") for n in range(4)]
    done = rocm_gate(
        "shard", "--runners", 2, "--index", 0, "--durations", tmp_path / "d.json", "--json", "-",
        stdin="\n".join(ids),
    )  # fmt: skip
    assert sorted(json.loads(done.stdout)["shards"]) == [ids[:4], ids[4:]]


def test_a_registered_file_the_store_never_measured_keeps_its_est_time(tmp_path):
    from pytest_rocm.scheduling.durations import DurationStore

    registry = UPSTREAM / "sglang-ci-registrations.jsonl"
    suite = "stage-b-test-1-gpu-small-amd"
    store = DurationStore(tmp_path / "d.json")
    store.add("MI300X", {"test/elsewhere.py::test_a": 3.0})
    store.save()
    balances = [
        json.loads(
            rocm_gate("shard", "--runners", 4, "--index", 0, "--suite", suite, registry, "--json", *extra).stdout
        )["balance"]
        for extra in ([], ["--durations", tmp_path / "d.json"])
    ]  # fmt: skip
    assert balances[0] == balances[1] and min(balances[0]["gpu_seconds"]) > 1000


@pytest.mark.parametrize(
    "args, message",
    [
        (["--runners", "0", "--index", "0", "x"], "expected 1 or more"),
        (["--runners", "2", "--index", "2", "-"], "--index 2 is not a shard of 2 (use 0 to 1)"),
        (["--runners", "2", "--index", "-1", "-"], "shards are numbered from 0"),
        (["--runners", "2", "--index", "0", "reg.jsonl"], "give --suite NAME"),
        (
            ["--runners", "2", "--index", "0", "--suite", "nope", "reg.jsonl"],
            "no enabled registration in suite 'nope'",
        ),
        (
            ["--runners", "2", "--index", "0", "--suite", "s", "reg.jsonl", "t.txt"],
            "a registrations .jsonl is sharded on its own",
        ),
    ],
)
def test_shard_bad_input_is_named(tmp_path, args, message):
    (tmp_path / "reg.jsonl").write_text(
        '{"path": "test/registered/a.py", "registrations": {"amd": []}}\n'
    )
    done = rocm_gate("shard", *args, stdin="t.py::a\n", cwd=tmp_path)
    assert done.returncode == 2 and message in done.stderr and "Traceback" not in done.stderr


def test_more_runners_than_tests_and_test_files_as_sources(tmp_path):
    for name in ("test_a.py", "test_b.py"):
        (tmp_path / name).write_text("def test(): pass\n")
    shards = [
        rocm_gate(
            "shard", "--runners", 10**20, "--index", i, "test_a.py", "test_b.py", cwd=tmp_path
        )
        for i in (0, 1, 2, 7)
    ]
    assert all(done.returncode == 0 for done in shards)
    assert sorted(p for done in shards for p in done.stdout.split()) == ["test_a.py", "test_b.py"]


def test_output_cut_short_by_the_reader_is_no_error(tmp_path):
    done = subprocess.run(
        f"{sys.executable} -m rocm_gate.cli shard --runners 1 --index 0 --suite "
        f"stage-b-test-1-gpu-small-amd {UPSTREAM / 'sglang-ci-registrations.jsonl'} | head -1",
        shell=True,
        capture_output=True,
        text=True,
    )
    assert len(done.stdout.splitlines()) == 1 and "Traceback" not in done.stderr


def test_names_a_pr_chose_print_as_text(small):
    """Issue 49: changed file names were printed raw, so a PR's file name could write the
    terminal's clipboard (OSC 52) or reverse the line (a right-to-left override)."""
    names = ["tests/test_a\x1b]52;c;ZXZpbA==\x07.py", "docs/\u202eevil.md"]
    (small / "changed.txt").write_text("\n".join(names) + "\n", encoding="utf-8")
    done = rocm_gate(
        "select", "--map", small / "map.toml", "--changed-files", small / "changed.txt"
    )
    assert done.returncode == 0, done.stderr
    assert "\x1b" not in done.stdout and "\u202e" not in done.stdout and "\x07" not in done.stdout
    assert "tests/test_a\\u001b]52;c;ZXZpbA==\\u0007.py" in done.stdout


def test_each_selected_path_names_its_size_and_why_and_the_whole_tree_is_everything(small):
    """Issue 49: a folder link ran most of the tree while the JSON said `everything: false`, and the
    text hid the strongest reason behind "(and 1 more reasons)". With the tree known, each path
    says how many test files it holds and the reason that selected it; the total says what share
    of the tree runs; paths that hold every test file are everything."""
    group_map = load_group_map(small / "map.toml")
    history = CoChange.learn(read_history(small / "history.jsonl"))
    tree = {
        "tests/v1/core/test_sched.py",
        "tests/v1/core/test_kv.py",
        "tests/v1/test_engine.py",
        "tests/kernels/attention/test_attention.py",
        "tests/conftest.py",
    }
    chosen = select(["vllm/v1/core/new_policy.py"], group_map, history, tree)
    assert not chosen.everything and chosen.sizes == {"tests/v1/core/": 2}
    assert chosen.to_dict()["test_files"] == {
        "selected": 2,
        "total": 4,
        "per_path": {"tests/v1/core/": 2},
    }
    both = select(["vllm/attention/ops.py", "tests/v1/conftest.py"], group_map, history, tree)
    assert both.everything and both.why_everything == "the selected paths hold every test file (4)"
    # strongest first: a changed test file before a rule before co-change, the larger share first
    from rocm_gate.selection.select import by_strength

    assert by_strength(
        [
            "a.py: co-changed (a.py changed with tests/x/ in 2 of 9 commits that changed it)",
            "a.py: rule `sources` of group engine",
            "a.py: co-changed (a.py changed with tests/y/ in 5 of 9 commits that changed it)",
            "tests/x/test_a.py changed",
        ]
    ) == [
        "tests/x/test_a.py changed",
        "a.py: rule `sources` of group engine",
        "a.py: co-changed (a.py changed with tests/y/ in 5 of 9 commits that changed it)",
        "a.py: co-changed (a.py changed with tests/x/ in 2 of 9 commits that changed it)",
    ]
