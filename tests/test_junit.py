"""The JUnit reader on real files (samples, and files real pytest writes here) and on what other
producers write."""

from collections import Counter

import pytest
from conftest import SAMPLES
from junitparser import Error, Failure, JUnitXml, Skipped

from rocm_gate.parity.junit import JUnitError, read_cases

JUNIT = SAMPLES / "junit"


@pytest.mark.parametrize(
    "name,total,counts",
    [
        (
            "dorny_pytest_properties_skip_xfail.xml",
            10,
            {"passed": 6, "failed": 2, "skipped": 1, "xfailed": 1},
        ),
        ("enricomi_pytest_horovod_97_tests.xml", 97, {"passed": 80, "skipped": 17}),
        ("junitparser_pytest_error.xml", 1, {"failed": 1}),
    ],
)
def test_samples(name, total, counts):
    cases = read_cases(JUNIT / name)
    assert len(cases) == total
    assert Counter(c.status for c in cases.values()) == counts


@pytest.mark.parametrize(
    "name",
    [
        "dorny_pytest_properties_skip_xfail.xml",
        "enricomi_pytest_horovod_97_tests.xml",
        "junitparser_pytest_error.xml",
    ],
)
def test_samples_agree_with_junitparser(name):
    """junitparser (the reference library) must see the same cases and results as our streaming
    reader."""
    expected = Counter()
    for suite in JUnitXml.fromfile(str(JUNIT / name)):
        for case in suite:
            kinds = {type(r) for r in case.result}
            expected[
                "failed"
                if Failure in kinds
                else "error"
                if Error in kinds
                else "skipped"
                if Skipped in kinds
                else "passed"
            ] += 1
    ours = Counter(
        "skipped" if c.status == "xfailed" else c.status for c in read_cases(JUNIT / name).values()
    )
    assert ours == expected


def test_sample_details():
    cases = read_cases(JUNIT / "dorny_pytest_properties_skip_xfail.xml")
    assert cases["tests/test_lib.py::test_always_fail"].message == "assert False"
    assert cases["tests/test_lib.py::test_always_skip"].message == "skipped"
    assert cases["tests/test_lib.py::test_with_record_property"].properties == {"example_key": "1"}
    assert "custom_classname.py::test_with_record_xml_attribute" in cases
    horovod = read_cases(JUNIT / "enricomi_pytest_horovod_97_tests.xml")
    skipped = horovod["test/test_spark.py::SparkTests::test_get_available_devices"]
    assert skipped.status == "skipped"
    assert skipped.message == "get_available_devices only supported in Spark 3.0 and above"


def test_truncated_sample_names_file_and_line():
    path = JUNIT / "enricomi_pytest_truncated_corrupt.xml"
    with pytest.raises(JUnitError) as info:
        read_cases(path)
    assert str(info.value).startswith(f"{path}: not well-formed XML at line 11, column 22")
    assert "--keep-going" in str(info.value)


def write(tmp_path, text, name="j.xml"):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_not_junit(tmp_path):
    with pytest.raises(
        JUnitError, match=r"root element is <html>, not <testsuites> or <testsuite>"
    ):
        read_cases(write(tmp_path, "<html><body>502 Bad Gateway</body></html>"))


def test_empty_file(tmp_path):
    with pytest.raises(JUnitError, match="not well-formed XML at line 1"):
        read_cases(write(tmp_path, ""))


def test_what_producers_write(tmp_path):
    path = write(
        tmp_path,
        """<?xml version="1.0" encoding="utf-8"?>
<testsuites>
  <testsuite name="empty" tests="0"/>
  <testsuite name="outer">
    <testsuite name="inner">
      <testcase classname="tests.kernels.test_a.TestOuter.TestInner" name="test_nested[a.b/c-[x]]"/>
    </testsuite>
    <testcase classname="tests.test_b" name="test_call_and_teardown">
      <failure message="assert 1 == 2">body</failure>
      <error message="teardown exploded">td</error>
    </testcase>
    <testcase classname="tests.test_b" name="test_teardown_only"><error message="teardown exploded"/></testcase>
    <testcase classname="tests.test_b" name="test_cdata"><failure><![CDATA[first line <b>not markup</b>
second line]]></failure></testcase>
    <testcase classname="tests.test_b" name="test_entities_&#x1F600;&amp;&lt;"><system-out>&#x10348;</system-out></testcase>
    <testcase classname="tests.test_b" name="test_flaky"><flakyFailure message="boom"/></testcase>
    <testcase classname="tests.test_b" name="test_rerun">
      <rerunFailure message="boom"/><failure message="boom again"/>
    </testcase>
  </testsuite>
</testsuites>""",
    )
    cases = read_cases(path)
    nested = cases["tests/kernels/test_a.py::TestOuter::TestInner::test_nested[a.b/c-[x]]"]
    assert nested.status == "passed"
    assert cases["tests/test_b.py::test_call_and_teardown"].status == "failed"
    assert cases["tests/test_b.py::test_call_and_teardown"].message == "assert 1 == 2"
    assert cases["tests/test_b.py::test_teardown_only"].status == "error"
    assert cases["tests/test_b.py::test_cdata"].message == "first line <b>not markup</b>"
    assert cases["tests/test_b.py::test_entities_\U0001f600&<"].status == "passed"
    assert (
        cases["tests/test_b.py::test_flaky"].status == "passed"
        and cases["tests/test_b.py::test_flaky"].rerun
    )
    assert (
        cases["tests/test_b.py::test_rerun"].status == "failed"
        and cases["tests/test_b.py::test_rerun"].rerun
    )
    assert len(cases) == 7


