"""Accuracy, performance and golden gates through pytester: each passes and fails on purpose;
baselines diff."""

import json

import pytest
from conftest import read_jsonl, read_report

from rocm_gate.cli import main as rocm_gate

BASELINES = """
schema = "pytest-rocm/baselines/1"

[[baseline]]
test = "test_gate_suite.py::test_accuracy"
metric = "gsm8k"
platform = "MI300X"
expected = 0.80
direction = "higher"
rtol = 0.08
source = "https://ci.example/runs/1 (2026-11-01, rocm 7.0)"

[[baseline]]
test = "test_gate_suite.py::test_accuracy"
metric = "gsm8k"
platform = "gfx950"
expected = 0.85
direction = "higher"
rtol = 0.05
source = "mi355x nightly"

[[baseline]]
test = "test_gate_suite.py::test_accuracy"
metric = "gsm8k"
platform = "cpu"
expected = 0.02
direction = "both"
rtol = 0.0
atol = 0.01
source = "this machine"

[[baseline]]
test = "test_gate_suite.py::test_throughput"
metric = "output_tok_per_s"
platform = "amd"
expected = 1000.0
direction = "higher"
max_regression_pct = 10
source = "perf nightly"

[[baseline]]
test = "test_gate_suite.py::test_latency"
metric = "ttft_ms"
platform = "MI300X"
expected = 50.0
direction = "lower"
max_regression_pct = 20
source = "perf nightly"
"""

GATES = """
import os
import pytest

VALUE = float(os.environ.get("MEASURED", "0.79"))
SAMPLES = [float(x) for x in os.environ.get("SAMPLES", "1000,990,1010").split(",")]

@pytest.mark.rocm_gate(group="accuracy")
def test_accuracy(accuracy_gate):
    accuracy_gate.check("gsm8k", VALUE)

@pytest.mark.rocm_gate(group="performance")
def test_throughput(perf_gate):
    perf_gate.check("output_tok_per_s", SAMPLES)

@pytest.mark.rocm_gate(group="performance")
def test_latency(perf_gate):
    perf_gate.check("ttft_ms", [float(x) for x in os.environ.get("LATENCY", "48,52,55").split(",")])
"""


@pytest.fixture
def gate_suite(pytester):
    pytester.makefile(".toml", baselines=BASELINES)
    pytester.makeini("[pytest]\nrocm_baselines = baselines.toml\n")
    pytester.makepyfile(test_gate_suite=GATES)
    return pytester


def run(pytester, monkeypatch, platform, **env):
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    result = pytester.runpytest(
        f"--rocm-platform={platform}",
        "--rocm-report-dir=out",
        "--rocm-reruns=0",
        "-p",
        "no:cacheprovider",
    )
    report = read_report(pytester.path / "out")
    return result, report


def test_all_gates_pass(gate_suite, monkeypatch):
    result, report = run(gate_suite, monkeypatch, "mi300x-1")
    result.assert_outcomes(passed=3)
    records = read_jsonl(gate_suite.path / "out/records-controller.jsonl")
    measured = {m["metric"]: m for r in records for m in r.get("measurements", [])}
    assert measured["gsm8k"]["passed"] and measured["gsm8k"]["platform"] == "MI300X"
    assert measured["gsm8k"]["low"] == pytest.approx(0.80 * 0.92)
    assert measured["output_tok_per_s"]["samples"] == [1000.0, 990.0, 1010.0]
    assert measured["output_tok_per_s"]["platform"] == "amd"  # no SKU or arch entry: the vendor one


def test_accuracy_gate_fails_with_measured_expected_tolerance_and_source(gate_suite, monkeypatch):
    result, _ = run(gate_suite, monkeypatch, "mi300x-1", MEASURED="0.70")
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines(
        [
            "*accuracy gate 'gsm8k': measured 0.7, expected 0.8 (higher is better, rtol 0.08, atol 0: accepts >= 0.736); "
            "baseline for MI300X from https://ci.example/runs/1 (2026-11-01, rocm 7.0) (*baselines.toml, baseline 1)"
        ]
    )


def test_most_specific_platform_key_wins(gate_suite, monkeypatch):
    # MI355X: no SKU entry, so the gfx950 one (0.85, rtol 0.05 -> 0.8075) decides.
    result, _ = run(gate_suite, monkeypatch, "mi355x-8", MEASURED="0.80")
    result.stdout.fnmatch_lines(
        ["*measured 0.8, expected 0.85*accepts >= 0.8075*baseline for gfx950*"]
    )


