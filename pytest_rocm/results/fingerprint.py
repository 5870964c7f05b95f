"""The fingerprint of a failure: what it says, with what changes from run to run taken out, and when
two fingerprints are the same failure.

Trunk-aware verdicts ask "does this PR fail the way main already fails?". A fingerprint is the whole
failure message (vLLM's `Test0:` comparisons, token lists and accuracy asserts say what differs
only after their first line), its lines joined, with the noise masked: temporary paths, hexadecimal
addresses and ids, times and durations, ports, process and worker ids, and source line numbers
(an edit above a test moves them). Every other number stays: it carries meaning.

`same_failure` compares two fingerprints: the same text once numbers are set aside, and each number
the same: integers exactly (token ids, counts), measured values (a number with a fraction) within
SAME_VALUE_REL of each other (or SAME_VALUE_ABS, near zero). So main's `assert 0.61 >= 0.7` and a PR's `assert 0.58 >= 0.7` are one
failure, `assert 0.05 >= 0.7` is another (the PR made it far worse), and a different token list is
another. Two refinements, each learned from what a failure says rather than from a list of messages:

- **pytest's rewritten ordering assertion is values, not code**: in `assert 431 <= 400` (and its `where
  431 = ...` lines) the integers are measured values, compared as values (431 and 429 are one failure, 43
  another); an equality (`assert [7, 3] == [7, 4]`) still compares integers exactly (token ids).
- **what varies is learned from main** (`among`): where main's own failures of a test, of one shape, differ
  in a number that the rules above hold apart (a seed the test prints, a random length, a batch size), that
  position is noise for that test: a PR failing the same way with yet another value there is main's
  failure. One failure of main's teaches nothing; the base experiment (trunk/judgement.py) settles the rest.
"""

from __future__ import annotations

import re

LIMIT = 1000
# two measured values within this fraction of the larger, or this far apart near zero (a logprob of
# -0.001 and one of -0.003 jitter, they do not differ), are the same failure's
SAME_VALUE_REL = 0.1
SAME_VALUE_ABS = 0.01
_NOISE = (
    (re.compile(r"(?:/tmp|/var/tmp|/dev/shm|/private/var|/run/user)/\S+"), "PATH"),
    (
        re.compile(r"\b\d{4}-\d\d-\d\d[T ]\d\d:\d\d(?::\d\d(?:\.\d+)?)?(?:Z|[+-]\d\d:?\d\d)?"),
        "TIME",
    ),
    (re.compile(r"\b\d{1,2}:\d\d:\d\d(?:\.\d+)?\b"), "TIME"),
    (
        re.compile(
            r"\b0x[0-9a-fA-F]+\b|\b[0-9a-f]{12,}\b|\b[0-9a-fA-F]{8}-(?:[0-9a-fA-F]{4}-){3}[0-9a-fA-F]{12}\b"
        ),
        "HEX",
    ),
    # a duration: `12.3s`, `in 4 seconds`, `45 ms`
    (re.compile(r"\b\d+(?:\.\d+)?\s?(?:ms|s|sec|secs|seconds?|minutes?|min)\b"), "DURATION"),
    # a source line (before ports: `file.py:123` is no host and port)
    (re.compile(r"\.py:\d+"), ".py:LINE"),
    (re.compile(r"\bline \d+"), "line LINE"),
    # a port after a host (`localhost:8000`, `127.0.0.1:43567`, `[::1]:80`, `node-3.cluster:29500`)
    (
        re.compile(r"(localhost|\d{1,3}(?:\.\d{1,3}){3}|\]|\b[\w-]+(?:\.[\w-]+)+):\d{2,5}\b"),
        r"\1:PORT",
    ),
    (re.compile(r"\b(pid|PID|process)[ =:]+\d+"), r"\1 PID"),
    (re.compile(r"\bgw\d+\b"), "gwN"),
)
_NUMBER = re.compile(r"[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?")
_SPACE = re.compile(r"[ \t]+")


def fingerprint(message: str | None, reason: str | None = None) -> str:
    """The failure's fingerprint: its message, else the verdict's reason ('' when neither says
    anything)."""
    for text in (message, reason):
        lines = [_SPACE.sub(" ", line).strip() for line in str(text or "").splitlines()]
        joined = " | ".join(line for line in lines if line)
        if joined:
            for pattern, mask in _NOISE:
                joined = pattern.sub(mask, joined)
            return joined[:LIMIT]
    return ""


