"""`rocm-gate parity`: a real CUDA/ROCm pair run through pytester, upstream maps on real trees,
SGLang's registry."""

import json
import re
from collections import Counter

import pytest
from conftest import GAP, REPO, SAMPLES
from conftest import UPSTREAM as UPSTREAM_DATA

from pytest_rocm.catalog.groups import GROUPS, load_group_map
from pytest_rocm.catalog.identity import detect_prefixes, nodeid_from_junit
from pytest_rocm.catalog.sglang import calls_in_source, read_checkout, read_registry
from rocm_gate.cli import main as rocm_gate
from rocm_gate.parity.markdown import GITHUB_SUMMARY_LIMIT, render
from rocm_gate.parity.sglang_registry import declared_parity

UPSTREAM = REPO / "pytest_rocm" / "maps"


def parity(*args) -> int:
    return rocm_gate(["parity", *map(str, args)])


def parity_of_pair(folder, *options) -> int:
    """`rocm-gate parity` on `folder`'s ref.xml and cand.xml, writing its reports there."""
    return parity(
        "--reference",
        folder / "ref.xml",
        "--candidate",
        folder / "cand.xml",
        *options,
        "--out",
        folder,
    )


def load(folder):
    return json.loads((folder / "parity.json").read_text())


# --- the real pair: one suite, run on a simulated CUDA and a simulated MI300X platform
# -------------

PAIR_SUITE = f"""
    import os
    import pytest

    ON_ROCM = os.environ["PYTEST_ROCM_PLATFORM"].startswith("mi")

    @pytest.mark.rocm_gate(group="attention")
    @pytest.mark.parametrize("dtype", ["bf16", "fp16", "fp8"])
    def test_paged_attention(dtype):
        pass

    @pytest.mark.rocm_gate(group="attention")
    @pytest.mark.rocm_known_gap(reason="fp8 kv cache not supported", issue="{GAP}")
    def test_fp8_kv_cache():
        pass

    @pytest.mark.rocm_gate(group="attention")
    @pytest.mark.rocm_known_gap(reason="sliding window drift", issue="{GAP}", mode="xfail")
    def test_sliding_window():
        assert not ON_ROCM

    @pytest.mark.rocm_gate(group="engine")
    def test_scheduler():
        pass

    @pytest.mark.rocm_gate(group="engine")
    def test_prefix_cache():
        assert not ON_ROCM, "prefix cache hit rate 0.0 < 0.5"

    @pytest.mark.rocm_gate(group="distributed_moe")
    @pytest.mark.hardware(gpus=8)
    def test_all2all():
        pass

    @pytest.mark.rocm_gate(group="distributed_moe")
    def test_nvfp4_moe():
        pass

    @pytest.mark.rocm_gate(group="api", blocking=False)
    def test_cuda_broken():
        assert ON_ROCM
"""


@pytest.fixture
def real_pair(pytester, monkeypatch):
    pytester.makepyfile(test_pair=PAIR_SUITE)
    runs = {}
    for platform in ("h100-8", "mi300x-8"):
        monkeypatch.setenv("PYTEST_ROCM_PLATFORM", platform)
        out = pytester.path / platform
        pytester.runpytest(
            f"--rocm-report-dir={out}", f"--junitxml={out}/junit.xml", "-p", "no:cacheprovider"
        )
        runs[platform] = out
    applicability = pytester.path / "applicability.toml"
    applicability.write_text(
        '[[not_applicable]]\nreason = "NVFP4 is Blackwell-only"\npaths = ["*::*nvfp4*"]\n'
    )
    return runs["h100-8"], runs["mi300x-8"], applicability


