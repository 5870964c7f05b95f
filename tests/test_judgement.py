"""The one decision (rocm-gate/rocm_gate/trunk/judgement.py): the check's conclusion held to the README's
table, read from the README itself, on every row and on generated run facts; each failure's class
and each passing test's on a table of main's states and bases; the quarantine and trunk-health
rules."""

from __future__ import annotations

import datetime as dt
import re

import pytest
from conftest import REPO
from hypothesis import given, settings
from hypothesis import strategies as st

from rocm_gate.trunk import judgement as j

README = (REPO / "README.md").read_text(encoding="utf-8")
COLUMNS = (
    "gate report",
    "blocking failures",
    "a test file the change broke",
    "complete",
    "infra without evidence",
    "check",
)
# the "then" rows, in order, as the README words them
THEN = [
    (
        "`incomplete` or `skipped`, and the repository chose soft rollout (`incomplete: neutral`)",
        "neutral",
    ),
    ("`incomplete` or `skipped`", "action_required"),
    ("results of a simulated platform, and `success` or `neutral`", "action_required"),
]


def _table(header: str) -> list[list[str]]:
    """The rows of the README table whose header line starts with `header`."""
    lines = README.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(header))
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip().strip("|").split("|")])
    return rows


RULES = _table("| gate report | blocking failures |")


def test_the_readme_has_the_table_and_the_then_rows():
    header = next(line for line in README.splitlines() if line.startswith("| gate report |"))
    assert tuple(c.strip() for c in header.strip("|").split("|")) == COLUMNS
    assert len(RULES) >= 10 and all(len(row) == len(COLUMNS) for row in RULES)
    assert [tuple(row) for row in _table("| then | check |")] == THEN


def _failures(facts: j.RunFacts) -> str:
    if not facts.classes:
        return "none"
    return "some new" if j.NEW in facts.classes.values() else "all excused"


def _matches(row: list[str], facts: j.RunFacts) -> bool:
    wanted = dict(zip(COLUMNS, row))
    seen = {
        "gate report": facts.gate,
        "blocking failures": _failures(facts),
        "a test file the change broke": "yes" if facts.change_collection_error else "no",
        "complete": "yes" if facts.complete else "no",
        "infra without evidence": "yes" if facts.unproven_infra else "no",
    }
    return all(wanted[k] in ("any", seen[k]) for k in seen)


def oracle(facts: j.RunFacts) -> tuple[str, str]:
    """(the table's conclusion, the check's), by the README alone."""
    judged = next(row[-1] for row in RULES if _matches(row, facts))
    check = judged
    if judged in ("incomplete", "skipped"):
        check = THEN[0][1] if facts.soft_rollout else THEN[1][1]
    if facts.simulated and check in ("success", "neutral"):
        check = THEN[2][1]
    return judged, check


run_facts = st.builds(
    j.RunFacts,
    gate=st.sampled_from(["success", "failure", "neutral", "incomplete", "skipped"]),
    gate_reason=st.just("the gate's reason"),
    complete=st.booleans(),
    incomplete_causes=st.just(("stopped early",)),
    unproven_infra=st.sampled_from([(), ("t.py::test_infra",)]),
    change_collection_error=st.booleans(),
    classes=st.dictionaries(
        st.sampled_from([f"t.py::test_{i}" for i in range(4)]),
        st.sampled_from([j.NEW, j.PRE_EXISTING, j.FLAKY_ON_MAIN, j.QUARANTINED]),
        max_size=4,
    ),
    soft_rollout=st.booleans(),
    simulated=st.booleans(),
)


@settings(max_examples=600, deadline=None)
@given(run_facts)
def test_the_check_concludes_what_the_readme_table_says(facts):
    decision = j.check_conclusion(facts)
    assert (decision.judged, decision.conclusion) == oracle(facts)


