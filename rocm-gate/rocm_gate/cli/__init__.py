"""The `rocm-gate` command line: one module per command, named in `COMMANDS` (loaded when run).

Each command module has `add_parser(commands)` (its arguments) and `run(args) -> int` (its exit
status). Commands import what they need when they run: `parity` at CI scale should not pay for
detection.

Exit statuses: one scheme for every command, in `exits` (docs/reference.md, "Exit statuses").
"""

from __future__ import annotations

import argparse
import importlib
import os
import signal
import sys
import textwrap
import threading

from pytest_rocm import errors

__all__ = ["main", "build_parser", "COMMANDS"]

DESCRIPTION = (
    "rocm-gate, pytest-rocm's CI service; `rocm-gate COMMAND --help` for one command's arguments. The "
    "commands, by who uses them:"
)
# who uses each command, in the order `rocm-gate --help` lists them: a maintainer adopting
# pytest-rocm in an upstream project first (docs/adoption.md), then who runs the gate's runners,
# check and history (docs/github.md, docs/reference.md). Every command is in one (tests/
# test_first_hour.py).
AUDIENCES = (
    (
        "adopting pytest-rocm in a project (docs/adoption.md)",
        ("groups", "verdict", "parity", "select", "register-markers", "doctor"),
    ),
    (
        "running the gate: its runners, the merge-blocking check, the history",
        (
            "preflight",
            "drain",
            "shard",
            "baselines",
            "trust",
            "publish",
            "rerun",
            "sweep",
            "blame",
            "history",
            "tracker",
            "dashboard",
        ),
    ),
)
# the older name of a command, listed after its audiences
ALIASES = {"report": "verdict"}
# name -> the module of rocm_gate.cli that implements it, imported when that command runs (a
# `rocm-gate parity` at CI scale does not pay for importing the other seventeen); `report` is the older
# name of `verdict`.
COMMANDS = {
    "doctor": "doctor",
    "verdict": "verdict",
    "report": "verdict",
    "baselines": "baselines",
    "parity": "parity",
    "groups": "groups",
    "shard": "shard",
    "select": "select",
    "preflight": "preflight",
    "drain": "drain",
    "publish": "publish",
    "sweep": "sweep",
    "trust": "trust",
    "rerun": "rerun",
    "history": "history",
    "tracker": "tracker",
    "dashboard": "dashboard",
    "register-markers": "register_markers",
    "blame": "blame",
}


def command_module(name: str):
    return importlib.import_module(f"rocm_gate.cli.{COMMANDS[name]}")


class _Commands:
    """argparse's subparsers, keeping each command's one-line help for the listing by audience
    (argparse's own lists every command in one paragraph, operators' mixed with a maintainer's)."""

    def __init__(self, action):
        self.action = action
        self.helps: dict[str, str] = {}

    def add_parser(self, name: str, **kwargs):
        self.helps[name] = kwargs.pop("help", "") or ""
        return self.action.add_parser(name, **kwargs)


def _listing(helps: dict[str, str]) -> str:
    """The commands by audience, each with its one-line help, as `rocm-gate --help` shows them."""
    lines = [textwrap.fill(DESCRIPTION, width=100)]
    width = max(len(name) for name in COMMANDS) + 2
    for title, names in AUDIENCES:
        lines += ["", f"{title}:"]
        for name in names:
            lines += textwrap.wrap(
                helps.get(name, ""),
                width=100,
                initial_indent=f"  {name:<{width}}",
                subsequent_indent=" " * (width + 2),
            ) or [f"  {name}"]
    lines += [""] + [f"`{old}` is the older name of `{new}`." for old, new in ALIASES.items()]
    return "\n".join(lines)


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The parser of every command, or of `only` (the command a command line names first)."""
    parser = argparse.ArgumentParser(
        prog="rocm-gate",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = _Commands(
        parser.add_subparsers(
            dest="command", required=True, metavar="COMMAND", help="one of the commands above"
        )
    )
    for name in [only] if only in COMMANDS else COMMANDS:
        command_module(name).add_parser(commands, name)
    parser.description = _listing(commands.helps)
    return parser


# The libraries of rocm-gate's extras (rocm-gate/pyproject.toml), by the extra that brings each: a
# command that needs one names the extra to install, never a traceback.
EXTRA_OF = {
    "github3": "github",
    "jsonschema": "github",
    "psycopg": "postgres",
    "jinja2": "dashboard",
    "markupsafe": "dashboard",
}


def missing_extra(exc: ModuleNotFoundError) -> str | None:
    """The extra whose library `exc` did not find, or None for any other missing module."""
    return EXTRA_OF.get((exc.name or "").split(".")[0])


class Stopped(KeyboardInterrupt):
    """SIGTERM (a job's cancel, a pod's deletion) raised like Ctrl-C, so what a command started is
    cleaned up."""

    signal_number = signal.SIGTERM


def _stop(signal_number, frame):
    raise Stopped()


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = build_parser(argv[0] if argv else None).parse_args(argv)
    # Only the main thread may set a handler; a caller's own (main() run in-process) is put back
    # after.
    previous = (
        signal.signal(signal.SIGTERM, _stop)
        if threading.current_thread() is threading.main_thread()
        else None
    )
    try:
        return command_module(args.command).run(args)
    # what a package raises for its user and the command did not catch to say more: one line and
    # the error's own exit status, never a traceback (pytest_rocm/errors.py)
    except errors.Error as exc:
        print(f"rocm-gate {args.command}: {exc}", file=sys.stderr)
        return exc.exit_code
    except ModuleNotFoundError as exc:
        extra = missing_extra(exc)
        if extra is None:
            raise
        print(
            f"rocm-gate {args.command}: {exc.name} is not installed; this command needs "
            f"rocm-gate's `{extra}` extra: pip install './rocm-gate[{extra}]' (from a checkout "
            "of pytest-rocm)",
            file=sys.stderr,
        )
        return errors.Error.exit_code
    except BrokenPipeError:  # `rocm-gate ... | head`: the reader has what it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    # Ctrl-C or a job's cancel: one line; artifacts are written atomically
    except KeyboardInterrupt as stopped:
        print(
            f"rocm-gate {args.command}: interrupted before it finished; it concluded nothing",
            file=sys.stderr,
        )
        # as a shell reports the signal
        return 128 + getattr(stopped, "signal_number", signal.SIGINT)
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


if __name__ == "__main__":
    sys.exit(main())