def test_real_pair_from_junit_and_gate_reports(real_pair, tmp_path, capsys):
    cuda, rocm, applicability = real_pair
    assert (
        parity(
            "--reference",
            cuda,
            "--candidate",
            rocm,
            "--applicability",
            applicability,
            "--out",
            tmp_path,
        )
        == 0
    )
    report = load(tmp_path)
    assert report["inputs"]["reference"]["files"] == [
        str(cuda / "junit.xml"),
        str(cuda / "gate-report.json"),
    ]
    groups = report["groups"]
    # attention: 5 pass on CUDA; on ROCm 3 pass, one known gap skipped, one known gap xfailed.
    assert {
        k: groups["attention"][k]
        for k in ("reference_passing", "both_passing", "known_gap", "failed")
    } == {"reference_passing": 5, "both_passing": 3, "known_gap": 2, "failed": 0}
    assert groups["attention"]["parity"] == 0.6
    assert groups["engine"]["reference_passing"] == 2 and groups["engine"]["both_passing"] == 1
    assert groups["engine"]["failed"] == 1
    assert (
        groups["distributed_moe"]["reference_passing"] == 1
        and groups["distributed_moe"]["both_passing"] == 1
    )
    assert groups["distributed_moe"]["not_applicable"] == 1
    assert groups["api"]["reference_passing"] == 0 and groups["api"]["reference_not_passing"] == 1
    assert groups["api"]["parity"] is None
    overall = report["overall"]
    assert (overall["reference_passing"], overall["both_passing"], overall["not_applicable"]) == (
        8,
        5,
        1,
    )
    assert overall["parity"] == 0.625
    # attention's two known gaps block nothing (skipped and xfailed on ROCm): 6 of 8 tests gate a
    # merge
    assert report["gating"] == {
        "reference_passing_tests": 8,
        "blocking_tests": 6,
        "tests_share": 0.75,
        "groups": ["attention", "distributed_moe", "engine"],  # api: none passes on the reference
        "fully_blocking_groups": ["distributed_moe", "engine"],
        "partly_blocking_groups": ["attention"],
        "groups_share": 0.666667,
    }
    assert overall["reference_not_passing"] == 1 and overall["tests_not_passing_on_both"] == len(
        report["tests"]
    )
    gaps = {(g["status"], g["reason"]): g["tests"] for g in groups["attention"]["gaps"]}
    assert gaps == {
        ("known_gap", f"fp8 kv cache not supported ({GAP})"): ["test_pair.py::test_fp8_kv_cache"],
        ("known_gap", f"sliding window drift ({GAP})"): ["test_pair.py::test_sliding_window"],
    }
    assert groups["engine"]["gaps"][0]["reason"].startswith(
        "AssertionError: prefix cache hit rate 0.0 < 0.5"
    )
    assert report["not_applicable"] == [
        {"reason": "NVFP4 is Blackwell-only", "count": 1, "tests": ["test_pair.py::test_nvfp4_moe"]}
    ]
    # a blocking gate: rerun once, failed again
    assert report["tests"]["test_pair.py::test_prefix_cache"] == {
        "group": "engine",
        "reference": "passed",
        "candidate": "failed",
        "parity": "failed",
        "rerun": True,
        "reason": groups["engine"]["gaps"][0]["reason"],
    }
    markdown = (tmp_path / "parity.md").read_text()
    assert markdown.startswith("## ROCm parity against the reference: 62.5%")
    assert (
        "| attention | 5 | 3 | 60.0% | 0 | 0 | 0 | 0 | 0 | 2 | 0 | 0 | 0 | 3 (partly) |" in markdown
    )
    # api has no reference pass: its row says why, and the reference's failure is listed
    assert "| api | 0 | 0 | n/a | 0 | 0 | 0 | 0 | 0 | 0 | 0 | 1 | 0 | 0 (no) |" in markdown
    assert "<b>api</b>: 1 not passing on the reference" in markdown
    assert "` test_pair.py::test_cuda_broken `: failed (` assert False `)" in markdown
    # an issue link from the inputs is text
    assert f"` fp8 kv cache not supported ` (issue ` {GAP} `)" in markdown
    assert "` NVFP4 is Blackwell-only ` (1)" in markdown


def test_real_pair_from_junit_alone(real_pair, tmp_path):
    """Without our gate reports the JUnit properties still carry groups and known gaps."""
    cuda, rocm, _ = real_pair
    assert (
        parity(
            "--reference", cuda / "junit.xml", "--candidate", rocm / "junit.xml", "--out", tmp_path
        )
        == 0
    )
    report = load(tmp_path)
    assert report["overall"]["reference_passing"] == 9 and report["overall"]["both_passing"] == 6
    assert report["groups"]["attention"]["known_gap"] == 2
    assert "test_all2all" in report["passing"]["test_pair.py"]


def test_min_parity_exit_code(real_pair, tmp_path, capsys):
    cuda, rocm, _ = real_pair
    assert (
        parity("--reference", cuda, "--candidate", rocm, "--min-parity", "0.9", "--out", tmp_path)
        == 3
    )
    assert "below the minimum 0.9" in capsys.readouterr().err
    assert "(target 90.0%: **not met**)" in (tmp_path / "parity.md").read_text()
    assert (
        parity("--reference", cuda, "--candidate", rocm, "--min-parity", "0.5", "--out", tmp_path)
        == 0
    )


def test_previous_report_gives_newly_broken_and_fixed(real_pair, tmp_path):
    cuda, rocm, _ = real_pair
    # everything passed before
    parity("--reference", cuda, "--candidate", cuda, "--out", tmp_path / "before")
    assert (
        parity(
            "--reference",
            cuda,
            "--candidate",
            rocm,
            "--previous",
            tmp_path / "before/parity.json",
            "--out",
            tmp_path / "after",
        )
        == 0
    )
    changes = load(tmp_path / "after")["changes"]
    assert sorted(c["test"] for c in changes["newly_broken"]) == [
        "test_pair.py::test_fp8_kv_cache",
        "test_pair.py::test_prefix_cache",
        "test_pair.py::test_sliding_window",
    ]
    assert changes["newly_fixed"] == []
    parity(
        "--reference",
        cuda,
        "--candidate",
        cuda,
        "--previous",
        tmp_path / "after/parity.json",
        "--out",
        tmp_path / "back",
    )
    assert len(load(tmp_path / "back")["changes"]["newly_fixed"]) == 3


