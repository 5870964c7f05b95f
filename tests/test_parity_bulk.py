"""`rocm-gate parity` compares plain passes in bulk: the same report as the test-by-test path, on
real JUnit files.

Plain passes (a `<testcase>` without children) are read by `case_lists` with C-level iteration and
compared as sets; every other test goes through `iter_cases` and the per-test comparison. Here the
same real files are run both ways: as they are, and rewritten so that no case is a plain pass (an
empty `<system-out/>` child changes no result, but sends every test through the per-test path).
"""

import json
import re
import shutil
from pathlib import Path

import pytest
from conftest import SAMPLES

from rocm_gate.cli import main as rocm_gate
from rocm_gate.parity import inputs
from rocm_gate.parity.junit import PLAIN_PASS, JUnitError, case_lists, iter_cases, merge_repeat

JUNIT = SAMPLES / "junit"
READABLE = [
    "dorny_pytest_properties_skip_xfail.xml",
    "enricomi_pytest_horovod_97_tests.xml",
    "junitparser_pytest_error.xml",
]
TRUNCATED = "enricomi_pytest_truncated_corrupt.xml"
# A map for the samples' paths (one file of theirs stays unmatched): groups from the map, and
# `ungrouped`.
GROUP_MAP = """schema = "pytest-rocm/groups/1"
source = "test"

[[rule]]
group = "engine"
paths = ["test/"]

[[rule]]
group = "api"
paths = ["tests/test_lib.py"]
"""


@pytest.fixture
def group_map(tmp_path):
    path = tmp_path / "groups.toml"
    path.write_text(GROUP_MAP, encoding="utf-8")
    return path


def parity(out, *args) -> dict:
    assert rocm_gate(["parity", *map(str, args), "--out", str(out)]) == 0
    return json.loads((out / "parity.json").read_text())


def no_plain_passes(source, target):
    """The same file with an empty <system-out/> in every case without children: no result
    changes."""
    text = source.read_text(encoding="utf-8")
    text = re.sub(r"<testcase\b([^>]*?)\s*/>", r"<testcase\1><system-out/></testcase>", text)
    text = re.sub(r"(<testcase\b[^>]*[^/]>)(\s*</testcase>)", r"\1<system-out/>\2", text)
    target.write_text(text, encoding="utf-8")
    return target


def normalised(report: dict) -> str:
    """The report with its lists of ids sorted: the per-test path lists passing tests in another
    order."""

    def walk(value):
        if isinstance(value, dict):
            return {k: walk(v) for k, v in value.items()}
        if isinstance(value, list):
            items = [walk(v) for v in value]
            return sorted(items, key=lambda v: json.dumps(v, sort_keys=True))
        return value

    report = walk(report)
    for side in ("reference", "candidate"):
        report["inputs"][side]["files"] = len(report["inputs"][side]["files"])
    return json.dumps(report, sort_keys=True)


@pytest.mark.parametrize("name", READABLE)
def test_bulk_reader_agrees_with_the_case_by_case_reader(name):
    ids, results = case_lists(JUNIT / name)
    expected = list(iter_cases(JUNIT / name))
    assert ids == [nodeid for nodeid, _ in expected]
    assert results == [case for _, case in expected]
    # a case without children is the shared plain pass in both readers, any other its own result
    assert [r is PLAIN_PASS for r in results] == [case is PLAIN_PASS for _, case in expected]
    assert any(r is PLAIN_PASS for r in results) or name == "junitparser_pytest_error.xml"


def test_bulk_reader_rejects_what_the_case_by_case_reader_rejects():
    with pytest.raises(JUnitError):
        case_lists(JUNIT / TRUNCATED)
    with pytest.raises(JUnitError):
        list(iter_cases(JUNIT / TRUNCATED))


