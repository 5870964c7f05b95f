"""The suites' server fixtures on the real vLLM engine (on the CPU here): a server that dies or
never becomes healthy fails its tests as infrastructure, with its log; the tiny model is built
deterministically; a model built with another weight seed shows up as a golden regression that names
the first divergence."""

import importlib.util
import json
from pathlib import Path

import pytest
from conftest import processes_with, read_jsonl, read_report
from filelock import FileLock

from pytest_rocm.results.verdicts import DEFAULT_SIGNATURES, build_signatures, find_signature
from pytest_rocm.serving.pool import devices_wanted
from pytest_rocm.serving.process import ServerConfigError, load_server_config

REPO = Path(__file__).resolve().parent.parent
SUITES = REPO / "suites"
needs_vllm = pytest.mark.skipif(
    importlib.util.find_spec("vllm") is None,
    reason="vLLM is not installed here: bash scripts/setup-env.sh suites,test",
)

CONFIG = """
[vllm.default]
args = ["--seed", "0"]
health_timeout_s = 600

[vllm.amd]
args = ["--gpu-memory-utilization", "0.4"]
env = { VLLM_ROCM_USE_AITER = "1", SHARED = "vendor" }

[vllm.gfx942]
env = { SHARED = "arch" }
health_timeout_s = 1200

[vllm.MI300X]
args = ["--max-num-seqs", "64"]

[vllm.cpu]
args = ["--dtype", "float32"]
"""


def test_server_config_merges_from_general_to_specific(tmp_path):
    path = tmp_path / "servers.toml"
    path.write_text(CONFIG)
    merged = load_server_config(path, "vllm", ["MI300X", "gfx942", "amd"])
    assert merged.args == ["--seed", "0", "--gpu-memory-utilization", "0.4", "--max-num-seqs", "64"]
    assert merged.env == {"VLLM_ROCM_USE_AITER": "1", "SHARED": "arch"}
    assert merged.health_timeout_s == 1200
    assert merged.sources == ["vllm.default", "vllm.amd", "vllm.gfx942", "vllm.MI300X"]
    cpu = load_server_config(path, "vllm", [None, None, "cpu"])
    assert (
        cpu.args == ["--seed", "0", "--dtype", "float32"]
        and cpu.env == {}
        and cpu.health_timeout_s == 600
    )
    assert load_server_config(path, "sglang", [None, None, "cpu"]).args == []


def test_server_config_errors_name_the_file_and_section(tmp_path):
    path = tmp_path / "servers.toml"
    path.write_text('[vllm.cpu]\nargs = ["--dtype"]\nenviron = { A = "1" }\n')
    with pytest.raises(
        ServerConfigError,
        match=r"servers.toml, \[vllm.cpu\]: unknown keys environ; allowed: args, env, health_timeout_s, python, start_ahead",
    ):
        load_server_config(path, "vllm", [None, None, "cpu"])
    path.write_text('[vllm.cpu]\nstart_ahead = "yes"\n')
    with pytest.raises(
        ServerConfigError,
        match=r"servers.toml, \[vllm.cpu\]: start_ahead must be true or false, got 'yes'",
    ):
        load_server_config(path, "vllm", [None, None, "cpu"])
    path.write_text("[vllm.cpu\n")
    with pytest.raises(ServerConfigError, match="servers.toml: not valid TOML"):
        load_server_config(path, "vllm", [None, None, "cpu"])


def test_server_config_python_is_relative_to_the_file_and_checked(tmp_path):
    path = tmp_path / "suites" / "servers.toml"
    path.parent.mkdir()
    path.write_text(
        '[sglang.default]\nargs = ["--random-seed", "0"]\n[sglang.cpu]\npython = "../.venv-sglang/bin/python"\n'
    )
    assert load_server_config(path, "sglang", [None, None, "cpu"]).python == str(
        tmp_path / ".venv-sglang/bin/python"
    )
    # the interpreter running pytest
    assert load_server_config(path, "sglang", [None, None, "amd"]).python is None
    path.write_text('[sglang.cpu]\npython = ["python3"]\n')
    with pytest.raises(
        ServerConfigError, match=r"\[sglang.cpu\]: python must be the path of an interpreter"
    ):
        load_server_config(path, "sglang", [None, None, "cpu"])


