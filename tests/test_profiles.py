import json

import pytest

from pytest_rocm.hw import profiles
from pytest_rocm.hw.model import Platform


@pytest.mark.parametrize(
    "name,description,vendor",
    [
        ("cpu", "no GPU (cpu)", "cpu"),
        ("mi300x-1", "1 x MI300X", "amd"),
        ("mi300x-8", "8 x MI300X", "amd"),
        ("mi325x-8", "8 x MI325X", "amd"),
        ("mi355x-8", "8 x MI355X", "amd"),
        ("h100-8", "8 x H100", "nvidia"),
        ("h200-1", "1 x H200", "nvidia"),
        ("MI300X-4", "4 x MI300X", "amd"),
    ],
)
def test_builtin_profiles(name, description, vendor):
    platform = profiles.load(name)
    assert platform.describe() == description
    assert platform.vendor == vendor
    assert platform.sources[0].name == "profile" and platform.sources[0].ok


def test_every_documented_builtin_loads():
    for name in profiles.BUILTIN:
        assert profiles.load(name).profile == name


def test_unknown_profile_names_the_choices():
    with pytest.raises(
        profiles.ProfileError, match="unknown platform profile 'mi400x-8'.*mi300x-8"
    ):
        profiles.load("mi400x-8")


def test_json_profile_round_trips_doctor_output(tmp_path):
    original = profiles.load("mi355x-8")
    path = tmp_path / "runner.json"
    path.write_text(json.dumps(original.to_dict()))
    loaded = profiles.load(str(path))
    assert loaded.describe() == "8 x MI355X"
    assert [g.arch for g in loaded.gpus] == ["gfx950"] * 8
    assert loaded.keys() == ["MI355X", "gfx950", "amd"]


def test_what_doctor_json_prints_is_a_profile(tmp_path, capsys):
    """The whole of `rocm-gate doctor --json` on a real 8 x MI300X capture, as the reference says
    it is usable: before, its platform sat under a key the loader did not read, and the profile
    was silently a runner with no GPU."""
    from conftest import SAMPLES

    from rocm_gate.cli import main as rocm_gate

    capture = SAMPLES / "amd-smi" / "mi300x_x8_amd-smi_static_json_rocm7.2.1_dell-ai.json"
    assert rocm_gate(["doctor", "--source", f"amd-smi={capture}", "--json"]) == 0
    path = tmp_path / "runner.json"
    path.write_text(capsys.readouterr().out)
    assert profiles.load(str(path)).describe() == "8 x MI300X"


def test_minimal_hand_written_profile(tmp_path):
    path = tmp_path / "mixed.json"
    path.write_text(
        json.dumps(
            {"vendor": "amd", "gpus": [{"sku": "MI300X", "arch": "gfx942", "memory_gb": 192}] * 2}
        )
    )
    platform = profiles.load(str(path))
    assert [g.index for g in platform.gpus] == [0, 1]
    assert platform.gpus[0].vendor == "amd"


@pytest.mark.parametrize(
    "content,message",
    [
        ("{not json", "Expecting property name"),
        ('{"vendor": "intel"}', "vendor 'intel' is not one of amd, nvidia, cpu"),
        # a misspelt key is not a runner without GPUs
        ('{"platfrom": {"vendor": "amd"}}', "no vendor or gpus key (it has platfrom)"),
        (
            '{"vendor": "amd", "gpus": [{"colour": "red", "index": 0, "vendor": "amd", "sku": "MI300X", "x": {}}]}',
            None,
        ),
        (
            '{"vendor": "amd", "gpus": [{"index": 0, "sku": 5}]}',
            "gpus[0].sku must be a string, got 5",
        ),
    ],
)
def test_bad_profile_files(tmp_path, content, message):
    path = tmp_path / "bad.json"
    path.write_text(content)
    if message is None:  # unknown keys are ignored, the rest loads
        assert profiles.load(str(path)).gpu_count == 1
        return
    with pytest.raises(profiles.ProfileError, match=str(path).replace(".", r"\.")) as info:
        profiles.load(str(path))
    assert message in str(info.value)


def test_platform_round_trip():
    platform = profiles.load("h100-8")
    assert Platform.from_dict(platform.to_dict()).to_dict() == platform.to_dict()