@pytest.mark.parametrize("index", range(len(RULES)))
def test_every_row_of_the_table_is_reached(index):
    """One run per row, built from the row's own cells: the function gives that row's conclusion
    (a row that no input can reach, or that the code orders differently, fails here)."""
    row = dict(zip(COLUMNS, RULES[index]))
    pick = {"any": False, "yes": True, "no": False}
    classes = {
        "some new": {"a": j.NEW, "b": j.PRE_EXISTING},
        "all excused": {"a": j.PRE_EXISTING, "b": j.FLAKY_ON_MAIN},
        "none": {},
        "any": {},
    }[row["blocking failures"]]
    facts = j.RunFacts(
        gate=row["gate report"],
        gate_reason="why",
        complete=row["complete"] != "no",
        unproven_infra=("t::x",) if pick[row["infra without evidence"]] else (),
        change_collection_error=pick[row["a test file the change broke"]],
        classes=classes,
    )
    assert j.check_conclusion(facts).judged == row["check"]


def test_the_reason_counts_only_the_new_failures():
    facts = j.RunFacts(
        gate="failure",
        gate_reason="3 blocking gate(s) regressed",
        classes={"a": j.NEW, "b": j.PRE_EXISTING, "c": j.FLAKY_ON_MAIN},
    )
    decision = j.check_conclusion(facts)
    assert decision.conclusion == "failure"
    assert decision.why.startswith("1 blocking gate(s) regressed, new in this run: a;")
    assert "2 more already failing or flaky on main, not counted" in decision.why


# failure classes --------------------------------------------------------------------------------

C = [f"{i:040x}" for i in range(1, 11)]  # main's commits, oldest first
FP = "AssertionError: output diverged at token 17 (logprob -0.410)"
OTHER = "KeyError: 'rope_scaling'"


def failing(since=4, green=2, fingerprints=(FP,), breaks=()):
    return {
        "state": "failing",
        "flaky_commits": [],
        "flaky_count": 0,
        "flips": 1,
        "since": {"sha": C[since], "started": f"2026-12-0{since}T00:00:00+00:00"},
        "last_green": {"sha": C[green]} if green is not None else None,
        "fingerprints": list(fingerprints),
        "flaky_fingerprints": [],
        "breaks": list(breaks),
    }


def fixed_on_main(since=3, green=1, fixed=6):
    return {
        "state": "passing",
        "flaky_commits": [],
        "flaky_count": 0,
        "flips": 2,
        "since": None,
        "last_green": None,
        "fingerprints": [],
        "flaky_fingerprints": [],
        "breaks": [
            {
                "since": {"sha": C[since], "started": f"2026-12-0{since}T00:00:00+00:00"},
                "last_green": {"sha": C[green]} if green is not None else None,
                "fixed": {"sha": C[fixed], "started": f"2026-12-0{fixed}T00:00:00+00:00"},
                "fingerprints": [FP],
            }
        ],
    }


def re_broken(fingerprints=(FP,)):
    """Main broke the test at C3, fixed it at C6, and broke it again at C8 (a revert, a re-land)."""
    earlier = fixed_on_main(since=3, green=1, fixed=6)["breaks"]
    return failing(since=8, green=7, fingerprints=fingerprints, breaks=earlier)


def flaky_on_main(fingerprints=(FP,)):
    return {
        "state": "passing",
        "flaky_commits": [C[5]],
        "flaky_count": 1,
        "flips": 0,
        "since": None,
        "last_green": None,
        "fingerprints": [],
        "flaky_fingerprints": list(fingerprints),
    }


def at(index):
    return j.place(C[index], C)


def off_list(date=None):
    return j.Base("f" * 40, None, date)


