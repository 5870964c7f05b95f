"""One validator per kind of value that an option, an ini key or an environment variable takes:
checked before any work is done, and put in one canonical form before it keys anything.

Each validator takes the value as given (the text, or a number) and `name`, where it came from
(`--pace`, `rocm_reruns`, `$ROCM_GATE_PACE`; None where the caller names it, as argparse does with
"argument --pace:"), and returns the value in its canonical form, or raises `BadValue` (a
`BadInput`, exit 2) that names `name`, the value and what is allowed. A value is never taken as
"not given" because it is empty: an empty value is refused by name.

- `number(text, name, unit=, low=, high=, above=)`: a finite number in [low, high] (above low where
  `above`), in `unit`; NaN, infinities and text are refused. Canonical: a float.
- `seconds` (a duration, a pace, a timeout: seconds), `hours` (an age or a window in hours):
  `number` in that unit.
- `whole(text, name, low=, high=, unit=)`: a whole number written in digits (no `3.0`, `1e3` or
  `1_000`) in [low, high]. Canonical: an int. `count` is the same for things counted.
- `share(text, name)`: a fraction from 0 to 1 (0.9 for 90%).
- `github_run(text, name)`: a GitHub run and its attempt, `ID` or `ID-ATTEMPT`, both from 1;
  canonical `ID-ATTEMPT` without leading zeros, the attempt 1 where none is given (`7`, `007-1`
  and `7-1` are one run: attempt 1 of run 7).
- `text(text, name)`: any text but the empty one (a name, a path before it is resolved); `command`
  and `arguments`: text shlex can split (a command must name a program).
- `folder(text, name, base=, exists=)`: a path that is (or, without `exists`, may become) a folder,
  resolved against `base`; an existing file is refused. Canonical: an absolute Path.
- `rules_folder(text, name, start=, tree=)`: a folder that must not be the tree under test: not in
  it (as given, or once its links are followed), not reached through a symlink in it, not a folder
  that holds it (docs/architecture.md, "The rules of the verdict").
- `setting_name(key, known)`: why an ini key that looks like one of ours (`rocm_report_dri`,
  `ROCM-RERUNS`) is none of `known`, with the closest one; None for a key that is not ours.

For argparse, `Option(validator, **bounds)` is a `type=` (its `kind` and `bounds` say what it takes;
tests/test_hostile_values.py reads them). A default read from the environment is given as
`environment(VARIABLE, default)`: a string argparse checks with the option's type only when the
option is not given, so `--help` never reads it, and a bad one is named by its variable.
"""

from __future__ import annotations

import argparse
import difflib
import math
import os
import re
import shlex
from collections.abc import Callable, Iterable
from pathlib import Path

from pytest_rocm.errors import BadInput

__all__ = [
    "BadValue",
    "FromEnvironment",
    "Option",
    "arguments",
    "command",
    "count",
    "environment",
    "folder",
    "github_run",
    "hours",
    "number",
    "rules_folder",
    "seconds",
    "setting_name",
    "share",
    "text",
    "whole",
]

# the most digits a whole number is read with (each validator's `high` is lower): more is no count
# of anything, and Python refuses to convert a string of over 4,300 digits anyway
_MOST_DIGITS = 40
_WHOLE = re.compile(r"[+-]?[0-9]+")
_RUN = re.compile(r"([0-9]+)(?:-([0-9]+))?")
# a GitHub run id fits a signed 64-bit integer; no run is attempted more than this often
MOST_RUN_ID = 2**63 - 1
MOST_ATTEMPT = 10_000


class BadValue(BadInput, argparse.ArgumentTypeError):
    """A value refused: the message names where it came from, the value, and what is allowed.
    An `argparse.ArgumentTypeError` too, so argparse prints it as it is ("argument --pace: ...")."""


class FromEnvironment(str):
    """A default read from an environment variable (`environment`): the text, and the variable
    that a message names."""

    variable: str

    def __new__(cls, value: str, variable: str) -> FromEnvironment:
        made = super().__new__(cls, value)
        made.variable = variable
        return made


def environment(variable: str, default: str) -> str:
    """An option's default from `$variable`: its text (a `FromEnvironment`) where it is set and not
    empty, else `default`. Given to argparse as a string: the option's type checks it only where
    the option is not given, so `--help` never reads it and a bad value is named by its variable."""
    value = os.environ.get(variable, "")
    return FromEnvironment(value, variable) if value.strip() else default


def _where(name: str | None) -> str:
    return f"{name}: " if name else ""


def _shown(value) -> str:
    text = value if isinstance(value, str) else repr(value)
    return repr(text if len(text) <= 60 else text[:60] + "...")


def _range(low: float, high: float, above: bool = False) -> str:
    return f"above {low:g} and at most {high:g}" if above else f"from {low:g} to {high:g}"


