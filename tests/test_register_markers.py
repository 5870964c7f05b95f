"""`rocm-gate register-markers`: pytest-rocm's markers added to a tree's pyproject.toml in place, on
the shapes real trees have (vLLM's: other lists closing with `]` before the markers), checked by the
TOML parser, and accepted by pytest without the plugin under --strict-markers."""

import difflib
import subprocess
import sys
import tomllib

import pytest

VLLM_SHAPED = """\
[build-system]
# Should be mirrored in requirements/build.txt
requires = [
    "cmake>=3.26.1",
    "ninja",
    "torch == 2.9.0",
]
build-backend = "setuptools.build_meta"

[tool.ruff]
line-length = 88

[tool.pytest.ini_options]
markers = [
    "slow_test",
    "core_model: enable this model test in each PR instead of only nightly",
    "optional: optional tests that are automatically skipped, include --optional to run them" # the last
]

[tool.typos.default]
extend-ignore-identifiers-re = [".*[UE]4M4.*"]
"""


def register(*args, cwd):
    return subprocess.run(
        [sys.executable, "-m", "rocm_gate.cli", "register-markers", *map(str, args)],
        cwd=cwd,
        capture_output=True,
        text=True,
    )


@pytest.mark.parametrize(
    "before",
    [
        VLLM_SHAPED,
        VLLM_SHAPED.replace("\n", "\r\n"),
        "[project]\nname = 'x'\n",  # no pytest table
        '[tool.pytest.ini_options]\naddopts = "-ra"\n\n[tool.other]\nlist = [\n  [1, 2],\n]\n',  # a table, no markers
    ],
)
def test_markers_are_added_keeping_every_other_line_and_a_second_run_changes_nothing(
    pytester, before
):
    (pytester.path / "pyproject.toml").write_bytes(before.encode())
    done = register(cwd=pytester.path)
    assert done.returncode == 0, done.stderr
    assert "registered rocm_gate, hardware, rocm_known_gap" in done.stdout
    after = (pytester.path / "pyproject.toml").read_bytes().decode()
    # CRLF stays CRLF: every line the edit writes ends as the file's do
    assert after.count("\r\n") == (after.count("\n") if "\r\n" in before else 0)
    old, new = tomllib.loads(before), tomllib.loads(after)
    markers = new["tool"]["pytest"]["ini_options"].pop("markers")
    assert markers[-3:][0].startswith("rocm_gate(group, blocking=True):")
    assert markers[:-3] == old.get("tool", {}).get("pytest", {}).get("ini_options", {}).get(
        "markers", []
    )
    old.get("tool", {}).get("pytest", {}).get("ini_options", {}).pop("markers", None)
    new_options = new["tool"]["pytest"]["ini_options"]
    if not new_options and "pytest" not in old.get("tool", {}):
        del new["tool"]["pytest"]
        if not new["tool"]:
            del new["tool"]
    assert new == old  # nothing else changed
    # every line kept as it was, but for the comma the list's last item needs to take another after
    # it
    for op, i1, i2, j1, _j2 in difflib.SequenceMatcher(
        None, before.splitlines(), after.splitlines()
    ).get_opcodes():
        if op == "replace":
            old_line, new_line = before.splitlines()[i1], after.splitlines()[j1]
            assert i2 - i1 == 1 and new_line in (
                old_line + ",",
                old_line.replace('" #', '", #', 1),
            ), (old_line, new_line)
        else:
            assert op in ("equal", "insert"), (op, before, after)
    again = register(cwd=pytester.path)
    assert again.returncode == 0 and "registered already" in again.stdout
    assert (pytester.path / "pyproject.toml").read_bytes().decode() == after
    # pytest without the plugin accepts the markers under --strict-markers
    pytester.makepyfile(
        test_x="""
        import pytest

        @pytest.mark.rocm_gate(group="engine")
        @pytest.mark.hardware(sku="MI300X")
        @pytest.mark.rocm_known_gap(reason="r", issue="https://github.com/o/r/issues/1")
        def test_x():
            pass
    """
    )
    result = pytester.runpytest_subprocess(
        "-p", "no:rocm", "--strict-markers", "-W", "error", "-p", "no:cacheprovider"
    )
    result.assert_outcomes(passed=1)


