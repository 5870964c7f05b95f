"""`rocm-gate preflight` and `rocm-gate drain` on real captured tool outputs (tests/data/samples/preflight)."""

import json
import shutil
import sys

import jsonschema
import pytest
from conftest import SAMPLES

from pytest_rocm.cli import main as rocm_gate
from pytest_rocm.schemas.artifacts import schema_document

PREFLIGHT = SAMPLES / "preflight"

# sample -> (SKU the runner class gives with --sku, or None; the verdict of the layer the tool proves).
# The SKU comes from the file name (where the capture names its GPUs); "mi300" captures from amd-smi's
# changelog do not say which MI300, so they run without one.
EXPECTED = {
    "agfhc/mi350x_x8_agfhc1.23.2_all_lvl1_all_pass_rocm7.0_mhilgema-proj.txt": ("MI350X", "ok"),
    "amd-smi/mi300_amd-smi_metric_--ecc-block_text_all_zero_amdsmi-changelog.txt": (None, "ok"),
    "amd-smi/mi300_amd-smi_metric_--pcie_text_amdsmi-changelog_EXCERPT.txt": (None, "ok"),
    "amd-smi/mi300_x8_amd-smi_topology_all_xgmi_rocm6.1_amdsmi-changelog.txt": (None, "ok"),
    "amd-smi/mi300_x8_amd-smi_xgmi_link_metric_table_rocm6.1_amdsmi-changelog.txt": ("MI300X", "ok"),
    "amd-smi/mi300x_amd-smi_bad-pages_none_rocm-blogs_EXCERPT.txt": ("MI300X", "ok"),
    "amd-smi/mi300x_x8_amd-smi_topology_access_weight_rocm-blogs_EXCERPT.txt": ("MI300X", "ok"),
    "amd-smi/mi300x_x8_amd-smi_xgmi_link_metric_with_traffic_rocm-blogs_EXCERPT.txt": ("MI300X", "ok"),
    "amd-smi/mi350x_x8_amd-smi_monitor_-putm_idle_rocm7.0_mhilgema-proj.txt": ("MI350X", "ok"),
    "babelstream/mi300x_x8_babelstream5_hip_mpi_system-acceptance-docs_EXCERPT.txt": ("MI300X", "ok"),
    "dmesg/mi300x_dmesg_gfxhub_retry_page_fault_llama-bench_augmxnt_EXCERPT.txt": ("MI300X", "degraded"),
    "dmesg/mi300x_x8_app_stderr_hip_HW_Exception_GPU_Hang_NOT_dmesg_rocm-issue-4021.txt": ("MI300X", "failed"),
    "dmesg/mi300x_x8_dmesg_boot_amdgpu_init_gpu0_ras_ok_xgmi_hive_rocm6.2.2_augmxnt_EXCERPT.txt": ("MI300X", "ok"),
    "dmesg/mi300x_x8_dmesg_boot_fatal_error_during_gpu_init_all8_after_hang_rocm-issue-4021-c12.txt": ("MI300X", "failed"),
    "dmesg/mi300x_x8_dmesg_ras_athub_uncorrectable_aca_xgmi_wafl_mode1_reset_rocm6.2.3_rocm-issue-4021.txt": ("MI300X", "failed"),
    "dmesg/mi300x_x8_dmesg_umc_hbm_5876ce_20ue_aca_hive_mode1_reset_rocm6.2.2_augmxnt_EXCERPT.txt": ("MI300X", "failed"),
    "lspci/mi350x_x8_lspci_DevSta_LnkSta_32GTs_x16_ok_mhilgema-proj.txt": ("MI350X", "ok"),
    "rccl-tests/mi210_x4_all_reduce_perf_FAIL_Test_NCCL_failure_internal_error_rccl-tests-issue-50.txt": ("MI210", "failed"),
    "rccl-tests/mi210_x8_all_reduce_perf_BAD_node_stops_after_header_hang_rocm6.3.3_mhilgema-proj.txt": ("MI210", "failed"),
    "rccl-tests/mi210_x8_all_reduce_perf_healthy_node_36.6GBps_rocm6.3.3_mhilgema-proj.txt": ("MI210", "ok"),
    "rccl-tests/mi210_x8x2nodes_all_reduce_perf_15.2GBps_rocm6.3.3_mhilgema-proj.txt": ("MI210", "ok"),
    "rccl-tests/mi300x_x8_all_reduce_perf_1node_k8s_hisohara.txt": ("MI300X", "ok"),
    "rccl-tests/mi300x_x8_all_reduce_perf_8G_system-acceptance-docs_wscollapsed.txt": ("MI300X", "ok"),
    "rccl-tests/mi300x_x8x2nodes_all_reduce_perf_rocm6.4.2_hisohara.txt": ("MI300X", "ok"),
    "rccl-tests/mi350x_x8_all_reduce_perf_-g8_dips_at_64M_2G_rocm7.0_mhilgema-proj.txt": ("MI350X", "degraded"),
    "rccl-tests/mi355x_x8_all_reduce_perf_512k-16G_oci-quickstarts_EXCERPT.txt": ("MI355X", "ok"),
    "rccl-tests/mi355x_x8x2nodes_all_reduce_perf_rocm7.0.1_pollara_hisohara_EXCERPT.txt": ("MI355X", "ok"),
    "rccl-tests/mi355x_x8x4nodes_alltoall_perf_pollara_oci-quickstarts_EXCERPT.txt": ("MI355X", "ok"),
    "rocm-smi/mi308x_x8_rocm-smi_concise_idle_ms-swift.txt": ("MI308X", "ok"),
    "rocm-smi/mi308x_x8_rocm-smi_showtopo_all_xgmi_ms-swift.txt": ("MI308X", "ok"),
    "rocm-smi/mi350x_x8_rocm-smi_concise_idle_rocm7.0_mhilgema-proj.txt": ("MI350X", "ok"),
    "rvs/mi300x_x8_rvs_-g_gpu_list_rvs0.0.60202_system-acceptance-docs.txt": ("MI300X", "ok"),
    "rvs/mi300x_x8_rvs_gm_single_violations_system-acceptance-docs_EXCERPT.txt": ("MI300X", "ok"),
    "rvs/mi300x_x8_rvs_gpup_single_system-acceptance-docs_EXCERPT.txt": ("MI300X", "ok"),
    "rvs/mi300x_x8_rvs_gst_ext_fp8_met_true_system-acceptance-docs_EXCERPT.txt": ("MI300X", "ok"),
    "rvs/mi300x_x8_rvs_gst_single_fp8_met_true_system-acceptance-docs_EXCERPT.txt": ("MI300X", "ok"),
    "rvs/mi300x_x8_rvs_iet_single_pass_true_system-acceptance-docs_EXCERPT.txt": ("MI300X", "ok"),
    "rvs/mi300x_x8_rvs_mem_test1_pass_test11_bandwidth_grep_system-acceptance-docs_EXCERPT.txt": ("MI300X", "ok"),
    "rvs/mi300x_x8_rvs_pbqt_single_p2p_system-acceptance-docs_EXCERPT.txt": ("MI300X", "ok"),
    "rvs/mi300x_x8_rvs_pebb_single_d2h_system-acceptance-docs_EXCERPT.txt": ("MI300X", "ok"),
    "rvs/mi300x_x8_rvs_peqt_single_system-acceptance-docs_EXCERPT.txt": ("MI300X", "ok"),
    "rvs/mi355x_x8_rvs1.6.75_babel_double_with_summary_rocm7.2.1_rvs-ug1main_EXCERPT.txt": ("MI355X", "ok"),
    "rvs/mi355x_x8_rvs1.6.75_gst_fp4_met_true_with_summary_rocm7.2.1_rvs-ug1main_EXCERPT.txt": ("MI355X", "ok"),
    "rvs/mi355x_x8_rvs1.6.75_mem_test1-11_pass_6.4TBps_with_summary_rocm7.2.1_rvs-ug1main_EXCERPT.txt": ("MI355X", "ok"),
    "rvs/mi355x_x8_rvs1.6.75_pbqt_xgmi_d2d_unidir_61GBps_with_summary_rocm7.2.1_rvs-ug1main_EXCERPT.txt": ("MI355X", "ok"),
    "transferbench/mi300x_x8_transferbench_a2a_system-acceptance-docs_wscollapsed.txt": ("MI300X", "ok"),
    "transferbench/mi300x_x8_transferbench_example-cfg_tests1-6_system-acceptance-docs_wscollapsed.txt": ("MI300X", "ok"),
    "transferbench/mi300x_x8_transferbench_p2p_system-acceptance-docs_wscollapsed.txt": ("MI300X", "ok"),
    "transferbench/mi350x_transferbench_example-cfg_AMD_LOG_LEVEL7_no_code_object_gfx950_mhilgema-proj_EXCERPT.txt": ("MI350X", "failed"),
    "transferbench/mi350x_transferbench_example-cfg_tests1-6_HSA_OVERRIDE_9.4.2_mhilgema-proj_EXCERPT.txt": ("MI350X", "ok"),
    "transferbench/mi350x_x8_transferbench_a2a_51.4GBps_rocm7.0_mhilgema-proj_EXCERPT.txt": ("MI350X", "ok"),
}


