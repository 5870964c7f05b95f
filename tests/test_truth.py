"""The truth harness (tests/truth.py) on generated histories: every class, conclusion, reason,
"fixed" claim, trunk state, flaky list, trunk-health cell, tracker issue and quarantine file agrees
with the oracle that made the history. And the harness can fail: a decision that forgets main's
state is caught."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st
from truth import Verdicts, judge, world

from pytest_rocm.trunk import attribution, judgement


@settings(max_examples=40, deadline=None, derandomize=True)
@given(st.integers(min_value=0, max_value=2**32 - 1))
def test_generated_histories_agree_with_their_oracle(seed):
    found = judge(world(random.Random(seed), seed))
    assert found.checks >= 30
    assert not found.disagreements, "\n".join(found.disagreements[:10])


def test_the_harness_catches_a_decision_that_forgets_main(monkeypatch):
    """Every failure judged new, whatever main says: the harness must disagree (a harness that
    agrees with anything proves nothing)."""
    monkeypatch.setattr(
        attribution, "failure_class", lambda *args, **kwargs: (judgement.NEW, "forgot main")
    )
    found = Verdicts()
    for seed in range(20):
        judge(world(random.Random(seed), seed), found)
    assert any("the truth says pre_existing" in d for d in found.disagreements)
    assert any("concluded failure, the truth says neutral" in d for d in found.disagreements)