@pytest.mark.parametrize("reference,candidate", [(a, b) for a in READABLE for b in READABLE])
def test_bulk_report_equals_the_per_test_report_on_real_files(
    tmp_path, group_map, reference, candidate
):
    bulk = parity(
        tmp_path / "bulk",
        "--reference",
        JUNIT / reference,
        "--candidate",
        JUNIT / candidate,
        "--groups",
        group_map,
    )
    per_test = parity(
        tmp_path / "per-test",
        "--reference",
        no_plain_passes(JUNIT / reference, tmp_path / f"ref-{reference}"),
        "--candidate",
        no_plain_passes(JUNIT / candidate, tmp_path / f"cand-{candidate}"),
        "--groups",
        group_map,
    )
    assert normalised(bulk) == normalised(per_test)
    assert bulk["overall"] == per_test["overall"] and bulk["groups"] == per_test["groups"]


def test_plain_passes_do_go_through_the_per_test_path_once_rewritten(tmp_path):
    rewritten = no_plain_passes(JUNIT / "enricomi_pytest_horovod_97_tests.xml", tmp_path / "h.xml")
    ids, results = case_lists(rewritten)
    assert len(ids) == 97 and not any(r is PLAIN_PASS for r in results)
    assert sum(r.status == "passed" for r in results) == 80


def test_many_files_in_parallel_give_the_serial_report(tmp_path, group_map, monkeypatch):
    """Eight files or more are read in worker processes; the report is the one a serial read writes,
    repeats across files (the same file given twice: a rerun job) included."""
    files = [JUNIT / name for name in READABLE + [TRUNCATED]] * 3
    folders = []
    for copy in range(3):  # the same tests in three folders: shards that ran them again
        folder = tmp_path / f"shard{copy}"
        folder.mkdir()
        for name in READABLE:
            shutil.copy(JUNIT / name, folder / name)
        folders.append(folder)
    args = [
        "--reference",
        *files,
        "--candidate",
        *folders,
        JUNIT / READABLE[0],
        "--keep-going",
        "--groups",
        group_map,
    ]
    parallel, serial = tmp_path / "parallel", tmp_path / "serial"
    assert len(files) >= inputs.PARALLEL_MIN_FILES
    first = parity(parallel, *args)
    # below it, files are read in this process
    monkeypatch.setattr(inputs, "PARALLEL_MIN_FILES", 10**6)
    second = parity(serial, *args)
    assert (parallel / "parity.json").read_bytes() == (serial / "parity.json").read_bytes()
    assert (parallel / "parity.md").read_bytes() == (serial / "parity.md").read_bytes()
    assert first["repeated"]["candidate"] == second["repeated"]["candidate"]
    assert len(first["inputs"]["reference"]["dropped"]) == 3


def test_bulk_comparison_across_shards_and_prefixes(tmp_path):
    """A file given twice (its tests repeat across files) and a prefix to strip: one report either
    way."""
    horovod = JUNIT / "enricomi_pytest_horovod_97_tests.xml"
    moved = horovod.read_text(encoding="utf-8").replace(
        'classname="test.', 'classname="ci.shard3.test.'
    )
    (tmp_path / "ref.xml").write_text(
        moved.replace('file="test/', 'file="ci/shard3/test/'), encoding="utf-8"
    )
    rewritten = no_plain_passes(tmp_path / "ref.xml", tmp_path / "ref-rewritten.xml")
    bulk = parity(
        tmp_path / "bulk",
        "--reference",
        tmp_path / "ref.xml",
        tmp_path / "ref.xml",
        "--candidate",
        horovod,
    )
    per_test = parity(
        tmp_path / "per-test",
        "--reference",
        rewritten,
        rewritten,
        "--candidate",
        no_plain_passes(horovod, tmp_path / "c.xml"),
    )
    assert bulk["inputs"]["reference"]["stripped_prefix"] == "ci/shard3/"
    assert normalised(bulk) == normalised(per_test)
    assert bulk["overall"]["both_passing"] == 80


