"""Under pytest-xdist: per-worker records, a worker killed mid-run, properties through the
controller."""

import xml.etree.ElementTree as ET

import pytest
from conftest import read_jsonl, read_report

from pytest_rocm.results.records import last_attempt_records, read_records

pytestmark = pytest.mark.slow

SUITE = """
    import os
    import time
    import pytest

    @pytest.mark.rocm_gate(group="engine")
    @pytest.mark.parametrize("i", range(6))
    def test_before(i):
        time.sleep(0.05)

    @pytest.mark.rocm_gate(group="engine")
    def test_killed():
        print("about to die", flush=True)
        os._exit(1)

    @pytest.mark.rocm_gate(group="attention", blocking=False)
    @pytest.mark.parametrize("i", range(6))
    def test_after(i):
        time.sleep(0.05)
"""


def test_worker_killed_mid_run_loses_no_records(pytester):
    pytester.makepyfile(test_kill=SUITE)
    result = pytester.runpytest_subprocess(
        "-n",
        "2",
        "--rocm-platform=mi300x-8",
        "--rocm-report-dir=out",
        "--junitxml=out/junit.xml",
        "--rocm-reruns=0",
        "-p",
        "no:cacheprovider",
    )
    result.assert_outcomes(passed=12, failed=1)
    out = pytester.path / "out"
    report = read_report(out)
    tests = report["tests"]
    assert len(tests) == 13
    killed = tests["test_kill.py::test_killed"]
    assert killed["status"] == "crashed"
    assert "crashed while running 'test_kill.py::test_killed'" in killed["detail"]
    assert killed["group"] == "engine"  # from the setup record in the dying worker's running slot
    assert all(
        t["status"] == "passed" for n, t in tests.items() if n != "test_kill.py::test_killed"
    )
    assert report["groups"]["engine"]["crashed"] == 1

    # The dying worker's file holds every record it wrote before, one per finished test; the setup
    # record of the test it died in waits in its running slot (a plain setup is no line of its
    # own), which the readers take for a line of the file.
    per_worker = {
        p.name: [r for r in read_jsonl(p) if "kind" not in r] for p in out.glob("records-gw*.jsonl")
    }
    assert sum(len(recs) for recs in per_worker.values()) == 12
    assert all(r["when"] == "setup+call+teardown" for recs in per_worker.values() for r in recs)
    assert not any(
        r["nodeid"] == "test_kill.py::test_killed" for recs in per_worker.values() for r in recs
    )
    slots = list(out.glob("records-gw*.running"))
    assert len(slots) == 1  # the workers that ended normally removed theirs
    dying = slots[0].with_suffix(".jsonl")
    setup = last_attempt_records(dying, "test_kill.py::test_killed")
    assert [(r["when"], r["outcome"], r["worker"]) for r in setup] == [
        ("setup", "passed", dying.stem.removeprefix("records-"))
    ]
    assert killed["attempts"][0]["worker"] == setup[0]["worker"]
    assert [r for r in read_records(out).records if r.get("when") == "setup"] == setup
    controller = read_jsonl(out / "records-controller.jsonl")
    crash = [r for r in controller if r.get("crashed")]
    assert [(r["nodeid"], r["exit_code"]) for r in crash] == [("test_kill.py::test_killed", 1)]
    assert "(worker exit code 1)" in crash[0]["failure"]
    # A crash looks like the infrastructure's: the health probe ran (nothing to probe on this
    # machine).
    probes = [r for r in controller if r.get("kind") == "probe"]
    assert len(probes) == 1 and probes[0]["ok"] is True

    # --rocm-reruns=0: an infra-looking crash, neither confirmed nor excused
    assert killed["verdict"] == "unconfirmed"
    assert killed["verdict_reason"].endswith("not rerun, so neither confirmed nor excused")
    # nor is the run: its device passed the probe, and nothing reran the test (it was neutral, the
    # crash excused on its signature alone)
    assert report["conclusion"] == "incomplete"
    assert report["conclusion_reason"].startswith(
        "1 blocking gate(s) failed with an infrastructure signature and were not rerun"
    )
    # the compact table: only the columns with something in them
    result.stdout.fnmatch_lines(
        [
            "group * gates * blocking * passed * crashed * unconfirmed * total",
            "engine * 7 * 7 * 6 * 1 * 1 * 7",
            "conclusion: incomplete*",
        ]
    )


def test_properties_and_groups_reach_the_controller(pytester):
    pytester.makefile(".toml", groups='[[rule]]\ngroup = "api"\npaths = ["test_mapped.py"]\n')
    pytester.makeini("[pytest]\nrocm_group_map = groups.toml\n")
    pytester.makepyfile(
        test_mapped="""
        import pytest

        @pytest.mark.parametrize("i", range(4))
        def test_unmarked(i):
            pass
    """,
        test_gate="""
        import pytest

        @pytest.mark.rocm_gate(group="attention")
        @pytest.mark.hardware(arch="gfx950")
        @pytest.mark.parametrize("i", range(4))
        def test_pinned(i):
            pass
    """,
    )
    result = pytester.runpytest_subprocess(
        "-n",
        "2",
        "--rocm-platform=mi355x-1",
        "--rocm-report-dir=out",
        "--junitxml=out/junit.xml",
        "--rocm-junit-properties=full",
        "--rocm-scheduler=xdist",  # both workers take tests (1 GPU: gpu would not)
        "-p",
        "no:cacheprovider",
    )
    result.assert_outcomes(passed=8)
    root = ET.parse(pytester.path / "out/junit.xml").getroot()
    groups = sorted(
        {p.get("value") for p in root.iter("property") if p.get("name") == "rocm_group"}
    )
    skus = {p.get("value") for p in root.iter("property") if p.get("name") == "rocm_sku"}
    assert groups == ["api", "attention"] and skus == {"MI355X"}
    report = read_report(pytester.path / "out")
    assert report["groups"]["api"]["passed"] == 4 and report["groups"]["attention"]["passed"] == 4
    assert {p.name for p in (pytester.path / "out").glob("records-*.jsonl")} == {
        "records-gw0.jsonl",
        "records-gw1.jsonl",
        "records-controller.jsonl",
    }
    assert report["conclusion"] == "success"


SETUP_DEATH = """
    import os
    import pytest

    @pytest.fixture
    def dies():
        os._exit(1)

    @pytest.mark.rocm_gate(group="engine")
    def test_dies_in_setup(dies):
        pass

    @pytest.mark.rocm_gate(group="engine")
    def test_fine():
        pass
"""


@pytest.mark.parametrize("reruns", [0, 1])
def test_a_worker_that_dies_before_writing_anything_for_a_gate_still_blocks(pytester, reruns):
    """The worker dies in the setup of a blocking gate, so it wrote no record of it: the controller's
    crash record and the collection record still make it a blocking crash (never a success), and
    the controller reruns it as it would any blocking gate."""
    pytester.makepyfile(test_setup_death=SETUP_DEATH)
    pytester.runpytest_subprocess(
        "-n",
        "2",
        "--rocm-platform=mi300x-8",
        "--rocm-report-dir=out",
        f"--rocm-reruns={reruns}",
        "-p",
        "no:cacheprovider",
    )
    report = read_report(pytester.path / "out")
    died = report["tests"]["test_setup_death.py::test_dies_in_setup"]
    assert (died["status"], died["blocking"], died["gate"]) == ("crashed", True, True)
    assert len(died["attempts"]) == 1 + reruns
    assert report["conclusion"] != "success"