def preflight(capsys, *args) -> tuple[int, dict]:
    code = rocm_gate(["preflight", "--json", "--require", "none", *args])
    return code, json.loads(capsys.readouterr().out)


def layer(evidence: dict, name: str) -> dict:
    return next(item for item in evidence["layers"] if item["name"] == name)


def test_every_preflight_sample_has_an_expectation():
    on_disk = {str(p.relative_to(PREFLIGHT)) for p in PREFLIGHT.glob("*/*") if p.is_file()}
    assert on_disk - set(EXPECTED) == set(), "a new preflight sample needs its expected verdict in EXPECTED"
    assert set(EXPECTED) - on_disk == set()


@pytest.mark.parametrize("name", sorted(EXPECTED), ids=[n.split("/")[1][:60] for n in sorted(EXPECTED)])
def test_sample_verdict_and_evidence(capsys, name):
    sku, verdict = EXPECTED[name]
    tool = name.split("/")[0]
    code, evidence = preflight(capsys, "--source", f"{tool}={PREFLIGHT / name}", *(["--sku", sku] if sku else []))
    proved = layer(evidence, "communication" if tool == "rccl-tests" else "hardware")
    assert proved["verdict"] == verdict, proved["reason"]
    assert code == (3 if verdict == "failed" else 0)
    lines = (PREFLIGHT / name).read_text(encoding="utf-8").splitlines()
    deciding = [f for f in proved["findings"] if f["status"] == verdict]
    assert deciding, "the verdict must come from findings"
    for item in deciding:
        if verdict != "ok":  # every finding that blocks or degrades names the line it came from
            assert item["line"] >= 1 and item["text"] == lines[item["line"] - 1].strip()[:200]
    assert all(source["unread"] <= 2 for source in proved["sources"]), proved["sources"]


