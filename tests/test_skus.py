import pytest

from pytest_rocm.hw.skus import identify_amd, identify_nvidia, normalise_arch, normalise_sku


@pytest.mark.parametrize(
    "name,expected",
    [
        ("AMD Instinct MI300X OAM", "MI300X"),
        ("MI300X-O", "MI300X"),
        ("AMD Instinct Mi325X VF", "MI325X"),
        ("AMD Instinct MI355X", "MI355X"),
        ("AMD Instinct MI300A", "MI300A"),
        ("AMD Instinct MI308X", "MI308X"),
        ("AMD Instinct MI210", "MI210"),
        ("AMD Instinct MI250X / MI250", "MI250X"),
    ],
)
def test_names(name, expected):
    assert identify_amd(name)[0] == expected


@pytest.mark.parametrize(
    "device,sku,arch",
    [
        ("0x74a1", "MI300X", "gfx942"),
        ("0x74A5", "MI325X", "gfx942"),
        ("74b9", "MI325X", "gfx942"),
        (0x75A3, "MI355X", "gfx950"),
        ("0x75a0", "MI350X", "gfx950"),
        ("0x740f", "MI210", "gfx90a"),
        ("0x74a0", "MI300A", "gfx942"),
    ],
)
def test_device_ids(device, sku, arch):
    assert identify_amd(None, None, device) == (sku, arch)


def test_family_name_falls_back_to_device_id_and_fixes_a_wrong_arch():
    # rocm-smi on MI250X prints the family name and "gfx9010" (rocm_smi_lib issue 159).
    assert identify_amd("AMD INSTINCT MI200 (MCM) OAM LC MBA HPE C2", "gfx9010", "0x7408") == (
        "MI250X",
        "gfx90a",
    )


def test_mi250_told_from_mi250x_by_compute_units():
    assert identify_amd(None, "gfx90a", "0x740c", compute_units=104)[0] == "MI250"
    assert identify_amd(None, "gfx90a", "0x740c", compute_units=110)[0] == "MI250X"


def test_empty_name_with_only_an_isa_string():
    # MI350X and MI355X look alike
    assert identify_amd("", "gfx950:sramecc+:xnack-") == (None, "gfx950")
    assert identify_amd("", "amdgcn-amd-amdhsa--gfx942:sramecc+:xnack-", memory_gb=256.0) == (
        "MI325X",
        "gfx942",
    )
    assert identify_amd("", "gfx942", memory_gb=192.0) == ("MI300X", "gfx942")
    # A partitioned GPU (CPX: 38 CUs, 24 GB) is not guessed from its size.
    assert identify_amd("", "gfx942", memory_gb=24.0, compute_units=38) == (None, "gfx942")


@pytest.mark.parametrize(
    "name,cap,expected",
    [
        ("NVIDIA H100 80GB HBM3", "9.0", ("H100", "sm_90")),
        ("NVIDIA H200", "9.0", ("H200", "sm_90")),
        ("NVIDIA B200", "10.0", ("B200", "sm_100")),
        ("NVIDIA H100 PCIe", None, ("H100", "sm_90")),
        ("NVIDIA GeForce RTX 4090", "8.9", (None, "sm_89")),
    ],
)
def test_nvidia(name, cap, expected):
    assert identify_nvidia(name, cap) == expected


def test_normalisers():
    assert normalise_sku("mi300x") == "MI300X"
    assert normalise_sku("MI999") is None
    assert normalise_arch("AMD Instinct MI300X (gfx942:sramecc+:xnack-)") == "gfx942"
    assert normalise_arch("no arch here") is None
