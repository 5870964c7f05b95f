"""Recovery decisions from a node's history: drain it, roll its image back, with the evidence and
the commands.

One bad run is an incident; a pattern is a machine. A node is drained when its own history shows
one:
- hardware or communication failed in `FAILED_PREFLIGHTS` of its last `WINDOW` preflights;
- an error count that only grows (correctable ECC, retired pages) over `GROWING_OVER` preflights in a row;
- gate verdicts of `infra` that follow one GPU (`INFRA_ON_ONE_GPU` attempts of different tests on it)
  or the node (`INFRA_RUNS` runs with infra verdicts).
The rollback target is the image of the newest run that concluded `success` on the default branch
(its manifest's provenance: a push, schedule or dispatch on the default branch); a PR's run never
names it, since a PR's code wrote that report. The file it comes from is named, for the operator to
check.

The history is untrusted (a gate report was written by a job that ran a PR's code): each file goes
through the strict loader (schemas/loader.py) and is skipped, named, when it is not a valid
artifact; an image name is used only when it is an OCI image reference, and every command printed is
quoted for the shell.
"""

from __future__ import annotations

import re
import shlex
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from pytest_rocm.errors import BadInput
from pytest_rocm.schemas.loader import ArtifactError, check_document, read_json_file
from pytest_rocm.schemas.markdown import plain

WINDOW = 5
FAILED_PREFLIGHTS = 2
GROWING_OVER = 3
INFRA_ON_ONE_GPU = 3
INFRA_RUNS = 3
COUNTED_CHECKS = ("ecc.correctable", "dmesg.ecc_correctable", "bad_pages.retired")
KINDS = {"pytest-rocm/preflight/": "preflight", "pytest-rocm/gate-report/": "gate-report"}
MANIFEST_TEXT = ("runner", "container_image", "finished")  # the manifest fields drain reads
# An OCI image reference (github.com/distribution/reference, reference.go):
# [host[:port]/]path[:tag][@digest].
_COMPONENT = r"[a-z0-9]+(?:(?:[_.]|__|-+)[a-z0-9]+)*"
_HOST = (
    r"(?:[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?(?:\.[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)*|\[[a-fA-F0-9:]+\])"
    r"(?::[0-9]+)?"
)
# the grammar's \w is [A-Za-z0-9_]: no letter that only looks like one
IMAGE_REFERENCE = re.compile(
    rf"(?:{_HOST}/)?{_COMPONENT}(?:/{_COMPONENT})*(?::[\w][\w.-]{{0,127}})?"
    r"(?:@[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,})?",
    re.ASCII,
)
NAME_MAX = 255  # the reference's name part, at most
REFERENCE_MAX = 1024  # name, tag and a sha512 digest fit (255 + 129 + 136); longer is refused before the pattern


class EvidenceFolderError(BadInput):
    """The folder of earlier preflight and gate-report evidence cannot be read; the message names
    it."""


@dataclass
class History:
    preflights: list[tuple[str, dict]] = field(default_factory=list)  # (file, preflight artifact)
    reports: list[tuple[str, dict]] = field(default_factory=list)  # (file, gate report)
    ignored: list[str] = field(default_factory=list)  # JSON that is not an artifact drain reads
    # artifacts that could not be believed: what is wrong, by file
    skipped: list[str] = field(default_factory=list)


@dataclass
class Decision:
    node: str
    drain: bool
    reasons: list[str]
    rollback_image: str | None
    current_image: str | None
    rollback_from: str | None = None  # the gate report that names the rollback image
    notes: list[str] = field(default_factory=list)  # images refused as not OCI references

    def commands(self) -> list[str]:
        """The commands an operator runs, each argument quoted: a node or image name never becomes
        shell syntax."""
        node = shlex.quote(self.node)
        lines = []
        if self.drain:
            lines += [
                f"kubectl cordon {node}",
                f"kubectl label node {node} pytest-rocm/drained=pytest-rocm-preflight --overwrite",
                f"kubectl drain {node} --ignore-daemonsets --delete-emptydir-data --timeout=30m",
            ]
        if self.rollback_image and self.rollback_image != self.current_image:
            image = shlex.quote(f"template.spec.containers[0].image={self.rollback_image}")
            lines.append(f"helm upgrade <runner-set> <chart> --reuse-values --set {image}")
        return lines

    def to_dict(self) -> dict:
        return {
            "node": self.node,
            "drain": self.drain,
            "reasons": self.reasons,
            "rollback_image": self.rollback_image,
            "rollback_from": self.rollback_from,
            "current_image": self.current_image,
            "notes": self.notes,
            "commands": self.commands(),
        }


