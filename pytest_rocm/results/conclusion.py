"""Whether a run executed what it collected, and its conclusion: the rules the GitHub check maps.

Completeness: the controller ends its records with a `session` record (exit
status, why it stopped, collection errors, what was collected). A run without
it (the controller was killed), stopped early (-x, --maxfail, Ctrl-C, an
INTERNALERROR), with collection errors, or with collected gates that never ran
is incomplete: `complete: false`, the causes, and the gates that never ran.

Conclusions (README "Conclusions", DESIGN section 3), first that applies:
- failure: a blocking gate regressed (confirmed), a blocking gate failed and was
  never rerun without an infrastructure signature, or a test file failed to
  collect for a reason of its own (a syntax error reproduces: the change broke it);
- incomplete: the run did not execute what it collected (see above);
- neutral: a blocking gate hit an infrastructure fault (evidence attached, reruns
  exhausted), or the health probe failed before any test ran;
- skipped: the run finished and no blocking gate executed (none collected, or all
  not applicable / known gaps here);
- success: blocking gates ran and none regressed.
"""

from __future__ import annotations

import re

from pytest_rocm.results.verdicts import find_signature

# Each conclusion's exit status (`rocm-gate verdict`, `pytest --rocm-exit-by-conclusion`): what passes a
# required check exits 0; pytest's own codes are not reused for anything that passes.
EXIT_BY_CONCLUSION = {"success": 0, "neutral": 0, "failure": 1, "incomplete": 3, "skipped": 5}
EXECUTED = {"passed", "failed", "error", "crashed", "xpassed"}
# pytest's exit statuses of a run that stopped before its end: interrupted, internal error.
STOPPED_EXIT = {2: "interrupted (Ctrl-C, or pytest stopped the session)", 3: "INTERNALERROR"}
# A collection error caused by the runner, not by the change: an import of a package not installed here.
_MISSING_PACKAGE = re.compile(r"(?:ModuleNotFoundError|ImportError): No module named '?([\w.]+)")


def completeness(session: dict | None, collection: dict | None, tests: dict[str, dict], signatures) -> dict:
    """Whether the run executed what it collected: causes, collection errors, and the gates that never ran.
    `session` and `collection` are the run's end-of-run and collection records (None when missing)."""
    causes: list[str] = []
    errors = []
    if session is None:
        causes.append("the run did not finish: no end-of-run record (the controller was killed, or the run is "
                      "still going)")
    else:
        exit_status = session.get("exitstatus")
        if exit_status in STOPPED_EXIT and not session.get("collection_errors"):
            causes.append(f"pytest stopped: {STOPPED_EXIT[exit_status]}")
        if session.get("stopped"):
            causes.append(f"pytest stopped early: {session['stopped']}")
        for error in session.get("collection_errors") or []:
            cause = collection_error_cause(error.get("text", ""), signatures)
            errors.append({"nodeid": error.get("nodeid"), "cause": cause["kind"], "detail": cause["detail"]})
        if errors:
            causes.append(f"{len(errors)} collection error(s): " + "; ".join(
                f"{e['nodeid']} ({e['cause']}: {e['detail']})" for e in errors[:5]))
    specs = (collection or {}).get("specs") or {}
    never_ran = sorted(n for n, spec in specs.items() if (spec.get("gate") or spec.get("blocking"))
                       and (n not in tests or tests[n]["status"] == "interrupted"))
    if never_ran:
        causes.append(f"{len(never_ran)} gate(s) collected but never ran to the end")
    interrupted = sorted(n for n, t in tests.items() if t["status"] == "interrupted")
    if interrupted and not never_ran:
        causes.append(f"{len(interrupted)} test(s) interrupted")
    return {"complete": not causes, "incomplete_causes": causes, "collection_errors": errors,
            "never_ran": never_ran, "collected": (collection or {}).get("tests")}


