"""Live detection: every source may be missing, refuse permission, hang or print nonsense; none
crashes the run."""

import json
import os
import stat
from pathlib import Path

import pytest
from conftest import SAMPLES

from pytest_rocm.hw import detect
from pytest_rocm.hw.parsers import nvidia_smi, torch_query
from pytest_rocm.hw.parsers.kfd_sysfs import gfx_from_target_version, parse_dir

STATIC_JSON = SAMPLES / "amd-smi/mi300x_x8_amd-smi_static_json_rocm7.2.1_dell-ai.json"


def fake_tool(folder: Path, name: str, script: str, executable: bool = True) -> None:
    path = folder / name
    path.write_text("#!/bin/sh\n" + script + "\n")
    path.chmod(stat.S_IRWXU if executable else stat.S_IRUSR | stat.S_IWUSR)


@pytest.fixture
def tools(tmp_path, monkeypatch):
    """A PATH holding only our fake tools (and the shell); no real sysfs."""
    folder = tmp_path / "bin"
    folder.mkdir()
    monkeypatch.setenv("PATH", f"{folder}:/usr/bin:/bin")
    monkeypatch.setattr(
        detect, "find_tool", lambda name: str(folder / name) if (folder / name).exists() else None
    )
    return folder


def by_name(platform):
    return {s.name: s for s in platform.sources}


def test_nothing_installed_gives_cpu_with_every_failure_explained(tools, tmp_path):
    platform = detect.detect_live(sysfs_root=tmp_path / "no-sysfs")
    assert platform.vendor == "cpu" and platform.gpus == []
    sources = by_name(platform)
    for name in ("amd-smi", "rocminfo", "rocm-smi", "nvidia-smi", "sysfs"):
        assert not sources[name].ok
        assert "missing" in sources[name].detail


def test_failures_of_every_kind_are_recorded(tools, tmp_path, monkeypatch):
    fake_tool(tools, "amd-smi", "echo 'this is not json'; exit 0")
    fake_tool(tools, "rocminfo", "echo 'hsa api call failure' >&2; exit 1")
    fake_tool(tools, "rocm-smi", "", executable=False)
    fake_tool(tools, "nvidia-smi", "sleep 5")
    monkeypatch.setattr(detect, "TOOL_TIMEOUT_S", 0.5)
    platform = detect.detect_live(sysfs_root=tmp_path / "no-sysfs")
    sources = by_name(platform)
    assert sources["amd-smi"].detail.startswith("unexpected output")
    assert "exited with 1: hsa api call failure" in sources["rocminfo"].detail
    assert sources["rocm-smi"].detail.startswith("permission denied")
    assert "did not answer in 0.5 s" in sources["nvidia-smi"].detail
    assert platform.vendor == "cpu"


def test_a_working_tool_wins_over_failing_ones(tools, tmp_path):
    sample = SAMPLES / "rocminfo/mi300x_x4_rocminfo_thamada.txt"
    fake_tool(tools, "rocminfo", f"cat '{sample}'")
    fake_tool(tools, "amd-smi", "echo '{\"gpu_data\": 5}'")
    platform = detect.detect_live(sysfs_root=tmp_path / "no-sysfs")
    assert platform.describe() == "4 x MI300X"
    assert by_name(platform)["rocminfo"].ok
    assert not by_name(platform)["amd-smi"].ok


def write_node(root: Path, number: int, props: dict, bank_bytes: int | None = None):
    node = root / str(number)
    node.mkdir(parents=True)
    (node / "properties").write_text("".join(f"{k} {v}\n" for k, v in props.items()))
    if bank_bytes:
        (node / "mem_banks/0").mkdir(parents=True)
        (node / "mem_banks/0/properties").write_text(f"heap_type 1\nsize_in_bytes {bank_bytes}\n")


def test_sysfs_topology(tmp_path):
    root = tmp_path / "nodes"
    write_node(root, 0, {"cpu_cores_count": 48, "simd_count": 0, "gfx_target_version": 0})
    for n in (1, 2):
        write_node(
            root,
            n,
            {
                "cpu_cores_count": 0,
                "simd_count": 1216,
                "simd_per_cu": 4,
                "gfx_target_version": 90402,
                "device_id": 0x74A1,
                "vendor_id": 4098,
            },
            206141652992,
        )
    parsed = parse_dir(root)
    assert [(g.sku, g.arch, g.memory_gb, g.compute_units) for g in parsed.gpus] == [
        ("MI300X", "gfx942", 192.0, 304)
    ] * 2


@pytest.mark.parametrize(
    "version,arch", [(90402, "gfx942"), (90010, "gfx90a"), (90500, "gfx950"), (110000, "gfx1100")]
)
def test_gfx_target_version(version, arch):
    assert gfx_from_target_version(version) == arch


def test_nvidia_smi_csv_with_and_without_header():
    with_header = (
        "index, name, memory.total [MiB], pci.bus_id, driver_version, compute_cap\n"
        "0, NVIDIA H100 80GB HBM3, 81559 MiB, 00000000:18:00.0, 570.124.06, 9.0\n"
        "1, NVIDIA H100 80GB HBM3, 81559 MiB, 00000000:2A:00.0, 570.124.06, 9.0\n"
    )
    parsed = nvidia_smi.parse(with_header)
    assert [(g.sku, g.arch, g.memory_gb) for g in parsed.gpus] == [("H100", "sm_90", 79.6)] * 2
    assert parsed.versions["driver"] == "nvidia 570.124.06"
    bare = "0, NVIDIA H200, 143771, 00000000:18:00.0, 575.57.08, 9.0\n"
    assert nvidia_smi.parse(bare).gpus[0].sku == "H200"