@pytest.mark.parametrize(
    "name, content, says",
    [
        ("pyproject.toml", "x = [", "not valid TOML"),
        ("pyproject.toml", '[tool.pytest.ini_options]\nmarkers = "a"\n', "markers is not a list"),
        ("pytest.ini", "[pytest]\nmarkers =\n    a\n", "only a pyproject.toml is edited"),
        ("pyproject.toml", b"\xff\xfe", "not UTF-8 text"),
        # issue 49: tracebacks on a key that is not a table, and on a 100,000-deep array
        ("pyproject.toml", '[tool]\npytest = "x"\n', "`tool.pytest` is str 'x', not a table"),
        (
            "pyproject.toml",
            "[tool.pytest]\nini_options = 5\n",
            "`tool.pytest.ini_options` is int 5",
        ),
        ("pyproject.toml", "x = " + "[" * 100_000 + "]" * 100_000 + "\n", "nested too deep"),
        # deep enough for tomlkit's limit (100 levels), not for the TOML parser's
        ("pyproject.toml", "x = " + "[" * 200 + "]" * 200 + "\n", "nested more than 100 levels"),
        # tomlkit would write `[pytest.ini_options]` (outside [tool]) under a dotted `pytest.` key:
        # the check with the TOML parser catches it, and nothing is written
        (
            "pyproject.toml",
            "[tool]\npytest.other = 1\n\n[x]\ny = 1\n",
            "would change more than the markers list",
        ),
    ],
    ids=lambda value: value[:30] if isinstance(value, str) else None,
)
def test_a_file_it_cannot_edit_safely_is_left_alone_naming_what_to_add(
    tmp_path, name, content, says
):
    path = tmp_path / name
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    done = register(path, cwd=tmp_path)
    assert done.returncode == 2 and says in done.stderr and "Traceback" not in done.stderr
    assert path.read_bytes() == (content if isinstance(content, bytes) else content.encode())


def test_check_changes_nothing_and_says_whether_the_markers_are_there(tmp_path):
    path = tmp_path / "pyproject.toml"
    path.write_text(VLLM_SHAPED)
    missing = register(path, "--check", cwd=tmp_path)
    assert (
        missing.returncode == 3 and "missing rocm_gate, hardware, rocm_known_gap" in missing.stdout
    )
    assert path.read_text() == VLLM_SHAPED
    assert register(path, cwd=tmp_path).returncode == 0
    assert register(path, "--check", cwd=tmp_path).returncode == 0


