"""`rocm-gate register-markers [PYPROJECT]`: add pytest-rocm's markers to a tree's pytest
configuration, so lanes that run without the plugin accept `rocm_gate`, `hardware` and
`rocm_known_gap` (no warning; no error under
--strict-markers). Edits the `markers` list of `[tool.pytest.ini_options]` in place, keeping every other byte,
and checks the result with the TOML parser before writing; a second run changes nothing.

Exit statuses (docs/reference.md, "Exit statuses"): 0 written or already there, 2 the file cannot be
read or edited safely (the message says what to add by hand).
"""

from __future__ import annotations

import argparse
import os
import stat
import sys
from pathlib import Path

from rocm_gate.cli import exits


def add_parser(commands, name: str) -> None:
    command = commands.add_parser(
        name,
        help="add pytest-rocm's markers to a tree's pyproject.toml (for lanes without the plugin)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    command.add_argument(
        "pyproject",
        nargs="?",
        type=Path,
        default=Path("pyproject.toml"),
        metavar="PYPROJECT",
        help="the tree's pyproject.toml (default: ./pyproject.toml)",
    )
    command.add_argument(
        "--check", action="store_true", help="change nothing; exit 3 when markers are missing"
    )


def run(args) -> int:
    from pytest_rocm.schemas.artifacts import write_text_atomic
    from rocm_gate.adoption.markers import MarkerEditError, add_markers

    try:
        edit = add_markers(args.pyproject)
    except MarkerEditError as exc:
        print(f"rocm-gate register-markers: {exc}", file=sys.stderr)
        return exits.BAD_INPUT
    if not edit.added:
        print(f"{args.pyproject}: pytest-rocm's markers are registered already")
        return exits.OK
    if args.check:
        print(f"{args.pyproject}: missing " + ", ".join(line.split("(")[0] for line in edit.added))
        return exits.NO
    # the file a link names is the one edited (the link stays a link), with its own permissions
    target = args.pyproject.resolve()
    try:
        mode = stat.S_IMODE(target.stat().st_mode)
    except OSError as exc:
        print(f"rocm-gate register-markers: {target}: {exc.strerror or exc}", file=sys.stderr)
        return exits.BAD_INPUT
    # no write bit is read-only, for root too (whom os.access lets write anything)
    if not mode & 0o222 or not os.access(target, os.W_OK):
        print(
            f"rocm-gate register-markers: {target}: read-only; make it writable (or add these "
            "lines by hand): " + "; ".join(edit.added),
            file=sys.stderr,
        )
        return exits.BAD_INPUT
    try:
        write_text_atomic(target, edit.text)
        os.chmod(target, mode)
    except OSError as exc:
        print(
            f"rocm-gate register-markers: {target}: cannot write it ({exc.strerror or exc}); "
            "nothing changed: check the folder's permissions",
            file=sys.stderr,
        )
        return exits.BAD_INPUT
    print(
        f"{args.pyproject}: registered "
        + ", ".join(line.split("(")[0] for line in edit.added)
        + " in [tool.pytest.ini_options] markers"
    )
    return exits.OK
