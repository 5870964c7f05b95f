"""`rocm-gate groups` and `pytest --collect-only`: how a tree sorts into groups, on real upstream
data and on trees a maintainer has."""

import json
import subprocess
import sys

import pytest
from conftest import REPO, UPSTREAM

MAPS = REPO / "pytest_rocm" / "maps"


def groups(*args, stdin: str | None = None) -> subprocess.CompletedProcess:
    """rocm-gate groups in its own process, as a maintainer runs it."""
    return subprocess.run(
        [sys.executable, "-m", "rocm_gate.cli", "groups", *map(str, args)],
        input=stdin,
        capture_output=True,
        text=True,
    )


def as_json(*args, stdin: str | None = None) -> dict:
    done = groups(*args, "--json", stdin=stdin)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_the_real_vllm_tree_list():
    report = as_json("--map", MAPS / "vllm.toml", UPSTREAM / "vllm-tests-tree.txt")
    files = {name: g["files"] for name, g in report["groups"].items()}
    # 1,010 test files (3 of them the fork's, in engine); helpers, conftests and __init__ set aside.
    assert files == {
        "attention": 70,
        "engine": 379,
        "api": 226,
        "multimodal": 125,
        "spec_decode": 17,
        "distributed_moe": 150,
        "accuracy": 3,
        "performance": 10,
        "ungrouped": 30,
    }
    assert report["total"] == {"items": None, "files": 1010} and report["not_test_files"] == 230
    assert (
        report["unused_patterns"] == []
        and report["rules_winning_nothing"] == []
        and report["overlaps"] == []
    )
    # all carve-outs before a broader rule (engine's tests/models/)
    assert report["files_in_two_groups_rules"] == 299
    assert "tests/cuda/test_cuda_context.py" in report["ungrouped_files"]
    text = groups("--map", MAPS / "vllm.toml", UPSTREAM / "vllm-tests-tree.txt").stdout
    assert "attention           70      0         0" in text
    assert "files in no group (counted as `ungrouped`) (30):" in text


def test_the_real_sglang_registrations_with_applicability():
    report = as_json(
        "--map",
        MAPS / "sglang.toml",
        "--applicability",
        MAPS / "applicability.toml",
        UPSTREAM / "sglang-ci-registrations.jsonl",
    )
    # conftest.py and __init__.py
    assert report["total"]["files"] == 674 and report["not_test_files"] == 20
    na = {entry["reason"].split(" ")[0]: len(entry["files"]) for entry in report["not_applicable"]}
    assert na["Ascend"] == 108
    # a not-applicable file is listed once: never also as ungrouped
    listed_na = {f for entry in report["not_applicable"] for f in entry["files"]}
    assert not listed_na & set(report["ungrouped_files"])
    # an MTP model's eval and benchmark are accuracy and performance; MTP under hybrid parallelism
    # is the MoE folder's; whole-model MTP runs are speculative decoding (before: all spec_decode,
    # `*mtp*` tried before the folders that name them more narrowly)
    assert report["overlaps"] == []
    from pytest_rocm.catalog.groups import load_group_map

    group_of = load_group_map(MAPS / "sglang.toml").group_of
    registered = "test/registered/"
    assert {
        path: group_of(registered + path)
        for path in (
            "amd/accuracy/mi30x/test_deepseek_v32_mtp_eval_amd.py",
            "amd/perf/mi35x/test_deepseek_v32_mtp_perf_mi35x.py",
            "moe/test_hybrid_dp_ep_tp_mtp.py",
            "8-gpu-models/test_deepseek_v3_mtp.py",
            "amd/test_deepseek_v3_mtp_kv_fp8.py",
            "spec/eagle/test_deepseek_v3_fp4_mtp_small.py",
        )
    } == {
        "amd/accuracy/mi30x/test_deepseek_v32_mtp_eval_amd.py": "accuracy",
        "amd/perf/mi35x/test_deepseek_v32_mtp_perf_mi35x.py": "performance",
        "moe/test_hybrid_dp_ep_tp_mtp.py": "distributed_moe",
        "8-gpu-models/test_deepseek_v3_mtp.py": "spec_decode",
        "amd/test_deepseek_v3_mtp_kv_fp8.py": "spec_decode",
        "spec/eagle/test_deepseek_v3_fp4_mtp_small.py": "spec_decode",
    }


