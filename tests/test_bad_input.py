"""Hostile input, as users and broken pipelines give it: every case ends with a clear message naming
the file, key or option, and the documented exit status; never a traceback."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

NOT_UTF8 = b'schema = "x"\n# caf\xe9\n'
GOOD_BASELINE = (
    'schema = "pytest-rocm/baselines/1"\n[[baseline]]\ntest = "t.py::test_a"\nmetric = "m"\n'
    'platform = "MI300X"\nexpected = 1.0\n'
)


def run_cli(args) -> tuple[int, str]:
    """`rocm-gate ARGS` as a user runs it: its own process, its exit status, everything it
    printed."""
    done = subprocess.run(
        [sys.executable, "-m", "rocm_gate.cli", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    return done.returncode, done.stdout + done.stderr


def write(tmp_path, name, content) -> str:
    path = tmp_path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    return str(path)


def records_dir(
    tmp_path,
    manifest: bytes | None = None,
    folder_named: str | None = None,
    link_to: str | None = None,
) -> str:
    folder = tmp_path / "run"
    folder.mkdir()
    record = {
        "schema": "pytest-rocm/record/1",
        "nodeid": "t.py::test_a",
        "worker": "gw0",
        "when": "setup",
        "outcome": "passed",
        "duration": 0.1,
        "t": 1.0,
    }
    (folder / "records-gw0.jsonl").write_text(json.dumps(record) + "\n")
    if manifest is not None:
        (folder / "manifest.json").write_bytes(manifest)
    # a folder where a worker's records file belongs (an unpacked artifact, a copy)
    if folder_named is not None:
        (folder / folder_named).mkdir()
    if link_to is not None:  # a results folder copied with links whose targets stayed behind
        (folder / "records-gw1.jsonl").symlink_to(link_to)
    return str(folder)


PLAIN_NAN = (
    '{"schema":"pytest-rocm/record/3","worker":"gw0","nodeid":"t.py::test_b","when":'
    '"setup+call+teardown","outcome":"passed","durations":[NaN,0.1,0.1],"t":2.0}'
)


def records_with(tmp_path, line: str) -> str:
    """A run's records with one more line after a good one."""
    folder = Path(records_dir(tmp_path))
    with (folder / "records-gw0.jsonl").open("a") as handle:
        handle.write(line + "\n")
    return str(folder)


def looping_records(tmp_path) -> str:
    """A worker's records file that is a symbolic link to itself (as a bad `ln -s` or a copy tool
    leaves one)."""
    folder = Path(records_dir(tmp_path))
    (folder / "records-gw1.jsonl").symlink_to("records-gw1.jsonl")
    return str(folder)


def gate_report(tmp_path, tests) -> str:
    return write(
        tmp_path,
        "cand/gate-report.json",
        json.dumps({"schema": "pytest-rocm/gate-report/1", "tests": tests}),
    )


JUNIT = '<testsuite><testcase classname="t" name="test_a"/></testsuite>'

