"""From a run's artifacts to the content of its check run: conclusion, summary, annotations,
buttons.

The conclusion is trunk/judgement.py's `check_conclusion` (the README's conclusion table), the one
place where the gate's conclusion and main's state become GitHub's. A required check passes on
`success`, `neutral` and `skipped`, so `neutral` is given only with infrastructure evidence after
the automatic reruns or where every blocking failure is main's, and a run that did not execute what
it collected, or ran no blocking gate, blocks (`action_required`) unless the repository chose soft
rollout (`neutral`, with a warning on top).

Everything is cut to GitHub's limits here (summary and text 65,535 characters, annotation titles
255, buttons' label and identifier 20 and description 40): a long list ends "and N more", it is
never refused. Every string that comes from the results (ids, messages, reasons, runner and image
names, group names) is written through `schemas/markdown.py`, so test output cannot add a heading,
link, image, mention or HTML.

Results from a simulated platform (`--rocm-platform`) publish only when the caller allows it (a
demo): then the title and the summary say SIMULATED and the conclusion is never `success` or
`neutral`, which both pass a required check (`action_required` instead).
"""

from __future__ import annotations

import datetime as dt
import re
import shlex
from dataclasses import dataclass, field

from pytest_rocm.schemas import markdown as md
from pytest_rocm.schemas.artifacts import describe_reference, manifest_stack
from rocm_gate.github.artifacts import Results
from rocm_gate.trunk import judgement

TEXT_LIMIT = 65535  # bytes of a check's summary, and of its text (GitHub counts UTF-8 bytes)
CUT_NOTE = "\n... (cut at GitHub's limit)"
ANNOTATIONS_PER_REQUEST = 50
# at most this many annotations (10 requests): GitHub allows about 80 content-creating requests a
# minute and 500 an hour (docs.github.com/en/rest/using-the-rest-api/rate-limits-for-the-rest-api);
# 30,000 failures were 600 requests. The rest are counted in the summary, and listed in the run's
# gate-report.json.
MAX_ANNOTATIONS = 500
ANNOTATION_TITLE_LIMIT = 255
ANNOTATION_MESSAGE_LIMIT = 4000  # GitHub takes 64 KB; a reader wants the first lines
EVIDENCE_LINES = 6
PARITY_ROWS = 40  # the parity table is in the fixed tail of the summary: bounded, so the lists above always fit
INCOMPLETE_POLICIES = ("block", "neutral")

# the run died before it wrote a gate report: the workflow run's conclusion decides
# anything else: action_required
MISSING_RESULTS = {"cancelled": "cancelled", "timed_out": "timed_out"}

ACTIONS = {
    "rerun-amd": {
        "label": "Re-run AMD",
        "identifier": "rerun-amd",
        "description": "Rerun the failed and infra AMD gates",
    },
    "rerun-all": {
        "label": "Re-run all",
        "identifier": "rerun-all",
        "description": "Rerun every AMD gate of this commit",
    },
}


@dataclass
class CheckContent:
    name: str
    conclusion: str
    title: str
    summary: str
    text: str = ""
    annotations: list[dict] = field(default_factory=list)
    actions: list[dict] = field(default_factory=list)

    def output(self, annotations: list[dict] | None = None) -> dict:
        # GitHub refuses a summary or text over 65,535 bytes (not characters): the last guard
        out = {"title": self.title, "summary": md.cut_page(self.summary, TEXT_LIMIT, CUT_NOTE)}
        if self.text:
            out["text"] = md.cut_page(self.text, TEXT_LIMIT, CUT_NOTE)
        if annotations:
            out["annotations"] = annotations
        return out


def check_name(results: Results | None, runner_class: str | None) -> str:
    """`rocm-gate / MI300X-8`: the runner class given (upper case), else the SKU the run saw, else
    its vendor. The rerun handler reads the class back from the name (lower case, as runner labels
    are)."""
    label = runner_class.upper() if runner_class else None
    if not label and results is not None:
        platform = results.manifest.get("platform") or {}
        skus = sorted({g.get("sku") for g in platform.get("gpus") or [] if g.get("sku")})
        label = "/".join(skus) or platform.get("vendor") or "unknown"
    return md.plain(f"rocm-gate / {(label or 'unknown').upper()}", 100)