def test_nvidia_smi_garbage_is_an_error_not_a_crash():
    platform = detect.merge(
        [
            detect._attempt(
                "nvidia-smi",
                lambda: nvidia_smi.parse(
                    "Failed to initialize NVML: Driver/library version mismatch"
                ),
            )
        ]
    )
    assert not platform.sources[0].ok
    assert "unexpected output" in platform.sources[0].detail


def test_unknown_file_source_is_reported(tmp_path):
    platform = detect.detect_from_files({"rocm-smi": str(tmp_path / "absent.txt")})
    assert not platform.sources[0].ok
    assert "absent.txt" in platform.sources[0].detail


def test_torch_source_answers_or_says_why():
    answers = detect._attempt("torch", detect.torch_query.probe)
    result, parsed = answers
    if result.ok:
        assert "torch" in parsed.versions
    else:
        assert "torch is not installed" in result.detail


FAKE_TORCH = """
import types
__version__ = "{version}"
version = types.SimpleNamespace(hip={hip!r}, cuda={cuda!r})

class _Props:
    def __init__(self, **kw):
        self.__dict__.update(kw)

class cuda:
    @staticmethod
    def is_available():
        {hang}
        return {count} > 0

    @staticmethod
    def device_count():
        return {count}

    @staticmethod
    def get_device_properties(i):
        return _Props(**{props!r})
"""


def fake_torch(tmp_path, **values):
    """A stand-in `torch` package for the probe's subprocess: simulated hardware, real probe
    code."""
    folder = tmp_path / "site"
    (folder / "torch").mkdir(parents=True)
    defaults = {"version": "2.13.0", "hip": None, "cuda": None, "count": 0, "props": {}, "hang": ""}
    (folder / "torch" / "__init__.py").write_text(FAKE_TORCH.format(**{**defaults, **values}))
    return {**os.environ, "PYTHONPATH": str(folder)}


def test_torch_query_rocm_build(tmp_path):
    env = fake_torch(
        tmp_path,
        version="2.9.0+rocm7.0",
        hip="7.0.51831",
        count=2,
        props={
            "name": "AMD Instinct MI300X",
            "gcnArchName": "gfx942:sramecc+:xnack-",
            "total_memory": 206141652992,
            "multi_processor_count": 304,
            "major": 9,
            "minor": 4,
        },
    )
    parsed = torch_query.probe(env=env)
    assert parsed.versions == {"torch": "2.9.0+rocm7.0", "hip": "7.0.51831"}
    assert [(g.sku, g.arch, g.memory_gb, g.vendor) for g in parsed.gpus] == [
        ("MI300X", "gfx942", 192.0, "amd")
    ] * 2


def test_torch_query_cuda_build(tmp_path):
    env = fake_torch(
        tmp_path,
        version="2.9.0+cu128",
        cuda="12.8",
        count=1,
        props={
            "name": "NVIDIA H200",
            "total_memory": 150109880320,
            "multi_processor_count": 132,
            "major": 9,
            "minor": 0,
        },
    )
    parsed = torch_query.probe(env=env)
    assert parsed.versions == {"torch": "2.9.0+cu128", "cuda": "12.8"}
    assert [(g.sku, g.arch, g.memory_gb) for g in parsed.gpus] == [("H200", "sm_90", 139.8)]


def test_torch_query_cpu_build_gives_versions_only(tmp_path):
    parsed = torch_query.probe(env=fake_torch(tmp_path))
    assert parsed.versions == {"torch": "2.13.0"} and parsed.gpus == []


def test_torch_query_hung_gpu_times_out(tmp_path, monkeypatch):
    monkeypatch.setattr(torch_query, "TIMEOUT_S", 1)
    env = fake_torch(tmp_path, hip="7.0", count=1, hang="import time; time.sleep(30)")
    result, _ = detect._attempt("torch", lambda: torch_query.probe(env=env))
    assert not result.ok and "torch did not answer in 1 s (hung GPU or driver?)" in result.detail


def _static_with(change) -> str:
    """The real 8 x MI300X `amd-smi static --json` capture, its first GPU changed by `change`."""
    data = json.loads(STATIC_JSON.read_text())
    change(data["gpu_data"][0])
    return json.dumps(data)


@pytest.mark.parametrize(
    "change",
    [
        lambda g: g["vram"].update(size="196592MB"),
        lambda g: g["vram"].update(size=196592),
        lambda g: g["asic"].update(num_compute_units="304 CUs"),
        lambda g: g["asic"].update(target_graphics_version=942),
        lambda g: g["asic"].update(device_id=0x74A1),
        lambda g: g.update(bus="N/A"),
    ],
    ids=[
        "size-without-space",
        "size-bare-number",
        "cus-with-word",
        "gfx-as-number",
        "id-as-int",
        "bus-na",
    ],
)
def test_odd_values_in_amd_smi_static_json_keep_the_source(change):
    """One odd value used to discard the whole amd-smi source (ValueError, TypeError,
    AttributeError), the platform then read from nothing."""
    from pytest_rocm.hw.parsers import amd_smi

    parsed = amd_smi.parse(_static_with(change))
    assert len(parsed.gpus) == 8 and parsed.gpus[0].sku == "MI300X"
    assert parsed.gpus[0].device_id == "0x74a1" and parsed.gpus[0].memory_gb == 192.0


def test_lines_around_amd_smi_json_are_skipped():
    """A `[WARNING] ...` line before the JSON starts with `[`, and a log line may follow it."""
    from pytest_rocm.hw.parsers import amd_smi

    text = "[WARNING] amdgpu driver version mismatch\n" + STATIC_JSON.read_text() + "\ndone.\n"
    assert len(amd_smi.parse(text).gpus) == 8
