"""The markers as a user writes them, run through pytester on simulated platforms."""

import json

import pytest
from conftest import GAP, read_report


def test_markers_are_registered(pytester):
    result = pytester.runpytest("--markers")
    result.stdout.fnmatch_lines(
        [
            "@pytest.mark.rocm_gate(group, blocking=True):*",
            "@pytest.mark.hardware(sku=None, arch=None, gpus=1, min_memory_gb=None, vendor=None):*",
            "@pytest.mark.rocm_known_gap(reason, issue, mode='skip'):*",
            "@pytest.mark.vllm_server(args=[[]...[]], env={...}, tiny_model=None):*",
            "@pytest.mark.sglang_server(args=[[]...[]], env={...}, tiny_model=None):*",
        ]
    )


@pytest.mark.parametrize(
    "marker,message",
    [
        (
            'rocm_gate(group="atention")',
            "unknown group 'atention'; allowed: accuracy, api, attention, distributed_moe, engine, multimodal, performance, spec_decode",
        ),
        (
            'rocm_gate(group="api", blockin=False)',
            "rocm_gate got an unexpected keyword argument 'blockin'",
        ),
        ('rocm_gate(group="api", blocking="yes")', "blocking must be True or False, got 'yes'"),
        ("rocm_gate()", "rocm_gate missing 1 required positional argument: 'group'"),
        ('hardware(sku="MI301X")', "unknown SKU 'MI301X'; allowed: MI300X, MI300A, MI308X, MI325X"),
        ('hardware(arch="gfx943")', "unknown arch 'gfx943'; allowed:"),
        ("hardware(gpus=0)", "gpus must be a whole number >= 1, got 0"),
        ("hardware(min_memory_gb=-1)", "min_memory_gb must be a positive number, got -1"),
        ('hardware(vendor="intel")', "vendor must be one of amd, nvidia, got 'intel'"),
        ('rocm_known_gap(reason="fp8 kv cache")', "issue must be the URL of the tracking issue"),
        (
            'rocm_known_gap(reason="fp8", issue="#123")',
            "issue must be the URL of the tracking issue",
        ),
        (f'rocm_known_gap(reason="", issue="{GAP}")', "reason must be a non-empty string"),
        (
            f'rocm_known_gap(reason="x", issue="{GAP}", mode="maybe")',
            "mode must be one of skip, xfail, got 'maybe'",
        ),
        (
            'vllm_server(arg=["--enforce-eager"])',
            "vllm_server got an unexpected keyword argument 'arg'",
        ),
        (
            'vllm_server(args="--enforce-eager")',
            "args must be a list of strings, got '--enforce-eager'",
        ),
        ('sglang_server(env={"A": 1})', "env must map strings to strings, got {'A': 1}"),
        (
            'vllm_server(tiny_model={"architecure": "whisper"})',
            "tiny_model has unknown field(s) architecure; allowed: architecture, head_dim,",
        ),
        (
            'vllm_server(tiny_model={"architecture": "whisperx"})',
            "tiny_model architecture 'whisperx' is not one of llama, mistral, mixtral, qwen3_moe, deepseek_v2, idefics3, whisper",
        ),
        (
            'vllm_server(tiny_model="whisper")',
            "tiny_model must be a dict of TinyModelSpec fields, got 'whisper'",
        ),
    ],
)
def test_wrong_arguments_are_collection_errors_naming_the_test(pytester, marker, message):
    pytester.makepyfile(
        test_bad=f"""
        import pytest

        def test_fine():
            pass

        @pytest.mark.{marker}
        def test_wrong():
            pass
    """
    )
    result = pytester.runpytest("--rocm-platform=mi300x-1")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(["*ERROR collecting test_bad.py*", "*invalid marker arguments*"])
    assert "test_bad.py::test_wrong: @pytest.mark." in result.stdout.str()
    assert message in result.stdout.str()
    assert (
        "test_fine" not in result.stdout.str().split("invalid marker arguments")[1].split("\n")[1]
    )