RULE_CHANGES_SHOWN = 10


def _rules_warnings(manifest: dict) -> list[str]:
    """What the tree under test sets otherwise than the default branch's rules of the verdict and
    settings of what the gates compare, record or select (plugin/rules.py, plugin/default_branch.py):
    the run used the default branch's, and a reviewer sees the change. Blocking gates the run
    collected and did not run are named. A run of a pull request without such rules says it took
    them from its own tree."""
    config = (
        manifest.get("verdict_config") if isinstance(manifest.get("verdict_config"), dict) else {}
    )
    out = _deselected(manifest)
    rules = config.get("rules")
    if not isinstance(rules, dict):
        if (manifest.get("provenance") or {}).get("event") in (
            "pull_request",
            "pull_request_target",
        ):
            out.append(
                "this run took the rules of the verdict (quarantine, reruns, infra signatures, "
                "baselines, ...) and what the gates compare and select from the PR's own tree: the "
                "gate workflow gave no `--rocm-rules` (the default branch's checkout)"
            )
        return out
    changed = [c for c in rules.get("changed") or [] if isinstance(c, dict)]
    if not changed:
        return out
    items = [
        md.code(str(c.get("setting")))
        + (
            f" file {md.code(str(c['file']))} {md.code(str(c.get('tree')))}"
            if c.get("file")
            else f": {md.code(str(c.get('tree')))} here, {md.code(str(c.get('rules')))} on the default branch"
        )
        for c in changed[:RULE_CHANGES_SHOWN]
    ]
    more = (
        f"; and {len(changed) - RULE_CHANGES_SHOWN} more"
        if len(changed) > RULE_CHANGES_SHOWN
        else ""
    )
    source = rules.get("file")
    where = (
        f"the default branch's {md.code(str(source))}"
        if isinstance(source, str) and source
        else "the default branch, which has no pytest configuration file"
    )
    return out + [
        "this PR changes the rules of the verdict, or what the gates compare, record or select; this "
        f"run used {where} (the PR's settings apply after merge): " + "; ".join(items) + more
    ]


def _deselected(manifest: dict) -> list[str]:
    """Blocking gates the run collected and then did not run (`deselected`): never a pass."""
    dropped = manifest.get("deselected")
    if not isinstance(dropped, dict) or not dropped:
        return []
    names = sorted(str(n) for n in dropped)
    shown = ", ".join(md.code(n) for n in names[:RULE_CHANGES_SHOWN])
    more = f" and {len(names) - RULE_CHANGES_SHOWN} more" if len(names) > RULE_CHANGES_SHOWN else ""
    return [
        f"{len(names)} blocking gate(s) collected and not run (deselected), so the run is incomplete: "
        f"{shown}{more}"
    ]


def _first_lines(*texts: str, limit: int = EVIDENCE_LINES) -> list[str]:
    lines = []
    for text in texts:
        lines += [line for line in (text or "").splitlines() if line.strip()]
        if len(lines) >= limit:
            break
    return [line[:300] for line in lines[:limit]]


def reproduce_command(nodeid: str, manifest: dict) -> str:
    """The command that runs one test the way the run did: its config file and simulated platform,
    if any."""
    args, keep = list(manifest.get("args") or []), []
    for i, arg in enumerate(args):
        if arg in ("-c", "--rootdir") and i + 1 < len(args):
            keep += [arg, args[i + 1]]
        elif arg.startswith(("--rocm-platform=", "--rootdir=", "--rocm-model-dir=")):
            keep.append(arg)
    return shlex.join(["python", "-m", "pytest", *keep, nodeid])


def _regression_item(nodeid: str, test: dict, manifest: dict) -> str:
    attempts = ", ".join(a["status"] for a in test["attempts"])
    why = test.get("verdict_reason") or test.get("message") or ""
    head = (
        f"- **{md.code(nodeid)}** ({md.code(test.get('group') or 'no group')}; attempts: {attempts})"
        + (f": {md.code(why)}" if why else "")
    )
    evidence = md.block(_first_lines(test.get("message", ""), test.get("detail", "")), indent="  ")
    return "\n".join(
        filter(
            None,
            [head, evidence, f"  reproduce: {md.code(reproduce_command(nodeid, manifest), 600)}"],
        )
    )