def test_a_thresholds_value_decides_the_verdict(capsys, tmp_path):
    sample = f"rccl-tests={PREFLIGHT / 'rccl-tests/mi300x_x8_all_reduce_perf_8G_system-acceptance-docs_wscollapsed.txt'}"
    strict = tmp_path / "thresholds.toml"
    strict.write_text('[sku.MI300X]\nrccl_all_reduce_busbw_gbps = 320\n'
                      'rccl_all_reduce_busbw_gbps_source = "a site that wants more"\n')
    code, evidence = preflight(capsys, "--source", sample, "--sku", "MI300X", "--thresholds", str(strict))
    found = layer(evidence, "communication")
    assert code == 3 and found["verdict"] == "failed"
    assert "315.84 GB/s at 8 GiB is below 320" in found["reason"]


def test_the_pipeline_stops_at_the_first_failed_layer(capsys):
    code, evidence = preflight(
        capsys, "--sku", "MI300X",
        "--source", f"dmesg={PREFLIGHT / 'dmesg/mi300x_x8_dmesg_umc_hbm_5876ce_20ue_aca_hive_mode1_reset_rocm6.2.2_augmxnt_EXCERPT.txt'}",
        "--source", f"rccl-tests={PREFLIGHT / 'rccl-tests/mi300x_x8_all_reduce_perf_1node_k8s_hisohara.txt'}",
        "--source", f"amd-smi={PREFLIGHT / 'amd-smi/mi300x_amd-smi_bad-pages_none_rocm-blogs_EXCERPT.txt'}")
    assert code == 3
    assert [l["verdict"] for l in evidence["layers"]] == ["failed", "skipped", "skipped", "skipped", "skipped"]
    assert layer(evidence, "communication")["reason"] == "not run: the hardware layer failed"
    messages = {f["message"] for f in layer(evidence, "hardware")["findings"]}
    assert "20 uncorrectable errors in the umc block on 0000:9d:00.0" in messages
    assert evidence["summary"].startswith("refused: the hardware layer failed")