@pytest.mark.parametrize(
    "marker,message",
    [
        (
            'rocm_gates(group="engine", blocking=True)',
            "@pytest.mark.rocm_gates is not a pytest-rocm marker (did you mean "
            "@pytest.mark.rocm_gate?)",
        ),
        ("rocm_gate_engine", "@pytest.mark.rocm_gate_engine is not a pytest-rocm marker;"),
        ("hardwar(gpus=2)", "(did you mean @pytest.mark.hardware?)"),
        ("vllm_servr(args=[])", "(did you mean @pytest.mark.vllm_server?)"),
        # ours but for case and separators (issue 49: both concluded `success`)
        ('Rocm_Gate(group="engine", blocking=True)', "(did you mean @pytest.mark.rocm_gate?)"),
        ('RocmGate(group="engine", blocking=True)', "(did you mean @pytest.mark.rocm_gate?)"),
        ("Hardware(gpus=2)", "(did you mean @pytest.mark.hardware?)"),
    ],
)
def test_a_misspelt_marker_is_a_collection_error_not_a_plain_test(pytester, marker, message):
    """Read as nothing, a misspelt gate marker made a failing blocking gate an ungrouped test, and
    the run's conclusion `success`, with only pytest's generic warning."""
    pytester.makepyfile(
        test_typo=f"""
        import pytest

        @pytest.mark.rocm_gate(group="engine", blocking=True)
        def test_ok():
            pass

        @pytest.mark.{marker}
        def test_typo():
            assert 0, "a real regression"
    """
    )
    result = pytester.runpytest("--rocm-platform=mi300x-1", "--rocm-report-dir=out")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    assert "test_typo.py::test_typo: @pytest.mark." in result.stdout.str()
    assert message in result.stdout.str()
    report = json.loads((pytester.path / "out" / "gate-report.json").read_text())
    assert report["conclusion"] != "success"


def test_a_projects_own_registered_marker_named_like_ours_is_its_own(pytester):
    pytester.makeini("[pytest]\nmarkers =\n    rocm_nightly: our own\n    hardwares: ours too\n")
    pytester.makepyfile(
        test_own="""
        import pytest

        @pytest.mark.rocm_nightly
        @pytest.mark.hardwares
        @pytest.mark.rocm_gate(group="engine")
        def test_it():
            pass
    """
    )
    result = pytester.runpytest("--rocm-platform=mi300x-1")
    result.assert_outcomes(passed=1)


def test_class_level_marker_errors_name_each_method(pytester):
    pytester.makepyfile(
        test_cls="""
        import pytest

        @pytest.mark.rocm_gate(group="nope")
        class TestAttention:
            def test_a(self):
                pass

            @pytest.mark.parametrize("dtype", ["bf16", "fp8"])
            def test_b(self, dtype):
                pass
    """
    )
    result = pytester.runpytest("--rocm-platform=cpu")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    for nodeid in (
        "test_cls.py::TestAttention::test_a",
        "test_cls.py::TestAttention::test_b[bf16]",
        "test_cls.py::TestAttention::test_b[fp8]",
    ):
        assert f"{nodeid}: @pytest.mark.rocm_gate: unknown group 'nope'" in result.stdout.str()


def test_extra_groups_from_ini(pytester):
    pytester.makeini("[pytest]\nrocm_groups =\n    quantization\n")
    pytester.makepyfile("""
        import pytest

        @pytest.mark.rocm_gate(group="quantization")
        def test_q():
            pass
    """)
    pytester.runpytest("--rocm-platform=cpu").assert_outcomes(passed=1)


HARDWARE_TESTS = """
    import pytest

    @pytest.mark.rocm_gate(group="distributed_moe")
    @pytest.mark.hardware(sku="MI300X", gpus=2)
    def test_two_mi300x():
        pass

    @pytest.mark.rocm_gate(group="attention")
    @pytest.mark.hardware(arch=["gfx942", "gfx950"])
    def test_cdna3_or_4():
        pass

    @pytest.mark.rocm_gate(group="engine")
    @pytest.mark.hardware(vendor="amd", min_memory_gb=200)
    def test_big_memory():
        pass

    @pytest.mark.rocm_gate(group="engine")
    @pytest.mark.hardware(vendor="nvidia")
    def test_cuda_only():
        pass
"""