def _infra_item(nodeid: str, test: dict, runner: str) -> str:
    attempts = "; ".join(
        f"{a['status']} on {md.code(a.get('worker') or 'main')} GPUs "
        f"{md.code(a.get('gpus') if a.get('gpus') is not None else 'none')}"
        + (
            f" ({md.code(a['signature']['name'] + ': ' + a['signature']['line'][:200])})"
            if a.get("signature")
            else ""
        )
        for a in test["attempts"]
    )
    probes = "; ".join(
        f"probe {'ok' if p.get('ok') else 'FAILED'} on devices {md.code(p.get('devices'))}"
        for p in test["probes"]
    )
    reruns = len(test["attempts"]) - 1
    return (
        f"- {md.code(nodeid)} on runner {md.code(runner)}: {md.code(test.get('verdict_reason', ''))}\n"
        f"  {reruns} rerun(s): {attempts}" + (f"; {probes}" if probes else "")
    )


def _stack_lines(manifest: dict) -> list[str]:
    stack = manifest_stack(manifest)
    sku = (
        f"{', '.join(stack['skus'])} ({stack['gpu_count']} GPUs)"
        if stack["skus"]
        else stack["description"]
    )
    rows = [
        ("SKU", sku),
        ("ROCm", stack["rocm"]),
        ("driver", stack["driver"]),
        ("torch", stack["torch"]),
        ("framework", stack["framework"] or "not recorded"),
        ("image", stack["image"]),
        ("runner", manifest.get("runner")),
        ("tested commit", manifest.get("git_sha")),
    ]
    return ["| stack | |", "|---|---|"] + [
        f"| {k} | {md.cell(v) if v else 'not recorded'} |" for k, v in rows
    ]


def _parity_lines(parity: dict | None, base: dict | None) -> list[str]:
    if not parity:
        return [
            "No parity report in this run (`rocm-gate parity ... --out DIR` writes `DIR/parity.json`; the gate "
            "job's results folder carries it when DIR is that folder)."
        ]
    reference = (parity.get("inputs") or {}).get("reference") or {}
    lines = [
        f"Reference: {md.code(describe_reference(reference))}.",
        "",
        "| group | ROCm/CUDA parity | both pass / CUDA pass | merge-blocking | gaps | vs base |",
        "|---|---|---|---|---|---|",
    ]
    base_groups = (base or {}).get("groups") or {}
    groups = sorted((parity.get("groups") or {}).items())
    if not groups:
        return ["The run's parity report has no groups."]
    for group, row in groups[:PARITY_ROWS]:
        value = row.get("parity")
        change = ""
        if (
            group in base_groups
            and value is not None
            and base_groups[group].get("parity") is not None
        ):
            delta = value - base_groups[group]["parity"]
            change = f"{delta:+.1%}" if abs(delta) >= 0.0005 else "same"
        lines.append(
            f"| {md.cell(group)} | {f'{value:.1%}' if value is not None else 'n/a'} | {row['both_passing']}/"
            f"{row['reference_passing']} | {row['blocking']} | {len(row['gaps'])} | {change or 'no base'} |"
        )
    if len(groups) > PARITY_ROWS:
        lines.append(f"| and {len(groups) - PARITY_ROWS} more groups (parity.json) | | | | | |")
    return lines


def _fill(sections: list[tuple[str, list[str]]], fixed: str, budget: int, more_where: str) -> str:
    """Fixed parts always; then each section's items in order while they fit, the rest as "and N
    more"."""
    size = md.utf8_len
    out, used = [], size(fixed)
    for heading, items in sections:
        if not items:
            continue
        block = [f"\n### {heading} ({len(items)})"]
        used += size(block[0]) + 1
        for i, item in enumerate(items):
            tail = f"- and {len(items) - i} more ({more_where})"
            if used + size(item) + 1 + size(tail) + 200 > budget:
                block.append(tail)
                used += size(tail) + 1
                break
            block.append(item)
            used += size(item) + 1
        out += block
    return md.cut_page(fixed + "\n".join(out), budget, CUT_NOTE)


SIMULATED = "SIMULATED"