@pytest.mark.parametrize("family", ["xunit1", "xunit2"])
def test_bulk_reader_on_real_pytest_output(pytester, family):
    """pytest's own JUnit (a collection error has no classname; reruns repeat a case): both readers
    agree."""
    pytester.makepyfile(
        **{
            "tests/test_ok": """
        import pytest

        @pytest.mark.parametrize("p", ["a.b", "x/y", "[1]"])
        def test_param(p):
            pass

        class TestGroup:
            def test_skip(self):
                pytest.skip("no GPU")
    """,
            "tests/test_broken": "import not_a_module\n",
        }
    )
    pytester.makeini(f"[pytest]\njunit_family = {family}\n")
    pytester.runpytest(
        "--junitxml=j.xml",
        "--continue-on-collection-errors",
        "-p",
        "no:rocm",
        "-p",
        "no:cacheprovider",
    )
    ids, results = case_lists(pytester.path / "j.xml")
    expected = list(iter_cases(pytester.path / "j.xml"))
    assert list(zip(ids, results)) == expected
    assert "tests/test_broken.py" in ids and "tests/test_ok.py::test_param[x/y]" in ids
    assert sum(r is PLAIN_PASS for r in results) == 3


def case_by_case(files) -> dict:
    """A side read the simple way, every case one by one: a case repeated in a file merged in
    document order, a test in several files merged across them (`merge_repeat`)."""
    side: dict = {}
    for path in files:
        in_file: dict = {}
        for nodeid, case in iter_cases(path):
            if case.status in ("skipped", "xfailed"):
                inputs._mark_known_gap(case)
            earlier = in_file.get(nodeid)
            in_file[nodeid] = case if earlier is None else merge_repeat(earlier, case, ordered=True)
        for nodeid, case in in_file.items():
            earlier = side.get(nodeid)
            side[nodeid] = case if earlier is None else merge_repeat(earlier, case, ordered=False)
    return side


def test_repeats_in_and_across_files_merge_as_read_case_by_case(pytester, monkeypatch):
    """pytest-rerunfailures repeats a case in its file; shards and a rerun job repeat a test across
    files, with other results. A side read in bulk (and in parallel: ten files) holds what reading
    every case one by one gives, in the same order."""
    pytester.makepyfile(
        test_shards="""
        import os, pathlib, pytest

        SHARD = int(os.environ["SHARD"])

        def test_fails_on_shard_0():
            assert SHARD != 0

        def test_flaky_each_run(tmp_path_factory):
            marker = tmp_path_factory.getbasetemp().parent / f"flaky-{SHARD}"
            first = not marker.exists()
            marker.touch()
            assert not first

        @pytest.mark.parametrize("p", ["a.b", "x/y", "[1]"])
        def test_plain(p):
            pass

        def test_known_gap_on_shard_1():
            if SHARD == 1:
                pytest.skip("known gap: slow kernel (https://github.com/x/y/issues/1)")

        def test_skip_or_fail():
            if SHARD == 2:
                pytest.skip("requires 8 GPUs")
            assert SHARD != 1
    """
    )
    files = []
    for shard in range(3):
        monkeypatch.setenv("SHARD", str(shard))
        junit = pytester.path / f"junit-{shard}.xml"
        pytester.runpytest_subprocess(
            "--reruns=1", f"--junitxml={junit}", "-p", "no:rocm", "-p", "no:cacheprovider"
        )
        files.append(junit)
    files += files + files + [JUNIT / READABLE[0]]  # the shards again: a rerun job, twice
    assert len(files) >= inputs.PARALLEL_MIN_FILES
    [side] = inputs.load_sides([("candidate", [str(f) for f in files])], keep_going=False)
    expected = case_by_case(files)
    assert list(side.results.items()) == list(expected.items())
    flaky = side.results["test_shards.py::test_flaky_each_run"]
    assert flaky.status == "passed" and flaky.rerun
    assert set(side.results["test_shards.py::test_fails_on_shard_0"].attempts) == {
        "failed",
        "passed",
    }
    assert side.results["test_shards.py::test_known_gap_on_shard_1"].status == "passed"