# (case id, build(tmp_path) -> argv, expected exit status, text the message must hold)
CLI_CASES = [
    (
        "doctor-negative-gpus",
        lambda p: ["doctor", "--platform", "cpu", "--expect-gpus", "-1"],
        2,
        "cannot be negative",
    ),
    (
        "doctor-gpus-not-a-number",
        lambda p: ["doctor", "--expect-gpus", "eight"],
        2,
        "expected a whole number",
    ),
    (
        "doctor-unknown-sku",
        lambda p: ["doctor", "--expect-sku", "MI999X"],
        2,
        "unknown SKU 'MI999X'",
    ),
    (
        "doctor-unknown-source",
        lambda p: ["doctor", "--source", "nope=x"],
        2,
        "unknown source 'nope'",
    ),
    (
        "doctor-source-without-file",
        lambda p: ["doctor", "--source", "rocminfo"],
        2,
        "expected TOOL=FILE",
    ),
    (
        "doctor-only-source-unreadable",
        lambda p: ["doctor", "--source", f"rocminfo={p / 'missing.txt'}"],
        2,
        "none of the given --source files could be read",
    ),
    (
        "profile-is-a-list",
        lambda p: ["doctor", "--platform", write(p, "l.json", "[1, 2]")],
        2,
        "expected a JSON object",
    ),
    (
        "profile-memory-lots",
        lambda p: [
            "doctor",
            "--platform",
            write(
                p, "m.json", '{"vendor": "amd", "gpus": [{"sku": "MI300X", "memory_gb": "lots"}]}'
            ),
        ],
        2,
        "memory_gb",
    ),
    (
        "profile-duplicate-index",
        lambda p: [
            "doctor",
            "--platform",
            write(p, "d.json", '{"vendor": "amd", "gpus": [{"index": 0}, {"index": 0}]}'),
        ],
        2,
        "duplicate device index",
    ),
    (
        "profile-index-is-a-path",
        lambda p: [
            "doctor",
            "--platform",
            write(p, "i.json", '{"vendor": "amd", "gpus": [{"index": "../../etc"}]}'),
        ],
        2,
        "index must be a whole number",
    ),
    ("profile-huge", lambda p: ["doctor", "--platform", "mi300x-5000000"], 2, "from 1 to 64 GPUs"),
    (
        "profile-not-utf8",
        lambda p: ["doctor", "--platform", write(p, "u.json", b'{"vendor": "\xff"}')],
        2,
        "platform profile file",
    ),
    (
        "profile-unknown-vendor",
        lambda p: ["doctor", "--platform", write(p, "v.json", '{"vendor": "intel"}')],
        2,
        "vendor 'intel'",
    ),
    ("verdict-no-folder", lambda p: ["verdict", p / "nope"], 2, "is not a folder of records"),
    (
        "verdict-no-folder-deprecated-option",
        lambda p: ["verdict", "--records", p / "nope"],
        2,
        "is not a folder of records",
    ),
    (
        "verdict-no-folder-given",
        lambda p: ["verdict"],
        2,
        "give the results folder of a run: rocm-gate verdict RESULTS_DIR",
    ),
    (
        "verdict-two-folders",
        lambda p: ["verdict", records_dir(p), "--records", p],
        2,
        "two results folders given",
    ),
    ("verdict-empty-folder", lambda p: ["verdict", p], 2, "no records-*.jsonl files"),
    (
        "verdict-records-symlink-loop",
        lambda p: ["verdict", looping_records(p)],
        2,
        "records-gw1.jsonl: a symbolic link that loops back on itself; a records file is the JSON lines one process "
        "of the run wrote there: put the run's own file in its place, or move this out of the folder",
    ),
    (
        "verdict-records-a-folder",
        lambda p: ["verdict", records_dir(p, folder_named="records-gw1.jsonl")],
        2,
        "records-gw1.jsonl: a folder, not a records file; a records file is the JSON lines",
    ),
    (
        "verdict-records-dangling-link",
        lambda p: ["verdict", records_dir(p, link_to="gone/records.jsonl")],
        2,
        "records-gw1.jsonl: a symbolic link to 'gone/records.jsonl', which does not exist",
    ),
    (
        "verdict-corrupt-manifest",
        lambda p: ["verdict", records_dir(p, b'{"schema": ')],
        2,
        "not a readable manifest",
    ),
    (
        "verdict-manifest-a-list",
        lambda p: ["verdict", records_dir(p, b"[]")],
        2,
        "not a pytest-rocm/manifest/1",
    ),
    (
        "verdict-manifest-bad-signatures",
        lambda p: [
            "verdict",
            records_dir(
                p,
                b'{"schema": "pytest-rocm/manifest/1", "verdict_config": {"infra_signatures": {"x": "("}}}',
            ),
        ],
        2,
        "bad regex",
    ),
    (
        "verdict-group-map-not-utf8",
        lambda p: ["verdict", records_dir(p), "--group-map", write(p, "g.toml", NOT_UTF8)],
        2,
        "not UTF-8 text",
    ),
    (
        "verdict-group-map-rule-7",
        lambda p: ["verdict", records_dir(p), "--group-map", write(p, "g.toml", "rule = 7\n")],
        2,
        "`rule` must be a list of tables",
    ),
    (
        "baseline-is-5",
        lambda p: [
            "baselines",
            "diff",
            write(p, "a.toml", "baseline = 5\n"),
            write(p, "b.toml", ""),
        ],
        2,
        "`baseline` must be a list of tables",
    ),
    (
        "baseline-negative-rtol",
        lambda p: [
            "baselines",
            "diff",
            write(p, "a.toml", GOOD_BASELINE + "rtol = -0.5\n"),
            write(p, "b.toml", ""),
        ],
        2,
        "`rtol` must be >= 0",
    ),
    (
        "baseline-nan",
        lambda p: [
            "baselines",
            "diff",
            write(p, "a.toml", GOOD_BASELINE + "rtol = nan\n"),
            write(p, "b.toml", ""),
        ],
        2,
        "must be a finite number",
    ),
    (
        "baseline-expected-inf",
        lambda p: [
            "baselines",
            "diff",
            write(p, "a.toml", GOOD_BASELINE.replace("expected = 1.0", "expected = inf")),
            write(p, "b.toml", ""),
        ],
        2,
        "must be a finite number",
    ),
    (
        "baseline-misspelt-table",
        lambda p: [
            "baselines",
            "diff",
            write(p, "a.toml", "[[baselines]]\ntest = 'x'\n"),
            write(p, "b.toml", ""),
        ],
        2,
        "unknown top-level key(s) 'baselines'",
    ),
    (
        "baseline-not-utf8",
        lambda p: ["baselines", "diff", write(p, "a.toml", NOT_UTF8), write(p, "b.toml", "")],
        2,
        "not UTF-8 text",
    ),
    (
        "baseline-wrong-schema",
        lambda p: [
            "baselines",
            "diff",
            write(p, "a.toml", 'schema = "pytest-rocm/baselines/9"\n'),
            write(p, "b.toml", ""),
        ],
        2,
        "this version reads 'pytest-rocm/baselines/1'",
    ),
    (
        "baseline-missing-file",
        lambda p: ["baselines", "diff", p / "none.toml", p / "none.toml"],
        2,
        "cannot read it",
    ),
    (
        "baseline-direction",
        lambda p: [
            "baselines",
            "diff",
            write(p, "a.toml", GOOD_BASELINE + 'direction = "up"\n'),
            write(p, "b.toml", ""),
        ],
        2,
        "direction must be one of",
    ),
    (
        "parity-min-nan",
        lambda p: [
            "parity",
            "--reference",
            "x",
            "--candidate",
            "y",
            "--min-parity",
            "nan",
            "--out",
            p,
        ],
        2,
        "expected a fraction from 0 to 1",
    ),
    (
        "parity-min-negative",
        lambda p: ["parity", "--reference", "x", "--candidate", "y", "--min-parity=-3", "--out", p],
        2,
        "expected a fraction from 0 to 1",
    ),
    (
        "parity-min-above-one",
        lambda p: [
            "parity",
            "--reference",
            "x",
            "--candidate",
            "y",
            "--min-parity",
            "1.5",
            "--out",
            p,
        ],
        2,
        "expected a fraction from 0 to 1",
    ),
    (
        "parity-misspelt-applicability",
        lambda p: [
            "parity",
            "--reference",
            write(p, "r.xml", JUNIT),
            "--candidate",
            write(p, "c.xml", JUNIT),
            "--applicability",
            write(p, "a.toml", '[[not_aplicable]]\nreason = "x"\npaths = ["a"]\n'),
            "--out",
            p,
        ],
        2,
        "unknown top-level key(s) 'not_aplicable'",
    ),
    (
        "parity-applicability-not-utf8",
        lambda p: [
            "parity",
            "--reference",
            write(p, "r.xml", JUNIT),
            "--candidate",
            write(p, "c.xml", JUNIT),
            "--applicability",
            write(p, "a.toml", NOT_UTF8),
            "--out",
            p,
        ],
        2,
        "not UTF-8 text",
    ),
    (
        "parity-groups-rule-7",
        lambda p: [
            "parity",
            "--reference",
            write(p, "r.xml", JUNIT),
            "--candidate",
            write(p, "c.xml", JUNIT),
            "--groups",
            write(p, "g.toml", "rule = 7\n"),
            "--out",
            p,
        ],
        2,
        "`rule` must be a list of tables",
    ),
    (
        "parity-previous-a-list",
        lambda p: [
            "parity",
            "--reference",
            write(p, "r.xml", JUNIT),
            "--candidate",
            write(p, "c.xml", JUNIT),
            "--previous",
            write(p, "prev.json", "[]"),
            "--out",
            p,
        ],
        2,
        "not a pytest-rocm/parity/1 report",
    ),
    (
        "parity-previous-garbage",
        lambda p: [
            "parity",
            "--reference",
            write(p, "r.xml", JUNIT),
            "--candidate",
            write(p, "c.xml", JUNIT),
            "--previous",
            write(p, "prev.json", b"\x00\xff"),
            "--out",
            p,
        ],
        2,
        "cannot read",
    ),
    (
        "parity-gate-report-without-status",
        lambda p: [
            "parity",
            "--reference",
            write(p, "r.xml", JUNIT),
            "--candidate",
            gate_report(p, {"t.py::test_a": {}}),
            "--out",
            p,
        ],
        2,
        "has no valid `status`",
    ),
    (
        "parity-sglang-not-utf8",
        lambda p: [
            "parity",
            "--sglang-registry",
            write(p, "sg/test/registered/test_x.py", b"# \xff\n").rsplit("/test/", 1)[0],
            "--out",
            p,
        ],
        2,
        "not UTF-8 text",
    ),
    (
        "parity-sglang-row-a-list",
        lambda p: ["parity", "--sglang-registry", write(p, "reg.jsonl", "[1]\n"), "--out", p],
        2,
        "not a registration line",
    ),
    (
        "parity-reference-missing",
        lambda p: ["parity", "--reference", p / "none", "--candidate", p, "--out", p],
        2,
        "no such file or folder",
    ),
    (
        "parity-one-side-only",
        lambda p: ["parity", "--reference", write(p, "r.xml", JUNIT), "--out", p],
        2,
        "give --reference and --candidate",
    ),
    (
        "parity-junit-not-xml",
        lambda p: [
            "parity",
            "--reference",
            write(p, "r.xml", "not xml"),
            "--candidate",
            write(p, "c.xml", JUNIT),
            "--out",
            p,
        ],
        2,
        "not well-formed XML",
    ),
    ("unknown-command", lambda p: ["dashbord"], 2, "invalid choice"),
    # issue 49: a RecursionError traceback, and NaN written into a report the strict loader refuses
    (
        "verdict-records-nested-100000-deep",
        lambda p: ["verdict", records_with(p, "[" * 100_000 + "]" * 100_000)],
        3,
        "records-gw0.jsonl:2: not a record (nested too deep); skipped",
    ),
    (
        "verdict-records-nan-durations",
        lambda p: ["verdict", records_with(p, PLAIN_NAN)],
        3,
        "`durations` must be 3 finite numbers (setup, call, teardown), got [nan, 0.1, 0.1]",
    ),
    (
        "verdict-manifest-nan",
        lambda p: ["verdict", records_dir(p, manifest=b'{"schema": "x", "started": NaN}')],
        2,
        "not a readable manifest (NaN is not a JSON number)",
    ),
    (
        "select-history-nested-100000-deep",
        lambda p: [
            "select",
            "--map",
            "vllm",
            "--changed-files",
            write(p, "changed.txt", "vllm/x.py\n"),
            "--history",
            write(p, "history.jsonl", "[" * 100_000 + "]" * 100_000 + "\n"),
        ],
        2,
        "history.jsonl:1: not a commit line (nested too deep); selecting everything",
    ),
]


