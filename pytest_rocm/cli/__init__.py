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
import threading

from pytest_rocm import errors

__all__ = ["main", "build_parser", "COMMANDS"]

DESCRIPTION = (
    "pytest-rocm's command line: check a runner (doctor), prove it before a job (preflight), decide "
    "whether to drain it (drain), rebuild a run's verdicts (verdict), review "
    "baseline changes (baselines diff), report CUDA parity (parity), check how a test tree sorts into "
    "groups (groups), split a suite across runners (shard), choose what a change needs to run (select), publish a run as a GitHub check (publish), decide whether a PR's code may reach the GPU runners (trust), turn a check's rerun button into a dispatch (rerun), finish checks a failed publish left (sweep), keep every run's results (history), keep the failure tracker issue of main (tracker), build the coverage dashboard from them (dashboard), run a PR's blocking failures again on its base (blame) and register the markers in an upstream tree (register-markers). Run `rocm-gate COMMAND --help`."
)
# name -> the module of pytest_rocm.cli that implements it, imported when that command runs (a
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
    return importlib.import_module(f"pytest_rocm.cli.{COMMANDS[name]}")


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The parser of every command, or of `only` (the command a command line names first)."""
    parser = argparse.ArgumentParser(prog="rocm-gate", description=DESCRIPTION)
    commands = parser.add_subparsers(dest="command", required=True)
    for name in [only] if only in COMMANDS else COMMANDS:
        command_module(name).add_parser(commands, name)
    return parser


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