def of_test(test: dict) -> str:
    """The fingerprint of a gate report's test entry: of the attempt that decided its verdict, the
    last failed attempt that carries no infrastructure signature and did not run in a process a
    device fault had poisoned (a first attempt's HSA fault followed by main's own failure is main's
    failure), else the last failed attempt, else the test's message."""
    failed = [
        a
        for a in test.get("attempts") or ()
        if a.get("status") in ("failed", "error", "crashed") and not a.get("after_fault")
    ]
    deciding = [a for a in failed if not a.get("signature")] or failed
    message = deciding[-1].get("message") if deciding else None
    return fingerprint(message or test.get("message"), test.get("verdict_reason"))


# a line of pytest's rewritten assertion that orders two values (`assert 431 <= 400`), or one of its
# `where 431 = len(x)` explanations: its numbers are measured values
_ORDERING = re.compile(r"(?:^|\s)assert\s.*\s(?:<=|>=|<|>)\s|^\+?\s*where\s")


def _parts(text: str) -> tuple[str, list[str], list[bool]]:
    """The text with every number as N, the numbers, and whether each is a value (a measured value,
    or a number of an ordering assertion's line)."""
    numbers, values = [], []
    for line in text.split(" | "):
        found = _NUMBER.findall(line)
        ordering = bool(_ORDERING.search(line))
        numbers += found
        values += [ordering or any(c in n for c in ".eE") for n in found]
    return _NUMBER.sub("N", text), numbers, values


def _same_number(a: str, b: str, value: bool) -> bool:
    if not value:
        return int(a) == int(b)  # an integer: a token id, a count
    x, y = float(a), float(b)
    return abs(x - y) <= max(SAME_VALUE_REL * max(abs(x), abs(y)), SAME_VALUE_ABS)


def same_failure(a: str | None, b: str | None, noise: frozenset[int] = frozenset()) -> bool:
    """Whether two fingerprints are one failure (see the module docstring); `noise`: the positions
    of numbers that vary between main's own failures of this shape (`among` learns them)."""
    if a is None or b is None:
        return a == b
    (text_a, numbers_a, values_a), (text_b, numbers_b, values_b) = _parts(a), _parts(b)
    return text_a == text_b and all(
        i in noise or _same_number(x, y, va or vb)
        for i, (x, y, va, vb) in enumerate(zip(numbers_a, numbers_b, values_a, values_b))
    )


def varying(fingerprints) -> dict[str, frozenset[int]]:
    """Shape -> the positions of numbers that differ between two of `fingerprints` of that shape
    (main's own repeated failures of one test): noise there."""
    by_shape: dict[str, list[tuple[list[str], list[bool]]]] = {}
    for other in fingerprints or ():
        shape, numbers, values = _parts(other)
        by_shape.setdefault(shape, []).append((numbers, values))
    out = {}
    for shape, seen in by_shape.items():
        first_numbers, first_values = seen[0]
        out[shape] = frozenset(
            i
            for i in range(len(first_numbers))
            if any(
                not _same_number(first_numbers[i], numbers[i], first_values[i] or values[i])
                for numbers, values in seen[1:]
            )
        )
    return out


def shape(fingerprint: str | None) -> str:
    """The failure's shape: its fingerprint with every number set aside (`among`'s `shape_only`; a
    flake's messages of one shape are one flake, history/flakes.py)."""
    return _parts(fingerprint or "")[0]


def among(mine: str, fingerprints, shape_only: bool = False) -> bool:
    """Whether `mine` is one failure with any of `fingerprints` (main's failures of one test), a
    number main's own failures vary in being noise (`varying`); `shape_only`: the same text with
    every number set aside (a flake's message counts steps, retries or ports that change from one
    flake to the next: main's flake and the PR's are one when only those differ)."""
    if shape_only:
        return any(_parts(mine)[0] == _parts(other)[0] for other in fingerprints or ())
    noise = varying(fingerprints)
    return any(
        same_failure(mine, other, noise.get(_parts(other)[0], frozenset()))
        for other in fingerprints or ()
    )


def distinct(fingerprints) -> list[str]:
    """One of each failure among `fingerprints`, in their order (a measured value jitters from run
    to run: twenty runs of one failure are one entry, not twenty)."""
    out: list[str] = []
    for mine in fingerprints:
        if not among(mine, out):
            out.append(mine)
    return out


def quarantine_excuses(quarantine: dict, fingerprint: str) -> bool:
    """Whether a quarantine entry excuses a failure with this fingerprint: the way it was entered
    with (an entry with no fingerprints, one a person wrote, excuses any). The plugin applies it as
    a test fails (plugin/recording.py, results/report.py) and trunk/judgement.py as it classes the
    failure: one rule for both."""
    return not quarantine.get("fingerprints") or among(fingerprint, quarantine["fingerprints"])