@pytest.mark.parametrize(
    "build,status,says", [c[1:] for c in CLI_CASES], ids=[c[0] for c in CLI_CASES]
)
def test_cli_refuses_bad_input_clearly(tmp_path, build, status, says):
    code, output = run_cli(build(tmp_path))
    assert "Traceback" not in output
    assert code == status, output
    assert says in output


# (case id, files to write, pytest arguments, text the usage error must hold)
PYTEST_CASES = [
    ("negative-reruns", {}, ["--rocm-reruns=-1"], "is negative"),
    (
        "reruns-not-a-number",
        {"pytest.ini": "[pytest]\nrocm_reruns = lots\n"},
        [],
        "rocm_reruns: 'lots' is not a whole",
    ),
    ("probe-unbalanced-quote", {}, ["--rocm-health-probe=python -c 'x"], "cannot split"),
    ("probe-missing", {}, ["--rocm-health-probe=/no/such/probe"], "is not an executable file"),
    (
        "timeout-not-a-number",
        {"pytest.ini": "[pytest]\nrocm_timeouts =\n    api=soon\n"},
        [],
        "rocm_timeouts: 'api=soon'",
    ),
    (
        "timeout-unknown-group",
        {"pytest.ini": "[pytest]\nrocm_timeouts =\n    apis=10\n"},
        [],
        "unknown group 'apis'",
    ),
    (
        "signature-bad-regex",
        {"pytest.ini": "[pytest]\nrocm_infra_signatures =\n    x=bad(\n"},
        [],
        "bad regex",
    ),
    ("group-map-not-utf8", {"g.toml": NOT_UTF8}, ["--rocm-group-map=g.toml"], "not UTF-8 text"),
    (
        "group-map-misspelt-table",
        {"g.toml": '[[rules]]\ngroup = "api"\npaths = ["a"]\n'},
        ["--rocm-group-map=g.toml"],
        "unknown top-level key(s) 'rules'",
    ),
    ("group-map-missing", {}, ["--rocm-group-map=none.toml"], "cannot read it"),
    (
        "group-map-blocking-string",
        {"g.toml": '[[rule]]\ngroup = "api"\npaths = ["a"]\nblocking = "yes"\n'},
        ["--rocm-group-map=g.toml"],
        "`blocking` must be true or false",
    ),
    ("profile-a-list", {"p.json": "[]"}, ["--rocm-platform=p.json"], "expected a JSON object"),
    (
        "exit-by-conclusion-maybe",
        {"pytest.ini": "[pytest]\nrocm_exit_by_conclusion = maybe\n"},
        [],
        "is not true or false",
    ),
    (
        "ini-setting-misspelt",
        {"pytest.ini": "[pytest]\nrocm_report_dri = out\n"},
        [],
        "rocm_report_dri is not a pytest-rocm setting (did you mean rocm_report_dir?)",
    ),
    (
        "exit-by-conclusion-without-a-report",
        {},
        ["--rocm-exit-by-conclusion"],
        "without --rocm-report-dir there is none; give the folder",
    ),
    (
        "baselines-is-5",
        {"b.toml": "baseline = 5\n"},
        ["--rocm-baselines=b.toml"],
        "`baseline` must be a list of tables",
    ),
    (
        "baselines-nan",
        {"b.toml": GOOD_BASELINE + "rtol = nan\n"},
        ["--rocm-baselines=b.toml"],
        "finite number",
    ),
]