@pytest.mark.parametrize("family", ["xunit1", "xunit2", "legacy"])
def test_real_pytest_output_maps_back_to_node_ids(pytester, family):
    """pytest's own JUnit, every family: the node ids we derive equal the ones pytest collected."""
    pytester.makepyfile(
        **{
            "tests/models/test_ids": """
        import pytest

        @pytest.mark.parametrize("p", ["a.b", "x/y", "[1]", "fp8-e4m3", "1.5e-3"])
        def test_param(p):
            pass

        class TestGroup:
            class TestNested:
                def test_deep(self):
                    pass

            @pytest.mark.parametrize("shape", [(1, 2), (3, 4)])
            def test_shape(self, shape):
                pass
    """
        }
    )
    pytester.makeini(f"[pytest]\njunit_family = {family}\n")
    collected = pytester.runpytest("--collect-only", "-q", "-p", "no:rocm").outlines
    expected = {line for line in collected if "::" in line}
    pytester.runpytest("--junitxml=j.xml", "-p", "no:rocm")
    assert set(read_cases(pytester.path / "j.xml")) == expected
    assert len(expected) == 8


def test_real_rerunfailures_output(pytester):
    """pytest-rerunfailures writes every attempt as its own case; the last counts and the test is
    marked rerun."""
    pytester.makepyfile(
        test_r="""
        ATTEMPTS = {"n": 0}

        def test_flaky():
            ATTEMPTS["n"] += 1
            assert ATTEMPTS["n"] > 1

        def test_broken():
            assert 0

        def test_fine():
            pass
    """
    )
    pytester.runpytest("--reruns=1", "--junitxml=j.xml", "-p", "no:rocm")
    cases = read_cases(pytester.path / "j.xml")
    assert {n: (c.status, c.rerun) for n, c in cases.items()} == {
        "test_r.py::test_flaky": ("passed", True),
        "test_r.py::test_broken": ("failed", True),
        "test_r.py::test_fine": ("passed", False),
    }


def test_a_failed_call_and_its_failed_teardown_are_one_attempt(pytester):
    """pytest writes a test whose call failed and whose teardown then failed as two cases of one
    id: read as a rerun, the teardown's error counted and the assertion was lost."""
    pytester.makepyfile(
        test_t="""
        import pytest

        @pytest.fixture
        def broken_teardown():
            yield
            raise RuntimeError("teardown boom")

        def test_fails_twice(broken_teardown):
            assert False, "the real failure"

        def test_only_teardown(broken_teardown):
            pass
    """
    )
    pytester.runpytest("--junitxml=j.xml", "-p", "no:rocm")
    cases = read_cases(pytester.path / "j.xml")
    fails, teardown = cases["test_t.py::test_fails_twice"], cases["test_t.py::test_only_teardown"]
    assert (fails.status, fails.rerun) == ("failed", False)
    assert "the real failure" in fails.message
    assert (teardown.status, teardown.rerun) == ("error", False)
    assert teardown.message.startswith("failed on teardown")


def test_googletest_suites_and_disabled_tests(tmp_path):
    """GoogleTest's JUnit (`--gtest_output=xml`): `file` is the C++ source, the suite is the
    classname, a disabled test has no child but `status="notrun"`. The classname was dropped (two
    suites' `Large` became one test, a failing one read as passing) and the disabled test counted
    as a pass."""
    path = tmp_path / "gtest.xml"
    path.write_text(
        '<?xml version="1.0" encoding="UTF-8"?>\n<testsuites name="AllTests">\n'
        '<testsuite name="AttnTest"><testcase name="Basic" file="kernel_test.cc" status="run" '
        'result="completed" classname="AttnTest"/>'
        '<testcase name="Large" file="kernel_test.cc" status="run" result="completed" '
        'classname="AttnTest"><failure message="Expected equality"/></testcase>'
        '<testcase name="DISABLED_Fp8" file="kernel_test.cc" status="notrun" result="suppressed" '
        'classname="AttnTest"/></testsuite>'
        '<testsuite name="GemmTest"><testcase name="Basic" file="kernel_test.cc" status="run" '
        'result="completed" classname="GemmTest"/><testcase name="Large" file="kernel_test.cc" '
        'status="run" result="completed" classname="GemmTest"/></testsuite></testsuites>\n'
    )
    expected = {
        "kernel_test.cc::AttnTest::Basic": "passed",
        "kernel_test.cc::AttnTest::Large": "failed",
        "kernel_test.cc::AttnTest::DISABLED_Fp8": "skipped",
        "kernel_test.cc::GemmTest::Basic": "passed",
        "kernel_test.cc::GemmTest::Large": "passed",
    }
    assert {n: c.status for n, c in read_cases(path).items()} == expected
    from rocm_gate.parity.junit import case_lists

    ids, results = case_lists(path)  # the bulk reader parity uses agrees
    assert {n: c.status for n, c in zip(ids, results, strict=True)} == expected