def number(
    text,
    name: str | None = None,
    *,
    unit: str,
    low: float,
    high: float,
    above: bool = False,
    hint: str = "",
) -> float:
    """A finite number of `unit` in [low, high] (above `low` where `above`)."""
    allowed = _range(low, high, above) + (f" ({hint})" if hint else "")
    if isinstance(text, bool):
        raise BadValue(f"{_where(name)}{text!r} is not a number; give {unit} {allowed}")
    if isinstance(text, (int, float)):
        value = float(text) if not isinstance(text, int) or abs(text) < 10**300 else math.inf
    else:
        given = str(text).strip()
        if not given:
            raise BadValue(f"{_where(name)}empty; give a number of {unit} {allowed}")
        try:
            if "_" in given:  # float() takes 1_000, which no tool writes as a number
                raise ValueError(given)
            value = float(given)
        except ValueError:
            raise BadValue(
                f"{_where(name)}{_shown(text)} is not a number; give {unit} {allowed}"
            ) from None
    if not math.isfinite(value):
        raise BadValue(
            f"{_where(name)}{_shown(text)} is not a finite number; give {unit} {allowed}"
        )
    if value < low or (above and value == low):
        what = (
            "negative" if value < 0 <= low else f"not above {low:g}" if above else f"below {low:g}"
        )
        raise BadValue(f"{_where(name)}{_shown(text)} is {what}; give {unit} {allowed}")
    if value > high:
        raise BadValue(
            f"{_where(name)}{_shown(text)} is more than {high:g} {unit}; give {unit} {allowed}"
        )
    return value


def seconds(text, name: str | None = None, *, low: float = 0.0, high: float, above=False, hint=""):
    """A duration (a timeout, a wait, a pace between writes) in seconds."""
    return number(text, name, unit="seconds", low=low, high=high, above=above, hint=hint)


def hours(text, name: str | None = None, *, low: float = 0.0, high: float, above=False, hint=""):
    """An age or a window in hours."""
    return number(text, name, unit="hours", low=low, high=high, above=above, hint=hint)


def share(text, name: str | None = None) -> float:
    """A fraction from 0 to 1."""
    given = text if isinstance(text, (int, float)) else str(text).strip()
    try:
        value = float(given)
    except (TypeError, ValueError):
        value = math.nan
    if isinstance(text, bool) or not 0 <= value <= 1:  # NaN too
        shown = "empty" if given == "" else f"{_shown(text)} is not a share"
        raise BadValue(f"{_where(name)}{shown}; expected a fraction from 0 to 1 (0.9 for 90%)")
    return value


def whole(
    text,
    name: str | None = None,
    *,
    low: int,
    high: int,
    unit: str = "",
    hint: str = "",
    too_small: str | None = None,
) -> int:
    """A whole number written in digits, in [low, high]; `too_small`, where given, is the message
    for one below `low` (`{value}` the number)."""
    of = f" of {unit}" if unit else ""
    allowed = f"a whole number{of} from {low} to {high}" + (f" ({hint})" if hint else "")
    if isinstance(text, bool) or (isinstance(text, float) and not text.is_integer()):
        raise BadValue(f"{_where(name)}{_shown(text)} is not a whole number; expected {allowed}")
    given = str(int(text)) if isinstance(text, (int, float)) else str(text).strip()
    if not given:
        raise BadValue(f"{_where(name)}empty; expected {allowed}")
    if not _WHOLE.fullmatch(given):
        raise BadValue(f"{_where(name)}{_shown(text)} is not a whole number; expected {allowed}")
    if len(given.lstrip("+-").lstrip("0")) > _MOST_DIGITS:
        raise BadValue(f"{_where(name)}{_shown(text)} is far too large; expected {allowed}")
    value = int(given)
    if value < low and too_small is not None:
        raise BadValue(f"{_where(name)}{too_small.format(value=value)}")
    if value < low:
        what = "negative" if value < 0 <= low else f"below {low}"
        raise BadValue(f"{_where(name)}{value} is {what}; expected {allowed}")
    if value > high:
        raise BadValue(f"{_where(name)}{value} is more than {high}; expected {allowed}")
    return value


count = whole  # a number of things: attempts, reruns, commits, GPUs


def github_run(text, name: str | None = None) -> str:
    """A GitHub run and its attempt as one canonical `ID-ATTEMPT`."""
    given = str(text).strip()
    found = _RUN.fullmatch(given)
    if found is None:
        raise BadValue(
            f"{_where(name)}{_shown(text)} is not a GitHub run; expected its id and attempt "
            "as GitHub lists them (12345-1; an id alone is attempt 1)"
        )
    run = int(found[1]) if len(found[1].lstrip("0")) <= _MOST_DIGITS else MOST_RUN_ID + 1
    attempt_text = found[2] if found[2] is not None else "1"
    attempt = int(attempt_text) if len(attempt_text.lstrip("0")) <= 9 else MOST_ATTEMPT + 1
    if not 1 <= run <= MOST_RUN_ID:
        raise BadValue(
            f"{_where(name)}{_shown(text)}: a GitHub run id is a whole number from 1 to "
            f"{MOST_RUN_ID}"
        )
    if not 1 <= attempt <= MOST_ATTEMPT:
        raise BadValue(
            f"{_where(name)}{_shown(text)}: a run's attempts are numbered from 1 "
            f"(GitHub's run_attempt), got attempt {attempt_text}"
        )
    return f"{run}-{attempt}"