# --- reading input: bad files, keep-going, prefixes
# -------------------------------------------------


def test_unreadable_input_exit_code_names_the_file(tmp_path, capsys):
    bad = SAMPLES / "junit/enricomi_pytest_truncated_corrupt.xml"
    assert (
        parity(
            "--reference",
            bad,
            "--candidate",
            SAMPLES / "junit/junitparser_pytest_error.xml",
            "--out",
            tmp_path,
        )
        == 2
    )
    err = capsys.readouterr().err
    assert str(bad) in err and "line 11" in err


def test_keep_going_reads_the_rest_and_names_the_dropped_file(tmp_path, capsys):
    bad = SAMPLES / "junit/enricomi_pytest_truncated_corrupt.xml"
    good = SAMPLES / "junit/enricomi_pytest_horovod_97_tests.xml"
    assert (
        parity("--reference", good, bad, "--candidate", good, "--keep-going", "--out", tmp_path)
        == 0
    )
    report = load(tmp_path)
    assert report["inputs"]["reference"]["files"] == [str(good)]
    dropped = report["inputs"]["reference"]["dropped"]
    assert len(dropped) == 1 and dropped[0].startswith(f"{bad}: not well-formed XML at line 11")
    assert "test case(s) before the error were kept" in dropped[0]
    assert report["overall"]["parity"] == 1.0 and report["overall"]["reference_passing"] == 80
    assert (
        "### Input files that could not be read (dropped)" in (tmp_path / "parity.md").read_text()
    )


@pytest.mark.parametrize(
    "field, value, says",
    [
        ("message", 5, "`message` must be text"),
        ("detail", None, None),  # null is allowed, and read as no text
        ("known_gap", "x", "`known_gap` must be an object"),
        ("attempts", 3, "`attempts` must be a list"),
        ("group", ["a"], "`group` must be a group name or null"),
        ("blocking", "false", "`blocking` must be true or false"),
    ],
)
def test_a_gate_report_with_a_field_of_another_type_is_named_not_a_traceback(
    tmp_path, capsys, field, value, says
):
    """The candidate's gate report is written by a job that ran the change's code: a field of the
    wrong type crashed parity (AttributeError, TypeError), also with --keep-going, or (a string
    `blocking`) counted a test as blocking."""
    from pytest_rocm.results.report import GATE_REPORT_SCHEMA

    (tmp_path / "ref.xml").write_text(junit_with([("tests.test_a", "test_0")]))
    entry = {"status": "failed", "group": "api", "blocking": True, "message": "m", "detail": "d"}
    report = tmp_path / "cand" / "gate-report.json"
    report.parent.mkdir()
    report.write_text(
        json.dumps(
            {
                "schema": GATE_REPORT_SCHEMA,
                "tests": {"tests/test_a.py::test_0": {**entry, field: value}},
            }
        )
    )
    args = ("--reference", tmp_path / "ref.xml", "--candidate", report, "--out", tmp_path)
    code = parity(*args)
    err = capsys.readouterr().err
    if says is None:
        assert code == 0, err
        return
    assert code == 2 and "Traceback" not in err
    assert str(report) in err and says in err
    deep = tmp_path / "deep" / "gate-report.json"
    deep.parent.mkdir()
    deep.write_text("[" * 100_000 + "]" * 100_000)
    assert parity(*args[:3], deep, report, tmp_path / "ref.xml", "--keep-going", *args[4:]) == 0
    dropped = load(tmp_path)["inputs"]["candidate"]["dropped"]
    assert [d.split(":")[0] for d in dropped] == [str(deep), str(report)]
    assert dropped[0].endswith("(read as a gate report)")


def test_keep_going_keeps_the_cases_of_a_one_line_file_cut_short(tmp_path, capsys):
    """pytest writes a whole JUnit file on one line: cut at 8,000 bytes, the cases before the cut
    were read line by line up to the broken line, so none was kept."""
    whole = SAMPLES / "junit/enricomi_pytest_horovod_97_tests.xml"
    assert len(whole.read_text().splitlines()) <= 2
    cut = tmp_path / "cut.xml"
    cut.write_bytes(whole.read_bytes()[:8000])
    good = SAMPLES / "junit/junitparser_pytest_error.xml"
    args = ("--reference", whole, "--candidate", cut, good, "--keep-going", "--out", tmp_path)
    assert parity(*args) == 0
    [dropped] = load(tmp_path)["inputs"]["candidate"]["dropped"]
    kept = int(re.search(r"\((\d+) test case\(s\) before the error were kept\)", dropped)[1])
    assert kept > 40