def _against_trunk(
    results: Results,
    trunk: dict | list[dict] | None,
    warnings: list[str],
    base_sha: str | None = None,
    base_date=None,
    trunk_max_age_h: float = 48.0,
    now: dt.datetime | None = None,
):
    """(attribution, the trunk state used) of a run's blocking failures against main's state on
    its SKU (trunk/) and the run's base experiment (base-check.json), or (None, None) where neither
    can judge: no usable state (none, none for its SKU, or too old at `now`, the clock's by
    default: each said in `warnings`) and no experiment."""
    from rocm_gate.trunk.attribution import attribute

    sku = "/".join(manifest_stack(results.manifest)["skus"])
    chosen = _usable_trunk(trunk, sku, warnings, base_date, trunk_max_age_h, now)
    base_check = getattr(results, "base_check", None)
    if chosen is None:
        if not (base_check or {}).get("tests"):
            return None, None
        # no state of main: the experiment alone judges what it ran
        chosen = {"sku": sku, "tests": {}, "commits": [], "main_commits": 0, "newest": None}
    provenance = results.provenance
    if base_sha:  # GitHub's fact wins over the run's claim
        provenance = {**provenance, "base_sha": base_sha, "merge_base": None}
    found = attribute(
        results.report["tests"], provenance, chosen, results.parity, base_date, base_check
    )
    return found, chosen


def _usable_trunk(trunk, sku: str, warnings: list[str], base_date, max_age_h, now) -> dict | None:
    """The trunk state of the run's SKU, where one is given and may be used (else None, the reason
    said in `warnings`)."""
    if not trunk:
        return None
    from rocm_gate.trunk.attribution import stale

    states = trunk if isinstance(trunk, list) else [trunk]
    chosen = next((t for t in states if t.get("sku") == sku), None)
    if chosen is None:
        given = ", ".join(md.code(t.get("sku")) for t in states)
        warnings.append(
            f"the trunk state given is for {given}, this run is on {md.code(sku)}: "
            "not used; every failure is judged on this run alone"
        )
        return None
    too_old = stale(chosen, now or dt.datetime.now(dt.UTC), base_date, max_age_h)
    if too_old:
        warnings.append(
            f"{md.code(too_old)}: not used; every failure is judged on this run alone (main's "
            "newer state judges it again)"
        )
        return None
    return chosen


def _trunk_items(found, tests: dict, manifest: dict, trunk: dict) -> dict:
    tracker = trunk.get("tracker_url")
    link = f" (tracker: {md.code(tracker)})" if tracker else ""

    def item(nodeid: str) -> str:
        cuda = " **also fails on the CUDA reference**" if nodeid in found.on_cuda_too else ""
        return f"- {md.code(nodeid)}{cuda}: {md.code(found.reasons[nodeid], 600)}"

    return {
        "pre_existing": [
            item(n) + link for n in found.not_blocking() if found.classes[n] == "pre_existing"
        ],
        "flaky_on_main": [
            item(n) for n in found.not_blocking() if found.classes[n] == "flaky_on_main"
        ],
        "flaky_on_base": [
            item(n) for n in found.not_blocking() if found.classes[n] == "flaky_on_base"
        ],
        "seen_on_other_prs": [
            item(n) for n in found.not_blocking() if found.classes[n] == "seen_on_other_prs"
        ],
        "new_reasons": {n: found.reasons[n] for n in found.new()},
        "fixed": [
            f"- {md.code(n)}: main fails it since {md.code((trunk['tests'][n]['since'] or {}).get('sha', '')[:12])}"
            f"; it passes here"
            for n in sorted(found.fixed)
        ],
        "not_fixed": [
            f"- {md.code(n)}: {md.code(why, 600)}" for n, why in sorted(found.not_fixed.items())
        ],
    }


@dataclass
class _Sorted:
    """A run's tests as the check shows them."""

    blocking_regressions: list[tuple[str, dict]]  # blocking, and new where main's state judged them
    other_regressions: list[tuple[str, dict]]  # shadow gates, unconfirmed failures, main's own
    quarantined: list[tuple[str, dict]]  # failing the way the quarantine excuses
    infra: list[tuple[str, dict]]
    flaky: list[tuple[str, dict]]
    gaps: list[tuple[str, dict]]
    ran: int  # blocking gates that ran