@pytest.mark.parametrize(
    "files,args,says", [c[1:] for c in PYTEST_CASES], ids=[c[0] for c in PYTEST_CASES]
)
def test_pytest_refuses_bad_settings_clearly(pytester, files, args, says):
    for name, content in files.items():
        (pytester.path / name).write_bytes(
            content if isinstance(content, bytes) else content.encode()
        )
    pytester.makepyfile(test_a="def test_a(): pass")
    result = pytester.runpytest_subprocess("--rocm-platform=mi300x-1", *args)
    output = result.stdout.str() + result.stderr.str()
    assert "Traceback" not in output and "INTERNALERROR" not in output
    assert result.ret == pytest.ExitCode.USAGE_ERROR, output
    assert says in output


@pytest.mark.parametrize(
    "key, meant",
    [("rocm_rerun", "rocm_reruns"), ("rocm-reruns", "rocm_reruns"), ("ROCM_RERUNS", "rocm_reruns")],
)
def test_a_misspelt_ini_setting_alone_is_refused_not_ignored(pytester, key, meant):
    """The run's only setting misspelt: before, the plugin stayed inert (no report, exit 0) and
    pytest only warned of an unknown option; one that differs from ours only by case or `-` was
    not even seen (issue 49)."""
    pytester.makeini(f"[pytest]\n{key} = 2\n")
    pytester.makepyfile(test_a="def test_a(): pass")
    result = pytester.runpytest_subprocess()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert f"{key} is not a pytest-rocm setting (did you mean {meant}?)" in (result.stderr.str())