def test_two_sided_accuracy(gate_suite, monkeypatch):
    result, _ = run(gate_suite, monkeypatch, "cpu", MEASURED="0.04")
    assert (
        "measured 0.04, expected 0.02 (two-sided, rtol 0, atol 0.01: accepts [0.01, 0.03])"
        in result.stdout.str()
    )
    result, _ = run(gate_suite, monkeypatch, "cpu", MEASURED="0.025")
    assert "accuracy gate" not in result.stdout.str()


def test_missing_baseline_fails_with_the_entry_to_add(gate_suite, monkeypatch):
    result, _ = run(gate_suite, monkeypatch, "h100-1")
    out = result.stdout.str()
    assert (
        "accuracy gate 'gsm8k': no baseline for this test on this platform (looked for H100, sm_90, nvidia); "
        "measured 0.79" in out
    )
    assert (
        '[[baseline]]\ntest = "test_gate_suite.py::test_accuracy"\nmetric = "gsm8k"\nplatform = "H100"\n'
        'expected = 0.79\ndirection = "higher"\nrtol = 0.08\nsource = "<run URL, date, stack>"'
    ) in out


def test_perf_gate_one_noisy_sample_does_not_block(gate_suite, monkeypatch):
    result, _ = run(gate_suite, monkeypatch, "mi300x-1", SAMPLES="1000,850,1005")
    result.assert_outcomes(passed=3)


def test_perf_gate_blocks_when_every_sample_regresses(gate_suite, monkeypatch):
    result, _ = run(gate_suite, monkeypatch, "mi300x-1", SAMPLES="880,870,899", LATENCY="61,65,70")
    result.assert_outcomes(passed=1, failed=2)
    result.stdout.fnmatch_lines(
        [
            "*performance gate 'output_tok_per_s': all 3 samples regressed (880, 870, 899; median 880), expected 1000 "
            "(higher is better, max regression 10%: accepts >= 900); baseline for amd from perf nightly*"
        ]
    )
    result.stdout.fnmatch_lines(
        [
            "*performance gate 'ttft_ms': all 3 samples regressed (61, 65, 70; median 65), "
            "expected 50 (lower is better, max regression 20%: accepts <= 60)*"
        ]
    )


def test_perf_gate_needs_three_samples(gate_suite, monkeypatch):
    result, _ = run(gate_suite, monkeypatch, "mi300x-1", SAMPLES="1000,1000")
    result.stdout.fnmatch_lines(
        ["*performance gate 'output_tok_per_s': needs at least 3 samples, got 2*"]
    )


def test_proposals_never_touch_baseline_files(gate_suite, monkeypatch):
    before = (gate_suite.path / "baselines.toml").read_text()
    monkeypatch.setenv("MEASURED", "0.5")
    gate_suite.runpytest(
        "--rocm-platform=mi325x-8",
        "--rocm-report-dir=out",
        "--rocm-reruns=0",
        "--rocm-propose-baselines=proposed.toml",
    )
    assert (gate_suite.path / "baselines.toml").read_text() == before
    proposed = (gate_suite.path / "proposed.toml").read_text()
    assert (
        'test = "test_gate_suite.py::test_accuracy"\nmetric = "gsm8k"\nplatform = "MI325X"\nexpected = 0.5\n'
        in proposed
    )
    assert (
        'metric = "output_tok_per_s"\nplatform = "MI325X"\nexpected = 1000.0\ndirection = "higher"\n'
        "max_regression_pct = 10.0" in proposed
    )
    assert 'source = "proposed from run on ' in proposed and "8 x MI325X" in proposed
    # The proposal is itself a valid baseline file.
    from pytest_rocm.gates.baselines import load_file

    assert len(load_file(gate_suite.path / "proposed.toml")) == 3


def test_bad_baseline_file_is_a_usage_error(pytester):
    pytester.makefile(
        ".toml",
        baselines='[[baseline]]\ntest = "t"\nmetric = "m"\nplatform = "cpu"\nexpected = "high"\n',
    )
    pytester.makeini("[pytest]\nrocm_baselines = baselines.toml\n")
    pytester.makepyfile("""
        import pytest

        @pytest.mark.rocm_gate(group="accuracy")
        def test_a(accuracy_gate):
            accuracy_gate.check("m", 1.0)
    """)
    result = pytester.runpytest("--rocm-platform=cpu")
    assert (
        "baseline 1: `expected` must be a finite number, got 'high'"
        in result.stdout.str() + result.stderr.str()
    )


# --- baselines diff -------------------------------------------------------------------------------