@pytest.mark.parametrize("cores", [2, 4])
def test_a_file_as_big_as_all_the_others_is_read_once_in_order(tmp_path, monkeypatch, cores):
    """The processes claim files one at a time as they go, this one from the front, the children
    (one per other core) from the back: with a file as big as all the others last, or files of even
    sizes, every file comes back once, in order, as a serial read gives it."""
    monkeypatch.setattr(inputs.os, "cpu_count", lambda: cores)
    horovod = (JUNIT / "enricomi_pytest_horovod_97_tests.xml").read_text(encoding="utf-8")
    head, _, rest = horovod.partition("<testcase ")
    body, _, tail = rest.rpartition("</testsuite>")
    big = head + "".join(
        "<testcase " + body.replace('name="test_', f'name="test_{copy}_') for copy in range(40)
    )
    for uneven in (False, True):
        paths = []
        for index in range(9):
            path = tmp_path / f"{uneven}-{index}.xml"
            shutil.copy(JUNIT / READABLE[index % len(READABLE)], path)
            paths.append(path)
        if uneven:
            paths.append(tmp_path / "big.xml")
            paths[-1].write_text(big + "</testsuite>" + tail, encoding="utf-8")
        parsing = inputs._Parsing(paths)
        try:
            assert len(parsing.children) == cores - 1  # read in parallel
            parsed = list(parsing)
        finally:
            parsing.close()
        assert parsed == [inputs._parse_junit(path) for path in paths]
    assert len(parsed[-1].ids) == 40 * 97


@pytest.mark.parametrize("count", [1, 7, inputs.MAX_CLAIMS, inputs.MAX_CLAIMS + 1, 3000])
def test_claims_hand_out_every_file_once(count):
    """Claims from the front and from the back, in any mix, give every file index once; with more
    files than claims, a claim is several files."""
    claims = inputs._Claims(count)
    front, back = [], []
    try:
        for turn in range(count + 1):
            claim = claims.take(from_back=turn % 3 == 0)
            if claim is None:
                break
            (back if turn % 3 == 0 else front).extend(claim)
        assert claims.take(from_back=False) is None and claims.take(from_back=True) is None
    finally:
        claims.close()
    assert sorted(front + back) == list(range(count))
    assert front == list(range(len(front)))  # this process reads the front, in order
    assert sorted(back) == list(range(len(front), count))


def forked_children() -> set[int]:
    """This process's child processes that are forks of it (same command line), or zombies."""
    found = set()
    mine = Path("/proc/self/cmdline").read_bytes()
    for task in Path("/proc/self/task").iterdir():
        for pid in (task / "children").read_text().split():
            process = Path("/proc") / pid
            try:
                zombie = (process / "stat").read_text().rpartition(")")[2].split()[0] == "Z"
                if zombie or (process / "cmdline").read_bytes() == mine:
                    found.add(int(pid))
            except OSError:
                pass  # gone meanwhile
    return found


@pytest.mark.parametrize("missing_input", [False, True])
def test_the_map_error_comes_first_and_no_reader_is_left(tmp_path, capsys, missing_input):
    """The sides' files start being read (by forked processes: nine files) before the group map is
    loaded; a broken map is still the error reported (before a missing input, as ever), and no
    reading process is left running or unreaped."""
    bad_map = tmp_path / "groups.toml"
    bad_map.write_text("schema = 1\n", encoding="utf-8")
    files = [str(JUNIT / name) for name in READABLE] * 3
    before = forked_children()
    missing = [str(tmp_path / "missing.xml")] if missing_input else []
    code = rocm_gate(
        ["parity", "--reference", *files, *missing, "--candidate", *files, "--groups", str(bad_map)]
        + ["--out", str(tmp_path / "out")]
    )
    assert code == 2
    assert f"group map {bad_map}: schema is 1" in capsys.readouterr().err
    assert forked_children() <= before
    assert not (tmp_path / "out").exists()
