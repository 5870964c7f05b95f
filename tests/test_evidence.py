"""Evidence from other PRs (trunk/evidence.py): several unrelated PRs failing a test the same way,
before any main run showed it, make it likely main's; guarded so that a PR's own regression is never
hidden by fewer PRs, one base, a pass since, or a main run since. A table, then generated histories
checked against an oracle written apart from the code."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rocm_gate.trunk import judgement as j
from rocm_gate.trunk.evidence import BASES, PRS, from_other_prs

C = [f"{i:x}" * 40 for i in range(1, 10)]  # main's commits, oldest first
C = [c[:40] for c in C]
FP = "AssertionError: output of test_paged diverged at token 17"
TEST = "tests/test_paged.py::test_paged"


def prs(*entries) -> dict:
    """(head ref, base index, verdict, fingerprint) per PR run."""
    return {TEST: [(ref, C[b], verdict, fp) for ref, b, verdict, fp in entries]}


THREE = [
    ("o/r:a", 4, "regression", FP),
    ("o/r:b", 5, "regression", FP),
    ("f/r:c", 5, "unconfirmed", FP),
]

CASES = [
    ("three PRs, two bases, nothing since", THREE, 6, [2], True),
    ("two PRs are not enough", THREE[:2], 6, [2], False),
    ("one base is not enough", [(r, 5, v, f) for r, _, v, f in THREE], 6, [2], False),
    ("this PR's own runs do not count", [*THREE[:2], ("o/r:me", 4, "regression", FP)], 6, [2], False),
    ("another failure is not the same", [*THREE[:2], ("f/r:c", 5, "regression", "KeyError: x")], 6, [2], False),
    ("a PR based since passed it", [*THREE, ("o/r:d", 6, "pass", "")], 6, [2], False),
    ("a PR based before passed it: no matter", [*THREE, ("o/r:d", 2, "pass", "")], 6, [2], True),
    ("main ran since the oldest base", THREE, 6, [2, 5], False),
    ("this PR's base is before the break", THREE, 3, [2], False),
]  # fmt: skip


@pytest.mark.parametrize(
    "rows,base,main,excused", [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_other_prs_make_a_failure_likely_mains_only_when_guarded(rows, base, main, excused):
    found = from_other_prs({TEST: FP}, prs(*rows), "o/r:me", C[base], C, [C[i] for i in main])
    assert (TEST in found) is excused, found
    kind, why = j.failure_class(FP, None, j.place(C[base], C), C, None, None, found.get(TEST))
    assert kind == (j.SEEN_ON_OTHER_PRS if excused else j.NEW), why
    if excused:
        assert "not yet settled" in why and C[4][:12] in why


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["o/r:a", "o/r:b", "f/r:c", "f/r:d", "o/r:me"]),
            st.integers(0, 8),
            st.sampled_from(["regression", "unconfirmed", "pass", "flaky"]),
            st.sampled_from([FP, "KeyError: x"]),
        ),
        max_size=8,
    ),
    st.integers(0, 8),
    st.lists(st.integers(0, 8), max_size=3),
)
def test_the_evidence_oracle(rows, base, main):
    """The oracle, from the rule's words: other PRs failing the same way number PRS or more, on BASES
    or more bases; the oldest of those bases is at or before this run's; no pass based at or after
    it; no main run at or after it."""
    failing = [
        (r, b)
        for r, b, v, f in rows
        if r != "o/r:me" and v in ("regression", "unconfirmed") and f == FP
    ]
    refs, bases = {r for r, _ in failing}, {b for _, b in failing}
    expected = len(refs) >= PRS and len(bases) >= BASES
    if expected:
        oldest = min(bases)
        expected = (
            base >= oldest
            and not any(v == "pass" and b >= oldest for _, b, v, _ in rows)
            and not any(m >= oldest for m in main)
        )
    found = from_other_prs(
        {TEST: FP},
        prs(*[(r, b, v, f) for r, b, v, f in rows]),
        "o/r:me",
        C[base],
        C,
        [C[i] for i in main],
    )
    assert (TEST in found) is expected
