"""Which module server each part of the run asks for, in the order this process runs them: read from
the collected items, so the pool can start the next one while the tests before it run.

A module asks for a server through the `vllm_server` or `sglang_server` fixture (its marker of that
name gives the arguments, environment or tiny model), or through a fixture that picks one at run time
by a `framework` parameter (the suites' `server`): pytest runs each value's tests together, so each
(module, kind) is one step of the plan. Servers a test starts for itself (`vllm_server_factory`) are
not in the plan: their settings exist only when the test runs.
"""

from __future__ import annotations

from dataclasses import dataclass, field

KINDS = ("vllm", "sglang")


@dataclass
class Step:
    module: str  # the module's node id (its file)
    kind: str
    settings: dict = field(default_factory=dict)  # the module's `<kind>_server` marker's keywords
    measures_speed: bool = False  # a test of the module uses perf_gate: nothing starts beside it


def server_plan(items) -> list[Step]:
    """The module servers of `items` in run order, one step per (module, kind)."""
    steps: dict[tuple[str, str], Step] = {}
    for item in items:
        names = getattr(item, "fixturenames", ())
        kinds = [kind for kind in KINDS if f"{kind}_server" in names]
        callspec = getattr(item, "callspec", None)
        framework = callspec.params.get("framework") if callspec is not None else None
        if framework in KINDS and "server" in names and framework not in kinds:
            kinds.append(framework)
        module = item.nodeid.split("::", 1)[0]
        for kind in kinds:
            step = steps.get((module, kind))
            if step is None:
                marker = item.get_closest_marker(f"{kind}_server")
                step = steps[(module, kind)] = Step(
                    module, kind, dict(marker.kwargs) if marker else {}
                )
            step.measures_speed = step.measures_speed or "perf_gate" in names
    return list(steps.values())


def next_step(plan: list[Step], module: str, kind: str) -> Step | None:
    """The step after (module, kind) in the plan: what the run asks for next."""
    for index, step in enumerate(plan):
        if step.module == module and step.kind == kind:
            return plan[index + 1] if index + 1 < len(plan) else None
    return None