def test_the_artifact_follows_its_schema(capsys, tmp_path):
    out = tmp_path / "preflight.json"
    rocm_gate(["preflight", "--require", "none", "--out", str(out), "--sku", "MI350X",
               "--source", f"rccl-tests={PREFLIGHT / 'rccl-tests/mi350x_x8_all_reduce_perf_-g8_dips_at_64M_2G_rocm7.0_mhilgema-proj.txt'}",
               "--source", f"lspci={PREFLIGHT / 'lspci/mi350x_x8_lspci_DevSta_LnkSta_32GTs_x16_ok_mhilgema-proj.txt'}"])
    summary = capsys.readouterr().out
    assert "communication  DEGRADED" in summary and "accepted (degraded: communication) (exit 0)" in summary
    document = schema_document("preflight")
    jsonschema.Draft202012Validator.check_schema(document)
    jsonschema.Draft202012Validator(document).validate(json.loads(out.read_text()))


def test_a_degraded_link_and_a_missing_gpu_fail_the_hardware_layer(capsys, tmp_path):
    """The captures have no degraded link (SOURCES.md: none found), so the healthy lspci capture is changed
    the way lspci prints a link that trained at x8, and the rvs -g list loses a GPU."""
    lspci = (PREFLIGHT / "lspci/mi350x_x8_lspci_DevSta_LnkSta_32GTs_x16_ok_mhilgema-proj.txt").read_text()
    degraded = tmp_path / "lspci.txt"
    degraded.write_text(lspci.replace("Width x16 (ok)", "Width x8 (downgraded)", 1))
    rvs = (PREFLIGHT / "rvs/mi300x_x8_rvs_-g_gpu_list_rvs0.0.60202_system-acceptance-docs.txt").read_text().splitlines()
    seven = tmp_path / "rvs.txt"
    seven.write_text("\n".join(rvs[:-1]) + "\n")
    code, evidence = preflight(capsys, "--sku", "MI300X", "--source", f"lspci={degraded}", "--source", f"rvs={seven}")
    hardware = layer(evidence, "hardware")
    assert code == 3 and hardware["verdict"] == "failed"
    failed = {f["check"]: f for f in hardware["findings"] if f["status"] == "failed"}
    assert failed["pcie.link"]["line"] == 2 and "downgraded" in failed["pcie.link"]["message"]
    assert failed["rvs.gpus_visible"]["message"] == "RVS sees 7 GPU(s); this SKU's node has 8"


def test_output_that_is_not_the_tool_fails_and_says_so(capsys, tmp_path):
    garbage = tmp_path / "notes.txt"
    garbage.write_text("hello\nthis is not rccl-tests\n")
    code, evidence = preflight(capsys, "--source", f"rccl-tests={garbage}")
    communication = layer(evidence, "communication")
    assert code == 3 and "no rccl-tests results table found" in communication["reason"]
    assert communication["sources"][0]["unread"] == 2


