"""Whether a run executed what it collected, and its conclusion: the rules the GitHub check maps.

Completeness: the controller ends its records with a `session` record (exit
status, why it stopped, collection errors, what was collected). A run without
it (the controller was killed), stopped early (-x, --maxfail, Ctrl-C, an
INTERNALERROR), with collection errors, with collected gates that never ran, or
with collected blocking gates that the run then deselected (a blocking gate not
run is never success by omission) is incomplete: `complete: false`, the causes,
the gates that never ran and those deselected.

Conclusions (docs/reference.md "Conclusions", docs/architecture.md), first that applies:
- failure: a blocking gate regressed (confirmed), a blocking gate failed and was
  never rerun without an infrastructure signature, or a test file failed to
  collect for a reason of its own (a syntax error reproduces: the change broke it);
- incomplete: the run did not execute what it collected (see above), or a blocking gate failed
  with an infrastructure signature and was never rerun (no evidence either way: neither blamed on
  the change nor passed off as the runner's); first of all, before any failure, when the tests
  imported another build of the framework than the checkout under test (`stack`: nothing that
  failed is the change's);
- neutral: a blocking gate hit an infrastructure fault (evidence attached, reruns
  exhausted), or the health probe failed before any test ran;
- skipped: the run finished and no blocking gate executed (none collected, or all
  not applicable / known gaps here);
- success: blocking gates ran and none regressed.
"""

from __future__ import annotations

import re

from pytest_rocm.results.environment import compiled_op, environment_cause, unverified_build
from pytest_rocm.results.stack import FIX as STACK_FIX
from pytest_rocm.results.stack import mismatch
from pytest_rocm.results.verdicts import find_signature

# Each conclusion's exit status (`rocm-gate verdict`, `pytest --rocm-exit-by-conclusion`): what
# passes a required check exits 0; pytest's own codes are not reused for anything that passes.
EXIT_BY_CONCLUSION = {"success": 0, "neutral": 0, "failure": 1, "incomplete": 3, "skipped": 5}
EXECUTED = {"passed", "failed", "error", "crashed", "xpassed"}
# pytest's exit statuses of a run that stopped before its end: interrupted, internal error.
STOPPED_EXIT = {
    2: "interrupted (Ctrl-C, or pytest stopped the session)",
    3: "INTERNALERROR",
    # pytest ran nothing it was asked to: a test path or node id that does not exist (a stale one
    # from an earlier run's list), or an option it refused
    4: "a usage error (a test path or node id that does not exist, or a bad option; pytest's "
    "output names it)",
}
# how the end-of-run record's `stopped` starts for a run stopped by KeyboardInterrupt (Ctrl-C, a job's
# cancel): plugin/hooks.py writes it
INTERRUPTED = "interrupted"
# The packages of the projects pytest-rocm gates, with their names in messages. A missing module of
# one of them is the change's (it removed or renamed a module its code or tests still import); the
# package itself missing, shadowed, or without its compiled extensions is the runner's set-up.
PROJECT_PACKAGES = {"vllm": "vLLM", "sglang": "SGLang"}
# The test tree's own package (vLLM's tests/ is one: `from tests.utils import ...`).
TEST_PACKAGES = ("tests",)
# The compiled extensions of a project package (vLLM's setup.py: vllm._C, vllm._moe_C, vllm._rocm_C,
# vllm._C_stable_libtorch, vllm.cumem_allocator, vllm.vllm_flash_attn._vllm_fa2_C, ...): a plain
# source checkout has none of them.
_COMPILED = re.compile(r"(?:^|\.)(?:_\w*C|cumem_allocator)$")
_NO_MODULE = re.compile(
    r"(?:ModuleNotFoundError|ImportError): No module named '?([\w.]+)'?"
    r"(?:; '([\w.]+)' is not a package)?"
)
_CANNOT_IMPORT = re.compile(
    r"ImportError: cannot import name '(\w+)' from '([\w.]+)' \(([^)\n]*)\)"
)
_INSTALLED = re.compile(r"[/\\](?:site|dist)-packages[/\\]")
TEST_REQUIREMENTS_FIX = (
    "install the project's test requirements in the job's image (vLLM: `pip install -r "
    "requirements/test/rocm.txt` on ROCm, `requirements/test/cuda.txt` on CUDA, the versions they pin)"
)
SHADOW_FIX = (
    "a plain checkout's {package}/ folder shadows the installed package: run pytest from a directory where "
    "the installed one wins (vLLM's CI runs from the checkout's tests/ folder) or install the checkout "
    "with `pip install -e .`"
)
# pytest-xdist's own text when two workers collected different tests (xdist/report.py:
# report_collection_diff); the controller keeps the end of a collection error's text, so its last
# line is what is sure to be there.
_XDIST_DIFF = re.compile(
    r"Different tests were collected between (\S+) and (\S+)\.|To see why this happens see "
    r"'Known limitations' in documentation for pytest-xdist"
)
HASH_SEED_FIX = (
    "test ids that change from process to process come from parametrizing over a set, whose order "
    "follows Python's per-process hash seed (vLLM's tests do): set PYTHONHASHSEED=0 in the job's "
    "environment so every xdist worker collects the same ids in the same order"
)