def _sort_tests(tests: dict, found) -> _Sorted:
    attributed = set(found.not_blocking()) if found else set()
    # a quarantined test that passes is no news here: whether main's failure is fixed is the trunk's
    quarantined = [
        (n, t)
        for n, t in tests.items()
        if t.get("quarantine") and t["quarantine"].get("excused", True) and t["verdict"] != "pass"
    ]
    excused = {n for n, _ in quarantined}
    blocking = [
        (n, t)
        for n, t in tests.items()
        if t["verdict"] == "regression" and t["blocking"] and n not in attributed
    ]
    # failures that do not block: non-blocking (shadow) gates, failures no rerun confirmed, and
    # (annotated as warnings) failures main's state excuses
    other = [
        (n, t)
        for n, t in tests.items()
        if t["verdict"] in ("regression", "unconfirmed")
        and (not (t["blocking"] and t["verdict"] == "regression") or n in attributed)
        and n not in excused
    ]
    return _Sorted(
        blocking_regressions=blocking,
        other_regressions=other,
        quarantined=quarantined,
        infra=[(n, t) for n, t in tests.items() if t["verdict"] == "infra"],
        flaky=[(n, t) for n, t in tests.items() if t["verdict"] == "flaky"],
        gaps=[(n, t) for n, t in tests.items() if t["verdict"] == "known_gap"],
        ran=sum(
            1
            for t in tests.values()
            if t["blocking"] and t["verdict"] in ("pass", "regression", "infra", "flaky")
        ),
    )


def _warnings(
    decision, incomplete_policy: str, simulated: str | None, manifest: dict, warnings: list[str]
) -> list[str]:
    """What the reader must know before anything else: a simulated platform, soft rollout, rules a
    PR changed, and what the trunk state could not do (`warnings`, from `_against_trunk`)."""
    out = []
    if simulated:
        out.append(
            f"{SIMULATED}: these results come from the simulated platform profile "
            f"{md.code(simulated)} (`--rocm-platform`), not from AMD hardware; nothing here proves the "
            "commit on a GPU"
        )
    out += warnings
    if decision.judged in ("incomplete", "skipped") and incomplete_policy == "neutral":
        out.append(
            f"soft rollout: this run is {decision.judged} ({md.code(decision.why)}) and reports "
            "`neutral` only because the repository chose `incomplete: neutral`; nothing here proves "
            "the commit"
        )
    return out + _rules_warnings(manifest)


def _head(
    name: str, decision, simulated, warnings, notes, found, trunk, lists: _Sorted, report: dict
) -> list[str]:
    head = [
        f"## {md.plain(name)}: **{decision.conclusion}**"
        + (f" ({SIMULATED})" if simulated else ""),
        "",
        f"Why: {md.code(decision.why)}",
        "",
    ]
    head += [f"> [!WARNING]\n> {w}\n" for w in warnings]
    head += [f"- {note}" for note in notes] + ([""] if notes else [])
    if found is not None:
        newest = (trunk.get("newest") or {}).get("sha") or "none"
        against = (
            f"Judged against main's state on {md.code(trunk['sku'])} ({trunk['main_commits']} main "
            f"commit(s), newest {md.code(newest[:12])})"
            if trunk.get("main_commits")
            else f"Judged on this run and its failures run again on the PR's base (no state of main on {md.code(trunk['sku'])})"
        )
        head += [
            f"{against}; this run's code is based on {md.code((found.base or 'unknown')[:12])}"
            + (f" ({md.code(found.note)})" if found.note else "")
            + (f"; {md.code(found.experiment_note)}" if found.experiment_note else "")
            + ".",
            "",
        ]
    head.append(
        f"{lists.ran} blocking gate(s) ran; {len(lists.blocking_regressions)} regressed, "
        f"{len(lists.infra)} infra, {len(lists.flaky)} flaky, {len(lists.gaps)} known gap(s), "
        f"{len(report['tests'])} test(s) in all."
    )
    return head


def _incomplete_lines(report: dict) -> list[str]:
    if report["complete"]:
        return []
    lines = [
        "",
        "**The run is incomplete**: "
        + "; ".join(md.code(c) for c in report["incomplete_causes"][:10]),
    ]
    if report["never_ran"]:
        lines.append(
            f"{len(report['never_ran'])} gate(s) never ran, e.g. {md.code(report['never_ran'][0])}."
        )
    return lines