def test_a_server_whose_interpreter_is_missing_is_skipped_naming_it_and_the_setup_command(pytester):
    pytester.makefile(".toml", servers='[sglang.cpu]\npython = "no-such-env/bin/python"\n')
    pytester.makepyfile("""
        import pytest

        @pytest.mark.rocm_gate(group="api")
        def test_sglang(sglang_server):
            pass
    """)
    result = pytester.runpytest_subprocess(
        "--rocm-platform=cpu",
        "--rocm-report-dir=out",
        "-p",
        "no:cacheprovider",
        "--rocm-server-config=servers.toml",
    )
    result.assert_outcomes(skipped=1)
    [entry] = read_report(pytester.path / "out")["skip_reasons"]
    assert entry["reason"] == (
        f"sglang is not installed for {pytester.path / 'no-such-env/bin/python'}, the "
        "interpreter the server configuration names for this platform (create that "
        "environment: bash scripts/setup-sglang-env.sh)"
    )


def test_devices_wanted_from_parallel_sizes():
    assert devices_wanted(["--tensor-parallel-size", "2", "-pp", "2"], 8) == 4
    assert devices_wanted(["--tensor-parallel-size=8"], 8) == 8
    assert devices_wanted(["--seed", "0"], 8) == 1
    assert devices_wanted(["--tensor-parallel-size", "2"], 0) == 0  # the CPU: no devices to lock
    with pytest.raises(
        ServerConfigError, match="--tensor-parallel-size needs a whole number, got 'two'"
    ):
        devices_wanted(["-tp", "two"], 8)


def test_server_start_failures_carry_the_server_not_healthy_signature():
    signatures = build_signatures()
    for line in (
        "vllm server exited with code 2 before becoming healthy: /m on port 1",
        "vllm server exited with code -9 before becoming healthy: /m on port 1",
        "sglang server did not become healthy within 900 s",
    ):
        assert find_signature([line], signatures)["name"] == "server_not_healthy", line
    assert "server_not_healthy" in DEFAULT_SIGNATURES


@pytest.mark.slow
@needs_vllm
def test_tiny_model_is_built_deterministically(tmp_path, model_cache):
    from pytest_rocm.serving.tiny_models import TinyModelSpec, ensure_tiny_model

    with FileLock(str(model_cache / "build.lock")):
        shared = ensure_tiny_model(model_cache)
    again = ensure_tiny_model(tmp_path / "other-cache")
    assert again.name == shared.name
    assert (again / "model.safetensors").read_bytes() == (shared / "model.safetensors").read_bytes()
    assert (again / "tokenizer.json").read_bytes() == (shared / "tokenizer.json").read_bytes()
    reseeded = ensure_tiny_model(tmp_path / "other-cache", TinyModelSpec(seed=1))
    assert reseeded.name != shared.name
    assert (reseeded / "model.safetensors").read_bytes() != (
        shared / "model.safetensors"
    ).read_bytes()
    assert json.loads((reseeded / "pytest-rocm-model.json").read_text())["spec"]["seed"] == 1
    assert sorted(p.name for p in (tmp_path / "other-cache").iterdir() if p.is_dir()) == sorted(
        [again.name, reseeded.name]
    ), "a finished build leaves no staging folder behind"


SERVER_TEST = """
import pytest

pytestmark = [pytest.mark.rocm_gate(group="api"), pytest.mark.vllm_server(args={args!r})]

def test_needs_the_server(vllm_server):
    assert vllm_server.alive()
"""


def run_suite(pytester, model_cache, *args):
    report_dir = pytester.path / "out"
    result = pytester.runpytest_subprocess(
        "--rocm-platform=cpu",
        f"--rocm-report-dir={report_dir}",
        f"--rocm-model-cache={model_cache}",
        "-p",
        "no:cacheprovider",
        *args,
    )
    report = read_report(report_dir)
    return result, report, report_dir


@pytest.mark.slow
@needs_vllm
def test_server_that_dies_fails_as_infra_with_its_log(pytester, model_cache):
    pytester.makepyfile(test_dies=SERVER_TEST.format(args=["--dtype", "no-such-dtype"]))
    pytester.makefile(".toml", servers=CONFIG)
    result, report, report_dir = run_suite(
        pytester, model_cache, "--rocm-server-config=servers.toml", "--rocm-reruns", "0"
    )
    result.assert_outcomes(errors=1)
    test = report["tests"]["test_dies.py::test_needs_the_server"]
    assert test["verdict"] == "unconfirmed", test  # --rocm-reruns 0: infra-looking, not confirmed
    assert test["attempts"][0]["signature"]["name"] == "server_not_healthy"
    assert "vllm server exited with code 2 before becoming healthy" in test["message"]
    output = result.stdout.str()
    assert "--- last 50 lines of the server log ---" in output
    assert "invalid choice: 'no-such-dtype'" in output  # vLLM's own words, from the log
    logs = list((report_dir / "servers").glob("vllm-*.log"))
    assert len(logs) == 1 and "no-such-dtype" in logs[0].read_text()
    [server] = json.loads((report_dir / "manifest.json").read_text())["servers"]
    assert server["nodeid"] == "test_dies.py" and server["healthy_after_s"] is None
    assert server["error"].startswith("vllm server exited with code 2") and server["log"] == str(
        logs[0]
    )