def test_on_this_machine_the_layers_say_why_they_were_skipped(capsys):
    if shutil.which("amd-smi") or shutil.which("rocm-smi"):
        pytest.skip("this machine has AMD tools: the live path is checked on GPU runners")
    code = rocm_gate(["preflight", "--json"])
    evidence = json.loads(capsys.readouterr().out)
    hardware = layer(evidence, "hardware")
    assert hardware["verdict"] == "skipped" and "amd-smi is not installed" in hardware["reason"]
    assert hardware["reason"].startswith("not proven: ")
    assert layer(evidence, "communication")["reason"] == "rccl-tests not run: add --benchmarks"
    assert layer(evidence, "framework")["verdict"] == "failed"  # no GPU visible: this is no runner
    assert "no GPU visible" in layer(evidence, "framework")["reason"]
    assert code == 3 and not evidence["accepted"]


def test_framework_layer_compares_the_pinned_stack(capsys, tmp_path):
    stack = tmp_path / "image.json"
    stack.write_text(json.dumps({"image": "rocm/vllm@sha256:aa", "packages": {"torch": "2.9.0+rocm7.0", "vllm": "0.32.0"}}))
    pinned = tmp_path / "pinned.json"
    pinned.write_text(json.dumps({"image": "rocm/vllm@sha256:aa", "packages": {"torch": "2.9.0+rocm7.0", "vllm": "0.32.1"}}))
    code, evidence = preflight(capsys, "--platform", "mi300x-8", "--stack", str(stack), "--expect-stack", str(pinned))
    framework = layer(evidence, "framework")
    assert code == 3 and framework["verdict"] == "failed"
    assert framework["reason"] == "vllm 0.32.0 is not the pinned 0.32.1"
    code, evidence = preflight(capsys, "--platform", "mi300x-8", "--stack", str(stack), "--expect-stack", str(stack))
    assert code == 0 and layer(evidence, "framework")["verdict"] == "ok"
    code, evidence = preflight(capsys, "--platform", "mi300x-4", "--sku", "MI300X")
    assert code == 3 and "expected 8 GPU(s)" in layer(evidence, "framework")["reason"]


def test_workload_layer_runs_the_smoke_test_on_each_gpu_alone(capsys):
    fails_on_3 = f'{sys.executable} -c "import os, sys; sys.exit(os.environ[\'HIP_VISIBLE_DEVICES\'] == \'3\')"'
    code, evidence = preflight(capsys, "--platform", "mi300x-8", "--smoke-command", fails_on_3)
    workload = layer(evidence, "workload")
    assert code == 3 and workload["verdict"] == "failed"
    assert workload["reason"] == "GPU 3: the smoke test exited with 1: no output"
    code, evidence = preflight(capsys, "--platform", "mi300x-2", "--expect-gpus", "2",
                               "--smoke-command", f"{sys.executable} -c pass")
    assert layer(evidence, "workload")["reason"] == "the smoke test passed on each of 2 GPU(s)"


@pytest.mark.parametrize("args,message", [
    (["--source", "nvidia-smi=x"], "unknown tool 'nvidia-smi'"),
    (["--source", "rvs"], "expected TOOL=FILE"),
    (["--source", "rvs=/no/such/file"], "/no/such/file: cannot read it"),
    (["--require", "hardware,network"], "unknown layer(s) network"),
    (["--sku", "MI999X"], "unknown SKU 'MI999X'"),
])
def test_bad_arguments_are_named(capsys, args, message):
    with pytest.raises(SystemExit) as exit_info:
        code = rocm_gate(["preflight", *args])
        raise SystemExit(code)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize("text,message", [
    ("[sku.MI300X]\nrccl_busbw = 1\nrccl_busbw_source = 'x'\n", "unknown key 'rccl_busbw'"),
    ("[sku.MI300X]\nrccl_all_reduce_busbw_gbps = 304\n", "rccl_all_reduce_busbw_gbps has no source"),
    ("[sku.MI300X\n", "not valid TOML"),
    ("[sku.MI999X]\ngpus = 8\ngpus_source = 'x'\n", "[sku.MI999X] is not a SKU table"),
    ("[default]\npcie_width = 'x16'\npcie_width_source = 'x'\n", "pcie_width = 'x16': expected a number"),
])
def test_a_broken_thresholds_file_is_named(capsys, tmp_path, text, message):
    broken = tmp_path / "thresholds.toml"
    broken.write_text(text)
    code = rocm_gate(["preflight", "--thresholds", str(broken), "--source", f"rvs={broken}"])
    assert code == 2
    err = capsys.readouterr().err
    assert str(broken) in err and message in err


