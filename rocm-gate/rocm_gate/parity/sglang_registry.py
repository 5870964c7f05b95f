"""SGLang's declared coverage: which test files are registered for AMD against CUDA.

SGLang registers each file under `test/registered/` with calls such as
`register_cuda_ci(est_time=300, suite="stage-b-test-1-gpu-small")`, or in the newer form
`register_cuda_ci(est_time=75, stage="extra-a", runner_config="2-gpu-large")` (suite
`extra-a-test-2-gpu-large`, as SGLang's `ci_register.py` makes it), and
`register_amd_ci(..., disabled="<reason>")`. catalog/sglang.py reads those calls; this module
reports declared parity per stage and GPU count, with the disabled AMD registrations and their
reasons, and the scheduling jobs of each suite.
"""

from __future__ import annotations

from collections import defaultdict

from pytest_rocm.catalog.applicability import Applicability
from pytest_rocm.catalog.sglang import RegisteredFile, gpus_of, stage_of


def suite_jobs(files: list[RegisteredFile]) -> dict[tuple[str, str], list]:
    """(backend, suite) -> a scheduling Job per file with an enabled registration in it: its
    `est_time` (1 s where none or 0 is declared, as for a test never measured) and the suite's GPU
    count."""
    from pytest_rocm.scheduling.dispatch import Job

    found: dict[tuple[str, str], list] = {}
    for f in files:
        for backend, calls in f.registrations.items():
            for call in calls:
                suite, seconds = call.get("suite"), call.get("est_time")
                if call.get("disabled") or not isinstance(suite, str) or not suite:
                    continue
                jobs = found.setdefault((backend, suite), [])
                jobs.append(
                    Job(
                        len(jobs),
                        f.path,
                        gpus_of(suite),
                        float(seconds)
                        if isinstance(seconds, (int, float)) and seconds > 0
                        else 1.0,
                    )
                )
    return found


def _not_applicable(file: RegisteredFile, applicability: Applicability | None) -> str | None:
    if applicability is None:
        return None
    suites = [str(r.get("suite", "")) for r in file.registrations.get("cuda", [])]
    return applicability.reason_for(file.path) or applicability.reason_for_suites(suites)


def declared_parity(
    files: list[RegisteredFile], applicability: Applicability | None = None
) -> dict:
    cuda = [f for f in files if f.registrations.get("cuda")]
    amd = [f for f in files if f.registrations.get("amd")]
    both = [f for f in cuda if f.registrations.get("amd")]
    disabled = [
        {"path": f.path, "suite": r.get("suite"), "reason": r["disabled"]}
        for f in amd
        for r in f.registrations["amd"]
        if r.get("disabled")
    ]
    buckets: dict[tuple[str, int], dict] = defaultdict(
        lambda: {"cuda": 0, "amd_enabled": 0, "not_applicable": 0}
    )
    excluded, missing, covered = [], [], 0
    for f in cuda:
        reason = _not_applicable(f, applicability)
        on_amd = bool(f.enabled("amd"))
        for key in sorted(
            {
                (stage_of(r.get("suite", ""), r), gpus_of(r.get("suite", "")))
                for r in f.registrations["cuda"]
            }
        ):
            bucket = buckets[key]
            if reason:
                bucket["not_applicable"] += 1
            else:
                bucket["cuda"] += 1
                bucket["amd_enabled"] += on_amd
        if reason:
            excluded.append({"path": f.path, "reason": reason})
        elif on_amd:
            covered += 1
        else:
            why = (
                "AMD registration disabled"
                if f.registrations.get("amd")
                else "not registered for AMD"
            )
            missing.append({"path": f.path, "why": why})
    applicable = len(cuda) - len(excluded)
    return {
        "files": len(files),
        "cuda": len(cuda),
        "amd": len(amd),
        "both": len(both),
        "amd_only": len(amd) - len(both),
        "amd_disabled_registrations": len(disabled),
        "amd_files_with_a_disabled_registration": len({d["path"] for d in disabled}),
        "cuda_applicable": applicable,
        "cuda_covered_on_amd": covered,
        "declared_parity": round(covered / applicable, 6) if applicable else None,
        "declared_parity_all_cuda_files": round(
            len([f for f in cuda if f.enabled("amd")]) / len(cuda), 6
        )
        if cuda
        else None,
        "by_stage_and_gpus": [
            {
                "stage": stage,
                "gpus": gpus,
                **counts,
                "parity": round(counts["amd_enabled"] / counts["cuda"], 6)
                if counts["cuda"]
                else None,
            }
            for (stage, gpus), counts in sorted(buckets.items())
        ],
        "disabled": disabled,
        "not_applicable": excluded,
        "missing_on_amd": missing,
    }


EXECUTED_KINDS = ("declared_and_passing", "declared_not_passing", "passing_not_declared", "neither")


def executed_coverage(
    files: list[RegisteredFile], report: dict, applicability: Applicability | None = None
) -> dict:
    """Declared coverage (an enabled AMD registration) against executed coverage (the candidate's
    results in a parity report), per test file registered for CUDA and applicable to ROCm.

    A file passes on the candidate when at least one of its tests ran there and every one that ran
    passed. `passing_not_declared` lists files that could be registered for AMD today;
    `declared_not_passing` lists registrations whose tests do not pass on the candidate."""
    # file -> passed?, per test that ran on the candidate
    ran: dict[str, list[bool]] = defaultdict(list)
    for path, rests in report.get("passing", {}).items():
        ran[path].extend([True] * len(rests))
    for nodeid, entry in report.get("tests", {}).items():
        candidate = entry.get("candidate")
        if candidate is not None and entry.get("parity") != "not_applicable":
            ran[nodeid.partition("::")[0]].append(candidate in ("passed", "xpassed"))
    kinds: dict[str, list[str]] = {kind: [] for kind in EXECUTED_KINDS}
    not_run = []
    for f in files:
        if not f.registrations.get("cuda") or _not_applicable(f, applicability):
            continue
        results = ran.get(f.path)
        if not results:
            not_run.append(f.path)
            continue
        passing, declared = all(results), bool(f.enabled("amd"))
        kind = (
            ("declared_and_passing" if passing else "declared_not_passing")
            if declared
            else ("passing_not_declared" if passing else "neither")
        )
        kinds[kind].append(f.path)
    return {
        **{kind: sorted(paths) for kind, paths in kinds.items()},
        "counts": {kind: len(paths) for kind, paths in kinds.items()} | {"not_run": len(not_run)},
        "not_run": sorted(not_run),
    }