@pytest.mark.parametrize("encoding", ["x-nonexistent", "shift_jis"])
def test_an_encoding_the_parser_cannot_read_names_the_file(tmp_path, capsys, encoding):
    """An unknown encoding raised LookupError (a traceback), and one expat cannot read a
    ValueError reported as `cannot read None`; neither could be dropped with --keep-going."""
    odd = tmp_path / "odd.xml"
    odd.write_text(
        f'<?xml version="1.0" encoding="{encoding}"?>\n'
        '<testsuite><testcase classname="tests.test_a" name="test_0"/></testsuite>\n'
    )
    good = SAMPLES / "junit/junitparser_pytest_error.xml"
    assert parity("--reference", good, "--candidate", odd, "--out", tmp_path) == 2
    err = capsys.readouterr().err
    assert f"{odd}: its encoding cannot be read" in err and "Traceback" not in err
    assert (
        parity("--reference", good, "--candidate", odd, good, "--keep-going", "--out", tmp_path)
        == 0
    )
    assert load(tmp_path)["inputs"]["candidate"]["dropped"][0].startswith(f"{odd}: its encoding")


def test_an_earlier_report_of_another_shape_is_named(tmp_path, capsys):
    previous = tmp_path / "prev.json"
    previous.write_text('{"schema": "pytest-rocm/parity/1", "passing": {"x": 5}, "tests": {}}')
    good = SAMPLES / "junit/junitparser_pytest_error.xml"
    args = ("--reference", good, "--candidate", good, "--previous", previous, "--out", tmp_path)
    assert parity(*args) == 2
    err = capsys.readouterr().err
    assert f"cannot read {previous}: its `passing` and `tests` are not shaped" in err


def test_an_interrupted_test_of_a_gate_report_is_counted_not_lost(tmp_path, capsys):
    """A gate report's `interrupted` status had no column: the test passed on the reference,
    counted in no column on the candidate, and the row did not add up."""
    from pytest_rocm.results.report import GATE_REPORT_SCHEMA

    (tmp_path / "ref.xml").write_text(junit_with([("tests.test_a", "test_0")]))
    report = tmp_path / "cand" / "gate-report.json"
    report.parent.mkdir()
    entry = {"status": "interrupted", "group": "api", "message": "", "detail": "", "attempts": []}
    report.write_text(
        json.dumps({"schema": GATE_REPORT_SCHEMA, "tests": {"tests/test_a.py::test_0": entry}})
    )
    assert (
        parity("--reference", tmp_path / "ref.xml", "--candidate", report, "--out", tmp_path) == 0
    )
    overall = load(tmp_path)["overall"]
    assert (overall["reference_passing"], overall["both_passing"], overall["error"]) == (1, 0, 1)


def test_a_file_name_with_a_line_break_is_printed_on_one_line(tmp_path, capsys):
    """A dropped file's name went to stderr as it is: a name with a line break printed a line of
    its own, which GitHub Actions reads as a workflow command (`::error ...`)."""
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "x\n::error title=forged::y.xml").write_text("not xml")
    good = SAMPLES / "junit/junitparser_pytest_error.xml"
    assert (
        parity("--reference", good, "--candidate", folder, good, "--keep-going", "--out", tmp_path)
        == 0
    )
    err = capsys.readouterr().err
    assert not [line for line in err.splitlines() if line.startswith("::")]
    assert "x\\n::error" in err


def test_missing_input_path(tmp_path, capsys):
    assert parity("--reference", tmp_path / "nope", "--candidate", tmp_path, "--out", tmp_path) == 2
    assert "no such file or folder" in capsys.readouterr().err


def junit_with(names, classname_prefix="", status=None):
    cases = "".join(
        f'<testcase classname="{classname_prefix}{module}" name="{name}">{status or ""}</testcase>'
        for module, name in names
    )
    return f'<testsuites><testsuite name="pytest">{cases}</testsuite></testsuites>'


def test_roots_are_aligned_automatically(tmp_path):
    names = [("tests.kernels.attention.test_x", "test_a[bf16]"), ("tests.v1.core.test_y", "test_b")]
    (tmp_path / "ref.xml").write_text(junit_with(names, "vllm-workspace."))
    (tmp_path / "cand.xml").write_text(junit_with(names[:1]))
    assert parity_of_pair(tmp_path, "--groups", UPSTREAM / "vllm.toml") == 0
    report = load(tmp_path)
    assert report["inputs"]["reference"]["stripped_prefix"] == "vllm-workspace/"
    assert report["passing"] == {"tests/kernels/attention/test_x.py": ["test_a[bf16]"]}
    assert report["tests"]["tests/v1/core/test_y.py::test_b"]["parity"] == "missing"
    assert (
        report["groups"]["engine"]["missing"] == 1
        and report["groups"]["attention"]["parity"] == 1.0
    )


def test_explicit_strip_prefix(tmp_path):
    (tmp_path / "ref.xml").write_text(junit_with([("ci.shard3.tests.test_x", "test_a")]))
    (tmp_path / "cand.xml").write_text(junit_with([("tests.test_x", "test_a")]))
    assert parity_of_pair(tmp_path, "--strip-prefix", "ci/shard3/") == 0
    assert load(tmp_path)["passing"] == {"tests/test_x.py": ["test_a"]}