def test_a_server_config_with_a_bad_section_fails_the_test_clearly(pytester):
    pytester.makefile(".toml", servers='[vllm.cpu]\nargs = "--dtype float32"\n')
    pytester.makepyfile(
        test_s="""
        from pytest_rocm.serving.process import ServerConfigError, load_server_config

        def test_s():
            try:
                load_server_config(__import__("pathlib").Path("servers.toml"), "vllm", ["cpu"])
            except ServerConfigError as exc:
                assert "[vllm.cpu]: args must be a list of strings" in str(exc)
            else:
                raise AssertionError("accepted")
    """
    )
    pytester.runpytest_subprocess().assert_outcomes(passed=1)


@pytest.mark.parametrize(
    "section, says",
    [
        ("vllm.mi300x", "[vllm.mi300x] names no platform (did you mean [vllm.MI300X]?)"),
        ("vllm.MI300", "[vllm.MI300] names no platform (did you mean [vllm.MI300X]?)"),
        ("sglang.gfx924", "[sglang.gfx924] names no platform (did you mean [sglang.gfx942]?)"),
    ],
)
def test_a_server_config_section_that_names_no_platform_is_refused(tmp_path, section, says):
    """A misspelt platform section matched no runner and was ignored: its arguments silently never
    applied. Every section is checked, also one of another kind than the server starting."""
    from pytest_rocm.serving.process import ServerConfigError, load_server_config

    config = tmp_path / "servers.toml"
    config.write_text(f'[vllm.default]\nargs = []\n\n[{section}]\nargs = ["--enforce-eager"]\n')
    with pytest.raises(ServerConfigError) as raised:
        load_server_config(config, "vllm", ["MI300X", "gfx942", "amd"])
    assert str(config) in str(raised.value) and says in str(raised.value)