CLASSES = [
    # (what, fingerprint, entry, base, quarantine, class)
    ("main passes it", FP, None, at(8), None, j.NEW),
    ("main fails it the same way, base after the break", FP, failing(), at(6), None, j.PRE_EXISTING),
    ("main fails it the same way, base at the break", FP, failing(), at(4), None, j.PRE_EXISTING),
    ("main fails it the same way, base in the suspect range", FP, failing(), at(3), None, j.PRE_EXISTING),
    ("base at main's last green commit", FP, failing(), at(2), None, j.NEW),
    ("base before main's last green commit", FP, failing(), at(1), None, j.NEW),
    ("main fails it another way", OTHER, failing(), at(6), None, j.NEW),
    ("numbers far apart are another failure", FP.replace("-0.410", "-2.900"), failing(), at(6), None, j.NEW),
    ("numbers within 10% are the same failure", FP.replace("-0.410", "-0.420"), failing(), at(6), None, j.PRE_EXISTING),
    ("base newer than the commit list", FP, failing(), off_list(), None, j.PRE_EXISTING),
    ("no base named", FP, failing(), j.Base(None), None, j.PRE_EXISTING),
    ("flaky on main the same way", FP, flaky_on_main(), at(8), None, j.FLAKY_ON_MAIN),
    ("flaky on main another way", OTHER, flaky_on_main(), at(8), None, j.NEW),
    ("flaky on main, its count changes from flake to flake", "AssertionError: lost a race after 79 steps",
     flaky_on_main(["AssertionError: lost a race after 23 steps"]), at(8), None, j.FLAKY_ON_MAIN),
    ("main fails it now, the way it flaked before", "AssertionError: lost a race after 79 steps",
     {**failing(fingerprints=["AssertionError: lost a race after 5 steps"]), "flaky_count": 1,
      "flaky_fingerprints": ["AssertionError: lost a race after 23 steps"]}, at(6), None, j.FLAKY_ON_MAIN),
    ("main fails it another way, and flaked this way before, base before the break", "AssertionError: lost a race after 79 steps",
     {**failing(), "flaky_count": 1, "flaky_fingerprints": ["AssertionError: lost a race after 23 steps"]},
     at(1), None, j.FLAKY_ON_MAIN),
    ("main fails it this very way, and flaked the same way before", FP,
     {**failing(), "flaky_count": 1, "flaky_fingerprints": [FP]}, at(6), None, j.PRE_EXISTING),
    ("main fixed it after this base", FP, fixed_on_main(), at(4), None, j.PRE_EXISTING),
    ("main fixed it before this base", FP, fixed_on_main(), at(7), None, j.NEW),
    ("main fixed it; base before the break", FP, fixed_on_main(), at(1), None, j.NEW),
    ("main fixed it; base off the list, made between the break and the fix", FP, fixed_on_main(),
     off_list(dt.datetime(2026, 12, 5, tzinfo=dt.UTC)), None, j.PRE_EXISTING),
    ("main fixed it; base off the list, made before the break", FP, fixed_on_main(),
     off_list(dt.datetime(2026, 12, 2, tzinfo=dt.UTC)), None, j.NEW),
    ("main fixed it; base off the list, made after the fix", FP, fixed_on_main(),
     off_list(dt.datetime(2026, 12, 7, tzinfo=dt.UTC)), None, j.NEW),
    ("main fixed it; base off the list, no date", FP, fixed_on_main(), off_list(), None, j.NEW),
    ("main fixed another failure", OTHER, fixed_on_main(), at(4), None, j.NEW),
    ("main re-broke it (a revert, a re-land); base inside the earlier break", FP,
     re_broken(), at(4), None, j.PRE_EXISTING),
    ("main re-broke it; base between the fix and the re-land", FP, re_broken(), at(6), None, j.NEW),
    ("main re-broke it another way; base inside the earlier break of this way", FP,
     re_broken(fingerprints=(OTHER,)), at(4), None, j.PRE_EXISTING),
    ("main re-broke it another way; base after it", FP, re_broken(fingerprints=(OTHER,)), at(9), None, j.NEW),
    ("quarantined for this failure", FP, failing(), at(6), {"reason": "r", "fingerprints": [FP]}, j.QUARANTINED),
    ("quarantined by hand, no fingerprint", OTHER, None, at(6), {"reason": "r", "fingerprints": []}, j.QUARANTINED),
    ("quarantined for another failure", OTHER, failing(), at(6), {"reason": "r", "fingerprints": [FP]}, j.NEW),
]  # fmt: skip