def test_identity_and_prefix_units():
    assert (
        nodeid_from_junit("tests.kernels.attention.test_x.TestY", "test_z[bf16-128]")
        == "tests/kernels/attention/test_x.py::TestY::test_z[bf16-128]"
    )
    assert nodeid_from_junit("", "tests.test_broken") == "tests/test_broken.py"
    assert (
        nodeid_from_junit("prefix.tests.test_x.TestA", "t", "tests/test_x.py")
        == "tests/test_x.py::TestA::t"
    )
    assert detect_prefixes(
        dict.fromkeys(["tests/a/test_x.py::t"]), dict.fromkeys(["tests/a/test_x.py::t"])
    ) == ("", "")
    assert detect_prefixes(
        dict.fromkeys(["a/test_x.py::t"]), dict.fromkeys(["root/tests/a/test_x.py::t"])
    ) == ("", "root/tests/")


# --- markdown size
# ---------------------------------------------------------------------------------


def test_markdown_fits_github_with_exact_totals(tmp_path):
    failing = '<failure message="{}"/>'
    names = [
        (
            f"tests.kernels.moe.test_fused_moe_{i // 50}",
            f"test_case_with_a_long_parameter_id[{'x' * 60}-{i}]",
        )
        for i in range(20000)
    ]
    cases = "".join(
        f'<testcase classname="{m}" name="{n}">{failing.format("reason " + str(i % 400))}</testcase>'
        for i, (m, n) in enumerate(names)
    )
    (tmp_path / "ref.xml").write_text(junit_with(names))
    (tmp_path / "cand.xml").write_text(
        f'<testsuites><testsuite name="x">{cases}</testsuite></testsuites>'
    )
    assert parity_of_pair(tmp_path, "--groups", UPSTREAM / "vllm.toml") == 0
    markdown = (tmp_path / "parity.md").read_text()
    assert len(markdown) <= GITHUB_SUMMARY_LIMIT
    assert "| distributed_moe | 20000 | 0 | 0.0% | 20000 |" in markdown
    assert re.search(r"` and \d+ more\n", markdown)
    assert re.search(r"- and \d+ more reasons covering \d+ tests", markdown)
    report = load(tmp_path)
    assert sum(g["count"] for g in report["groups"]["distributed_moe"]["gaps"]) == 20000
    assert len(render(report, limit=4000)) <= 4000


# --- upstream group maps on the real trees
# ---------------------------------------------------------


def is_test_file(path):
    name = path.rsplit("/", 1)[-1]
    return name.startswith("test_") or name.endswith("_test.py")


# Test files the tree list holds that upstream's commit 9aaf83ef does not (the list was taken from a
# fork 53 commits later; tests/data/upstream/README.md says how they were found). Expectations leave
# them out.
FORK_ONLY = {
    "tests/model_executor/layers/test_b12x_contract.py",
    "tests/model_executor/layers/test_logits_processor.py",
    "tests/v1/sample/test_score_mode.py",
}
VLLM_COUNTS = {
    "engine": 376,
    "api": 226,
    "distributed_moe": 150,
    "multimodal": 125,
    "attention": 70,
    "spec_decode": 17,
    "performance": 10,
    "accuracy": 3,
    "ungrouped": 30,
}


def test_vllm_map_on_the_real_tree():
    group_map = load_group_map(UPSTREAM / "vllm.toml", set(GROUPS))
    files = [
        line.strip()
        for line in (UPSTREAM_DATA / "vllm-tests-tree.txt").read_text().splitlines()
        if line.strip()
    ]
    assert FORK_ONLY <= set(files)
    tests = [f for f in files if is_test_file(f) and f not in FORK_ONLY]
    counts = Counter(group_map.group_of(f, "ungrouped") for f in tests)
    assert dict(counts) == VLLM_COUNTS
    assert len(tests) == 1007 and len(files) == 1240
    other = sorted({f.split("/")[1] for f in tests if group_map.group_of(f) is None})
    # What is left is general utilities, configuration, platform plumbing and tooling.
    assert other == [
        "cuda",
        "plugins_tests",
        "test_config.py",
        "test_embedded_commit.py",
        "test_envs.py",
        "test_logger.py",
        "test_version.py",
        "test_vllm_port.py",
        "test_zen_cpu_platform_detection.py",
        "tools",
        "utils_",
    ]
    assert group_map.source.startswith("vllm-project/vllm@9aaf83ef502fc37bc647f6e474314d48ba36cd1c")


def test_sglang_map_on_the_real_registry():
    group_map = load_group_map(UPSTREAM / "sglang.toml", set(GROUPS))
    paths = [f.path for f in read_registry(UPSTREAM_DATA / "sglang-ci-registrations.jsonl")]
    counts = Counter(group_map.group_of(p, "ungrouped") for p in paths)
    assert counts == {
        "engine": 226,
        "ungrouped": 213,
        "distributed_moe": 50,
        "performance": 50,
        "api": 47,
        "accuracy": 45,
        "spec_decode": 27,
        "attention": 27,
        "multimodal": 9,
    }
    other_roots = {p.split("/")[2] for p in paths if group_map.group_of(p) is None}
    assert other_roots == {"ascend", "debug_utils", "observability", "profiling", "unit", "utils"}


