"""SGLang in its CPU environment (.venv-sglang, scripts/setup-sglang-env.sh): the environment's
requirements against the installed SGLang's, the import-only sgl_kernel stand-in (its names against
what SGLang imports, its ops raising when called, a server that calls one failing the test with the
op named), and the cross-framework golden test catching SGLang serving other weights."""

from __future__ import annotations

import ast
import importlib.metadata
import json
import os
import re
import subprocess
import warnings
from pathlib import Path

import pytest
from conftest import REPO, copy_suites, run_suites
from memory_pressure import TakeMemoryAtBaseline, available_bytes
from packaging.requirements import Requirement

from pytest_rocm.hw.profiles import builtin
from pytest_rocm.serving.process import (
    Server,
    command_for,
    free_port,
    load_server_config,
    stand_in_problem,
)
from pytest_rocm.serving.provider import TINY_MODEL_SGLANG_ARGS
from pytest_rocm.serving.tiny_models import TinyModelSpec, ensure_tiny_model

ENV = REPO / "envs" / "sglang-cpu"
STAND_IN = ENV / "sgl-kernel-standin" / "sgl_kernel" / "__init__.py"
SGLANG_PYTHON = Path(
    load_server_config(REPO / "suites" / "servers.toml", "sglang", [None, None, "cpu"]).python
)
needs_sglang = pytest.mark.skipif(
    not SGLANG_PYTHON.exists(),
    reason=f"SGLang's CPU environment is not installed ({SGLANG_PYTHON}): "
    "bash scripts/setup-sglang-env.sh",
)
# sgl_kernel CPU ops that SGLang imports only on paths this environment never takes; the stand-in
# leaves them out, so taking such a path fails at its import, naming the op.
NOT_ON_THIS_PATH = {
    "build_draft_decode_metadata_cpu": "the Intel AMX attention backend (CPUs with AMX)",
    "rotate_input_ids_cpu": "multi-layer EAGLE speculative decoding",
}


def stand_in_ops() -> set[str]:
    tree = ast.parse(STAND_IN.read_text())
    [ops] = [
        node.value
        for node in tree.body
        if isinstance(node, ast.Assign) and node.targets[0].id == "OPS"
    ]
    return set(ast.literal_eval(ops))


def sglang_distribution() -> importlib.metadata.Distribution:
    site = next(SGLANG_PYTHON.parent.parent.glob("lib/python*/site-packages"))
    [found] = [
        d
        for d in importlib.metadata.distributions(path=[str(site)])
        if d.metadata["Name"] == "sglang"
    ]
    return found


@needs_sglang
def test_every_requirement_of_the_installed_sglang_is_installed_or_excluded_with_a_reason():
    text = (ENV / "requirements.txt").read_text()
    listed = {
        Requirement(line).name.lower().replace("_", "-"): Requirement(line)
        for line in text.splitlines()
        if line.strip() and not line.startswith("#")
    }
    excluded = {
        m[1].lower().replace("_", "-")
        for m in re.finditer(r"^# excluded: ([\w.-]+): \S", text, re.M)
    }
    sglang = sglang_distribution()
    pinned = (ENV / "sglang.txt").read_text().split("sglang==")[1].split()[0]
    assert sglang.version == pinned, (
        f"{SGLANG_PYTHON} has sglang {sglang.version}, sglang.txt pins {pinned}"
    )
    unaccounted, different = [], []
    for line in sglang.requires:
        wanted = Requirement(line)
        if wanted.marker is not None and "extra" in str(wanted.marker):
            continue  # optional extras are not installed
        name = wanted.name.lower().replace("_", "-")
        if name in excluded:
            continue
        if name not in listed:
            unaccounted.append(line)
        elif not _satisfies(listed[name], wanted):
            different.append(f"{line} (requirements.txt: {listed[name]})")
    assert not unaccounted, (
        f"sglang {sglang.version} requires these, which envs/sglang-cpu/requirements.txt "
        f"neither lists nor excludes (with a reason): {unaccounted}"
    )
    assert not different, (
        f"requirements.txt pins what sglang {sglang.version} does not accept: {different}"
    )


def _satisfies(ours: Requirement, wanted: Requirement) -> bool:
    """Our line asks for what SGLang's does: the same specifier, or pins (==) only versions SGLang
    accepts."""
    if not wanted.specifier or str(ours.specifier) == str(wanted.specifier):
        return True
    pins = [spec.version for spec in ours.specifier if spec.operator == "=="]
    return bool(pins) and all(wanted.specifier.contains(version) for version in pins)