def test_loosened_threshold_is_visible_in_the_diff(tmp_path, capsys):
    old = tmp_path / "old.toml"
    old.write_text(BASELINES)
    new = tmp_path / "new.toml"
    # removed + added
    new.write_text(
        BASELINES.replace("rtol = 0.08", "rtol = 0.20")  # loosened
        .replace("max_regression_pct = 20", "max_regression_pct = 5")  # tightened
        .replace('platform = "cpu"', 'platform = "gfx942"')
    )
    assert rocm_gate(["baselines", "diff", str(old), str(new)]) == 0
    out = capsys.readouterr().out
    assert (
        "LOOSENED  test_gate_suite.py::test_accuracy :: gsm8k @ MI300X: expected 0.8 (rtol 0.08, atol 0, accepts >= 0.736)"
        " -> expected 0.8 (rtol 0.2, atol 0, accepts >= 0.64)"
    ) in out
    assert "TIGHTENED test_gate_suite.py::test_latency :: ttft_ms @ MI300X" in out
    assert "REMOVED   test_gate_suite.py::test_accuracy :: gsm8k @ cpu" in out
    assert "ADDED     test_gate_suite.py::test_accuracy :: gsm8k @ gfx942" in out
    assert "1 loosened, 1 tightened, 0 moved, 1 added, 1 removed" in out
    assert rocm_gate(["baselines", "diff", str(old), str(new), "--fail-on-loosened"]) == 3
    assert rocm_gate(["baselines", "diff", str(old), str(old), "--fail-on-loosened"]) == 0


# --- golden ---------------------------------------------------------------------------------------

GOLDEN = """
import json
import os
import pytest

@pytest.mark.rocm_gate(group="engine")
def test_greedy(golden):
    data = json.loads(os.environ["OUTPUTS"])
    golden.check("greedy", data["ids"], [[{int(k): v for k, v in top.items()} for top in seq] for seq in data["lps"]],
                 dtype=os.environ.get("DTYPE"))
"""


def outputs(ids, lps):
    return json.dumps({"ids": ids, "lps": lps})


REFERENCE = outputs(
    [[5, 7, 9], [1, 2]],
    [
        [{"5": -0.1, "6": -2.0}, {"7": -0.2, "8": -1.5}, {"9": -0.3, "4": -1.0}],
        [{"1": -0.1, "3": -2.5}, {"2": -0.4, "0": -1.1}],
    ],
)


@pytest.fixture
def golden_suite(pytester, monkeypatch):
    pytester.makepyfile(test_golden=GOLDEN)
    monkeypatch.setenv("OUTPUTS", REFERENCE)
    pytester.runpytest("--rocm-platform=h100-1", "--rocm-golden-record=golden").assert_outcomes(
        passed=1
    )
    return pytester


def test_golden_identical_and_close_outputs_pass(golden_suite, monkeypatch):
    golden_suite.runpytest("--rocm-platform=mi300x-1", "--rocm-golden=golden").assert_outcomes(
        passed=1
    )
    # Position 1 differs, but each side's token is in the other's top-k: close enough (vLLM's rule).
    monkeypatch.setenv(
        "OUTPUTS",
        outputs(
            [[5, 8, 4], [1, 2]],
            [
                [{"5": -0.1, "6": -2.1}, {"8": -0.3, "7": -0.4}, {"4": -0.2}],
                [{"1": -0.1}, {"2": -0.4}],
            ],
        ),
    )
    golden_suite.runpytest("--rocm-platform=mi300x-1", "--rocm-golden=golden").assert_outcomes(
        passed=1
    )


def test_golden_divergence_names_position_tokens_and_logprobs(golden_suite, monkeypatch):
    monkeypatch.setenv(
        "OUTPUTS",
        outputs(
            [[5, 7, 9], [1, 3]],
            [[{"5": -0.1}, {"7": -0.2}, {"9": -0.3}], [{"1": -0.1}, {"3": -0.2, "4": -0.9}]],
        ),
    )
    result = golden_suite.runpytest(
        "--rocm-platform=mi300x-1", "--rocm-golden=golden", "--rocm-reruns=0"
    )
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*golden 'greedy' (cross-platform: vLLM's check_logprobs_close (top-k)): sequence 1 diverges at position 1: "
            "this run chose token 3 (logprob -0.2000), the reference "
            "chose 2 (logprob -0.4000); 3 is not in the reference's top-2; 2 is not in this run's top-2 "
            "(reference recorded on 1 x H100, *greedy.json)"
        ]
    )


def _scaled(outputs_json: str, factor: float) -> str:
    data = json.loads(outputs_json)
    return outputs(
        data["ids"],
        [[{k: v * factor for k, v in top.items()} for top in seq] for seq in data["lps"]],
    )


