"""The one decision of a run against main: what each blocking failure is, what each of main's
failing tests that passes here is, and the check's conclusion. Pure functions of the run's verdicts,
the trunk state (trunk/state.py), the quarantine the run applied, and the commit its code is based
on; `github/checks.py` (publish, and the sweep through it) reads them, and nothing else decides.
The README's conclusion table is `check_conclusion` written out; tests/test_judgement.py reads the
table and holds the function to it on generated cases.

A blocking failure's class (`failure_class`), first that applies:

  quarantined    the quarantine excuses it: listed for this SKU, failing the way it was entered with
                 (an entry without fingerprints excuses any failure); a quarantined test failing
                 another way is judged as any test (the plugin makes it blocking, results/report.py)
  (the experiment, `base_experiment`: the test run again on the PR's base in fresh processes, where
  it ran; an experiment beats every inference below)
  new            the base has no such test (it is new in this PR)
  flaky_on_base  it passed and failed on the base: flaky there, named, not this PR's
  pre_existing   it failed on the base in every attempt: not this PR's
  new            it passed on the base in every attempt, and fails here
  (main's state, where no experiment settled it)
  flaky_on_main  main passed and failed it on one commit of this SKU in the window, the same way
                 (the same text: the numbers of a flake's message may change from flake to flake),
                 unless the code that ran holds main's current failure of it, this very failure
  new            main is flaky on it another way (and passes it now)
  new            main fails it, but the code that ran is based at or before main's last green commit
                 (main's failure is not in it)
  new            main fails it another way (another fingerprint)
  pre_existing   main fails it the same way, and the code that ran contains that commit (or may: its
                 base is in the suspect range, or newer than the trunk state's commits)
  pre_existing   main failed it the same way and has fixed it since, after the code's base (a
                 rebase picks up the fix)
  seen_on_other_prs  main passes it as far as it ran, and several unrelated PRs fail it the same way
                 since a base main has not run since (trunk/evidence.py): likely main's, provisional
  new            anything else: main passes it

A test main fails that passes here (`passing_class`): `fixed` only where the code that ran
contains main's break (its base at or after the first failing commit, or made after that run
started); otherwise `not_fixed_here` (the base predates the break, or may).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field

from pytest_rocm.results.fingerprint import among, quarantine_excuses

NEW, PRE_EXISTING, FLAKY_ON_MAIN, QUARANTINED, FLAKY_ON_BASE, SEEN_ON_OTHER_PRS = (
    "new",
    "pre_existing",
    "flaky_on_main",
    "quarantined",
    "flaky_on_base",
    "seen_on_other_prs",
)
FIXED, NOT_FIXED_HERE = "fixed", "not_fixed_here"
EXCUSED = (PRE_EXISTING, FLAKY_ON_MAIN, QUARANTINED, FLAKY_ON_BASE, SEEN_ON_OTHER_PRS)
# an attempt on the base that shows a failure, and one that shows a pass (base-check.json's outcomes)
BASE_FAILED = ("failed", "error", "crashed")
BASE_PASSED = ("passed",)


@dataclass(frozen=True)
class Base:
    """The main commit the code that ran is built on (trunk/attribution.py: code_base), where it
    lies on the trunk state's commit list (None: not on it), and when it was made (GitHub's
    committer date, or None)."""

    sha: str | None
    index: int | None = None
    date: dt.datetime | None = None


def place(sha: str | None, commits: list[str], date: dt.datetime | None = None) -> Base:
    index = commits.index(sha) if sha and sha in commits else None
    return Base(sha, index, date)


def _index(commits: list[str], commit: dict | None) -> int | None:
    sha = (commit or {}).get("sha")
    return commits.index(sha) if sha in commits else None


def moment(text) -> dt.datetime | None:
    """An ISO time as an aware datetime (UTC where it names no zone), or None."""
    try:
        value = dt.datetime.fromisoformat(str(text).replace("Z", "+00:00"))
    except ValueError:
        return None
    return value if value.tzinfo else value.replace(tzinfo=dt.UTC)


def _short(commit: dict | None) -> str:
    return ((commit or {}).get("sha") or "unknown")[:12]


def _contains(base: Base, since: dict, commits: list[str]) -> bool | None:
    """Whether the code based on `base` contains main's commit `since`: True, False, or None where
    it cannot be told (base off the list with no date)."""
    at = _index(commits, since)
    if base.index is not None and at is not None:
        return base.index >= at
    started = moment((since or {}).get("started"))
    if base.index is None and base.date is not None and started is not None:
        # the first run that showed the break started after its commit was made
        return base.date >= started
    return None


def _before_green(base: Base, green: dict | None, commits: list[str]) -> bool:
    """Whether the base is at or before main's last green commit (main's break is not in it)."""
    at = _index(commits, green)
    return base.index is not None and at is not None and base.index <= at


def base_experiment(experiment: dict | None, base_sha: str | None) -> tuple[str, str] | None:
    """(class, why) from the failing test run again on the PR's base (its base-check.json entry:
    `attempts`, each with an `outcome`), or None where it settles nothing (not run, skipped)."""
    if not experiment:
        return None
    attempts = [a for a in experiment.get("attempts") or () if isinstance(a, dict)]
    outcomes = [str(a.get("outcome")) for a in attempts]
    at = (base_sha or "the base")[:12]
    if "absent" in outcomes:
        return NEW, f"the base {at} has no such test: it is new in this PR"
    # an attempt that failed with an infrastructure signature says nothing of the code on the base;
    # one that failed and passed within its own process (its rerun: a `flaky` verdict) is both
    failed = sum(o in BASE_FAILED and not a.get("signature") for o, a in zip(outcomes, attempts))
    passed = sum(
        o in BASE_PASSED or a.get("verdict") == "flaky" for o, a in zip(outcomes, attempts)
    )
    ran = f"{len(outcomes)} attempt(s) in fresh processes"
    if failed and passed:
        return FLAKY_ON_BASE, (
            f"run again on the base {at}: passed {passed} and failed {failed} of {ran}: flaky "
            "there, not this PR's"
        )
    if failed:
        return (
            PRE_EXISTING,
            f"run again on the base {at}: failed in {failed} of {ran}: not this PR's",
        )
    if passed:
        return NEW, (
            f"run again on the base {at}: passed in {passed} of {ran}, and fails here: this PR's"
        )
    return None


def failure_class(
    fingerprint: str,
    entry: dict | None,
    base: Base,
    commits: list[str],
    quarantine: dict | None = None,
    experiment: dict | None = None,
    other_prs: dict | None = None,
) -> tuple[str, str]:
    """(class, why) of a blocking failure with this fingerprint, against the quarantine entry the
    run applied, the test run again on the PR's base (`experiment`, its base-check.json entry), and
    the test's trunk entry (None: main passes it throughout the window)."""
    mine = fingerprint or "(no message)"
    if quarantine is not None and quarantine_excuses(quarantine, fingerprint):
        return (
            QUARANTINED,
            f"quarantined: {quarantine.get('reason') or 'listed in the quarantine file'}",
        )
    settled = base_experiment(experiment, base.sha)
    if settled is not None:
        return settled
    flake = _flake(fingerprint, entry)
    if entry is not None and entry["state"] in ("passing", "flaky") and entry["flaky_count"]:
        theirs = "; ".join(f or "(no message)" for f in entry.get("flaky_fingerprints", [])[:2])
        return flake or (
            NEW,
            f"flaky on main, but this failure differs: main: {theirs}; here: {mine}",
        )
    if entry is not None and entry["state"] == "failing":
        return _against_mains_failure(fingerprint, entry, base, commits, flake)
    earlier = _earlier_break(fingerprint, entry, base, commits)
    if earlier is not None:
        return earlier
    if other_prs:
        return SEEN_ON_OTHER_PRS, (
            f"likely main's, not yet settled: {other_prs['prs']} other PRs on {other_prs['bases']} "
            f"bases fail it the same way since {_short({'sha': other_prs['since']})}, and no run "
            "based since passed it; main's own run or the base experiment decides"
        )
    return NEW, "main passes this test"