@pytest.mark.parametrize(
    "platform,passed,reasons",
    [
        (
            "mi300x-8",
            ["test_two_mi300x", "test_cdna3_or_4"],
            [
                "needs 1 x AMD GPU with >= 200 GB each, this runner has 8 x MI300X",
                "needs 1 x NVIDIA GPU, this runner has 8 x MI300X",
            ],
        ),
        (
            "mi355x-1",
            ["test_cdna3_or_4", "test_big_memory"],
            [
                "needs 2 x MI300X, this runner has 1 x MI355X",
                "needs 1 x NVIDIA GPU, this runner has 1 x MI355X",
            ],
        ),
        (
            "h100-8",
            ["test_cuda_only"],
            [
                "needs 2 x MI300X, this runner has 8 x H100",
                "needs 1 x gfx942 or gfx950, this runner has 8 x H100",
                "needs 1 x AMD GPU with >= 200 GB each, this runner has 8 x H100",
            ],
        ),
        (
            "cpu",
            [],
            [
                "needs 2 x MI300X, this runner has no GPU (cpu)",
                "needs 1 x gfx942 or gfx950, this runner has no GPU (cpu)",
                "needs 1 x AMD GPU with >= 200 GB each, this runner has no GPU (cpu)",
                "needs 1 x NVIDIA GPU, this runner has no GPU (cpu)",
            ],
        ),
    ],
)
def test_unmet_hardware_is_skipped_with_both_sides(pytester, platform, passed, reasons):
    pytester.makepyfile(test_hw=HARDWARE_TESTS)
    result = pytester.runpytest(f"--rocm-platform={platform}", "-rs")
    result.assert_outcomes(passed=len(passed), skipped=len(reasons))
    for name in passed:
        result.stdout.no_fnmatch_line(f"*SKIPPED*{name}*")
    for reason in reasons:
        result.stdout.fnmatch_lines([f"SKIPPED *not applicable: {reason}"])


KNOWN_GAP_TESTS = f"""
    import os
    import pytest

    def rocm_only_bug():
        # The simulated bug shows only where the simulated platform is AMD.
        return os.environ["PYTEST_ROCM_PLATFORM"].startswith("mi")

    @pytest.mark.rocm_gate(group="attention")
    @pytest.mark.rocm_known_gap(reason="fp8 kv cache not supported", issue="{GAP}")
    def test_gap_skip():
        assert not rocm_only_bug()

    @pytest.mark.rocm_gate(group="attention")
    @pytest.mark.rocm_known_gap(reason="wrong logits at bs=1", issue="{GAP}", mode="xfail")
    def test_gap_xfail():
        assert not rocm_only_bug()
"""


def test_known_gaps_apply_on_amd(pytester, monkeypatch):
    pytester.makepyfile(test_gaps=KNOWN_GAP_TESTS)
    monkeypatch.setenv("PYTEST_ROCM_PLATFORM", "mi300x-1")
    result = pytester.runpytest("-rsx")
    result.assert_outcomes(skipped=1, xfailed=1)
    result.stdout.fnmatch_lines(
        [
            f"SKIPPED *known gap: fp8 kv cache not supported ({GAP})",
            f"XFAIL *known gap: wrong logits at bs=1 ({GAP})",
        ]
    )


@pytest.mark.parametrize("platform", ["h100-8", "h200-1", "cpu"])
def test_known_gaps_do_not_apply_on_cuda_or_cpu(pytester, monkeypatch, platform):
    pytester.makepyfile(test_gaps=KNOWN_GAP_TESTS)
    monkeypatch.setenv("PYTEST_ROCM_PLATFORM", platform)
    pytester.runpytest().assert_outcomes(passed=2)