def _sections(
    lists: _Sorted, against: dict | None, report: dict, manifest: dict
) -> list[tuple[str, list[str]]]:
    """The lists between the head and the fixed tail, in the order a reader needs them."""
    tests, runner = report["tests"], str(manifest.get("runner") or "unknown")
    against = against or {}
    new_reasons = against.get("new_reasons") or {}

    def gap(t: dict, key: str) -> str:
        return md.code((t.get("known_gap") or {}).get(key, ""))

    return [
        ("Pre-existing on main (not blocking)", against.get("pre_existing", [])),
        ("Flaky on main (not blocking)", against.get("flaky_on_main", [])),
        ("Flaky on the PR's base (not blocking)", against.get("flaky_on_base", [])),
        (
            "Likely main's, seen on other PRs (not blocking until main's own run decides)",
            against.get("seen_on_other_prs", []),
        ),
        (
            "Regressions (blocking)" + (": new in this PR" if against else ""),
            [
                _regression_item(n, t, manifest)
                + (f"\n  decided by: {md.code(new_reasons[n], 600)}" if n in new_reasons else "")
                for n, t in lists.blocking_regressions
            ],
        ),
        ("Fixed by this PR (failing on main, passing here)", against.get("fixed", [])),
        (
            "Failing on main, passing here, not fixed by this PR (its base predates the break)",
            against.get("not_fixed", []),
        ),
        (
            "Quarantined (ran, never blocks)",
            [
                f"- {md.code(n)}: {t['verdict']}; {md.code(t['quarantine'].get('reason', ''))}"
                for n, t in lists.quarantined
            ],
        ),
        ("Infrastructure faults", [_infra_item(n, t, runner) for n, t in lists.infra]),
        (
            "Other failures (non-blocking gates, or not confirmed by a rerun)",
            [
                _regression_item(n, t, manifest)
                for n, t in lists.other_regressions
                if n not in against.get("excused", ())
            ],
        ),
        (
            "Collection errors",
            [
                f"- {md.code(e['nodeid'])} ({e['cause']})"
                + (
                    f": {md.code(_first_lines(e['detail'], limit=1)[0])}"
                    if e["detail"].strip()
                    else ""
                )
                for e in report["collection_errors"]
            ],
        ),
        (
            "Known gaps touched",
            [f"- {md.code(n)}: {gap(t, 'reason')} {gap(t, 'issue')}" for n, t in lists.gaps],
        ),
        (
            "Known gaps that now pass (remove the marker, close the issue)",
            [
                f"- {md.code(n)}: {gap(t, 'issue')}"
                for n, t in tests.items()
                if t.get("known_gap") and t["verdict"] == "pass"
            ],
        ),
        (
            "Flaky (passed on rerun, not blocking)",
            [f"- {md.code(n)}: {md.code(t.get('verdict_reason', ''))}" for n, t in lists.flaky],
        ),
    ]


def _details(report: dict, more_where: str) -> str:
    """The check's text: every skip reason and every verdict that is not a pass."""
    return _fill(
        [
            (
                "Skipped, with reasons",
                [
                    f"- {r['count']} {md.code(r['status'])}: {md.code(r['reason'])}"
                    for r in report["skip_reasons"]
                ],
            ),
            (
                "Non-pass verdicts",
                [
                    f"- {md.code(n)}: {t['verdict']} ({t['status']})"
                    for n, t in report["tests"].items()
                    if t["verdict"] != "pass"
                ],
            ),
        ],
        "",
        TEXT_LIMIT,
        more_where,
    ).strip()


def _title(lists: _Sorted, why: str, simulated) -> str:
    title = md.plain(
        f"{len(lists.blocking_regressions)} regression(s)" if lists.blocking_regressions else why,
        200,
    )
    # the reason comes from the results: it must not pass for a placeholder
    if title.startswith(PLACEHOLDER_TITLES):
        title = md.plain(f"results: {title}", 200)
    return md.plain(f"{SIMULATED}: {title}", 200) if simulated else title


