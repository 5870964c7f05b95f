"""`rocm-gate doctor` as a user runs it: the console script, saved tool outputs, exit codes."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import SAMPLES

ROCM_GATE = [str(Path(sys.executable).with_name("rocm-gate"))]
STATIC = SAMPLES / "amd-smi/mi300x_x8_amd-smi_static_json_rocm7.2.1_dell-ai.json"
VERSION = SAMPLES / "amd-smi/mi300x_amd-smi_version_json_rocm7.2.1_dell-ai.json"


def doctor(*args):
    return subprocess.run(
        [*ROCM_GATE, "doctor", *args], capture_output=True, text=True, timeout=120
    )


def test_saved_outputs_are_shown():
    done = doctor("--source", f"amd-smi={STATIC}", "--source", f"amd-smi-version={VERSION}")
    assert done.returncode == 0, done.stderr
    assert "platform: 8 x MI300X  (vendor amd; read from saved tool output)" in done.stdout
    assert "  7      MI300X  gfx942  192 GB" in done.stdout
    assert "rocm         7.2.1" in done.stdout
    assert "driver       amdgpu 6.16.13" in done.stdout
    assert "health: ok" in done.stdout


@pytest.mark.parametrize(
    "args,code,message",
    [
        (["--expect-gpus", "8", "--expect-sku", "MI300X"], 0, "health: ok"),
        (["--expect-gpus", "4"], 3, "expected 4 GPU(s), this runner has 8 x MI300X"),
        (["--expect-sku", "mi355x"], 3, "expected every GPU to be MI355X; 8 are not"),
    ],
)
def test_expectations(args, code, message):
    done = doctor("--source", f"amd-smi={STATIC}", *args)
    assert done.returncode == code
    assert message in done.stdout


def test_no_gpu_visible_is_its_own_exit_code():
    done = doctor("--source", f"amd-smi-version={VERSION}", "--expect-gpus", "8")
    assert done.returncode == 4
    assert "health: NO GPU (exit 4)" in done.stdout


def test_a_failing_source_is_shown_with_its_error(tmp_path):
    broken = tmp_path / "rocminfo.txt"
    broken.write_text("hsa api call failure at: /long_pathname/rocminfo.cc:1306\n")
    done = doctor(
        "--source",
        f"rocminfo={broken}",
        "--source",
        f"rocm-smi={SAMPLES / 'rocm-smi/mi300x_x4_rocm-smi_concise_thamada.txt'}",
    )
    assert done.returncode == 0
    assert f"FAIL  rocminfo={broken}" in done.stdout
    assert "unexpected output: no HSA agents found in rocminfo output" in done.stdout
    assert "platform: 4 x MI300X" in done.stdout


def test_json_output_is_a_usable_profile(tmp_path, pytester):
    done = doctor("--json", "--platform", "mi325x-8", "--expect-sku", "MI325X")
    assert done.returncode == 0
    data = json.loads(done.stdout)
    assert data["health"] == {"status": "healthy", "exit_code": 0, "problems": []}
    assert data["platform"]["description"] == "8 x MI325X"
    profile = tmp_path / "runner.json"
    profile.write_text(json.dumps(data["platform"]))
    pytester.makepyfile("""
        import pytest

        @pytest.mark.rocm_gate(group="engine")
        @pytest.mark.hardware(sku="MI325X", gpus=8, min_memory_gb=250)
        def test_x():
            pass
    """)
    pytester.runpytest(f"--rocm-platform={profile}").assert_outcomes(passed=1)


def test_this_machine():
    """Live detection here (no GPU): every source answers or says why, and the check says no GPU."""
    done = doctor("--require-gpu")
    assert done.returncode in (0, 4)
    if done.returncode == 4:
        assert "platform: no GPU (cpu)" in done.stdout
        for source in ("amd-smi", "rocminfo", "rocm-smi", "nvidia-smi", "sysfs"):
            assert any(
                line.strip().startswith(("FAIL", "ok")) and source in line
                for line in done.stdout.splitlines()
            )


@pytest.mark.parametrize(
    "args,message",
    [
        (["--source", "rocmsmi=x.txt"], "unknown source 'rocmsmi'"),
        (["--source", "amd-smi"], "expected TOOL=FILE"),
        (["--expect-sku", "MI400X"], "unknown SKU 'MI400X'"),
        (["--platform", "mi999x-2"], "unknown platform profile 'mi999x-2'"),
    ],
)
def test_bad_input(args, message):
    done = doctor(*args)
    assert done.returncode == 2
    assert message in done.stderr


def test_a_detection_tool_that_hangs_is_a_health_problem(tmp_path, monkeypatch, capsys):
    """A hung amd-smi beside a rocm-smi that answers: the platform is read from rocm-smi, and the
    health check used to say ok (exit 0) with the hang only in the sources' list."""
    from pytest_rocm.hw import detect
    from rocm_gate.cli import main as rocm_gate

    tools = tmp_path / "bin"
    tools.mkdir()
    (tools / "amd-smi").write_text("#!/bin/sh\nexec sleep 600\n")
    concise = SAMPLES / "rocm-smi/mi300x_x4_rocm-smi_concise_thamada.txt"
    (tools / "rocm-smi").write_text(f"#!/bin/sh\ncat {concise}\n")
    for tool in tools.iterdir():
        tool.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tools}:/usr/bin:/bin")
    monkeypatch.setattr(detect, "TOOL_TIMEOUT_S", 1)
    code = rocm_gate(["doctor", "--expect-gpus", "4"])
    out = capsys.readouterr().out
    assert "platform: 4 x MI300X" in out
    assert code == 3 and "health: MISMATCH (exit 3)" in out
    assert "amd-smi `amd-smi static --json` did not answer in 1 s (hung GPU or driver?)" in out