def test_a_linked_pyproject_is_edited_through_the_link_keeping_its_mode(tmp_path):
    """Issue 49: a symlinked pyproject was replaced by a regular file (the real one unchanged), and
    the new file's permissions were the temporary file's."""
    real = tmp_path / "shared" / "pyproject.toml"
    real.parent.mkdir()
    real.write_text(VLLM_SHAPED)
    real.chmod(0o664)
    (tmp_path / "tree").mkdir()
    link = tmp_path / "tree" / "pyproject.toml"
    link.symlink_to(real)
    done = register(link, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert link.is_symlink() and "rocm_gate(group" in real.read_text()
    assert real.stat().st_mode & 0o777 == 0o664


def test_a_read_only_pyproject_is_refused_naming_it_and_left_alone(tmp_path):
    path = tmp_path / "pyproject.toml"
    path.write_text(VLLM_SHAPED)
    path.chmod(0o444)
    done = register(path, cwd=tmp_path)
    assert done.returncode == 2 and "read-only; make it writable" in done.stderr
    assert "Traceback" not in done.stderr and path.read_text() == VLLM_SHAPED


@pytest.mark.parametrize(
    "line",
    [
        r'"slow: say \"hi\" # not a comment"',  # an escaped quote, then a `#` inside the string
        r'"slow: say \"hi # there\""',  # the `#` between two escaped quotes
        r'"slow: a path C:\\temp\\" # a comment after an escaped backslash',
        "'slow: a literal \\ with \"quotes\" # and a hash'",
    ],
)
def test_marker_text_with_escapes_and_hashes_stays_valid_toml(tmp_path, line):
    """Issue 63: a marker line holding `\\"` and `#` was read as ending at the escaped quote, the
    rest taken for a comment, and the edit was a TOML parse error's traceback."""
    before = f"[tool.pytest.ini_options]\nmarkers = [\n    {line}\n]\n"
    (tmp_path / "pyproject.toml").write_text(before)
    done = register(cwd=tmp_path)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    after = tomllib.loads((tmp_path / "pyproject.toml").read_text())
    markers = after["tool"]["pytest"]["ini_options"]["markers"]
    assert markers[0] == tomllib.loads(f"x = {line}")["x"]  # the round trip keeps the line's text
    assert [m.split("(")[0] for m in markers[1:]] == ["rocm_gate", "hardware", "rocm_known_gap"]
    assert register(cwd=tmp_path).stdout.endswith("registered already\n")


@pytest.mark.parametrize(
    "dumped, says",
    [
        (lambda document: "x = [", "would not be valid TOML"),  # an edit that does not parse
        (lambda document: "", "would change more than the markers list"),  # one that drops keys
    ],
)
def test_an_edit_that_would_not_parse_or_changes_more_is_refused_not_a_traceback(
    tmp_path, monkeypatch, dumped, says
):
    from rocm_gate.adoption import markers

    monkeypatch.setattr(markers.tomlkit, "dumps", dumped)
    (tmp_path / "pyproject.toml").write_text(
        '[tool.pytest.ini_options]\nmarkers = [\n    "a",\n    "b",\n]\n'
    )
    with pytest.raises(markers.MarkerEditError, match=says):
        markers.add_markers(tmp_path / "pyproject.toml")


def test_tomlkit_running_out_of_stack_names_the_file(tmp_path, monkeypatch):
    """tomlkit before 0.14 had no nesting limit: deep input raised RecursionError from its parser."""
    from rocm_gate.adoption import markers

    def deep(text):
        raise RecursionError("maximum recursion depth exceeded")

    monkeypatch.setattr(markers.tomlkit, "parse", deep)
    path = tmp_path / "pyproject.toml"
    path.write_text("[project]\nname = 'x'\n")
    with pytest.raises(
        markers.MarkerEditError, match="nested too deep for the TOML editor"
    ) as raised:
        markers.add_markers(path)
    assert str(path) in str(raised.value)


# A tree's pyproject as maintainers write them (CRLF, from a Windows checkout): comments inside the
# markers list, inline tables elsewhere, a multi-line string that reads like a markers list and a
# table header, and a list after the markers that also closes with `]`.
REALISTIC = """\
# A tree's pyproject, as maintainers write them
[build-system]
requires = ["setuptools>=77", "wheel"]  # keep in step with requirements/build.txt
build-backend = "setuptools.build_meta"

[project]
name = "engine"
description = \"\"\"
Serving engine. The test configuration below reads:
markers = [ "not", "this", "list" ]
[tool.pytest.ini_options]
\"\"\"
authors = [{ name = "Maintainers", email = "dev@example.org" }]
urls = { Homepage = "https://example.org", "Bug Tracker" = 'https://example.org/issues' }

[tool.ruff]
lint.select = ["E", "F"]   # ruff's own table, with a list ending in `]`

[tool.pytest.ini_options]
# the test matrix
markers = [
    # fast lanes
    "slow_test: deselect with '-m \\"not slow_test\\"'",
    'core_model: enable this model test in each PR',  # a literal string
    "distributed(num_gpus=2): tests that need several GPUs",
    # more lanes are added below this line
]
addopts = "-ra --strict-markers"
filterwarnings = [
    "ignore::DeprecationWarning",
]

[tool.typos.default]
extend-ignore-identifiers-re = [".*[UE]4M4.*"]
""".replace("\n", "\r\n")


def test_a_realistic_pyproject_keeps_every_byte_outside_the_markers_it_adds(tmp_path):
    """Issue 64: the edit is tomlkit's; every byte of the file but the marker lines it adds before
    the list's closing `]` is kept: comments, quoting, inline tables, the multi-line string, CRLF."""
    from rocm_gate.adoption.markers import LINES

    path = tmp_path / "pyproject.toml"
    path.write_bytes(REALISTIC.encode())
    done = register(path, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    after = path.read_bytes().decode()
    close = REALISTIC.index("]\r\naddopts")  # the markers list's closing bracket
    assert after.startswith(REALISTIC[:close]) and after.endswith(REALISTIC[close:])
    added = after[close : len(after) - len(REALISTIC) + close]
    assert added.count("\r\n") == added.count("\n") == 3  # one line a marker, each ending CRLF
    assert all(line.startswith('    "') for line in added.splitlines())  # as the list indents
    assert tuple(tomllib.loads(f"x = [{added}]")["x"]) == LINES
    old, new = tomllib.loads(REALISTIC), tomllib.loads(after)
    old["tool"]["pytest"]["ini_options"]["markers"] += list(LINES)
    assert new == old
    assert register(path, cwd=tmp_path).stdout.endswith("registered already\n")
    assert path.read_bytes().decode() == after


@pytest.mark.parametrize(
    "before, after",
    [
        # one line: written one marker a line, its items kept as written, its comment after it
        (
            "[tool.pytest.ini_options]\r\nmarkers = [\"a\", 'b']  # ours\r\nx = 1\r\n",
            "[tool.pytest.ini_options]\r\nmarkers = [\r\n    \"a\",\r\n    'b',\r\n{new}]  # ours\r\n"
            "x = 1\r\n",
        ),
        (
            "[tool.pytest.ini_options]\nmarkers = []\n",
            "[tool.pytest.ini_options]\nmarkers = [\n{new}]\n",
        ),
        # no pytest table, [tool] written by other tables: the new one goes with them, a blank line
        # on each side
        (
            "[tool.ruff]\nx = 1\n\n[other]\ny = 2\n",
            "[tool.ruff]\nx = 1\n\n[tool.pytest.ini_options]\nmarkers = [\n{new}]\n\n[other]\ny = 2\n",
        ),
        # no [tool] and no last newline: appended after a blank line, as today
        (
            "[project]\r\nname = 'x'",
            "[project]\r\nname = 'x'\r\n\r\n[tool.pytest.ini_options]\r\nmarkers = [\r\n{new}]\r\n",
        ),
        # [tool.pytest.ini_options] written as dotted keys: the markers are one too
        (
            '[tool.pytest]\nini_options.addopts = "-ra"\n',
            '[tool.pytest]\nini_options.addopts = "-ra"\nini_options.markers = [\n{new}]\n',
        ),
        # CRLF lines and a multi-line string of "\n" ones: each line kept as it ends
        (
            '[project]\r\nx = """\na\n"""\r\n\r\n[tool.pytest.ini_options]\r\nmarkers = [\r\n    "a",\r\n]\r\n',
            '[project]\r\nx = """\na\n"""\r\n\r\n[tool.pytest.ini_options]\r\nmarkers = [\r\n    "a",\r\n'
            "{new}]\r\n",
        ),
    ],
    ids=["one-line", "empty", "new-table", "no-tool-no-newline", "dotted", "mixed-endings"],
)
def test_the_shapes_the_text_edit_refused_are_edited(tmp_path, before, after):
    """The hand-written edit refused one-line lists and a [tool.pytest.ini_options] not written as a
    header; tomlkit edits them."""
    from rocm_gate.adoption.markers import LINES

    newline = "\r\n" if before.split("\n", 1)[0].endswith("\r") else "\n"
    new = "".join(f'    "{line}",{newline}' for line in LINES)
    path = tmp_path / "pyproject.toml"
    path.write_bytes(before.encode())
    done = register(path, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert path.read_bytes().decode() == after.format(new=new)
    assert register(path, cwd=tmp_path).stdout.endswith("registered already\n")


def test_an_inline_table_stays_on_its_line(tmp_path):
    from rocm_gate.adoption.markers import LINES

    path = tmp_path / "pyproject.toml"
    path.write_text('[tool]\npytest.ini_options = {addopts = "-ra", markers = ["a"]}  # inline\n')
    assert register(path, cwd=tmp_path).returncode == 0
    listed = ", ".join(f'"{line}"' for line in LINES)
    assert path.read_text() == (
        f'[tool]\npytest.ini_options = {{addopts = "-ra", markers = ["a", {listed}]}}  # inline\n'
    )