def build(
    results: Results,
    name: str,
    details_url: str | None = None,
    path_prefix: str = "",
    incomplete_policy: str = "block",
    base_parity: dict | None = None,
    notes: list[str] = (),
    trunk: dict | list[dict] | None = None,
    base_sha: str | None = None,
    base_date=None,
    trunk_max_age_h: float = 48.0,
    unavailable: str | None = None,
    now: dt.datetime | None = None,
) -> CheckContent:
    """The check of a run's results. `notes`: what the publisher established about the run
    (provenance), shown under the head. `trunk`: main's state per SKU (trunk/state.py; one, or a
    list): the run's failures are classed against its SKU's. `unavailable`: why main's state could
    not be had (the check says so, and judges the run alone). The conclusion is trunk/judgement.py's,
    the README's table; a simulated platform's results never pass."""
    report, manifest = results.report, results.manifest
    against_trunk: list[str] = []
    if unavailable:
        against_trunk.append(
            f"main's state was unavailable ({md.code(unavailable, 400)}): every failure is judged on "
            "this run alone; the sweep judges a blocked check again once main's state can be read"
        )
    found, trunk = _against_trunk(
        results, trunk, against_trunk, base_sha, base_date, trunk_max_age_h, now
    )
    simulated = results.simulated_profile
    decision = judgement.check_conclusion(
        judgement.facts_of(
            report,
            found.classes if found else None,
            soft_rollout=incomplete_policy == "neutral",
            simulated=bool(simulated),
        )
    )
    warnings = _warnings(decision, incomplete_policy, simulated, manifest, against_trunk)
    lists = _sort_tests(report["tests"], found)
    against = _trunk_items(found, report["tests"], manifest, trunk) if found else None
    if against is not None:
        against["excused"] = set(found.not_blocking())
    more_where = (
        f"the run's artifacts: {details_url}" if details_url else "the run's gate-report.json"
    )
    head = _head(name, decision, simulated, warnings, notes, found, trunk, lists, report)
    # new failures are annotated as failures; main's own, and what does not block, as warnings
    marks = annotations(lists.blocking_regressions, lists.other_regressions, path_prefix)
    if len(marks) > MAX_ANNOTATIONS:
        head.append(
            f"The first {MAX_ANNOTATIONS} of {len(marks)} failures are annotated (GitHub's rate "
            f"limits); every one is in {more_where}."
        )
        marks = marks[:MAX_ANNOTATIONS]
    head += _incomplete_lines(report)
    # the lists between the head and the fixed tail, so the tail always fits
    tail = "\n".join(
        [
            "",
            "### Parity with CUDA",
            *_parity_lines(results.parity, base_parity),
            "",
            "### Pinned stack",
            *_stack_lines(manifest),
        ]
    )
    sections = _sections(lists, against, report, manifest)
    body = _fill(sections, "\n".join(head), TEXT_LIMIT - md.utf8_len(tail) - 2, more_where)
    return CheckContent(
        name=name,
        conclusion=decision.conclusion,
        title=_title(lists, decision.why, simulated),
        summary=body + "\n" + tail,
        text=_details(report, more_where),
        annotations=marks,
        actions=actions_for(decision.conclusion, bool(lists.blocking_regressions or lists.infra)),
    )


def actions_for(conclusion: str, rerunnable: bool) -> list[dict]:
    """ "Re-run AMD" only when there is something failed or infra to rerun; "Re-run all" always (at
    most 3)."""
    return ([ACTIONS["rerun-amd"]] if rerunnable or conclusion != "success" else []) + [
        ACTIONS["rerun-all"]
    ]


LOCATION = re.compile(r"^(?P<path>[^\s:][^:\n]*\.py):(?P<line>[1-9]\d{0,8}):", re.MULTILINE)


def _line_of(nodeid: str, detail: str) -> int:
    """The failing line in the test's own file, from the traceback's `path:line:` entries (the last
    wins)."""
    file = nodeid.split("::")[0]
    lines = [
        int(m["line"])
        for m in LOCATION.finditer(detail or "")
        if file.endswith(m["path"]) or m["path"].endswith(file)
    ]
    return lines[-1] if lines else 1