def test_stale_patterns_shadowed_rules_and_overlaps_are_named_and_strict_fails(tmp_path):
    (tmp_path / "map.toml").write_text(
        'schema = "pytest-rocm/groups/1"\n'
        '[[rule]]\ngroup = "engine"\npaths = ["tests/", "!tests/gone/"]\n'
        '[[rule]]\ngroup = "attention"\npaths = ["tests/kernels/attention/", "tests/renamed_later.py"]\n'
        '[[rule]]\ngroup = "api"\npaths = ["tests/x::test_y"]\n'
    )
    (tmp_path / "list.txt").write_text(
        "tests/kernels/attention/test_a.py\ntests/test_b.py\ntests/conftest.py\n"
    )
    report = as_json("--map", tmp_path / "map.toml", tmp_path / "list.txt")
    assert [p["pattern"] for p in report["unused_patterns"] if not p.get("unchecked")] == [
        "!tests/gone/",
        "tests/renamed_later.py",
    ]
    assert [p["pattern"] for p in report["unused_patterns"] if p.get("unchecked")] == [
        "tests/x::test_y"
    ]
    # rule 2 is shadowed by rule 1
    assert [r["rule"] for r in report["rules_winning_nothing"]] == [2, 3]
    # `tests/` before `tests/kernels/attention/`: the narrower rule never wins ...
    assert report["overlaps"] == [
        {"file": "tests/kernels/attention/test_a.py", "group": "engine", "also": ["attention"]}
    ]
    done = groups("--map", tmp_path / "map.toml", tmp_path / "list.txt", "--strict")
    assert done.returncode == 3
    assert "rule 2 (attention): tests/renamed_later.py" in done.stdout
    assert "rules that sort no test" in done.stdout and "rule 2 (attention)" in done.stdout
    # ... and the order a maintainer meant sorts it, with no problem left for --strict
    (tmp_path / "fixed.toml").write_text(
        'schema = "pytest-rocm/groups/1"\n'
        '[[rule]]\ngroup = "attention"\npaths = ["tests/kernels/attention/"]\n'
        '[[rule]]\ngroup = "engine"\npaths = ["tests/"]\n'
    )
    done = groups("--map", tmp_path / "fixed.toml", tmp_path / "list.txt", "--strict")
    assert done.returncode == 0, done.stdout
    assert json.loads(
        groups("--map", tmp_path / "fixed.toml", tmp_path / "list.txt", "--json").stdout
    )["groups"] == {
        "attention": {"items": None, "files": 1, "gates": 0, "blocking": 0},
        "engine": {"items": None, "files": 1, "gates": 0, "blocking": 0},
    }


def test_two_groups_naming_one_file_as_narrowly(tmp_path):
    (tmp_path / "map.toml").write_text(
        'schema = "pytest-rocm/groups/1"\n'
        '[[rule]]\ngroup = "spec_decode"\npaths = ["tests/*mtp*"]\n'
        '[[rule]]\ngroup = "accuracy"\npaths = ["tests/evals/"]\n'
    )
    (tmp_path / "list.txt").write_text("tests/evals/test_gsm8k.py\ntests/evals/test_mtp_gsm8k.py\n")
    report = as_json("--map", tmp_path / "map.toml", tmp_path / "list.txt")
    assert report["overlaps"] == [
        {"file": "tests/evals/test_mtp_gsm8k.py", "group": "spec_decode", "also": ["accuracy"]}
    ]
    assert groups("--map", tmp_path / "map.toml", tmp_path / "list.txt", "--strict").returncode == 3


TREE = {
    "tests/kernels/attention/test_attn.py": """
        import pytest
        @pytest.mark.parametrize("head", [64, 128])
        def test_attn(head): pass
    """,
    "tests/entrypoints/test_api.py": """
        import pytest
        @pytest.mark.rocm_gate(group="api", blocking=True)
        def test_gate(): pass
        def test_plain(): pass
    """,
    "tests/test_utils.py": "def test_util(): pass\n",
}


def make_tree(pytester):
    for path, source in TREE.items():
        target = pytester.path / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(__import__("textwrap").dedent(source))


def test_collect_only_prints_the_table_and_agrees_with_the_cli(pytester):
    make_tree(pytester)
    result = pytester.runpytest_subprocess(
        "--collect-only", "-q", f"--rocm-group-map={MAPS / 'vllm.toml'}", "-p", "no:cacheprovider"
    )
    assert result.ret == 0
    result.stdout.fnmatch_lines(
        [
            "*pytest-rocm: how the collected tests sort into groups*",
            "group  *items  files  gates  blocking",
            "attention  *2  *1  *0  *0",
            "api  *2  *1  *1  *1",  # one of the two is a blocking gate from its marker
            "ungrouped  *1  *1  *0  *0",
            "all  *5  *3  *1  *1",
            "files in no group (counted as `ungrouped`) (1):",
            "  tests/test_utils.py",
        ]
    )
    assert "conclusion" not in result.stdout.str()  # nothing ran: no verdict is given
    # the same output piped into rocm-gate groups (markers unseen there: the map alone decides)
    report = as_json("--map", MAPS / "vllm.toml", "-", stdin=result.stdout.str())
    assert report["total"] == {"items": 5, "files": 3}
    assert {n: g["items"] for n, g in report["groups"].items()} == {
        "attention": 2,
        "api": 2,
        "ungrouped": 1,
    }
    # `-qq` prints `path: count`: the same counts
    qq = pytester.runpytest_subprocess(
        "--collect-only", "-qq", "-p", "no:rocm", "-p", "no:cacheprovider"
    )
    assert as_json("--map", MAPS / "vllm.toml", "-", stdin=qq.stdout.str())["total"] == {
        "items": 5,
        "files": 3,
    }
    # a checkout folder: its test files, whatever pytest would collect
    assert as_json("--map", MAPS / "vllm.toml", pytester.path)["total"] == {
        "items": None,
        "files": 3,
    }