@pytest.mark.parametrize(
    "config,says",
    [
        ("model_name: x/y\ngroup: [distributed_moe\n", "not valid YAML, fix the file"),
        ("- a list\n- not a config\n", "must be a mapping of vLLM's lm-eval config keys"),
        ("model_name: x/y\ngroup: distributed-moe\ntasks: []\n", "unknown group 'distributed-moe'"),
    ],
)
def test_a_broken_real_model_config_is_a_collection_error_naming_it(pytester, config, says):
    """The accuracy suite's real-model configs (suites/accuracy/configs/*.yaml) as a hurried edit
    leaves them."""
    pytest.importorskip("yaml")
    suites = Path(__file__).resolve().parent.parent / "suites"
    shutil.copytree(
        suites / "accuracy",
        pytester.path / "accuracy",
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    shutil.copy(suites / "gate_support.py", pytester.path / "gate_support.py")
    (pytester.path / "accuracy/configs/Broken.yaml").write_text(config)
    result = pytester.runpytest_subprocess(
        "accuracy/test_lm_eval.py", "--collect-only", "-p", "no:cacheprovider"
    )
    output = result.stdout.str() + result.stderr.str()
    assert result.ret == pytest.ExitCode.INTERRUPTED
    assert says in output and ("Broken.yaml" in output or "test_real_model[Broken]" in output), (
        output
    )
    assert "Traceback" not in output, output


# raised only to leave their module, never for a user: github/api.py's retry signals, the
# rerun relay's "nothing to do for this payload" (its command says so and exits 0)
CONTROL_FLOW = {"Ambiguous", "_Refused", "Ignored"}


def test_every_error_of_the_package_derives_from_the_one_base():
    """pytest_rocm/errors.py: a user's error has one base, so `cli.main` catches what a command
    did not (and its exit status is the class's)."""
    import ast
    import importlib

    import pytest_rocm
    from pytest_rocm import errors

    package = Path(pytest_rocm.__file__).parent
    outside = []
    for path in sorted(package.rglob("*.py")):
        module_name = ".".join(path.relative_to(package.parent).with_suffix("").parts)
        module_name = module_name.removesuffix(".__init__")
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.ClassDef) or node.name in CONTROL_FLOW:
                continue
            cls = getattr(importlib.import_module(module_name), node.name, None)
            if isinstance(cls, type) and issubclass(cls, Exception):
                if not issubclass(cls, errors.Error):
                    outside.append(f"{module_name}.{node.name}")
    assert outside == []