def completeness(
    session: dict | None,
    collection: dict | None,
    tests: dict[str, dict],
    signatures,
    moved_unrun: list[str] = (),
) -> dict:
    """Whether the run executed what it collected: causes, collection errors, and the gates that
    never ran. `session` and `collection` are the run's end-of-run and collection records (None when
    missing); `moved_unrun`, the tests a process a device fault poisoned did not run and no fresh
    process ran either."""
    stack_record = (collection or {}).get("stack")
    stopped_by = interruption(session)
    causes, errors = _session_causes(session, collection, tests, signatures, stack_record)
    # the tests imported another build of the framework than the checkout under test: what failed
    # to collect is the machine's, and nothing that ran judged the change
    stack = mismatch(stack_record)
    if stack is not None:
        causes.append(stack)
        errors = [{**error, "cause": "infra", "detail": stack} for error in errors]
    specs = (collection or {}).get("specs") or {}
    never_ran = sorted(
        n
        for n, spec in specs.items()
        if (spec.get("gate") or spec.get("blocking"))
        and (n not in tests or tests[n]["status"] == "interrupted")
    )
    if never_ran:
        causes.append(f"{len(never_ran)} gate(s) collected but never ran to the end")
    deselected = deselected_gates(collection)
    if deselected:
        causes.append(deselected_cause(deselected))
    if moved_unrun:
        causes.append(
            f"{len(moved_unrun)} test(s) that a process a device fault poisoned did not run never ran "
            f"in a fresh process: {', '.join(moved_unrun[:5])}"
            + (f" and {len(moved_unrun) - 5} more" if len(moved_unrun) > 5 else "")
        )
    interrupted = sorted(n for n, t in tests.items() if t["status"] == "interrupted")
    if interrupted and not never_ran:
        causes.append(f"{len(interrupted)} test(s) interrupted")
    return {
        "complete": not causes,
        "incomplete_causes": causes,
        "collection_errors": errors,
        "never_ran": never_ran,
        "deselected": deselected,
        "collected": (collection or {}).get("tests"),
        "stack_mismatch": stack,
        "interrupted": stopped_by,
    }


def _session_causes(
    session: dict | None, collection: dict | None, tests: dict, signatures, stack_record
) -> tuple[list[str], list[dict]]:
    """What the end-of-run record says kept the run from executing what it collected (an
    interruption first), and its collection errors, each judged (`collection_error_cause`)."""
    if session is None:
        return [
            "the run did not finish: no end-of-run record (the controller was killed, or the run is "
            "still going)"
        ], []
    causes: list[str] = []
    stopped_by = interruption(session)
    if stopped_by is not None:
        ran = sum(1 for t in tests.values() if t["status"] in EXECUTED)
        causes.append(f"interrupted ({stopped_by}) after {ran} test(s) ran")
    else:
        exit_status = session.get("exitstatus")
        if exit_status in STOPPED_EXIT and not session.get("collection_errors"):
            causes.append(f"pytest stopped: {STOPPED_EXIT[exit_status]}")
        if session.get("stopped"):
            causes.append(f"pytest stopped early: {session['stopped']}")
    if collection is None and session.get("collected") is None:
        # a run that collected nothing says so (collected: []); this one never heard of a
        # collection, as when every xdist worker died setting up (xdist then ends the session
        # with "no tests ran", exit 5): never `skipped`, which passes a required check
        causes.append(
            "no process reported what it collected (under xdist: every worker died before its "
            "collection ended; pytest's output says why)"
        )
    errors = []
    for error in session.get("collection_errors") or []:
        cause = collection_error_cause(error.get("text", ""), signatures, stack_record)
        errors.append(
            {"nodeid": error.get("nodeid"), "cause": cause["kind"], "detail": cause["detail"]}
        )
    if errors:
        causes.append(
            f"{len(errors)} collection error(s): "
            + "; ".join(
                f"{e['nodeid']} ({e['detail'] if e['cause'] == 'infra' else 'the change: ' + e['detail']})"
                for e in errors[:5]
            )
        )
    return causes, errors