@needs_sglang
def test_the_stand_in_lists_exactly_what_the_installed_sglang_imports_on_the_cpu():
    """Every `*_cpu` op that the installed SGLang imports from sgl_kernel is in the stand-in, or on
    a path named in NOT_ON_THIS_PATH; and the stand-in lists nothing SGLang no longer imports."""
    site = next(SGLANG_PYTHON.parent.parent.glob("lib/python*/site-packages"))
    imported: dict[str, str] = {}
    for path in sorted((site / "sglang").rglob("*.py")):
        source = path.read_bytes()
        if b"sgl_kernel import" not in source:
            continue
        with warnings.catch_warnings():
            # invalid escapes in SGLang's own strings
            warnings.simplefilter("ignore", SyntaxWarning)
            warnings.simplefilter("ignore", DeprecationWarning)
            tree = ast.parse(source)
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module == "sgl_kernel":
                for alias in node.names:
                    if alias.name.endswith("_cpu"):
                        imported.setdefault(alias.name, str(path.relative_to(site)))
    ops = stand_in_ops()
    new = {
        name: where
        for name, where in imported.items()
        if name not in ops and name not in NOT_ON_THIS_PATH
    }
    assert not new, (
        f"this SGLang imports sgl_kernel CPU ops the stand-in does not list (name: where): {new}; "
        "add each to OPS in envs/sglang-cpu/sgl-kernel-standin/sgl_kernel/__init__.py or to "
        "NOT_ON_THIS_PATH here, with the path that imports it"
    )
    assert not ops - set(imported), (
        f"the stand-in lists ops SGLang no longer imports: {sorted(ops - set(imported))}"
    )


@needs_sglang
def test_each_stand_in_op_raises_naming_itself_and_an_unlisted_name_is_an_import_error():
    script = """
import json, sgl_kernel
called = {}
for name in sgl_kernel.OPS:
    try:
        getattr(sgl_kernel, name)(1, key=2)
    except sgl_kernel.StandInOpCalled as exc:
        called[name] = str(exc)
try:
    from sgl_kernel import fused_moe_cpu
    unlisted = "imported"
except ImportError as exc:
    unlisted = str(exc)
print(json.dumps({"called": called, "unlisted": unlisted, "file": sgl_kernel.__file__}))
"""
    out = json.loads(
        subprocess.run(
            [str(SGLANG_PYTHON), "-c", script], check=True, capture_output=True, text=True
        ).stdout
    )
    assert set(out["called"]) == stand_in_ops()
    for name, message in out["called"].items():
        assert message.startswith(f"sgl_kernel.{name} was called") and "stand-in" in message
    assert "cannot import name 'fused_moe_cpu' from 'sgl_kernel'" in out["unlisted"]
    # What the server fixture makes of that import error in a server's log: the name, the fix, not
    # infra.
    log = f"ImportError: cannot import name 'fused_moe_cpu' from 'sgl_kernel' ({out['file']})"
    problem = stand_in_problem(log)
    assert problem and "sgl_kernel.fused_moe_cpu" in problem and "add it to OPS" in problem
    # not the stand-in
    assert stand_in_problem(log.replace(out["file"], str(REPO / "pyproject.toml"))) is None
    # A model file SGLang skips at start-up is not the cause of anything.
    assert (
        stand_in_problem(
            "Ignore import error when loading sglang.srt.models.x: No module named 'sgl_kernel.y'"
        )
        is None
    )


def copy_suites_with_sglang(pytester) -> None:
    copy_suites(pytester)
    # servers.toml: ../.venv-sglang/bin/python
    (pytester.path / ".venv-sglang").symlink_to(REPO / ".venv-sglang")


STAND_IN_CALLED = """
import pytest

pytestmark = pytest.mark.rocm_gate(group="spec_decode")

def test_sglang_speculative_decoding(sglang_server_factory, served_model):
    # A draft model of its own makes SGLang warm up a KV-cache copy kernel: on the CPU, a stand-in op.
    sglang_server_factory(args=["--speculative-algorithm", "STANDALONE", "--speculative-draft-model-path",
                                served_model.path, "--speculative-num-steps", "2", "--speculative-eagle-topk", "1",
                                "--speculative-num-draft-tokens", "3"])
"""