def _preflight_to(history, name, node, *sources):
    code = rocm_gate(["preflight", "--require", "none", "--node", node, "--sku", "MI300X", "--out",
                      str(history / name), *(a for s in sources for a in ("--source", s))])
    return code


def _ecc_with_correctable(count: int, path):
    """The real all-zero `amd-smi metric --ecc-block` capture with the UMC correctable count set."""
    text = (PREFLIGHT / "amd-smi/mi300_amd-smi_metric_--ecc-block_text_all_zero_amdsmi-changelog.txt").read_text()
    path.write_text(text.replace("CORRECTABLE_COUNT: 0", f"CORRECTABLE_COUNT: {count}", 1))
    return f"amd-smi={path}"


def test_drain_decides_from_a_nodes_recorded_history(capsys, tmp_path):
    history = tmp_path / "history"
    history.mkdir()
    failing = f"dmesg={PREFLIGHT / 'dmesg/mi300x_x8_dmesg_ras_athub_uncorrectable_aca_xgmi_wafl_mode1_reset_rocm6.2.3_rocm-issue-4021.txt'}"
    healthy = f"rccl-tests={PREFLIGHT / 'rccl-tests/mi300x_x8_all_reduce_perf_1node_k8s_hisohara.txt'}"
    assert _preflight_to(history, "n1-a.json", "node-1", failing) == 3
    assert _preflight_to(history, "n1-b.json", "node-1", healthy) == 0
    assert _preflight_to(history, "n2-a.json", "node-2", failing) == 3  # once: an incident, not a pattern
    assert _preflight_to(history, "n2-b.json", "node-2", healthy) == 0
    for day, count in enumerate((3, 40, 170)):
        assert _preflight_to(history, f"n3-{day}.json", "node-3", _ecc_with_correctable(count, tmp_path / f"e{day}")) == 0
    assert _preflight_to(history, "n1-c.json", "node-1", failing) == 3
    capsys.readouterr()

    assert rocm_gate(["drain", "--history", str(history), "--node", "node-1"]) == 3
    out = capsys.readouterr().out
    assert "node node-1: DRAIN" in out and "2 of the last 3 preflights failed" in out
    assert "kubectl cordon node-1" in out and "kubectl drain node-1 --ignore-daemonsets" in out
    assert rocm_gate(["drain", "--history", str(history), "--node", "node-2"]) == 0
    assert rocm_gate(["drain", "--history", str(history), "--node", "node-3", "--json"]) == 3
    decision = json.loads(capsys.readouterr().out.split("\n", 1)[1])
    assert decision["reasons"] == ["ecc.correctable from amd-smi grows over 3 preflights: 3 (n3-0.json) -> 40 (n3-1.json) "
                                   "-> 170 (n3-2.json)"]
    # the recovery layer of the next preflight refuses the node
    code, evidence = preflight(capsys, "--node", "node-1", "--history", str(history), "--source", healthy, "--sku", "MI300X")
    assert code == 3 and layer(evidence, "recovery")["verdict"] == "failed"


def _gate_report(path, runner, image, conclusion, infra_tests=(), gpu=None):
    tests = {test: {"verdict": "infra", "attempts": [{"status": "crashed", "gpus": [gpu]}, {"status": "crashed", "gpus": [gpu]}]}
             for test in infra_tests}
    tests["t::ok"] = {"verdict": "pass", "attempts": [{"status": "passed", "gpus": [0]}]}
    path.write_text(json.dumps({"schema": "pytest-rocm/gate-report/1", "conclusion": conclusion, "tests": tests,
                                "manifest": {"runner": runner, "container_image": image, "finished": path.stem}}))