# --- SGLang declared coverage
# ----------------------------------------------------------------------


def test_sglang_registry_numbers(tmp_path):
    files = read_registry(UPSTREAM_DATA / "sglang-ci-registrations.jsonl")
    result = declared_parity(files)
    assert (
        result["files"],
        result["cuda"],
        result["amd"],
        result["both"],
        result["amd_disabled_registrations"],
    ) == (694, 337, 228, 128, 14)
    assert result["amd_only"] == 100
    # 128 on both, 11 of them with every AMD registration disabled
    assert result["cuda_covered_on_amd"] == 117
    assert result["declared_parity"] == round(117 / 337, 6)
    assert len(result["missing_on_amd"]) == 337 - 117
    # a file may sit in several buckets
    assert sum(row["cuda"] for row in result["by_stage_and_gpus"]) >= 337
    stage_b_1 = next(
        r for r in result["by_stage_and_gpus"] if (r["stage"], r["gpus"]) == ("stage-b", 1)
    )
    assert (stage_b_1["cuda"], stage_b_1["amd_enabled"]) == (185, 93)
    reasons = {d["path"]: d["reason"] for d in result["disabled"]}
    assert (
        reasons["test/registered/lora/test_lora_tp.py"]
        == "see https://github.com/sgl-project/sglang/issues/13107"
    )


def test_sglang_registry_through_the_cli_with_applicability(tmp_path):
    assert (
        parity(
            "--sglang-registry",
            UPSTREAM_DATA / "sglang-ci-registrations.jsonl",
            "--applicability",
            UPSTREAM / "applicability.toml",
            "--out",
            tmp_path,
        )
        == 0
    )
    sglang = load(tmp_path)["sglang"]
    excluded = {e["path"]: e["reason"] for e in sglang["not_applicable"]}
    assert excluded[
        "test/registered/4-gpu-models/test_nvidia_nemotron_3_super_nvfp4.py"
    ].startswith("NVFP4")
    assert excluded["test/registered/4-gpu-models/test_qwen35_fp4_triton.py"].startswith(
        "registered only on NVIDIA Blackwell"
    )
    assert sglang["cuda_applicable"] == 337 - len(excluded)
    assert sglang["declared_parity"] == round(
        sglang["cuda_covered_on_amd"] / sglang["cuda_applicable"], 6
    )
    markdown = (tmp_path / "parity.md").read_text()
    assert markdown.startswith("## SGLang declared AMD coverage:")
    # a FlashInfer TRT-LLM backend test leaves
    assert "| stage-b | 1 | 184 | 93 | 50.5% | 1 |" in markdown


def test_sglang_checkout_is_read_with_ast_never_imported(tmp_path):
    registered = tmp_path / "sglang/test/registered"
    (registered / "attention").mkdir(parents=True)
    (registered / "attention/test_flash.py").write_text(
        "import torch_that_does_not_exist\n"
        "from sglang.test.ci.ci_register import register_amd_ci, register_cuda_ci\n"
        "raise SystemExit('imported!')\n"
        "register_cuda_ci(est_time=120, suite='stage-b-test-1-gpu-small')\n"
        "register_amd_ci(120, 'stage-b-test-1-gpu-small-amd', disabled='see https://github.com/sgl-project/sglang/issues/1')\n"
        "ci.register_npu_ci(est_time=TIME, suite='x')\n"
    )
    (registered / "test_cuda_only.py").write_text(
        "register_cuda_ci(est_time=60, suite='stage-c-test-4-gpu-h100')\n"
    )
    files = read_checkout(tmp_path / "sglang")
    assert [f.path for f in files] == [
        "test/registered/attention/test_flash.py",
        "test/registered/test_cuda_only.py",
    ]
    assert files[0].registrations == {
        "cuda": [{"est_time": 120, "suite": "stage-b-test-1-gpu-small"}],
        "amd": [
            {
                "est_time": 120,
                "suite": "stage-b-test-1-gpu-small-amd",
                "disabled": "see https://github.com/sgl-project/sglang/issues/1",
            }
        ],
        "npu": [{"est_time": "TIME", "suite": "x"}],
    }
    result = declared_parity(files)
    assert (
        result["cuda"],
        result["amd"],
        result["cuda_covered_on_amd"],
        result["amd_disabled_registrations"],
    ) == (2, 1, 0, 1)