@pytest.mark.slow
@needs_sglang
def test_a_stand_in_op_that_sglang_calls_fails_the_test_naming_the_op(pytester, model_cache):
    copy_suites_with_sglang(pytester)
    (pytester.path / "suites" / "spec_decode" / "test_stand_in_called.py").write_text(
        STAND_IN_CALLED
    )
    report = run_suites(pytester, model_cache, "suites/spec_decode/test_stand_in_called.py")
    [test] = report["tests"].values()
    assert test["status"] == "failed" and test["verdict"] == "regression", (
        test["status"],
        test["verdict_reason"],
    )
    assert "SGLang called sgl_kernel.copy_all_layer_kv_cache_cpu" in test["message"], test[
        "message"
    ]
    # not infrastructure
    assert all(a.get("signature") is None for a in test["attempts"]), test["attempts"]
    assert report["conclusion"] == "failure"


# SGLang serves the tiny Llama of another weight seed under the same name; the reference stays on
# seed 0.
OTHER_WEIGHTS = """
import pytest

def pytest_collection_modifyitems(items):
    for module in {item.getparent(pytest.Module) for item in items}:  # the module's server reads the module's marker
        module.add_marker(pytest.mark.sglang_server(tiny_model={"architecture": "llama", "seed": 1}))
"""


@pytest.mark.slow
@needs_sglang
def test_sglang_serving_other_weights_is_a_regression_naming_the_first_divergence(
    pytester, model_cache
):
    copy_suites_with_sglang(pytester)
    (pytester.path / "suites" / "engine" / "conftest.py").write_text(OTHER_WEIGHTS)
    report = run_suites(
        pytester,
        model_cache,
        "suites/engine/test_frameworks_against_transformers.py::test_greedy_matches_transformers[sglang]",
    )
    [(nodeid, test)] = report["tests"].items()
    assert nodeid.endswith("test_greedy_matches_transformers[sglang]")
    assert test["verdict"] == "regression", test["verdict_reason"]
    assert (
        "served by sglang: sequence" in test["message"]
        and "diverges at position" in test["message"]
    )
    [row] = report["frameworks_against_reference"]
    assert row["framework"] == "sglang" and not row["passed"] and row["first_difference"]
    assert row["agreeing_tokens"] < row["tokens"]
    assert os.path.basename(row["nodeid"]) == os.path.basename(nodeid)
    # the first attempt's server, and a fresh one for its rerun (a warm server proves nothing);
    # the manifest names SGLang's own stack
    servers = report["manifest"]["servers"]
    first, rerun = (attempt["servers"] for attempt in test["attempts"])
    assert len(servers) == 2 and first != rerun
    server = servers[0]
    assert server["server"] == "sglang" and server["model_spec"]["spec"]["seed"] == 1
    assert (
        server["packages"]["sglang"] == sglang_distribution().version
        and "sgl-kernel-cpu-standin" in server["packages"]
    )


@pytest.mark.slow
@needs_sglang
def test_sglang_starts_when_another_process_takes_memory_between_its_two_measurements(
    tmp_path, model_cache
):
    """CI once failed at random here: SGLang, started as the suites start it on the CPU, refused to
    start because another process took memory while it started ("Loaded weights leave no GPU memory
    for the KV cache"). Here 15% of the free memory is taken at the worst moment, between SGLang's
    baseline and its KV-cache sizing (the server frozen meanwhile); with suites/servers.toml's
    settings before the fix (--mem-fraction-static 0.05) this start fails every time (the captured
    log: tests/data/serving/)."""
    platform = builtin("cpu")
    settings = load_server_config(REPO / "suites" / "servers.toml", "sglang", platform.keys())
    model = ensure_tiny_model(model_cache, TinyModelSpec(seed=0))
    port = free_port()
    server = Server(
        kind="sglang",
        model=str(model),
        served_name="tiny-llama",
        port=port,
        command=command_for(
            "sglang",
            str(model),
            "tiny-llama",
            port,
            [*settings.args, *TINY_MODEL_SGLANG_ARGS],
            settings.python,
        ),
        env=settings.env,
        log_path=tmp_path / "sglang.log",
        devices=[],
    )
    taken = max(int(available_bytes() * 0.15), 1536 * 2**20)
    with TakeMemoryAtBaseline(server, taken) as pressure:
        try:
            server.start(settings.health_timeout_s)
        finally:
            server.stop()
    assert pressure.taken_at is not None, (
        "the memory was never taken: SGLang logged no memory baseline"
    )
    assert not pressure.late, "SGLang had begun loading the weights before the memory was taken"
    assert "pytest-rocm: healthy after" in server.log_path.read_text()