def text(value, name: str | None = None, *, what: str = "a value") -> str:
    """Any text but the empty one, and no NUL character (no path or name holds one)."""
    given = str(value)
    if not given.strip():
        raise BadValue(f"{_where(name)}empty; give {what}")
    if "\x00" in given:
        raise BadValue(f"{_where(name)}{_shown(value)} holds a NUL character; give {what}")
    return given


def arguments(value, name: str | None = None, *, what: str = "arguments") -> list[str]:
    """Text shlex splits into arguments (the empty text: none)."""
    try:
        return shlex.split(str(value))
    except ValueError as exc:
        raise BadValue(
            f"{_where(name)}{_shown(value)}: cannot split it into {what} ({exc}); it is split "
            "with shlex, not run by a shell"
        ) from None


def command(value, name: str | None = None) -> list[str]:
    """A command line: text shlex splits into a program and its arguments."""
    argv = arguments(text(value, name, what="a command"), name, what="a command's arguments")
    if not argv:
        raise BadValue(f"{_where(name)}{_shown(value)} names no program; give a command")
    return argv


def folder(value, name: str | None = None, *, base: Path | None = None, exists=False) -> Path:
    """A path that is a folder (with `exists`), or may be made one: never an existing file."""
    given = text(value, name, what="a folder")
    path = Path(os.path.abspath((base or Path.cwd()) / given))
    if path.exists() and not path.is_dir():
        raise BadValue(f"{_where(name)}{given} is {path}, a file, not a folder; give a folder")
    if exists and not path.is_dir():
        raise BadValue(f"{_where(name)}{given} is {path}, which does not exist; give a folder")
    return path


def rules_folder(value, name: str | None, *, start: Path, tree: Path, fix: str) -> Path:
    """The rules' folder: an existing folder (resolved once, from `start`) that is not the tree
    under test (`tree`), nor in it, nor reached through a symlink in it, nor a folder holding it;
    `fix` says what to give instead."""
    given = text(value, name, what="the default branch's checkout")
    lexical = Path(os.path.normpath(start / given))
    resolved = lexical.resolve()
    if not resolved.is_dir():
        raise BadValue(f"{_where(name)}{given} is not a folder; {fix}")
    roots = {tree, tree.resolve()}
    link = _link_in(start, given, roots)
    if link is not None:
        raise BadValue(
            f"{_where(name)}{given} goes through {link}, a symlink in the tree under test ({tree}), "
            f"which the PR under test can commit; {fix}"
        )
    for place in (lexical, resolved):
        if _inside(place, roots):
            raise BadValue(
                f"{_where(name)}{given} is {place}, in the tree under test ({tree}), which the PR "
                f"under test can commit; {fix}"
            )
        if any(place in r.parents for r in roots):
            raise BadValue(
                f"{_where(name)}{given} is {place}, which holds the tree under test ({tree}); {fix}"
            )
    return resolved


def _inside(place: Path, roots: set[Path]) -> bool:
    return any(place == r or r in place.parents for r in roots)


def _link_in(start: Path, given: str, roots: set[Path]) -> Path | None:
    """The first symlink on the way from `start` along `given` that lies in one of `roots`
    (followed as the system follows it: a `..` after a link leaves the link's target)."""
    here = Path("/") if Path(given).is_absolute() else start.resolve()
    for part in Path(given).parts:
        if part in ("/", "."):
            continue
        step = here / part
        if part != ".." and step.is_symlink() and _inside(here, roots):
            return step
        here = step.resolve()
    return None


def setting_name(key: str, known: Iterable[str], prefix: str = "rocm_") -> str | None:
    """Why `key` (an ini file's) is refused: ours but for case and separators (`ROCM-RERUNS`), or
    misspelt (`rocm_report_dri`), with the setting meant; None for a key that is not ours."""
    names = sorted(known)
    normal = key.lower().replace("-", "_")
    if not normal.startswith(prefix) or key in names:
        return None
    close = [normal] if normal in names else difflib.get_close_matches(normal, names, n=1)
    return (
        f"{key} is not a pytest-rocm setting"
        + (f" (did you mean {close[0]}?)" if close else "")
        + f"; the settings are {', '.join(names)}"
    )


class Option:
    """An argparse `type=`: `validator` with its `bounds`; a value from the environment
    (`environment`) is named by its variable, one typed by argparse's "argument --flag:". With
    `keep`, the value is checked and kept as given (a path, resolved later against its base)."""

    def __init__(self, validator: Callable, keep: bool = False, **bounds):
        self.validator = validator
        self.keep = keep
        self.bounds = bounds
        self.kind = validator.__name__
        self.__name__ = self.kind  # argparse names the type in some messages

    def __call__(self, value):
        name = f"${value.variable}" if isinstance(value, FromEnvironment) else None
        return self.check(value, name)

    def check(self, value, name: str | None):
        """The value as `name` gives it (an ini key, a variable)."""
        checked = self.validator(value, name, **self.bounds)
        return value if self.keep else checked

    def __repr__(self) -> str:
        return f"Option({self.kind}, {self.bounds})"