def image_reference(value: object) -> str | None:
    """`value` when it is an OCI image reference (`rocm/vllm:v0.9`, `ghcr.io/o/i@sha256:<64 hex>`),
    else None."""
    if (
        not isinstance(value, str)
        or len(value) > REFERENCE_MAX
        or not IMAGE_REFERENCE.fullmatch(value)
    ):
        return None
    name = value.split("@")[0]
    if ":" in name.rsplit("/", 1)[-1]:
        name = name.rsplit(":", 1)[0]
    return value if len(name) <= NAME_MAX else None


def read_history(folder: Path) -> History:
    """Every preflight artifact and gate report under a folder; other JSON is listed as ignored, and
    a file that is not a valid artifact (damaged, a folder or link named *.json, wrong types) is
    skipped with the reason."""
    try:
        paths = sorted(folder.rglob("*.json")) if folder.is_dir() else None
    except OSError as exc:
        raise EvidenceFolderError(f"{folder}: cannot read it ({exc.strerror or exc})") from None
    if paths is None:
        raise EvidenceFolderError(
            f"{folder}: no such folder (give the folder of earlier preflight.json and gate-report.json)"
        )
    history = History()
    for path in paths:
        try:
            kind, data = _read_artifact(path)
        except ArtifactError as exc:
            history.skipped.append(plain(exc, 500))
            continue
        if kind == "preflight":
            history.preflights.append((str(path), data))
        elif kind == "gate-report":
            history.reports.append((str(path), data))
        else:
            history.ignored.append(str(path))
    history.preflights.sort(key=lambda item: item[1]["finished"])
    history.reports.sort(key=lambda item: item[1]["manifest"].get("finished") or "")
    return history


def _read_artifact(path: Path) -> tuple[str | None, dict | None]:
    """(kind, document) of one history file through the strict loader; (None, None) for JSON of
    another kind."""
    data = read_json_file(path)
    if not isinstance(data, dict) or "schema" not in data:
        return None, None
    if not isinstance(data["schema"], str):
        raise ArtifactError(
            f"{path}: schema is {data['schema']!r}, not an artifact name such as pytest-rocm/preflight/1"
        )
    kind = next((kind for prefix, kind in KINDS.items() if data["schema"].startswith(prefix)), None)
    if kind is None:
        return None, None
    check_document(data, kind, str(path))
    if kind == "gate-report":
        for key in MANIFEST_TEXT:
            if data["manifest"].get(key) is not None and not isinstance(data["manifest"][key], str):
                raise ArtifactError(
                    f"{path}: not a valid gate-report artifact at manifest/{key}: "
                    f"{data['manifest'][key]!r} is not a string"
                )
    return kind, data