@pytest.mark.parametrize(
    "fingerprint,entry,base,quarantine,expected",
    [case[1:] for case in CLASSES],
    ids=[case[0] for case in CLASSES],
)
def test_each_failure_gets_its_class(fingerprint, entry, base, quarantine, expected):
    kind, why = j.failure_class(fingerprint, entry, base, C, quarantine)
    assert kind == expected, why
    assert why


def ran_on_base(*outcomes: str) -> dict:
    """A base-check.json entry: the test run again on the PR's base, an outcome per attempt."""
    return {"attempts": [{"outcome": o} for o in outcomes], "not_run": None}


EXPERIMENTS = [
    # (what, entry on main, the experiment, quarantine, class)
    ("passes on the base every time: this PR's, whatever main's state infers", failing(),
     ran_on_base("passed", "passed"), None, j.NEW),
    ("passes on the base, main flaked this way: still this PR's", flaky_on_main(),
     ran_on_base("passed", "passed"), None, j.NEW),
    ("fails on the base every time: not this PR's, though main passes it", None,
     ran_on_base("failed", "failed"), None, j.PRE_EXISTING),
    ("an error on the base counts as a failure there", None, ran_on_base("error", "failed"), None,
     j.PRE_EXISTING),
    ("passes and fails on the base: flaky there, not blocking", None,
     ran_on_base("failed", "passed"), None, j.FLAKY_ON_BASE),
    ("the base has no such test: new in this PR", failing(), ran_on_base("absent"), None, j.NEW),
    ("skipped on the base settles nothing: main's state decides", failing(),
     ran_on_base("skipped", "skipped"), None, j.PRE_EXISTING),
    ("no experiment: main's state decides", None, None, None, j.NEW),
    ("quarantine comes first", None, ran_on_base("passed", "passed"),
     {"reason": "r", "fingerprints": [FP]}, j.QUARANTINED),
    ("an infrastructure fault on the base says nothing of its code", None,
     {"attempts": [{"outcome": "failed", "signature": "hsa"}, {"outcome": "failed", "signature": "hsa"}]},
     None, j.NEW),
    ("failed and passed within one attempt on the base: flaky there", None,
     {"attempts": [{"outcome": "failed", "verdict": "flaky"}]}, None, j.FLAKY_ON_BASE),
]  # fmt: skip


@pytest.mark.parametrize(
    "entry,experiment,quarantine,expected",
    [case[1:] for case in EXPERIMENTS],
    ids=[case[0] for case in EXPERIMENTS],
)
def test_the_experiment_on_the_base_beats_every_inference(entry, experiment, quarantine, expected):
    kind, why = j.failure_class(FP, entry, at(6), C, quarantine, experiment)
    assert kind == expected, why
    if quarantine is None and j.base_experiment(experiment, C[6]) is not None:
        assert C[6][:12] in why  # the evidence names the base it ran on


@given(
    st.lists(
        st.sampled_from(["passed", "failed", "error", "crashed", "skipped", "interrupted"]),
        max_size=4,
    )
)
def test_the_experiment_oracle(outcomes):
    """The oracle, written apart from the code: any failure and any pass on the base is a flake
    there; failures only are main's; passes only are the PR's; neither settles nothing."""
    failed = any(o in ("failed", "error", "crashed") for o in outcomes)
    passed = "passed" in outcomes
    expected = (
        j.FLAKY_ON_BASE
        if failed and passed
        else j.PRE_EXISTING
        if failed
        else j.NEW
        if passed
        else None
    )
    found = j.base_experiment(ran_on_base(*outcomes), C[6])
    assert (found[0] if found else None) == expected


