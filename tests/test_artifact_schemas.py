"""The JSON Schemas published in the package hold for what the plugin and `rocm-gate parity` really
write."""

import json

import jsonschema
import pytest
from conftest import read_jsonl, read_report
from test_verdicts import CONFTEST

from pytest_rocm.schemas.artifacts import schema_document
from rocm_gate.cli import main as rocm_gate

SUITE = """
    import pytest

    pytestmark = pytest.mark.rocm_gate(group="engine")

    def test_flaky(attempt, gpus):
        assert attempt > 0

    def test_bug():
        print("HW Exception by GPU node-2 reason :GPU Hang")
        assert False

    @pytest.mark.rocm_gate(group="api", blocking=False)
    def test_shadow():
        pass

    @pytest.mark.hardware(sku="MI355X")
    def test_elsewhere():
        pass

    @pytest.mark.rocm_known_gap(reason="no fp8", issue="https://github.com/o/r/issues/1")
    def test_gap():
        pass
"""


def validator(kind: str) -> jsonschema.Draft202012Validator:
    document = schema_document(kind)
    jsonschema.Draft202012Validator.check_schema(document)
    return jsonschema.Draft202012Validator(document)


@pytest.fixture
def run_output(pytester):
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_suite=SUITE)
    pytester.runpytest_subprocess(
        "-n",
        "2",
        "--rocm-platform=mi300x-2",
        "--rocm-report-dir=out",
        "--junitxml=out/junit.xml",
        "--rocm-health-probe=true",
        "-p",
        "no:cacheprovider",
    )
    return pytester.path / "out"


def test_records_gate_report_and_manifest_match_their_schemas(run_output):
    records = [r for path in sorted(run_output.glob("records-*.jsonl")) for r in read_jsonl(path)]
    kinds = {r.get("kind", "phase") for r in records}
    assert {"phase", "probe", "preflight", "collection", "session"} <= kinds
    record_schema = validator("record")
    for record in records:
        record_schema.validate(record)
    report = read_report(run_output)
    validator("gate-report").validate(report)
    validator("manifest").validate(json.loads((run_output / "manifest.json").read_text()))
    assert report["tests"]["test_suite.py::test_flaky"]["verdict"] == "flaky"


def test_a_report_that_claims_success_while_incomplete_breaks_the_schema(run_output):
    report = read_report(run_output)
    report.update(complete=False, conclusion="success", incomplete_causes=["x"])
    with pytest.raises(jsonschema.ValidationError):
        validator("gate-report").validate(report)


def test_parity_report_matches_its_schema(run_output, tmp_path):
    assert (
        rocm_gate(
            [
                "parity",
                "--reference",
                str(run_output / "junit.xml"),
                "--candidate",
                str(run_output),
                "--out",
                str(tmp_path),
            ]
        )
        == 0
    )
    validator("parity").validate(json.loads((tmp_path / "parity.json").read_text()))