def test_the_newer_registration_form_names_its_suite_by_stage_and_runner(tmp_path):
    """SGLang's ci_register.py now takes keyword-only `stage` and `runner_config` (`suite`
    optional), its suite `{stage}-test-{runner_config}`: such files were in no suite (sharding said
    'no enabled registration in suite') and counted in stage `other` on 1 GPU."""
    registered = tmp_path / "sglang/test/registered"
    registered.mkdir(parents=True)
    (registered / "test_new.py").write_text(
        "register_cuda_ci(est_time=75, stage='extra-a', runner_config='2-gpu-large')\n"
        "register_amd_ci(est_time=15, stage='jit-kernel-unit', runner_config='amd')\n"
    )
    (registered / "test_old.py").write_text(
        "register_cuda_ci(est_time=60, suite='stage-c-test-8-gpu-h200')\n"
    )
    [new, old] = read_checkout(tmp_path / "sglang")
    assert new.registrations["cuda"][0]["suite"] == "extra-a-test-2-gpu-large"
    assert new.registrations["amd"][0]["suite"] == "jit-kernel-unit-test-amd"
    buckets = {
        (b["stage"], b["gpus"]): b["cuda"] for b in declared_parity([new, old])["by_stage_and_gpus"]
    }
    assert buckets == {("extra-a", 2): 1, ("stage-c", 8): 1}
    done = rocm_gate(
        [
            "shard",
            "--runners",
            "1",
            "--index",
            "0",
            "--suite",
            "jit-kernel-unit-test-amd",
            str(tmp_path / "sglang"),
        ]
    )
    assert done == 0


def test_sglang_syntax_error_names_the_file():
    with pytest.raises(ValueError, match=r"broken.py:1: not valid Python"):
        calls_in_source("register_amd_ci(", "broken.py")


def test_same_inputs_give_the_same_report_bytes(real_pair, tmp_path):
    """Rebuilding a report must not depend on hash order: two processes with different hash seeds
    agree."""
    import os
    import subprocess
    import sys

    cuda, rocm, applicability = real_pair
    outputs = []
    for seed in ("1", "2"):
        out = tmp_path / seed
        subprocess.run(
            [
                sys.executable,
                "-m",
                "rocm_gate.cli",
                "parity",
                "--reference",
                str(cuda),
                "--candidate",
                str(rocm),
                "--applicability",
                str(applicability),
                "--out",
                str(out),
            ],
            env={**os.environ, "PYTHONHASHSEED": seed},
            check=True,
            capture_output=True,
        )
        outputs.append(((out / "parity.json").read_bytes(), (out / "parity.md").read_bytes()))
    assert outputs[0] == outputs[1]


# --- gating coverage, reference failures, and tests listed once
# -------------------------------------------


def test_gating_coverage_counts_tests_and_leaves_ungrouped_out(tmp_path):
    """A group with 1 blocking gate of 4 is `partly` merge-blocking, not "a merge-blocking group";
    `ungrouped` is never counted as a group; a not-applicable test under tests/cuda/ is listed once,
    not also as ungrouped."""
    blocking = '<properties><property name="rocm_blocking" value="true"/></properties>'
    names = [("tests.kernels.attention.test_a", f"test_{i}") for i in range(4)] + [
        ("tests.cuda.test_cuda_context", "test_ctx"),
        ("tests.misc.test_u", "test_u"),
    ]
    (tmp_path / "ref.xml").write_text(junit_with(names))
    cases = "".join(
        f'<testcase classname="{m}" name="{n}">{blocking if n in ("test_0", "test_u") else ""}</testcase>'
        for m, n in names
    )
    (tmp_path / "cand.xml").write_text(
        f'<testsuites><testsuite name="x">{cases}</testsuite></testsuites>'
    )
    (tmp_path / "na.toml").write_text(
        '[[not_applicable]]\nreason = "CUDA runtime only"\npaths = ["tests/cuda/"]\n'
    )
    assert (
        parity_of_pair(
            tmp_path, "--groups", UPSTREAM / "vllm.toml", "--applicability", tmp_path / "na.toml"
        )
        == 0
    )
    report = load(tmp_path)
    assert report["gating"] == {
        "reference_passing_tests": 5,
        "blocking_tests": 2,
        "tests_share": 0.4,
        "groups": ["attention"],
        "fully_blocking_groups": [],
        "partly_blocking_groups": ["attention"],
        "groups_share": 0.0,
    }
    assert report["groups"]["attention"]["blocking"] == "partly"
    assert report["unmatched"] == ["tests/misc/test_u.py::test_u"]
    assert report["not_applicable"][0]["tests"] == ["tests/cuda/test_cuda_context.py::test_ctx"]
    markdown = (tmp_path / "parity.md").read_text()
    assert "0 of 1 groups are merge-blocking in full (0.0%); partly: attention (1 of 4)" in markdown
    assert "2 of 5 tests passing on the reference are merge-blocking" in markdown
    assert markdown.count("test_ctx") == 1
    assert "### `ungrouped`: tests no marker or map rule puts in a group (1)" in markdown


