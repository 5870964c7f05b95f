"""The fingerprint of a failure: what it says, with what changes from run to run taken out.

Trunk-aware verdicts ask "does this PR fail the way main already fails?". Two failures of one test
are the same when their fingerprints are equal: the first line of the failure message (the exception
and its text), with numbers, hexadecimal addresses and temporary paths replaced, so
`assert 0.61 >= 0.7` on main and `assert 0.58 >=
0.7` here are one failure, and `KeyError: 'rope_scaling'` is another.
"""

from __future__ import annotations

import re

LIMIT = 200
_PATH = re.compile(r"(/tmp|/var/tmp|/dev/shm|/private/var)/\S+")
_HEX = re.compile(r"\b0x[0-9a-fA-F]+\b|\b[0-9a-f]{12,}\b")
_NUMBER = re.compile(r"[-+]?\b\d+(?:\.\d+)?(?:[eE][-+]?\d+)?\b")
_SPACE = re.compile(r"\s+")


def fingerprint(message: str | None, reason: str | None = None) -> str:
    """The failure's fingerprint ('' when it says nothing)."""
    for text in (message, reason):
        line = next((line.strip() for line in str(text or "").splitlines() if line.strip()), "")
        if line:
            line = _PATH.sub("PATH", line)
            line = _HEX.sub("HEX", line)
            line = _NUMBER.sub("N", line)
            return _SPACE.sub(" ", line)[:LIMIT]
    return ""


def of_test(test: dict) -> str:
    """The fingerprint of a gate report's test entry."""
    return fingerprint(test.get("message"), test.get("verdict_reason"))