def test_an_error_no_command_caught_is_one_line_and_its_exit_status(monkeypatch, capsys):
    from pytest_rocm.errors import NotDone
    from rocm_gate import cli
    from rocm_gate.history.store import HistoryError

    for error, status in (
        (HistoryError("history.db: schema 9 is newer than this rocm-gate"), 2),
        (NotDone("GitHub did not answer"), 4),
    ):
        module = cli.command_module("verdict")

        def run(args, error=error):
            raise error

        monkeypatch.setattr(module, "run", run)
        assert cli.main(["verdict", "somewhere"]) == status
        err = capsys.readouterr().err
        assert err == f"rocm-gate verdict: {error}\n"


@pytest.mark.parametrize(
    "library, args, extra",
    [
        ("github3", ["publish", "--repo", "a/b", "--sha", "0" * 40, "{results}"], "github"),
        ("jinja2", ["dashboard", "--db", "{tmp}/h.db", "--out", "{tmp}/site"], "dashboard"),
    ],
)
def test_a_command_without_its_extra_names_the_extra(tmp_path, library, args, extra):
    """rocm-gate's GitHub, PostgreSQL and dashboard libraries are extras: a command that needs one
    where it is not installed says which extra to install, in one line, never a traceback."""
    results = tmp_path / "results"
    shutil.copytree(Path(__file__).parent / "data" / "main-job", results)
    args = [a.format(results=results, tmp=tmp_path) for a in args]
    # the library cannot be imported, as where the extra was never installed
    code = (
        f"import sys; sys.modules[{library!r}] = None\n"
        "from rocm_gate.cli import main\n"
        "sys.exit(main(sys.argv[1:]))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "GITHUB_TOKEN": "ghs_x"},
    )
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert "not installed" in done.stderr and f"rocm-gate[{extra}]" in done.stderr