def decide(node: str, history: History) -> Decision:
    reasons = []
    mine = [(f, p) for f, p in history.preflights if p.get("node") == node][-WINDOW:]
    failed = [
        (f, layer)
        for f, p in mine
        for layer in p.get("layers", [])
        if layer.get("name") in ("hardware", "communication") and layer.get("verdict") == "failed"
    ]
    if len({f for f, _ in failed}) >= FAILED_PREFLIGHTS:
        reasons.append(
            f"{len({f for f, _ in failed})} of the last {len(mine)} preflights failed: "
            + "; ".join(
                f"{layer['name']}: {layer.get('reason', '')} ({Path(f).name})"
                for f, layer in failed[:3]
            )
        )
    reasons += _growing_counts(mine)
    reports = [(f, r) for f, r in history.reports if r["manifest"].get("runner") == node]
    reasons += _infra_patterns(reports)
    notes = [
        f"{Path(f).name}: the manifest's container_image is not an OCI image reference; it is not used or printed"
        for f, r in history.reports
        if r["manifest"].get("container_image") is not None
        and image_reference(r["manifest"]["container_image"]) is None
    ]
    current = next(
        (
            r["manifest"].get("container_image")
            for _, r in reversed(reports)
            if r["manifest"].get("container_image")
        ),
        None,
    )
    rollback, rollback_from = _last_accepted_image(history.reports)
    return Decision(
        node,
        bool(reasons),
        [plain(reason, 1000) for reason in reasons],
        rollback,
        image_reference(current),
        rollback_from=rollback_from,
        notes=[plain(n, 500) for n in notes],
    )


def _growing_counts(preflights: list[tuple[str, dict]]) -> list[str]:
    series: dict[tuple, list[tuple[float, str]]] = defaultdict(list)
    for path, preflight in preflights:
        totals: dict[tuple, float] = defaultdict(float)
        for layer in preflight.get("layers", []):
            for item in layer.get("findings", []):
                if item.get("check") in COUNTED_CHECKS and isinstance(
                    item.get("value"), (int, float)
                ):
                    totals[(item["check"], item.get("tool"))] += item["value"] * item.get(
                        "count", 1
                    )
        for key, total in totals.items():
            series[key].append((total, path))
    reasons = []
    for (check, tool), values in series.items():
        tail = values[-GROWING_OVER:]
        if len(tail) == GROWING_OVER and all(a[0] < b[0] for a, b in zip(tail, tail[1:])):
            reasons.append(
                f"{check} from {tool} grows over {GROWING_OVER} preflights: "
                + " -> ".join(f"{v:g} ({Path(p).name})" for v, p in tail)
            )
    return reasons


def _infra_patterns(reports: list[tuple[str, dict]]) -> list[str]:
    by_gpu: dict[int, set[str]] = defaultdict(set)
    runs_with_infra = []
    for path, report in reports:
        infra = [
            (test, data) for test, data in report["tests"].items() if data["verdict"] == "infra"
        ]
        if infra:
            runs_with_infra.append(Path(path).name)
        for test, data in infra:
            for attempt in data["attempts"]:
                if attempt["status"] != "passed":
                    for gpu in attempt["gpus"] or []:
                        by_gpu[gpu].add(test)
    reasons = [
        f"GPU {gpu}: infra failures of {len(tests)} different tests ({', '.join(sorted(tests)[:3])}): "
        "the device, not the tests"
        for gpu, tests in sorted(by_gpu.items())
        if len(tests) >= INFRA_ON_ONE_GPU
    ]
    if len(runs_with_infra) >= INFRA_RUNS:
        reasons.append(
            f"{len(runs_with_infra)} runs on this node ended with infra verdicts: {', '.join(runs_with_infra[-INFRA_RUNS:])}"
        )
    return reasons


TRUSTED_EVENTS = ("push", "schedule", "workflow_dispatch")  # runs of the default branch's own code


def _on_default_branch(manifest: dict) -> bool:
    provenance = manifest.get("provenance")
    if not isinstance(provenance, dict) or not isinstance(provenance.get("default_branch"), str):
        return False
    return (
        provenance.get("event") in TRUSTED_EVENTS
        and provenance.get("ref") == f"refs/heads/{provenance['default_branch']}"
    )


def _last_accepted_image(reports: list[tuple[str, dict]]) -> tuple[str | None, str | None]:
    """(image, file) of the newest successful run on the default branch."""
    for path, report in reversed(reports):
        image = image_reference(report["manifest"].get("container_image"))
        if report["conclusion"] == "success" and image and _on_default_branch(report["manifest"]):
            return image, path
    return None, None