def interruption(session: dict | None) -> str | None:
    """How the run was interrupted before its end (Ctrl-C, a job's cancel: pytest's
    KeyboardInterrupt), as the end-of-run record says; None where it was not (pytest's own stop
    after collection errors has the same exit status, and says so by its errors)."""
    if session is None:
        return None
    stopped = session.get("stopped")
    if isinstance(stopped, str) and stopped.startswith(INTERRUPTED):
        return stopped.removeprefix(INTERRUPTED).strip(": ") or "Ctrl-C"
    if session.get("exitstatus") == 2 and not session.get("collection_errors") and not stopped:
        return "Ctrl-C, or pytest stopped the session"
    return None


def deselected_gates(collection: dict | None) -> dict[str, str]:
    """The collection record's blocking gates the run collected and then did not run -> how
    (plugin/collection.py: dropped_gates)."""
    found = (collection or {}).get("deselected")
    if not isinstance(found, dict):
        return {}
    return {str(n): str(how) for n, how in sorted(found.items())}


def deselected_cause(deselected: dict[str, str]) -> str:
    """Why a run that deselected blocking gates is incomplete, naming them and the fix."""
    shown = ", ".join(list(deselected)[:10]) + (
        f" and {len(deselected) - 10} more" if len(deselected) > 10 else ""
    )
    hows = set(deselected.values())
    by = []
    if "deselected" in hows:
        by.append("deselected (-k, -m, --deselect, --last-failed, --stepwise, or a hook)")
    if "dropped" in hows:
        by.append("dropped from the session's items by a hook, without a word")
    return (
        f"{len(deselected)} blocking gate(s) collected and never run, "
        + " or ".join(by)
        + f": {shown}; a blocking gate decides the check: run it, or make it non-blocking"
    )


def collection_error_cause(text: str, signatures, stack: dict | None = None) -> dict:
    """Why a file failed to collect: `infra` (the runner's reason: a run problem such as xdist
    workers that collected different tests, an infrastructure signature, or a set-up problem such as
    a test requirement or the project's package missing here, a compiled op the installed build
    lacks, an error raised inside an installed package that is not the checkout's code:
    results/environment.py) or `change` (anything else: a syntax error, a bad marker, an import of
    the project's own code that broke, which reproduces on any runner with the checkout's build).
    `stack` is the collection record's (results/stack.py): what the tests imported, and whether it
    is the checkout. The detail says which, and the fix."""
    differing = _xdist_difference(text)
    if differing is not None:
        return {"kind": "infra", "detail": differing}
    signature = find_signature([text], signatures)
    if signature is not None:
        return {
            "kind": "infra",
            "detail": f"infrastructure: {signature['name']}: {signature['line']}",
        }
    if compiled_op(text) is not None:
        return {"kind": "infra", "detail": environment_cause(text, stack)}
    missing = _missing_module(text, stack)
    if missing is not None:
        return missing
    environment = environment_cause(text, stack)
    if environment is not None:
        return {"kind": "infra", "detail": environment}
    lines = [
        line for line in text.strip().splitlines() if line.startswith("E ")
    ] or text.strip().splitlines()
    detail = (lines[-1] if lines else "no detail").removeprefix("E").strip()
    return {"kind": "change", "detail": _shortened(detail, 300)}


def _shortened(text: str, limit: int) -> str:
    """`text` in at most `limit` characters, cut at a word's end and marked, not mid-word."""
    if len(text) <= limit:
        return text
    return text[: limit - 1].rsplit(" ", 1)[0] + "…"


def _xdist_difference(text: str) -> str | None:
    """xdist's "Different tests were collected between gw0 and gw1" error: the test files whose ids
    differ between the workers (the lines of its diff), and the fix."""
    found = _XDIST_DIFF.search(text)
    if found is None:
        return None
    header = re.search(r"Different tests were collected between (\S+) and (\S+)\.", text)
    between = f" ({header.group(1)} and {header.group(2)})" if header else ""
    files: list[str] = []
    # an id only one worker has, or one both have in another place (`-` and `+`)
    ids: set[str] = set()
    for line in text.splitlines():
        if (
            line[:1] not in "+-"
            or line.startswith(("---", "+++"))
            or len(line) < 2
            or " " in line[1:].split("::")[0]
        ):
            continue
        ids.add(line[1:])
        path = line[1:].split("::", 1)[0]
        if path not in files:
            files.append(path)
    if files:
        shown = ", ".join(files[:10]) + (f" and {len(files) - 10} more" if len(files) > 10 else "")
        what = f"{len(ids)} test id(s) differ or stand in another order, in {shown}" + (
            "" if header else " (the start of xdist's list was cut)"
        )
    else:
        what = "xdist's list of the differing ids was cut"
    return f"run problem: the xdist workers{between} collected different tests: {what}; {HASH_SEED_FIX}"