def _against_mains_failure(
    fingerprint: str, entry: dict, base: Base, commits: list[str], flake
) -> tuple[str, str]:
    """A failure of a test main fails now. Where the code that ran does not hold main's current
    break, or fails another way, an earlier break of main's that it does hold (main fixed it, then
    broke the test again: a revert and a re-land) may still be this failure's."""
    mine = fingerprint or "(no message)"
    since, green = entry["since"], entry.get("last_green")
    earlier = _earlier_break(fingerprint, entry, base, commits)
    if _before_green(base, green, commits):
        return (
            flake
            or earlier
            or (
                NEW,
                f"main fails this test since {_short(since)}, but this run's code is based on "
                f"{(base.sha or 'unknown')[:12]}, at or before main's last green commit {_short(green)}: "
                "main's failure is not in the code that ran",
            )
        )
    if not among(fingerprint, entry["fingerprints"]):
        theirs = "; ".join(f or "(no message)" for f in entry["fingerprints"][:2])
        return (
            flake
            or earlier
            or (
                NEW,
                f"main fails this test since {_short(since)}, but differently: main: {theirs}; here: {mine}",
            )
        )
    contains = _contains(base, since, commits)
    where = (
        "based on it or later"
        if contains
        else "based inside the suspect range"
        if base.index is not None
        else "based on a commit the trunk state does not list (newer than its last main run, or "
        "older than its commit list)"
        if base.sha
        else "no base named"
    )
    return (
        PRE_EXISTING,
        f"pre-existing on main since {_short(since)}, the same failure ({where})",
    )


