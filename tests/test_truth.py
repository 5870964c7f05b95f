"""The truth harness (tests/truth.py) on generated histories: every class, conclusion, reason,
"fixed" claim, trunk state, flaky list, trunk-health cell, tracker issue and quarantine file agrees
with the oracle that made the history. And the harness can fail: a decision that forgets main's
state is caught."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st
from truth import Verdicts, judge, world

from rocm_gate.trunk import attribution, judgement


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


def test_the_harness_catches_a_state_that_forgets_flakes_across_commits_and_moves(monkeypatch):
    """Main's state as it was before issue 58: flaky only on one commit, every test id its own
    test for ever. The shapes grown from upstream's history must show it (a test failing on
    alternate commits read as main's break, or a PR's flake of it as new; a moved test's old id
    failing for ever, its new id with no history)."""
    from rocm_gate.trunk import state

    monkeypatch.setattr(state, "_gone_since", lambda *args: None)
    monkeypatch.setattr(state, "_chains", lambda *args: ({}, {}))
    monkeypatch.setattr(
        state, "flaky_commits", lambda series: {c for c, said, _ in series if said == "flaky"}
    )
    found = Verdicts()
    for seed in (0, 2, 10):
        judge(world(random.Random(seed), seed), found)
    said = "\n".join(found.disagreements)
    assert "failing in the trunk state after its move" in said  # the old id, for ever
    assert "last green None, the truth says" in said  # the new id, with no history
    assert "test_engine_2 is failing in the trunk state, the truth says flaky" in said
    assert "test_engine_2 is new, the truth says flaky_on_main or pre_existing" in said