def _missing_module(text: str, stack: dict | None = None) -> dict | None:
    """An import that failed for want of a module: the change's, or the runner's set-up (see
    PROJECT_PACKAGES; a module or name the project's installed build lacks is the change's only where
    that build is known to be the checkout's code: `stack`)."""
    missing = [(m.group(1), m.group(2)) for m in _NO_MODULE.finditer(text)]
    for name, _ in missing:  # anywhere in the text: the import of one is what broke what followed
        top = name.split(".")[0]
        if top in PROJECT_PACKAGES and _COMPILED.search(name):
            return _setup(
                f"{PROJECT_PACKAGES[top]} was imported without its compiled extensions (`No module named "
                f"{name!r}`): a plain source checkout, not an installed build; "
                + SHADOW_FIX.format(package=top)
            )
    if missing:
        name, not_package = missing[-1]
        top = name.split(".")[0]
        if not_package:
            return _setup(
                f"`{not_package}` is a module, not the package: a file named {not_package}.py shadows "
                f"it (`No module named {name!r}`); rename that file or run from another directory"
            )
        if top in PROJECT_PACKAGES or top in TEST_PACKAGES:
            if name == top:
                if top in TEST_PACKAGES:
                    return _setup(
                        f"the test tree's package {top!r} does not import (`No module named {top!r}`): "
                        "run pytest from the checkout, with its rootdir at the tree's root"
                    )
                return _setup(
                    f"{PROJECT_PACKAGES[top]} is not installed on this runner (`No module named {top!r}`): "
                    f"install {PROJECT_PACKAGES[top]} in the job's image before the tests run"
                )
            build = unverified_build(stack, top) if top in PROJECT_PACKAGES else None
            if build is not None:
                return _setup(
                    f"the installed {build} has no module {name!r} (`No module named {name!r}`), and "
                    f"nothing shows it is the checkout under test: {STACK_FIX}"
                )
            return {
                "kind": "change",
                "detail": f"ModuleNotFoundError: No module named {name!r}: the change's "
                f"own package has no module {name!r} (removed or renamed while "
                "something still imports it)",
            }
        return _setup(
            f"the test requirement {top!r} is not installed on this runner (`No module named {name!r}`): "
            + TEST_REQUIREMENTS_FIX
        )
    cannot = list(_CANNOT_IMPORT.finditer(text))
    if cannot:
        name, module, where = cannot[-1].groups()
        top = module.split(".")[0]
        if top in PROJECT_PACKAGES and where == "unknown location":
            return _setup(
                f"{module!r} was imported from a folder that is not the installed package (`cannot import "
                f"name {name!r} from {module!r} (unknown location)`): "
                + SHADOW_FIX.format(package=top)
            )
        build = unverified_build(stack, top) if top in PROJECT_PACKAGES else None
        if build is not None or (
            top in PROJECT_PACKAGES and not stack and _INSTALLED.search(where)
        ):
            return _setup(
                f"the installed {build or PROJECT_PACKAGES[top]} has no {name!r} (`cannot import name "
                f"{name!r} from {module!r}`), and nothing shows it is the checkout under test: "
                + STACK_FIX
            )
        if top not in PROJECT_PACKAGES and top not in TEST_PACKAGES and _INSTALLED.search(where):
            return _setup(
                f"the installed {top!r} has no {name!r} (`cannot import name {name!r} from {module!r}`): "
                f"another version than the tests need; " + TEST_REQUIREMENTS_FIX
            )
    return None


def _setup(detail: str) -> dict:
    return {"kind": "infra", "detail": "set-up problem: " + detail}