PASSING = [
    ("base after the break", failing(), at(6), j.FIXED),
    ("base at the break", failing(), at(4), j.FIXED),
    ("base at the last green commit: the break is not in it", failing(), at(2), j.NOT_FIXED_HERE),
    ("base before the last green commit", failing(), at(0), j.NOT_FIXED_HERE),
    ("base in the suspect range: it may not hold the break", failing(), at(3), j.NOT_FIXED_HERE),
    ("base off the list, made after the break's first run", failing(), off_list(dt.datetime(2026, 12, 9, tzinfo=dt.UTC)), j.FIXED),
    ("base off the list, made before the break's first run", failing(), off_list(dt.datetime(2026, 12, 1, tzinfo=dt.UTC)), j.NOT_FIXED_HERE),
    ("base off the list, no date", failing(), off_list(), j.NOT_FIXED_HERE),
]  # fmt: skip


@pytest.mark.parametrize(
    "entry,base,expected", [case[1:] for case in PASSING], ids=[case[0] for case in PASSING]
)
def test_a_pass_of_mains_failure_is_fixed_only_where_the_base_holds_the_break(
    entry, base, expected
):
    kind, why = j.passing_class(entry, base, C)
    assert kind == expected, why


@pytest.mark.parametrize(
    "quarantine,fingerprint,excused",
    [
        ({"fingerprints": []}, OTHER, True),
        ({}, OTHER, True),
        ({"fingerprints": [FP]}, FP, True),
        ({"fingerprints": [FP]}, FP.replace("-0.410", "-0.400"), True),
        ({"fingerprints": [FP]}, OTHER, False),
        ({"fingerprints": [FP]}, "", False),
    ],
)
def test_a_quarantine_excuses_the_failure_it_was_entered_with(quarantine, fingerprint, excused):
    assert j.quarantine_excuses(quarantine, fingerprint) is excused


@pytest.mark.parametrize(
    "blocking,held,cell",
    [(0, 0, "green"), (1, 0, "red"), (2, 3, "red"), (0, 1, "quarantined")],
)
def test_a_quarantined_failure_is_not_green(blocking, held, cell):
    assert j.health_cell(blocking, held) == cell


def test_the_reasons_name_commits_and_fingerprints_not_secrets():
    kind, why = j.failure_class(OTHER, failing(), at(6), C)
    assert kind == j.NEW and C[4][:12] in why and "rope_scaling" in why
    assert re.search(r"differently: main: .*diverged", why)


@pytest.mark.parametrize(
    "generated,max_age,base_date,used",
    [
        ("2026-12-07T09:00:00+00:00", 48.0, None, True),
        ("2026-12-04T09:00:00+00:00", 48.0, None, False),  # 72 h old
        ("2026-12-07T09:00:00+00:00", float("nan"), None, False),  # NaN never compares as older
        ("2026-12-07T09:00:00+00:00", -5.0, None, False),
        ("2027-01-06T09:00:00+00:00", 48.0, None, False),  # dated 30 days in the future
        ("2026-12-07T10:05:00+00:00", 48.0, None, True),  # a clock a few minutes ahead
        ("2026-12-07T09:00:00+00:00", 48.0, "2026-12-07T09:30:00+00:00", False),  # before the base
        ("not a time", 48.0, None, False),
        (None, 48.0, None, False),
    ],
)
def test_knowledge_from_the_future_or_from_nowhere_excuses_nothing(
    generated, max_age, base_date, used
):
    from rocm_gate.trunk.attribution import stale

    now = dt.datetime(2026, 12, 7, 10, 0, tzinfo=dt.UTC)
    base = j.moment(base_date) if base_date else None
    why = stale({"generated": generated}, now, base, max_age)
    assert (why is None) is used, why