def collection_error_cause(text: str, signatures) -> dict:
    """Why a file failed to collect: `infra` (an infrastructure signature, or a package this runner lacks)
    or `change` (anything else: a syntax error, a bad marker, an import of the project's own code that
    broke, which reproduces on any runner)."""
    signature = find_signature([text], signatures)
    if signature is not None:
        return {"kind": "infra", "detail": f"{signature['name']}: {signature['line']}"}
    missing = _MISSING_PACKAGE.search(text)
    if missing:
        return {"kind": "infra", "detail": f"package {missing.group(1)!r} is not installed on this runner"}
    lines = [line for line in text.strip().splitlines() if line.startswith("E ")] or text.strip().splitlines()
    return {"kind": "change", "detail": (lines[-1] if lines else "no detail").removeprefix("E").strip()[:300]}


def conclusion(tests: dict[str, dict], run: dict, runner: str | None = None,
               preflight: dict | None = None) -> tuple[str, str]:
    """The run's conclusion and why (the rules are in this module's docstring)."""
    blocking = {nodeid: t for nodeid, t in tests.items() if t["blocking"]}
    regressions = sorted(n for n, t in blocking.items() if t["verdict"] == "regression")
    unconfirmed = sorted(n for n, t in blocking.items() if t["verdict"] == "unconfirmed")
    unconfirmed_plain = [n for n in unconfirmed if not _signature_of(blocking[n])]
    broken_files = [e for e in run["collection_errors"] if e["cause"] == "change"]
    infra = sorted(n for n, t in blocking.items() if t["verdict"] == "infra") + \
        [n for n in unconfirmed if n not in unconfirmed_plain]
    executed = [n for n, t in blocking.items() if t["attempts"][0]["status"] in EXECUTED]
    if regressions or unconfirmed_plain or broken_files:
        parts = []
        if regressions:
            parts.append(f"{len(regressions)} blocking gate(s) regressed: {', '.join(regressions[:10])}")
        if unconfirmed_plain:
            parts.append(f"{len(unconfirmed_plain)} blocking gate(s) failed and were not rerun: "
                         f"{', '.join(unconfirmed_plain[:10])}")
        if broken_files:
            parts.append(f"{len(broken_files)} test file(s) failed to collect (a defect of the change: it "
                         f"reproduces): " + "; ".join(f"{e['nodeid']}: {e['detail']}" for e in broken_files[:5]))
        return "failure", "; ".join(parts)
    if not run["complete"]:
        return "incomplete", "the run did not execute what it collected: " + "; ".join(run["incomplete_causes"])
    if infra or (preflight is not None and not preflight.get("ok")):
        where = f" on runner {runner}" if runner else ""
        if not infra:
            return "neutral", (f"the health probe failed{where} before any test ran on devices "
                               f"{','.join(map(str, preflight.get('devices', [])))} ({preflight.get('detail')}); "
                               "rerun on another runner")
        # the devices of the attempts that failed: a rerun that passed ran on a healthy device
        devices = sorted({str(d) for n in infra for a in blocking[n]["attempts"] if a["status"] != "passed"
                          for d in (a.get("gpus") or [])}, key=lambda d: (len(d), d))
        on = f" (devices {','.join(devices)})" if devices else ""
        recovered = [n for n in infra if blocking[n]["attempts"][-1]["status"] == "passed"]
        if len(recovered) == len(infra):
            return "neutral", (f"{len(infra)} blocking gate(s) hit infrastructure faults{where}{on} and passed on "
                               f"their rerun: nothing to rerun; the faulty devices are the suspects "
                               f"({', '.join(infra[:10])})")
        left = [n for n in infra if n not in recovered]
        return "neutral", (f"{len(infra)} blocking gate(s) hit infrastructure faults{where}{on}; "
                           f"rerun on another runner the {len(left)} that never passed: {', '.join(left[:10])}")
    if not executed:
        return "skipped", "no blocking gate ran on this runner (none collected, or none applicable here)"
    flaky = [n for n, t in blocking.items() if t["verdict"] == "flaky"]
    note = f" ({len(flaky)} flaky, reported)" if flaky else ""
    return "success", f"{len(executed)} blocking gate(s) ran, none regressed{note}"


def _signature_of(test: dict) -> dict | None:
    return next((a["signature"] for a in test["attempts"] if a.get("signature")), None)