def test_minimal_junit_read_with_the_map_sorts_as_the_full_one(pytester, tmp_path):
    """The default JUnit file leaves out the groups the map gave; parity with the same map gets them
    back."""
    pytester.makepyfile(
        **{
            "tests/kernels/attention/test_k": "def test_k(): pass\n",
            "tests/v1/core/test_s": "import pytest\n@pytest.mark.rocm_gate(group='engine')\ndef test_s(): pass\n",
        }
    )
    vllm_map = UPSTREAM / "vllm.toml"
    for mode in ("minimal", "full"):
        result = pytester.runpytest(
            f"--rocm-group-map={vllm_map}",
            f"--junitxml={mode}.xml",
            "-p",
            "no:cacheprovider",
            f"--rocm-junit-properties={mode}",
            "--rocm-platform=mi300x-8",
        )
        assert result.ret == 0
    minimal, full = (pytester.path / "minimal.xml"), (pytester.path / "full.xml")
    assert "rocm_group" not in minimal.read_text().split("test_k")[1].split("</testcase>")[0]
    assert minimal.stat().st_size < full.stat().st_size
    for reference, candidate in ((full, minimal), (minimal, full)):
        assert (
            parity(
                "--reference",
                reference,
                "--candidate",
                candidate,
                "--groups",
                vllm_map,
                "--out",
                tmp_path,
            )
            == 0
        )
        groups = load(tmp_path)["groups"]
        assert {name: (g["both_passing"], g["blocking"]) for name, g in groups.items()} == {
            "attention": (1, "no"),
            "engine": (1, "all"),
        }


def _rendered(markdown: str) -> str:
    import cmarkgfm
    from cmarkgfm.cmark import Options

    return cmarkgfm.github_flavored_markdown_to_html(markdown, options=Options.CMARK_OPT_UNSAFE)


def test_a_page_cut_to_githubs_limit_keeps_hostile_text_inside_code(tmp_path):
    """200 candidate failures, each in a group of its own (a `rocm_group` property: the candidate
    decides how many groups there are) with a message full of markup: even the shortest lists
    exceed 65,535 characters. The last-resort cut used to fall inside a code span, and the rest of
    that line rendered as a link, an image and a mention."""
    from xml.sax.saxutils import quoteattr

    count = 200
    hostile = (
        "[click here](https://evil.example/login) @octocat <img src=https://evil.example/p.png> "
        * 4
    )[:290]
    (tmp_path / "ref.xml").write_text(
        "<testsuite>"
        + "".join(f'<testcase classname="tests.test_cut" name="test_{i}"/>' for i in range(count))
        + "</testsuite>"
    )
    (tmp_path / "cand.xml").write_text(
        "<testsuite>"
        + "".join(
            f'<testcase classname="tests.test_cut" name="test_{i}"><properties>'
            f'<property name="rocm_group" value="g{i:03d}{"x" * 80}"/></properties>'
            f"<failure message={quoteattr(hostile)}/></testcase>"
            for i in range(count)
        )
        + "</testsuite>"
    )
    parity_of_pair(tmp_path)
    markdown = (tmp_path / "parity.md").read_text()
    assert len(markdown) <= GITHUB_SUMMARY_LIMIT and "(report cut to fit" in markdown
    html = _rendered(markdown)
    assert "evil.example" not in re.sub(r"<code>.*?</code>", "", html, flags=re.S)
    assert "<img" not in html and "<a " not in html
    assert html.count("<details>") == html.count("</details>")


@pytest.mark.parametrize(
    "group", ["www.evil.com", "GH-12", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4", "GHSA-abcd"]
)
def test_a_group_name_github_would_link_is_shown_as_code(tmp_path, group):
    """`md.name` showed identifier-like names as they are; GitHub links these."""
    (tmp_path / "ref.xml").write_text(junit_with([("tests.test_a", "test_0")]))
    (tmp_path / "cand.xml").write_text(
        '<testsuite><testcase classname="tests.test_a" name="test_0"><properties>'
        f'<property name="rocm_group" value="{group}"/></properties><failure message="x"/>'
        "</testcase></testsuite>"
    )
    parity_of_pair(tmp_path)
    html = _rendered((tmp_path / "parity.md").read_text())
    assert group in html
    assert group not in re.sub(r"<code>.*?</code>", "", html, flags=re.S)


def test_a_prefix_stripped_onto_another_files_id_is_merged_not_dropped(tmp_path, capsys):
    """`--strip-prefix ws/`: `ws/tests/test_a.py::test_0` failed in one candidate file and
    `tests/test_a.py::test_0` passed in another; the later one simply replaced the earlier."""
    (tmp_path / "ref.xml").write_text(junit_with([("tests.test_a", "test_0")]))
    failing = tmp_path / "a_fail.xml"
    failing.write_text(
        '<testsuite><testcase classname="ws.tests.test_a" name="test_0">'
        '<failure message="F"/></testcase></testsuite>'
    )
    passing = tmp_path / "b_pass.xml"
    passing.write_text(junit_with([("tests.test_a", "test_0")]))
    for order in ([passing, failing], [failing, passing]):
        code = parity(
            "--reference",
            tmp_path / "ref.xml",
            "--candidate",
            *order,
            "--strip-prefix",
            "ws/",
            "--out",
            tmp_path,
        )
        assert code == 0, capsys.readouterr().err
        report = load(tmp_path)
        # a pass in any file counts (shards, a rerun job), and the failure is kept as an attempt
        assert report["overall"]["both_passing"] == 1
        [repeated] = report["repeated"]["candidate"]
        assert repeated["counted"] == "passed" and "failed" in repeated["attempts"]