def test_collection_errors_in_piped_output_are_said(pytester):
    make_tree(pytester)
    pytester.makepyfile(**{"tests/test_broken": "import not_installed_anywhere\n"})
    collected = pytester.runpytest_subprocess(
        "--collect-only", "-q", "-p", "no:rocm", "-p", "no:cacheprovider"
    )
    done = groups("--map", MAPS / "vllm.toml", "-", stdin=collected.stdout.str())
    assert done.returncode == 0
    assert "pytest reported errors while collecting" in done.stderr and "incomplete" in done.stderr
    assert "ERROR" not in done.stdout.split("group map")[1].split("\n")[1]


def test_bad_sources_are_named(tmp_path):
    (tmp_path / "map.toml").write_text(
        'schema = "pytest-rocm/groups/1"\n[[rule]]\ngroup = "api"\npaths = ["a/"]\n'
    )
    cases = {
        "missing": (tmp_path / "nope.txt", "nope.txt: no such file or folder"),
        "binary": (tmp_path / "bin.txt", "bin.txt: not UTF-8 text"),
        "empty": (tmp_path / "empty.txt", "no tests in"),
        "bad jsonl": (tmp_path / "reg.jsonl", "reg.jsonl:1: not a registration line"),
    }
    (tmp_path / "bin.txt").write_bytes(b"\xff\xfe\x00tests")
    (tmp_path / "empty.txt").write_text("\n\n")
    (tmp_path / "reg.jsonl").write_text("[1, 2]\n")
    for name, (source, message) in cases.items():
        done = groups("--map", tmp_path / "map.toml", source)
        assert done.returncode == 2, name
        assert message in done.stderr and "Traceback" not in done.stderr, (name, done.stderr)
    (tmp_path / "typo.toml").write_text(
        'schema = "pytest-rocm/groups/1"\n[[rule]]\ngroup = "api"\npath = ["a/"]\n'
    )
    done = groups("--map", tmp_path / "typo.toml", tmp_path / "empty.txt")
    assert done.returncode == 2 and "typo.toml" in done.stderr and "paths" in done.stderr


def test_options_as_maintainers_type_them(tmp_path):
    (tmp_path / "map.toml").write_text(
        'schema = "pytest-rocm/groups/1"\n[[rule]]\ngroup = "atention"\npaths = ["t/"]\n'
    )
    (tmp_path / "list.txt").write_text("t/check_a.py\nt/test_b.py\n_private/test_c.py\n")
    done = groups("--map", tmp_path / "map.toml", tmp_path / "list.txt")
    assert (
        done.returncode == 2
        and "unknown group 'atention'" in done.stderr
        and "--extra-group" in done.stderr
    )
    # --python-files takes one glob per use, so the source after it stays a source
    report = as_json(
        "--map",
        tmp_path / "map.toml",
        "--extra-group",
        "atention",
        "--python-files",
        "check_*.py",
        tmp_path / "list.txt",
    )
    assert report["groups"] == {"atention": {"items": None, "files": 1, "gates": 0, "blocking": 0}}
    assert report["not_test_files"] == 2
    # a path that starts with "_" is a path, not one of pytest's section lines
    assert as_json(
        "--map", tmp_path / "map.toml", "--extra-group", "atention", tmp_path / "list.txt"
    )["ungrouped_files"] == ["_private/test_c.py"]


def test_standard_input_that_is_not_text_and_qq_counts_of_one(tmp_path):
    vllm_map = MAPS / "vllm.toml"
    done = subprocess.run(
        [sys.executable, "-m", "rocm_gate.cli", "groups", "--map", str(vllm_map), "-"],
        input=b"\xff\xfe tests",
        capture_output=True,
    )
    assert (
        done.returncode == 2
        and b"standard input: not UTF-8 text" in done.stderr
        and b"Traceback" not in done.stderr
    )
    # `-qq` lines count items even when every file has one test
    report = as_json(
        "--map", vllm_map, "-", stdin="tests/v1/core/test_a.py: 1\ntests/test_b.py: 1\n"
    )
    assert report["total"] == {"items": 2, "files": 2}