def test_golden_on_the_same_platform_and_dtype_is_exact(pytester, monkeypatch):
    """Logprobs scaled by 0.9, or a greedy choice of the second-best token, pass vLLM's lenient
    cross-platform rule; against a reference of the same platform key and dtype they are
    regressions."""
    pytester.makepyfile(test_golden=GOLDEN)
    monkeypatch.setenv("OUTPUTS", REFERENCE)
    monkeypatch.setenv("DTYPE", "bfloat16")
    pytester.runpytest("--rocm-platform=mi300x-1", "--rocm-golden-record=golden").assert_outcomes(
        passed=1
    )
    pytester.runpytest("--rocm-platform=mi300x-1", "--rocm-golden=golden").assert_outcomes(passed=1)
    monkeypatch.setenv("OUTPUTS", _scaled(REFERENCE, 0.9))
    scaled = pytester.runpytest(
        "--rocm-platform=mi300x-1", "--rocm-golden=golden", "--rocm-reruns=0"
    )
    scaled.assert_outcomes(failed=1)
    scaled.stdout.fnmatch_lines(
        [
            "*golden 'greedy' (same platform: exact tokens, logprobs within 0.002): sequence 0 "
            "position 0: token 5 has logprob -0.0900, the reference -0.1000 (more than 0.002 apart)*"
        ]
    )
    second_best = outputs(
        [[5, 8, 9], [1, 2]],
        [
            [{"5": -0.1, "6": -2.0}, {"7": -0.2, "8": -1.5}, {"9": -0.3, "4": -1.0}],
            [{"1": -0.1, "3": -2.5}, {"2": -0.4, "0": -1.1}],
        ],
    )
    monkeypatch.setenv("OUTPUTS", second_best)
    pytester.runpytest(
        "--rocm-platform=mi300x-1", "--rocm-golden=golden", "--rocm-reruns=0"
    ).stdout.fnmatch_lines(
        [
            "*sequence 0 diverges at position 1: this run chose token 8 (logprob -1.5000), the reference chose 7*"
        ]
    )
    # another dtype, or another platform: the lenient rule, and the report says so
    monkeypatch.setenv("DTYPE", "float16")
    monkeypatch.setenv("OUTPUTS", _scaled(REFERENCE, 0.9))
    pytester.runpytest(
        "--rocm-platform=mi300x-1", "--rocm-golden=golden", "--rocm-report-dir=out"
    ).assert_outcomes(passed=1)
    records = [
        json.loads(line)
        for f in (pytester.path / "out").glob("records-*.jsonl")
        for line in f.read_text().splitlines()
    ]
    rules = [
        m["rule"] for r in records for m in r.get("measurements") or [] if m.get("kind") == "golden"
    ]
    assert rules == ["cross-platform: vLLM's check_logprobs_close (top-k)"]


def test_golden_without_a_recording_says_how_to_make_one(pytester, monkeypatch):
    pytester.makepyfile(test_golden=GOLDEN)
    monkeypatch.setenv("OUTPUTS", REFERENCE)
    result = pytester.runpytest("--rocm-platform=mi300x-1", "--rocm-golden=golden")
    result.stdout.fnmatch_lines(
        [
            "*golden 'greedy': *greedy.json does not exist; record it on the reference platform "
            "with --rocm-golden-record *golden*"
        ]
    )


def test_a_proposed_baseline_entry_is_valid_toml_for_any_test_id():
    """Test ids and run descriptions hold quotes, backslashes and control characters; the entry
    stays TOML."""
    import tomllib

    from pytest_rocm.gates.baselines import entry_text

    test_id = 'suites/t.py::test_x[a"b\\\\c\x01\x7f\u2028]'
    entry = tomllib.loads(
        entry_text(
            test_id, "tok/s", "MI300X", 12.5, "higher", "run\tat\x1bnight", max_regression_pct=10.0
        )
    )["baseline"][0]
    assert entry == {
        "test": test_id,
        "metric": "tok/s",
        "platform": "MI300X",
        "expected": 12.5,
        "direction": "higher",
        "max_regression_pct": 10.0,
        "source": "run\tat\x1bnight",
    }


LIVE = """
import json
import os
import pytest
from pytest_rocm.gates.golden import as_golden

def layout(data):
    return as_golden(data["ids"], [[{int(k): v for k, v in top.items()} for top in seq] for seq in data["lps"]])

@pytest.mark.rocm_gate(group="engine")
@pytest.mark.parametrize("framework", ["vllm", "sglang"])
def test_against_reference(golden, framework):
    golden.check_live("greedy", layout(json.loads(os.environ["REFERENCE"])),
                      layout(json.loads(os.environ[framework.upper()])), reference_name="transformers", framework=framework)
"""


