"""The SKU table is one file (`pytest_rocm/hw/skus.toml`) that every reader of SKU facts reads:
detection, the markers, the simulated profiles and node acceptance (issue 64: an MI450X with device
id 0x7600 was found by detection but not by preflight's own pattern; a B300 added to one list was
accepted by the marker and never detected). Adding a row is walked through every reader, in a copy
of the package with that row added, as a maintainer following docs/extending.md would."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import textwrap
from pathlib import Path

import pytest

import pytest_rocm
import rocm_gate
from pytest_rocm.hw import skus
from pytest_rocm.hw.skus import (
    COMPUTE_PARTITIONS,
    LOGICAL_GPUS_PER_PARTITION_MODE,
    SKUS,
    SkuTableError,
    load_table,
    partition_from_compute_units,
)
from rocm_gate.preflight.inventory import judge_partitions

PACKAGE = Path(pytest_rocm.__file__).resolve().parent
SAMPLES = Path(__file__).parent / "data" / "samples"
# 8 x MI300X, amd-smi static --json (dell-ai; tests/data/samples/README.md)
AMD_SMI_STATIC = SAMPLES / "amd-smi" / "mi300x_x8_amd-smi_static_json_rocm7.2.1_dell-ai.json"

NEW_ROWS = """
[[sku]]
name = "MI450X"
vendor = "amd"
arch = "gfx1250"
device_ids = ["0x7600"]
memory_gb = 432.0
vram_mib = 442368
compute_units = 256
compute_partitions = ["SPX", "DPX", "QPX", "CPX"]

[[sku]]
name = "B300"
vendor = "nvidia"
arch = "sm_103"
memory_gb = 268.0
"""

# What each reader makes of the new rows, run in a fresh interpreter on the copy of the package.
READERS = """
import json, sys
from pathlib import Path
import pytest_rocm
from pytest_rocm.hw import detect, profiles, skus
from pytest_rocm.plugin import markers
from rocm_gate.preflight.layers import ToolOutput, guess_sku
from rocm_gate.preflight.inventory import judge_partitions

sample = Path(sys.argv[1])
found = {"package": pytest_rocm.__file__}
platform = detect.detect_from_files({"amd-smi": str(sample)})
found["detected"] = sorted({(g.sku, g.arch) for g in platform.gpus})
found["by_device_id"] = skus.identify_amd(device_id="0x7600")
found["nvidia"] = skus.identify_nvidia("NVIDIA B300 SXM6 AC")
found["marker"] = [skus.normalise_sku(n) for n in ("mi450x", "b300")]
found["marker_archs"] = sorted({"gfx1250", "sm_103"} & markers.KNOWN_ARCHS)
found["profile"] = [
    (g.sku, g.device_id, g.memory_gb) for g in profiles.builtin("mi450x-8").gpus[:1]
] + [(g.sku, g.arch) for g in profiles.builtin("b300-2").gpus[:1]]
found["preflight"] = guess_sku([ToolOutput("lspci", "lspci.txt", "c1:00.0 Display controller: "
                                           "Advanced Micro Devices, Inc. [AMD/ATI] Device [1002:0x7600]")])