def _earlier_break(
    fingerprint: str, entry: dict | None, base: Base, commits: list[str]
) -> tuple[str, str] | None:
    """PRE_EXISTING where the code that ran holds a break main had and fixed in the window, failing
    the same way (a PR based inside it fails it as main did; a rebase picks up the fix)."""
    for gone in reversed((entry or {}).get("breaks") or []):
        if not among(fingerprint, gone["fingerprints"]) or _before_green(
            base, gone.get("last_green"), commits
        ):
            continue
        # the code must hold the break and not the fix: a base on the commit list after main's last
        # green commit before the break (checked above) holds it, or may (the suspect range); one
        # off the list is placed by its date
        fixed = _contains(base, gone["fixed"], commits)
        broke = base.index is not None or _contains(base, gone["since"], commits)
        if fixed is False and broke:
            return PRE_EXISTING, (
                f"main failed this test the same way from {_short(gone['since'])} until "
                f"{_short(gone['fixed'])} fixed it, after this run's base {(base.sha or 'unknown')[:12]}: "
                "a rebase picks up the fix"
            )
    return None


def _flake(fingerprint: str, entry: dict | None) -> tuple[str, str] | None:
    """FLAKY_ON_MAIN where main flaked on the test in the window failing this way. A flake's message
    may count what changes from flake to flake: the same text is the flake, whatever main's newest
    commit said (a flake that failed every attempt there reads as failing)."""
    if entry is None or not entry["flaky_count"]:
        return None
    if not among(fingerprint, entry.get("flaky_fingerprints"), shape_only=True):
        return None
    last = (entry.get("flaky_commits") or ["unknown"])[-1]
    return FLAKY_ON_MAIN, (
        f"flaky on main, failing the same way: passed and failed on {entry['flaky_count']} "
        f"main commit(s), last {last[:12]}"
    )


def passing_class(entry: dict, base: Base, commits: list[str]) -> tuple[str, str]:
    """(class, why) of a test main fails (its entry is `failing`) that passes in this run."""
    since = entry["since"]
    if _contains(base, since, commits):
        return FIXED, f"main fails it since {_short(since)}; it passes here"
    if _before_green(base, entry.get("last_green"), commits):
        return NOT_FIXED_HERE, (
            f"main fails it since {_short(since)}; it passes here because this run's code is based on "
            f"{base.sha[:12]}, before main broke it (last green {_short(entry.get('last_green'))})"
        )
    return NOT_FIXED_HERE, (
        f"main fails it since {_short(since)}; it passes here, but this run's code may be based before "
        f"main broke it ({(base.sha or 'no base named')[:12]})"
    )


# the check's conclusion ------------------------------------------------------------------------

# gate-report conclusion -> check-run conclusion, where nothing else applies (a required check
# passes on `success`, `neutral` and `skipped`)
CHECK_OF_GATE = {
    "success": "success",
    "failure": "failure",
    "neutral": "neutral",
    "incomplete": "action_required",
    "skipped": "action_required",
}
PASSING = ("success", "neutral")


@dataclass(frozen=True)
class RunFacts:
    """What the conclusion reads of one run (`facts_of`)."""

    gate: str  # the gate report's conclusion
    gate_reason: str
    complete: bool = True
    incomplete_causes: tuple[str, ...] = ()
    # blocking gates that ended infra with neither a rerun nor a failed health probe
    unproven_infra: tuple[str, ...] = ()
    change_collection_error: bool = False  # a test file failed to collect for the change's reason
    # each blocking failure's class (every one NEW where no trunk state judged the run)
    classes: dict[str, str] = field(default_factory=dict)
    soft_rollout: bool = False  # the repository's `incomplete: neutral`
    simulated: bool = False  # results from a simulated platform profile