def test_a_checkout_folder_is_named_from_its_root_wherever_it_is_given_from(tmp_path):
    checkout = tmp_path / "work" / "vllm"
    (checkout / "tests/kernels/attention").mkdir(parents=True)
    (checkout / "tests/kernels/attention/test_a.py").write_text("def test(): pass\n")
    (checkout / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    for cwd, folder in (
        (tmp_path / "work", "vllm"),
        (checkout, "."),
        (checkout / "tests", "kernels"),
        (tmp_path, checkout),
    ):
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "rocm_gate.cli",
                "groups",
                "--map",
                str(MAPS / "vllm.toml"),
                str(folder),
                "--json",
            ],
            cwd=cwd,
            capture_output=True,
            text=True,
        )
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["groups"] == {
            "attention": {"items": None, "files": 1, "gates": 0, "blocking": 0}
        }, (cwd, folder)


@pytest.mark.slow
def test_shipped_maps_by_name_from_the_cli_the_option_and_the_ini(pytester, tmp_path):
    """`vllm` (or `pytest_rocm:vllm`) is the installed map, wherever pytest runs; a name that is no
    shipped map is refused with the list; a file of that name where the value is read still wins
    over a bare name."""
    by_name = as_json("--map", "vllm", UPSTREAM / "vllm-tests-tree.txt")
    assert (
        by_name["groups"]
        == as_json("--map", MAPS / "vllm.toml", UPSTREAM / "vllm-tests-tree.txt")["groups"]
    )
    assert by_name["map"]["source"].startswith("vllm-project/vllm@9aaf83ef")
    wrong = groups("--map", "pytest_rocm:vlm", UPSTREAM / "vllm-tests-tree.txt")
    assert (
        wrong.returncode == 2
        and "'pytest_rocm:vlm' names no map shipped with pytest-rocm" in wrong.stderr
    )
    assert "pytest_rocm:sglang, pytest_rocm:vllm" in wrong.stderr
    pytester.makepyfile(
        **{
            "tests/v1/core/test_sched.py": "def test_a():\n    pass\n",
            "tests/entrypoints/openai/test_chat.py": "def test_b():\n    pass\n",
        }
    )
    for args, ini in (
        (["--rocm-group-map=vllm"], ""),
        ([], "rocm_group_map = pytest_rocm:vllm\n"),
        ([], "rocm_group_map = vllm\n"),
    ):
        pytester.makeini(f"[pytest]\n{ini}")
        result = pytester.runpytest_subprocess(
            "--collect-only", "-q", "-p", "no:cacheprovider", *args
        )
        assert result.ret == 0, result.stderr.str()
        result.stdout.fnmatch_lines(
            [
                f"group map: {MAPS / 'vllm.toml'} (paths read from vllm-project/vllm@9aaf83ef*",
                "engine *1*",
                "api *1*",
            ]
        )
    pytester.makeini("[pytest]\nrocm_group_map = pytest_rocm:vlm\n")
    refused = pytester.runpytest_subprocess("--collect-only", "-q", "-p", "no:cacheprovider")
    assert refused.ret == pytest.ExitCode.USAGE_ERROR
    refused.stderr.fnmatch_lines(
        ["*rocm_group_map: 'pytest_rocm:vlm' names no map shipped with pytest-rocm*"]
    )
    # a file named like a map, where the ini is: the file
    (pytester.path / "vllm").write_text(
        'schema = "pytest-rocm/groups/1"\n[[rule]]\ngroup = "attention"\npaths = ["tests/"]\n'
    )
    pytester.makeini("[pytest]\nrocm_group_map = vllm\n")
    local = pytester.runpytest_subprocess("--collect-only", "-q", "-p", "no:cacheprovider")
    local.stdout.fnmatch_lines([f"group map: {pytester.path / 'vllm'}", "attention *2*"])


def test_a_stale_map_says_which_commit_it_was_made_for(tmp_path):
    tree = tmp_path / "tree.txt"
    tree.write_text("tests/v1/core/test_sched.py\ntests/kernels/attention/test_renamed_later.py\n")
    text = groups("--map", "vllm", tree).stdout
    assert "patterns that match nothing in this tree" in text
    assert (
        "the map was made for vllm-project/vllm@9aaf83ef502fc37bc647f6e474314d48ba36cd1c (2026-05-19, PR #43119): "
        "a tree at another commit moves or removes the files those patterns name"
    ) in text