found["partition"] = skus.partition_from_compute_units("MI450X", 64)
found["vram"] = skus.VRAM_MB["MI450X"]
found["partition_findings"] = [
    f.status for f in judge_partitions({"0": ("QPX", "NPS1", None), "1": ("QPX", "NPS1", None)}, "MI450X")
]
print(json.dumps(found))
"""


def test_a_new_sku_is_one_row_every_reader_knows(tmp_path):
    copy = tmp_path / "pytest_rocm"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    table = copy / "hw" / "skus.toml"
    table.write_text(table.read_text() + NEW_ROWS)
    sample = tmp_path / "amd-smi-static.json"
    sample.write_text(
        AMD_SMI_STATIC.read_text()
        .replace("MI300X", "MI450X")
        .replace("0x74a1", "0x7600")
        .replace("gfx942", "gfx1250")
    )
    # -S: no .pth files, so the checkout's editable install does not shadow the copy; the
    # environment's libraries come after the copy on the path
    # rocm_gate from its source folder: it imports the copy's pytest_rocm
    service = Path(rocm_gate.__file__).resolve().parent.parent
    path = os.pathsep.join([str(tmp_path), str(service), sysconfig.get_paths()["purelib"]])
    done = subprocess.run(
        [sys.executable, "-S", "-c", READERS, str(sample)],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": path},
        cwd=tmp_path,  # `-c` puts the working folder first on the path
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    assert found["package"].startswith(str(copy)), found[
        "package"
    ]  # the copy ran, not the checkout
    assert found["detected"] == [["MI450X", "gfx1250"]]
    assert found["by_device_id"] == ["MI450X", "gfx1250"]
    assert found["nvidia"] == ["B300", "sm_103"]
    assert found["marker"] == ["MI450X", "B300"]
    assert found["marker_archs"] == ["gfx1250", "sm_103"]
    assert found["profile"] == [["MI450X", "0x7600", 432.0], ["B300", "sm_103"]]
    assert found["preflight"] == ["MI450X", ["lspci.txt"]]
    assert found["partition"] == "QPX"
    assert found["vram"] == 442368
    assert found["partition_findings"] == ["ok"]


def test_the_checkout_knows_none_of_the_new_rows():
    """The walk above proves something only if the rows are new: here the same readers know
    neither SKU."""
    assert skus.identify_amd(device_id="0x7600") == (None, None)
    assert skus.normalise_sku("MI450X") is None and skus.normalise_sku("B300") is None
    assert skus.identify_nvidia("NVIDIA B300 SXM6 AC")[0] is None


@pytest.mark.parametrize(
    "row",
    [sku for sku in SKUS if sku.compute_partitions],
    ids=lambda sku: sku.name,
)
def test_every_partition_mode_of_a_sku_is_known_by_its_compute_units(row):
    """Issue 64: the 2- and 4-way modes were untested (breaking them passed every test). Each
    mode a row lists: an agent with the whole GPU's CUs divided by the mode's parts is that mode,
    and a node all in it is accepted; the whole GPU is no partition."""
    assert partition_from_compute_units(row.name, row.compute_units) is None
    for mode in row.compute_partitions:
        parts = LOGICAL_GPUS_PER_PARTITION_MODE[mode]
        if parts > 1:
            assert partition_from_compute_units(row.name, row.compute_units // parts) == mode
        node = {str(gpu): (mode, "NPS1", None) for gpu in range(8)}
        assert [f.status for f in judge_partitions(node, row.name)] == ["ok"], mode
    assert set(COMPUTE_PARTITIONS[row.name]) == set(row.compute_partitions)


def test_a_mode_the_sku_cannot_be_set_to_fails_the_node(tmp_path, monkeypatch):
    """A row that lists fewer modes: a GPU reported in another one is not that SKU's mode."""
    table = tmp_path / "skus.toml"
    table.write_text(
        textwrap.dedent(
            """
            [[sku]]
            name = "MI400X"
            vendor = "amd"
            arch = "gfx1250"
            compute_units = 256
            compute_partitions = ["SPX", "CPX"]
            """
        )
    )
    (row,) = load_table(table)
    assert row.compute_partitions == ("SPX", "CPX")
    node = {str(gpu): ("DPX", "NPS1", None) for gpu in range(2)}
    assert [f.status for f in judge_partitions(node, "MI300X")] == ["ok"]
    monkeypatch.setitem(COMPUTE_PARTITIONS, "MI300X", row.compute_partitions)
    assert {f.status for f in judge_partitions(node, "MI300X")} == {"failed"}


@pytest.mark.parametrize(
    "rows, named",
    [
        ('[[sku]]\nname = "X1"\nvendor = "amd"\narch = "gfx9"\nvram = 3\n', "unknown key vram"),
        ('[[sku]]\nname = "X1"\nvendor = "intel"\narch = "x"\n', "vendor of"),
        ('[[sku]]\nname = "X1"\nvendor = "amd"\narch = "g"\ndevice_ids = ["zz"]\n', "device_ids"),
        ('[[sku]]\nname = "X1"\nvendor = "amd"\narch = "g"\ncompute_units = "304"\n', "an integer"),
        ('[[sku]]\nname = "X1"\nvendor = "amd"\narch = "g"\ncompute_units = true\n', "an integer"),
        ('sku = "X1"\n', "rows of \\[\\[sku\\]\\]"),
        (
            '[[sku]]\nname = "X1"\nvendor = "amd"\narch = "g"\ncompute_partitions = ["NPS4"]\n',
            "compute_partitions",
        ),
        (
            '[[sku]]\nname = "X1"\nvendor = "amd"\narch = "g"\ndevice_ids = ["0x7600"]\n'
            '[[sku]]\nname = "X2"\nvendor = "amd"\narch = "g"\ndevice_ids = ["0x7600"]\n',
            "device id 0x7600 in two rows",
        ),
    ],
)
def test_a_bad_row_is_named_with_its_key(tmp_path, rows, named):
    table = tmp_path / "skus.toml"
    table.write_text(rows)
    with pytest.raises(SkuTableError, match=named) as raised:
        load_table(table)
    assert str(table) in str(raised.value)
    assert "X1" in str(raised.value) or "two rows" in named or "rows of" in named