def conclusion(
    tests: dict[str, dict], run: dict, runner: str | None = None, preflight: dict | None = None
) -> tuple[str, str]:
    """The run's conclusion and why (the rules are in this module's docstring); a run interrupted
    before its end says so first, whatever it concludes."""
    verdict, why = _conclusion(tests, run, runner, preflight)
    if run.get("interrupted"):
        causes = "the run did not execute what it collected: "
        why = (
            why.removeprefix(causes)
            if why.startswith(causes + "interrupted")
            else f"interrupted before its end ({run['interrupted']}): {why}"
        )
    return verdict, why


def _conclusion(
    tests: dict[str, dict], run: dict, runner: str | None, preflight: dict | None
) -> tuple[str, str]:
    if run.get("stack_mismatch"):
        return "incomplete", (
            "the run did not test the checkout, so no failure is the change's: "
            + run["stack_mismatch"]
        )
    blocking = {nodeid: t for nodeid, t in tests.items() if t["blocking"]}
    regressions = sorted(n for n, t in blocking.items() if t["verdict"] == "regression")
    unconfirmed = sorted(n for n, t in blocking.items() if t["verdict"] == "unconfirmed")
    unconfirmed_plain = [n for n in unconfirmed if not _signature_of(blocking[n])]
    broken_files = [e for e in run["collection_errors"] if e["cause"] == "change"]
    # a signature but no rerun and no probe (--rocm-reruns 0): no evidence either way
    unconfirmed_signed = [n for n in unconfirmed if n not in unconfirmed_plain]
    infra = sorted(n for n, t in blocking.items() if t["verdict"] == "infra")
    executed = [n for n, t in blocking.items() if t["attempts"][0]["status"] in EXECUTED]
    if regressions or unconfirmed_plain or broken_files:
        parts = []
        if regressions:
            parts.append(
                f"{len(regressions)} blocking gate(s) regressed: {', '.join(regressions[:10])}"
            )
        if unconfirmed_plain:
            parts.append(
                f"{len(unconfirmed_plain)} blocking gate(s) failed and were not rerun: "
                f"{', '.join(unconfirmed_plain[:10])}"
            )
        if broken_files:
            parts.append(
                f"{len(broken_files)} test file(s) failed to collect (a defect of the change: it "
                f"reproduces): "
                + "; ".join(f"{e['nodeid']}: {e['detail']}" for e in broken_files[:5])
            )
        return "failure", "; ".join(parts)
    if not run["complete"]:
        return "incomplete", "the run did not execute what it collected: " + "; ".join(
            run["incomplete_causes"]
        )
    if unconfirmed_signed:
        return "incomplete", (
            f"{len(unconfirmed_signed)} blocking gate(s) failed with an infrastructure signature "
            f"and were not rerun, so nothing confirms either the fault or a regression: "
            f"{', '.join(unconfirmed_signed[:10])}; run them again (reruns on: --rocm-reruns)"
        )
    if infra or (preflight is not None and not preflight.get("ok")):
        where = f" on runner {runner}" if runner else ""
        if not infra:
            return "neutral", (
                f"the health probe failed{where} before any test ran on devices "
                f"{','.join(map(str, preflight.get('devices', [])))} ({preflight.get('detail')}); "
                "rerun on another runner"
            )
        # the devices of the attempts that failed: a rerun that passed ran on a healthy device
        devices = sorted(
            {
                str(d)
                for n in infra
                for a in blocking[n]["attempts"]
                if a["status"] != "passed"
                for d in (a.get("gpus") or [])
            },
            key=lambda d: (len(d), d),
        )
        on = f" (devices {','.join(devices)})" if devices else ""
        recovered = [n for n in infra if blocking[n]["attempts"][-1]["status"] == "passed"]
        if len(recovered) == len(infra):
            return "neutral", (
                f"{len(infra)} blocking gate(s) hit infrastructure faults{where}{on} and passed on "
                f"their rerun: nothing to rerun; the faulty devices are the suspects "
                f"({', '.join(infra[:10])})"
            )
        left = [n for n in infra if n not in recovered]
        return "neutral", (
            f"{len(infra)} blocking gate(s) hit infrastructure faults{where}{on}; "
            f"rerun on another runner the {len(left)} that never passed: {', '.join(left[:10])}"
        )
    if not executed:
        return (
            "skipped",
            "no blocking gate ran on this runner (none collected, or none applicable here)",
        )
    flaky = [n for n, t in blocking.items() if t["verdict"] == "flaky"]
    note = f" ({len(flaky)} flaky, reported)" if flaky else ""
    return "success", f"{len(executed)} blocking gate(s) ran, none regressed{note}"


def _signature_of(test: dict) -> dict | None:
    return next((a["signature"] for a in test["attempts"] if a.get("signature")), None)