def unproven_infra(tests: dict) -> tuple[str, ...]:
    """Blocking gates that ended `infra` with neither a rerun nor a failed health probe behind the
    verdict: not accepted as an infrastructure fault."""
    return tuple(
        sorted(
            nodeid
            for nodeid, t in tests.items()
            if t["blocking"]
            and t["verdict"] == "infra"
            and len(t["attempts"]) < 2
            and not any(not p.get("ok", True) for p in t["probes"])
        )
    )


def facts_of(
    report: dict,
    classes: dict[str, str] | None = None,
    soft_rollout: bool = False,
    simulated: bool = False,
) -> RunFacts:
    """The facts of a gate report; `classes`: its blocking failures' classes against main (None:
    judged alone, every one new)."""
    from pytest_rocm.schemas.artifacts import blocking_failures

    if classes is None:
        classes = {name: NEW for name in blocking_failures(report["tests"])}
    return RunFacts(
        gate=report["conclusion"],
        gate_reason=report.get("conclusion_reason") or report["conclusion"],
        complete=bool(report["complete"]),
        incomplete_causes=tuple(report.get("incomplete_causes") or ()),
        unproven_infra=unproven_infra(report["tests"]),
        change_collection_error=any(
            e.get("cause") == "change" for e in report.get("collection_errors") or ()
        ),
        classes=dict(classes),
        soft_rollout=soft_rollout,
        simulated=simulated,
    )


@dataclass(frozen=True)
class Decision:
    conclusion: str  # the check run's
    why: str
    # the table's conclusion before soft rollout and simulation: `incomplete` and `skipped` named
    judged: str


def check_conclusion(facts: RunFacts) -> Decision:
    """The check run's conclusion and why: the README's conclusion table."""
    judged, why = _by_gate(facts)
    conclusion = CHECK_OF_GATE.get(judged, "action_required")
    if judged in ("incomplete", "skipped") and facts.soft_rollout:
        conclusion = "neutral"
    if facts.simulated and conclusion in PASSING:
        conclusion = "action_required"
    return Decision(conclusion, why, judged)


def _by_gate(facts: RunFacts) -> tuple[str, str]:
    """(conclusion before soft rollout and simulation: `incomplete` and `skipped` as such, why)."""
    new = sorted(n for n, c in facts.classes.items() if c == NEW)
    excused = sorted(n for n, c in facts.classes.items() if c in EXCUSED)
    if facts.gate == "failure":
        if new:
            if not excused:
                return "failure", facts.gate_reason
            return "failure", (
                f"{len(new)} blocking gate(s) regressed, new in this run: {', '.join(new[:5])}; "
                f"{len(excused)} more already failing or flaky on main, not counted"
            )
        if not facts.classes or facts.change_collection_error:
            return "failure", facts.gate_reason
        none_new = (
            f"{len(excused)} blocking failure(s), none new: already failing, flaky or quarantined on "
            f"main ({', '.join(excused[:5])})"
        )
        if not facts.complete:
            return "incomplete", (
                f"{none_new}; but the run is incomplete: " + "; ".join(facts.incomplete_causes[:3])
            )
        if facts.unproven_infra:
            return "incomplete", (
                f"{none_new}; but {len(facts.unproven_infra)} blocking gate(s) ended infra without "
                f"evidence, e.g. {facts.unproven_infra[0]}"
            )
        return "neutral", none_new
    if facts.gate == "neutral" and facts.unproven_infra:
        return "incomplete", (
            f"infra verdict without evidence on {len(facts.unproven_infra)} blocking gate(s) (no rerun, "
            f"no failed health probe), e.g. {facts.unproven_infra[0]}: not accepted as an "
            "infrastructure fault"
        )
    if facts.gate in ("neutral", "incomplete", "skipped", "success"):
        return facts.gate, facts.gate_reason
    return "incomplete", f"unknown gate conclusion {facts.gate!r}"


# trunk health ----------------------------------------------------------------------------------


def health_cell(blocking_failed: int, quarantined_failed: int) -> str:
    """A group's state in one main run (the dashboard's trunk health, the tracker): `red` where a
    blocking gate failed, `quarantined` where only quarantined gates did (main still fails them: a
    quarantine stops the blocking, not the failing, and is no recovery), else `green`."""
    if blocking_failed:
        return "red"
    return "quarantined" if quarantined_failed else "green"