def test_hardware_requirement_wins_over_known_gap(pytester):
    pytester.makepyfile(f"""
        import pytest

        @pytest.mark.rocm_gate(group="attention")
        @pytest.mark.hardware(sku="MI355X")
        @pytest.mark.rocm_known_gap(reason="needs new aiter", issue="{GAP}")
        def test_x():
            pass
    """)
    result = pytester.runpytest("--rocm-platform=mi300x-1", "-rs")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["*not applicable: needs 1 x MI355X, this runner has 1 x MI300X"])


def test_unknown_platform_profile_is_a_usage_error(pytester):
    pytester.makepyfile("""
        import pytest

        @pytest.mark.rocm_gate(group="api")
        def test_x():
            pass
    """)
    result = pytester.runpytest("--rocm-platform=mi999x-8")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*unknown platform profile 'mi999x-8'*"])


GROUP_MAP = """
schema = "pytest-rocm/groups/1"
source = "test tree"

[[rule]]
group = "attention"
paths = ["tests/kernels/attention/", "!tests/kernels/attention/test_moe_like.py"]

[[rule]]
group = "distributed_moe"
paths = ["tests/kernels/*moe*", "tests/distributed/"]
blocking = true

[[rule]]
group = "api"
paths = ["tests/entrypoints/openai/test_chat.py::test_stream"]
"""


def make_upstream_tree(pytester):
    pytester.makefile(".toml", groups=GROUP_MAP)
    files = {
        "tests/kernels/attention/test_flash.py": "def test_flash(): pass\n",
        "tests/kernels/attention/test_moe_like.py": "def test_moe_like(): pass\n",
        "tests/distributed/test_comm.py": "def test_allreduce(): pass\n",
        "tests/entrypoints/openai/test_chat.py": "def test_stream(): pass\ndef test_tools(): pass\n",
        "tests/test_config.py": "def test_config(): pass\n",
    }
    for path, text in files.items():
        target = pytester.path / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)


def test_group_map_from_ini_groups_unmarked_tests(pytester):
    make_upstream_tree(pytester)
    pytester.makeini("[pytest]\nrocm_group_map = groups.toml\n")
    result = pytester.runpytest(
        "--rocm-platform=mi300x-1", "--rocm-report-dir=out", "-p", "no:cacheprovider"
    )
    result.assert_outcomes(passed=6)
    report = read_report(pytester.path / "out")
    groups = {nodeid: t["group"] for nodeid, t in report["tests"].items()}
    assert (
        groups
        == {
            "tests/kernels/attention/test_flash.py::test_flash": "attention",
            "tests/kernels/attention/test_moe_like.py::test_moe_like": "distributed_moe",  # excluded, falls through
            "tests/distributed/test_comm.py::test_allreduce": "distributed_moe",
            "tests/entrypoints/openai/test_chat.py::test_stream": "api",
            "tests/entrypoints/openai/test_chat.py::test_tools": None,
            "tests/test_config.py::test_config": None,
        }
    )
    assert report["tests"]["tests/distributed/test_comm.py::test_allreduce"]["blocking"] is True
    assert report["tests"]["tests/kernels/attention/test_flash.py::test_flash"]["blocking"] is False


@pytest.mark.parametrize(
    "content,message",
    [
        ("[[rule]]\ngroup = 'attention'\n", "rule 1: needs `paths = ["),
        (
            "[[rule]]\ngroup = 'atention'\npaths = ['tests/']\n",
            "rule 1: unknown group 'atention'; allowed:",
        ),
        ("[[rule]\n", "not valid TOML"),
        ("[[rule]]\ngroup = 'api'\npaths = ['tests/']\nblock = true\n", "unknown keys block"),
    ],
)
def test_bad_group_map_is_a_usage_error_naming_the_file(pytester, content, message):
    pytester.makefile(".toml", groups=content)
    pytester.makepyfile("def test_x(): pass")
    result = pytester.runpytest("--rocm-group-map=groups.toml")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "groups.toml" in result.stderr.str() and message in result.stderr.str()
