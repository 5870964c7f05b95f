"""Every real captured output under tests/data/samples/ (copied from ../shared/samples/) must come out
right."""

import pytest
from conftest import SAMPLES

from pytest_rocm.hw.detect import detect_from_files

# file, source, vendor, GPU count, SKU, arch, memory GiB per GPU (None where the tool does not say),
# versions that must be read (subset), partition of GPU 0
CASES = [
    (
        "amd-smi/mi300x-o_amd-smi_static_text_rocm-blogs.txt",
        "amd-smi",
        "amd",
        1,
        "MI300X",
        "gfx942",
        None,
        {},
        None,
    ),
    (
        "amd-smi/mi300x_amd-smi_version_json_rocm7.2.1_dell-ai.json",
        "amd-smi-version",
        "cpu",
        0,
        None,
        None,
        None,
        {"rocm": "7.2.1", "driver": "amdgpu 6.16.13"},
        None,
    ),
    (
        "amd-smi/mi300x_x8_amd-smi_static_json_nonroot_permission_banner_rocm7.2.1_dell-ai.txt",
        "amd-smi",
        "amd",
        8,
        "MI300X",
        "gfx942",
        None,
        {},
        None,
    ),
    (
        "amd-smi/mi300x_x8_amd-smi_static_json_rocm7.2.1_dell-ai.json",
        "amd-smi",
        "amd",
        8,
        "MI300X",
        "gfx942",
        192.0,
        {"driver": "amdgpu 6.16.13"},
        None,
    ),
    (
        "amd-smi/mi325x_vf_amd-smi_list_text_device-metrics-exporter.txt",
        "amd-smi",
        "amd",
        2,
        "MI325X",
        "gfx942",
        None,
        {},
        None,
    ),
    (
        "amd-smi/mi350x_amd-smi_static_text_gfx950_rocm-systems-pr-2987_EXCERPT.txt",
        "amd-smi",
        "amd",
        1,
        "MI350X",
        "gfx950",
        None,
        {"driver": "amdgpu 6.18.3"},
        None,
    ),
    (
        "rocm-smi/mi250x_rocm-smi_showproductname_json_gfx9010_rocm_smi_lib-issue-159.json",
        "rocm-smi",
        "amd",
        1,
        "MI250X",
        "gfx90a",
        None,
        {},
        None,
    ),
    (
        "rocm-smi/mi300x_oam_rocm-smi_showproductname_rocm-blogs-notebook.txt",
        "rocm-smi",
        "amd",
        1,
        "MI300X",
        "gfx942",
        None,
        {},
        None,
    ),
    (
        "rocm-smi/mi300x_x4_rocm-smi_concise_thamada.txt",
        "rocm-smi",
        "amd",
        4,
        "MI300X",
        "gfx942",
        None,
        {},
        "SPX/NPS1",
    ),
    (
        "rocminfo/mi300x_x4_rocminfo_thamada.txt",
        "rocminfo",
        "amd",
        4,
        "MI300X",
        "gfx942",
        192.0,
        {"hsa_runtime": "1.1"},
        None,
    ),
    (
        "rocminfo/mi355x_rocminfo_gfx950_agent_rocm-libraries-issue-9055_EXCERPT.txt",
        "rocminfo",
        "amd",
        1,
        "MI355X",
        "gfx950",
        None,
        {},
        None,
    ),
    (
        "collect-env/vllm_collect_env_mi300x_rocm6.2_torch2.6dev_augmxnt.txt",
        "collect-env",
        "amd",
        8,
        "MI300X",
        "gfx942",
        None,
        {
            "rocm": "6.2.41134-65d174c3e",
            "hip": "6.2.41133",
            "torch": "2.6.0.dev20241015+rocm6.2",
            "vllm": "0.6.4.dev11+gba309422",
        },
        None,
    ),
]


def test_every_sample_has_an_expectation():
    covered = {case[0] for case in CASES}
    on_disk = {
        str(p.relative_to(SAMPLES))
        for p in SAMPLES.glob("*/*")
        if p.parent.name not in ("junit", "preflight") and p.is_file()
    }
    assert on_disk - covered == set(), "a new sample needs its expected SKU, arch and count here"


@pytest.mark.parametrize(
    "name,source,vendor,count,sku,arch,memory,versions,partition",
    CASES,
    ids=[c[0].split("/")[1][:50] for c in CASES],
)
def test_sample(name, source, vendor, count, sku, arch, memory, versions, partition):
    platform = detect_from_files({source: str(SAMPLES / name)})
    assert all(s.ok for s in platform.sources), [s.detail for s in platform.sources]
    assert platform.vendor == vendor
    assert platform.gpu_count == count
    assert [g.sku for g in platform.gpus] == [sku] * count
    assert [g.arch for g in platform.gpus] == [arch] * count
    assert [g.memory_gb for g in platform.gpus] == [memory] * count
    assert {k: platform.versions.get(k) for k in versions} == versions
    if count:
        assert platform.gpus[0].partition == partition
        assert [g.index for g in platform.gpus] == list(range(count))


def test_raw_names_are_kept():
    platform = detect_from_files(
        {"amd-smi": str(SAMPLES / "amd-smi/mi300x-o_amd-smi_static_text_rocm-blogs.txt")}
    )
    assert platform.gpus[0].raw_name == "MI300X-O"
    assert platform.gpus[0].pci_bus == "0000:05:00.0"
    platform = detect_from_files(
        {
            "rocm-smi": str(
                SAMPLES
                / "rocm-smi/mi250x_rocm-smi_showproductname_json_gfx9010_rocm_smi_lib-issue-159.json"
            )
        }
    )
    assert platform.gpus[0].raw_name == "AMD INSTINCT MI200 (MCM) OAM LC MBA HPE C2"


def test_permission_banner_is_noted():
    platform = detect_from_files(
        {
            "amd-smi": str(
                SAMPLES
                / "amd-smi/mi300x_x8_amd-smi_static_json_nonroot_permission_banner_rocm7.2.1_dell-ai.txt"
            )
        }
    )
    assert "Permission needed" in platform.sources[0].detail
    assert "render group" in platform.sources[0].detail
    # The board name still answers when the ASIC fields are N/A.
    assert platform.gpus[0].raw_name == "AMD Instinct MI300X OAM"


def test_sources_combine_static_and_version():
    platform = detect_from_files(
        {
            "amd-smi": str(
                SAMPLES / "amd-smi/mi300x_x8_amd-smi_static_json_rocm7.2.1_dell-ai.json"
            ),
            "amd-smi-version": str(
                SAMPLES / "amd-smi/mi300x_amd-smi_version_json_rocm7.2.1_dell-ai.json"
            ),
        }
    )
    assert platform.describe() == "8 x MI300X"
    assert platform.versions["rocm"] == "7.2.1"


def test_rocminfo_fills_memory_missing_from_rocm_smi():
    platform = detect_from_files(
        {
            "rocm-smi": str(SAMPLES / "rocm-smi/mi300x_x4_rocm-smi_concise_thamada.txt"),
            "rocminfo": str(SAMPLES / "rocminfo/mi300x_x4_rocminfo_thamada.txt"),
        }
    )
    assert [g.memory_gb for g in platform.gpus] == [192.0] * 4
    assert platform.gpus[0].partition == "SPX/NPS1"