@pytest.mark.slow
@needs_vllm
def test_server_that_never_becomes_healthy_is_killed_with_its_workers(pytester, model_cache):
    pytester.makepyfile(test_slow=SERVER_TEST.format(args=[]))
    pytester.makefile(".toml", servers=CONFIG + "health_timeout_s = 3\n")  # appended to [vllm.cpu]
    result, report, report_dir = run_suite(
        pytester, model_cache, "--rocm-server-config=servers.toml", "--rocm-reruns", "0"
    )
    result.assert_outcomes(errors=1)
    test = report["tests"]["test_slow.py::test_needs_the_server"]
    assert (
        test["verdict"] == "unconfirmed"
        and test["attempts"][0]["signature"]["name"] == "server_not_healthy"
    )
    assert "vllm server did not become healthy within 3 s" in test["message"]
    log = next((report_dir / "servers").glob("vllm-*.log"))
    assert processes_with(str(log.stem).replace("vllm-", "--port\0")) == [], (
        "a server process outlived its test"
    )


@needs_vllm
@pytest.mark.slow
def test_golden_outputs_catch_a_model_with_other_weights(pytester, model_cache):
    """Break it on purpose: the engine suite's golden test on a tiny model built with weight seed 1
    against the outputs recorded with seed 0 must fail as a regression that names the first
    divergence, with the server's log attached."""
    result, report, report_dir = run_suite(
        pytester,
        model_cache,
        str(SUITES / "engine" / "test_engine.py") + "::test_golden_outputs",
        "-c",
        str(SUITES / "pytest.ini"),
        "--rootdir",
        str(SUITES),
        "--rocm-tiny-model-seed",
        "1",
        "--junitxml",
        str(pytester.path / "junit.xml"),
    )
    assert result.ret == 1
    test = report["tests"]["engine/test_engine.py::test_golden_outputs"]
    assert test["verdict"] == "regression", test["verdict_reason"]
    assert len(test["attempts"]) == 2 and all(a["signature"] is None for a in test["attempts"])
    # recorded here with the same platform key and dtype: the exact rule applies, and the message
    # says so
    assert (
        "golden 'tiny-llama-greedy-32' (same platform: exact tokens, logprobs within 0.002): sequence 0 "
        "diverges at position"
    ) in test["message"]
    assert "this run chose token" in test["message"] and "the reference chose" in test["message"]
    assert report["conclusion"] == "failure"
    records = [r for path in report_dir.glob("records-*.jsonl") for r in read_jsonl(path)]
    failed = [r for r in records if r.get("outcome") == "failed"]
    assert failed and all("Application startup complete" in r["log_tail"] for r in failed)
    assert "rocm_server_log" in (pytester.path / "junit.xml").read_text()
    # the first attempt's server, and a fresh one for its rerun (a warm server proves nothing)
    servers = json.loads((report_dir / "manifest.json").read_text())["servers"]
    first, rerun = (attempt["servers"] for attempt in test["attempts"])
    assert len(servers) == 2 and first != rerun and test["attempts"][1]["worker"] == "rerun1"
    server = servers[0]
    assert (
        server["model_spec"]["spec"]["seed"] == 1
        and server["healthy_after_s"] > 0
        and server["error"] is None
    )
    assert "--seed" in server["command"] and server["env"]["VLLM_CPU_KVCACHE_SPACE"] == "1"


def test_sglang_server_says_why_it_does_not_run(pytester):
    if importlib.util.find_spec("sglang") is not None:
        pytest.skip("SGLang is installed here: the skip path cannot be seen")
    pytester.makepyfile("""
        import pytest

        @pytest.mark.rocm_gate(group="api")
        def test_sglang(sglang_server):
            pass
    """)
    result = pytester.runpytest_subprocess(
        "--rocm-platform=cpu", "--rocm-report-dir=out", "-p", "no:cacheprovider"
    )
    result.assert_outcomes(skipped=1)
    report = read_report(pytester.path / "out")
    [entry] = report["skip_reasons"]
    assert (
        entry["reason"]
        == (
            "sglang is not installed in this environment (install the suites' extra: "
            "pip install -e .[sglang])"
        )
        and entry["count"] == 1
    ), entry
