"""The errors a user can act on, with one base: `Error`, whose `exit_code` is what `rocm-gate`
exits with when one reaches `cli.main` (docs/reference.md, "Exit statuses").

`BadInput` (exit 2): what the command or the plugin was given cannot be read or is wrong; the message
names the file, key or test and the fix. `NotDone` (exit 4): the work could not finish for a reason
outside the input (GitHub unreachable, a server that did not start); running it again may help.
Each package's errors derive from one of the two (`ArtifactError`, `GroupMapError`, `PublishError`,
...). A command catches them where it adds something to say; `cli.main` catches the rest, once, so
none reaches the user as a traceback. Control flow that never leaves its module (`github.api`'s
`Ambiguous`, `github.rerun`'s `Ignored`) is not an `Error`.
"""

from __future__ import annotations

__all__ = ["BadInput", "Error", "NotDone"]


class Error(Exception):
    """An error a user can act on; the message says what to do."""

    exit_code = 2


class BadInput(Error, ValueError):
    """The input cannot be read or is wrong (exit 2)."""

    exit_code = 2


class NotDone(Error, RuntimeError):
    """The work could not finish for a reason outside the input (exit 4)."""

    exit_code = 4
