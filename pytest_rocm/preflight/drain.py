"""Recovery decisions from a node's history: drain it, roll its image back, with the evidence and the commands.

One bad run is an incident; a pattern is a machine. A node is drained when its own history shows one:
- hardware or communication failed in `FAILED_PREFLIGHTS` of its last `WINDOW` preflights;
- an error count that only grows (correctable ECC, retired pages) over `GROWING_OVER` preflights in a row;
- gate verdicts of `infra` that follow one GPU (`INFRA_ON_ONE_GPU` attempts of different tests on it)
  or the node (`INFRA_RUNS` runs with infra verdicts).
The last image whose run concluded `success` in the history given is the rollback target.
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

WINDOW = 5
FAILED_PREFLIGHTS = 2
GROWING_OVER = 3
INFRA_ON_ONE_GPU = 3
INFRA_RUNS = 3
COUNTED_CHECKS = ("ecc.correctable", "dmesg.ecc_correctable", "bad_pages.retired")


class HistoryError(ValueError):
    """A history file cannot be read; the message names it."""


@dataclass
class History:
    preflights: list[tuple[str, dict]] = field(default_factory=list)  # (file, preflight artifact)
    reports: list[tuple[str, dict]] = field(default_factory=list)  # (file, gate report)
    ignored: list[str] = field(default_factory=list)


@dataclass
class Decision:
    node: str
    drain: bool
    reasons: list[str]
    rollback_image: str | None
    current_image: str | None

    def commands(self) -> list[str]:
        lines = []
        if self.drain:
            reason = "pytest-rocm-preflight"
            lines += [f"kubectl cordon {self.node}",
                      f"kubectl label node {self.node} pytest-rocm/drained={reason} --overwrite",
                      f"kubectl drain {self.node} --ignore-daemonsets --delete-emptydir-data --timeout=30m"]
        if self.rollback_image and self.rollback_image != self.current_image:
            lines.append(f"helm upgrade <runner-set> <chart> --reuse-values "
                         f"--set 'template.spec.containers[0].image={self.rollback_image}'")
        return lines

    def to_dict(self) -> dict:
        return {"node": self.node, "drain": self.drain, "reasons": self.reasons, "rollback_image": self.rollback_image,
                "current_image": self.current_image, "commands": self.commands()}


def read_history(folder: Path) -> History:
    """Every preflight artifact and gate report under a folder (other JSON files are listed as ignored)."""
    if not folder.is_dir():
        raise HistoryError(f"{folder}: no such folder (give the folder of earlier preflight.json and gate-report.json)")
    history = History()
    for path in sorted(folder.rglob("*.json")):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise HistoryError(f"{path}: not valid JSON ({exc}); remove it or restore it from the run's artifacts") from None
        kind = data.get("schema", "") if isinstance(data, dict) else ""
        if kind.startswith("pytest-rocm/preflight/"):
            history.preflights.append((str(path), data))
        elif kind.startswith("pytest-rocm/gate-report/"):
            history.reports.append((str(path), data))
        else:
            history.ignored.append(str(path))
    history.preflights.sort(key=lambda item: item[1].get("finished") or "")
    history.reports.sort(key=lambda item: ((item[1].get("manifest") or {}).get("finished") or ""))
    return history


def decide(node: str, history: History) -> Decision:
    reasons = []
    mine = [(f, p) for f, p in history.preflights if p.get("node") == node][-WINDOW:]
    failed = [(f, layer) for f, p in mine for layer in p.get("layers", [])
              if layer.get("name") in ("hardware", "communication") and layer.get("verdict") == "failed"]
    if len({f for f, _ in failed}) >= FAILED_PREFLIGHTS:
        reasons.append(f"{len({f for f, _ in failed})} of the last {len(mine)} preflights failed: "
                       + "; ".join(f"{layer['name']}: {layer.get('reason', '')} ({Path(f).name})" for f, layer in failed[:3]))
    reasons += _growing_counts(mine)
    reports = [(f, r) for f, r in history.reports if (r.get("manifest") or {}).get("runner") == node]
    reasons += _infra_patterns(reports)
    current = next(((r.get("manifest") or {}).get("container_image") for _, r in reversed(reports)), None)
    return Decision(node, bool(reasons), reasons, _last_accepted_image(history.reports), current)


def _growing_counts(preflights: list[tuple[str, dict]]) -> list[str]:
    series: dict[tuple, list[tuple[float, str]]] = defaultdict(list)
    for path, preflight in preflights:
        totals: dict[tuple, float] = defaultdict(float)
        for layer in preflight.get("layers", []):
            for item in layer.get("findings", []):
                if item.get("check") in COUNTED_CHECKS and isinstance(item.get("value"), (int, float)):
                    totals[(item["check"], item.get("tool"))] += item["value"] * item.get("count", 1)
        for key, total in totals.items():
            series[key].append((total, path))
    reasons = []
    for (check, tool), values in series.items():
        tail = values[-GROWING_OVER:]
        if len(tail) == GROWING_OVER and all(a[0] < b[0] for a, b in zip(tail, tail[1:])):
            reasons.append(f"{check} from {tool} grows over {GROWING_OVER} preflights: "
                           + " -> ".join(f"{v:g} ({Path(p).name})" for v, p in tail))
    return reasons


def _infra_patterns(reports: list[tuple[str, dict]]) -> list[str]:
    by_gpu: dict[int, set[str]] = defaultdict(set)
    runs_with_infra = []
    for path, report in reports:
        infra = [(test, data) for test, data in (report.get("tests") or {}).items() if data.get("verdict") == "infra"]
        if infra:
            runs_with_infra.append(Path(path).name)
        for test, data in infra:
            for attempt in data.get("attempts", []):
                if attempt.get("status") != "passed":
                    for gpu in attempt.get("gpus") or []:
                        by_gpu[gpu].add(test)
    reasons = [f"GPU {gpu}: infra failures of {len(tests)} different tests ({', '.join(sorted(tests)[:3])}): "
               "the device, not the tests" for gpu, tests in sorted(by_gpu.items()) if len(tests) >= INFRA_ON_ONE_GPU]
    if len(runs_with_infra) >= INFRA_RUNS:
        reasons.append(f"{len(runs_with_infra)} runs on this node ended with infra verdicts: {', '.join(runs_with_infra[-INFRA_RUNS:])}")
    return reasons


def _last_accepted_image(reports: list[tuple[str, dict]]) -> str | None:
    for _, report in reversed(reports):
        image = (report.get("manifest") or {}).get("container_image")
        if report.get("conclusion") == "success" and image:
            return image
    return None