def test_live_reference_sets_the_frameworks_side_by_side(pytester, monkeypatch):
    """Each framework against a reference computed in the run: a near-tie flip passes (vLLM's rule)
    and is shown where it differs; tokens outside the reference's top-k fail naming the position;
    the report and the end of the run list both frameworks against the same reference."""
    pytester.makepyfile(test_live=LIVE)
    monkeypatch.setenv("REFERENCE", REFERENCE)
    # vLLM: the second sequence flips a near-tie at position 1 (each side's token in the other's top-k).
    monkeypatch.setenv(
        "VLLM",
        outputs(
            [[5, 7, 9], [1, 0]],
            [
                [{"5": -0.1, "6": -2.0}, {"7": -0.2, "8": -1.5}, {"9": -0.3, "4": -1.0}],
                [{"1": -0.1, "3": -2.5}, {"0": -0.5, "2": -0.6}],
            ],
        ),
    )
    # SGLang: other weights, another token at position 0 that the reference does not rank at all.
    monkeypatch.setenv(
        "SGLANG",
        outputs(
            [[8, 7, 9], [1, 2]],
            [[{"8": -0.2, "3": -1.0}, {"7": -0.2}, {"9": -0.3}], [{"1": -0.1}, {"2": -0.4}]],
        ),
    )
    result = pytester.runpytest(
        "--rocm-platform=cpu", "--rocm-report-dir=out", "--rocm-reruns=1", "-p", "no:cacheprovider"
    )
    assert result.ret == 1
    result.stdout.fnmatch_lines(
        [
            "*golden 'greedy' against transformers (another implementation: vLLM's check_logprobs_close (top-k)), served "
            "by sglang: sequence 0 diverges at position 0: this run chose token 8 (logprob -0.2000), the reference chose 5 "
            "(logprob -0.1000); 8 is not in the reference's top-2; 5 is not in this run's top-2"
        ]
    )
    result.stdout.fnmatch_lines(
        [
            "greedy tokens of each framework against the same reference (same weights, same prompts):",
            "framework  golden  reference     same tokens  gate  first difference",
            "vllm       greedy  transformers  4/5          pass  sequence 1 diverges at position 1: this run chose token 0*",
            "sglang     greedy  transformers  2/5          FAIL  sequence 0 diverges at position 0: this run chose token 8*",
        ]
    )
    report = read_report(pytester.path / "out")
    rows = {row["framework"]: row for row in report["frameworks_against_reference"]}
    assert (
        set(rows) == {"vllm", "sglang"} and rows["vllm"]["passed"] and not rows["sglang"]["passed"]
    )
    assert (
        rows["vllm"]["agreeing_tokens"] == 4
        and rows["sglang"]["agreeing_tokens"] == 2
        and rows["vllm"]["tokens"] == 5
    )
    assert report["tests"][rows["sglang"]["nodeid"]]["verdict"] == "regression"


@pytest.mark.parametrize(
    "damage, says",
    [
        (lambda text: text[: len(text) // 2], "is not JSON (line *: it is damaged or cut short"),
        (lambda text: "[]", "is not a golden file (a JSON list, not an object)"),
        (
            lambda text: json.dumps({k: v for k, v in json.loads(text).items() if k != "logprobs"}),
            "has no `logprobs`: a golden file holds the token ids and their top-k logprobs",
        ),
        (
            lambda text: json.dumps(
                {**json.loads(text), "logprobs": [[[[5, "x"]]] * 3, [[[1, -0.1]]] * 2]}
            ),
            "has `logprobs` at sequence 0 position 0 that are not [[]token, logprob[]] pairs",
        ),
    ],
)
def test_a_damaged_golden_file_fails_the_test_naming_the_file_and_the_fix(
    golden_suite, damage, says
):
    [path] = (golden_suite.path / "golden").rglob("*.json")
    path.write_text(damage(path.read_text()))
    result = golden_suite.runpytest(
        "--rocm-platform=mi300x-1", "--rocm-golden=golden", "--rocm-reruns=0"
    )
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            f"*golden 'greedy': *{path.name} {says}; record it again on the reference platform "
            "with --rocm-golden-record *golden*"
        ]
    )
    result.stdout.no_fnmatch_line("*Traceback*")
    result.stdout.no_fnmatch_line("*json/decoder.py*")