def annotations(blocking: list, non_blocking: list, path_prefix: str = "") -> list[dict]:
    out = []
    for level, items in (("failure", blocking), ("warning", non_blocking)):
        for nodeid, test in items:
            line = _line_of(nodeid, test.get("detail", ""))
            message = (
                "\n".join(_first_lines(test.get("message", ""), test.get("detail", ""), limit=20))
                or test.get("verdict_reason")
                or "regression"
            )
            out.append(
                {
                    "path": md.plain(path_prefix + nodeid.split("::")[0], 1000),
                    "start_line": line,
                    "end_line": line,
                    "annotation_level": level,
                    "title": md.plain(f"{test['verdict']}: {nodeid}", ANNOTATION_TITLE_LIMIT),
                    "message": message[:ANNOTATION_MESSAGE_LIMIT],
                }
            )
    return out


def missing_results(
    name: str, run_conclusion: str | None, why: str, details_url: str | None
) -> CheckContent:
    """The check of a run that left no usable results: it blocks, and says why."""
    conclusion = MISSING_RESULTS.get(run_conclusion or "", "action_required")
    summary = (
        f"## {md.plain(name)}: **{conclusion}**\n\nNo usable results: {md.code(why, 2000)}\n\nThe workflow run "
        f"ended {md.code(run_conclusion or 'without a conclusion')}. Nothing proves this commit; re-run the AMD "
        "gates." + (f"\n\nRun: {details_url}" if details_url else "")
    )
    return CheckContent(
        name=name,
        conclusion=conclusion,
        title=md.plain(f"no results ({run_conclusion or 'unknown'})"),
        summary=md.cut_page(summary, TEXT_LIMIT, CUT_NOTE),
        actions=[ACTIONS["rerun-all"]],
    )


# Titles of the checks that prove nothing (placeholders): a run that was not approved, and a check the
# sweep could not finish (no approval established). The publisher recognises them on a commit by these
# (only this App writes checks of these names), so such a check never stands over an approved run's
# result, and the rerun relay never turns a click on one into a dispatch (a dispatch approves).
WAITING_TITLE = "Waiting for approval"
MIRROR_TITLE = "Not approved: an approved run's result stands"
UNFINISHED_TITLE = "Unfinished: the result could not be published"
PLACEHOLDER_TITLES = (WAITING_TITLE, MIRROR_TITLE, UNFINISHED_TITLE)


def unfinished(name: str, why: str, details_url: str | None) -> CheckContent:
    """The check the sweep completes when it still cannot publish a run's result (GitHub refusing or
    down): it blocks (`timed_out`), says why, and offers no rerun button: nothing established that the
    run was approved, and a rerun's dispatch would approve its commit."""
    summary = (
        f"## {md.plain(name)}: **timed_out**\n\nThe result could not be published: {md.code(why, 2000)}"
        "\n\nNothing proves this commit. Someone with write access reruns the gate on purpose (the label "
        "`rocm-ci-approved`, or a dispatch naming the commit)."
        + (f"\n\nRun: {details_url}" if details_url else "")
    )
    return CheckContent(name=name, conclusion="timed_out", title=UNFINISHED_TITLE, summary=summary)


def waiting_for_approval(name: str, why: str, details_url: str | None) -> CheckContent:
    """The check of a commit no approved run has gated yet: it blocks, and says what approves it."""
    summary = (
        f"## {md.plain(name)}: **action_required**\n\nNo approved run has gated this commit: {md.code(why, 2000)}"
        "\n\nA fork's commit reaches the AMD runners only after someone with write access approves that exact "
        "commit: the label `rocm-ci-approved` (remove and add it again after a new push) or a dispatch of the "
        "gate workflow naming the commit. The approved run's result replaces this check."
        + (f"\n\nRun: {details_url}" if details_url else "")
    )
    return CheckContent(
        name=name, conclusion="action_required", title=WAITING_TITLE, summary=summary
    )


def mirror(name: str, standing: dict, why: str, details_url: str | None) -> CheckContent:
    """The check of an unapproved run on a commit an approved run already gated: the same
    conclusion, pointing at that check (GitHub takes the newest check of a name, which must not undo
    the approved result)."""
    summary = (
        f"## {md.plain(name)}: **{standing['conclusion']}** (the result of an approved run)\n\nThis run was not "
        f"approved ({md.code(why, 2000)}) and proved nothing new. The approved run's check on this commit "
        f"stands: {standing.get('html_url') or standing.get('id')}"
        + (f"\n\nThis run: {details_url}" if details_url else "")
    )
    return CheckContent(
        name=name, conclusion=standing["conclusion"], title=MIRROR_TITLE, summary=summary
    )