def test_drain_follows_infra_verdicts_to_one_gpu_and_names_the_rollback_image(capsys, tmp_path):
    _gate_report(tmp_path / "2026-11-01.json", "node-7", "rocm/vllm@sha256:good", "success")
    _gate_report(tmp_path / "2026-11-02.json", "node-7", "rocm/vllm@sha256:new", "neutral", ["a::x", "b::y"], gpu=5)
    _gate_report(tmp_path / "2026-11-03.json", "node-7", "rocm/vllm@sha256:new", "neutral", ["c::z"], gpu=5)
    _gate_report(tmp_path / "2026-11-04.json", "node-8", "rocm/vllm@sha256:new", "neutral", ["a::x"], gpu=1)
    (tmp_path / "notes.json").write_text("{}")
    assert rocm_gate(["drain", "--history", str(tmp_path), "--node", "node-7", "--json"]) == 3
    decision = json.loads(capsys.readouterr().out)
    assert decision["reasons"] == ["GPU 5: infra failures of 3 different tests (a::x, b::y, c::z): the device, not the tests"]
    assert decision["rollback_image"] == "rocm/vllm@sha256:good" and decision["current_image"] == "rocm/vllm@sha256:new"
    assert any("template.spec.containers[0].image=rocm/vllm@sha256:good" in c for c in decision["commands"])
    assert decision["ignored_files"] == [str(tmp_path / "notes.json")]
    assert rocm_gate(["drain", "--history", str(tmp_path), "--node", "node-8"]) == 0


def test_drain_names_a_corrupt_history_file(capsys, tmp_path):
    (tmp_path / "broken.json").write_text("{\"schema\": ")
    assert rocm_gate(["drain", "--history", str(tmp_path), "--node", "n"]) == 2
    assert f"{tmp_path / 'broken.json'}: not valid JSON" in capsys.readouterr().err
    assert rocm_gate(["drain", "--history", str(tmp_path / "none"), "--node", "n"]) == 2


def test_amd_smi_json_and_coloured_text_read_alike(capsys, tmp_path):
    """`amd-smi metric --json` (ROCm 7 wraps GPUs in `gpu_data`) and `bad-pages` text with colours and CRLF, shaped
    like the real captures; the values are set to show each check acting."""
    metric = tmp_path / "metric.json"
    metric.write_text(json.dumps({"gpu_data": [
        {"gpu": 0, "ecc": {"total_correctable_count": 0, "total_uncorrectable_count": 2},
         "pcie": {"width": 16, "speed": {"value": 16, "unit": "GT/s"}},
         "temperature": {"edge": "N/A", "hotspot": {"value": 41, "unit": "C"}, "mem": {"value": 35, "unit": "C"}}},
        {"gpu": 1, "retired": "No bad pages found.", "pending": [{"page_address": "0x1234", "page_size": 4096}]}]}))
    pages = tmp_path / "bad-pages.txt"
    pages.write_bytes(b"\x1b[32mGPU: 0\x1b[0m\r\n    RETIRED:\r\n        PAGE_ADDRESS: 0x2f1000\r\n        PAGE_SIZE: 4096\r\n"
                      b"        PAGE_ADDRESS: 0x2f3000\r\n    PENDING: No bad pages found.\r\n")
    code, evidence = preflight(capsys, "--sku", "MI300X", "--source", f"amd-smi={metric}", "--source", f"amd-smi={pages}")
    findings = {(f["check"], f["status"], f["message"]) for f in layer(evidence, "hardware")["findings"]}
    assert code == 3
    assert ("ecc.uncorrectable", "failed", "GPU 0 ECC/TOTAL_UNCORRECTABLE_COUNT = 2") in findings
    assert ("pcie.link", "failed", "GPU 0 PCIe speed 16 GT/s below 32") in findings
    assert ("bad_pages.pending", "degraded", "GPU 1: 1 page(s) pending retirement (reset the GPU to retire them)") in findings
    assert ("bad_pages.retired", "ok", "GPU 0: 2 page(s) retired (safe; `rocm-gate drain` acts when the count grows)") in findings
    assert all(source["unread"] == 0 for source in layer(evidence, "hardware")["sources"])
