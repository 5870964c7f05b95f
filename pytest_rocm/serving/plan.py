"""Which servers the run will ask for, in the order this process asks for them: read from the
collected items, so the pool can start them while the tests before them run.

Two kinds of step:
- a module's server: a module asks for one through the `vllm_server` or `sglang_server` fixture (its
  marker of that name gives the arguments, environment or tiny model), or through a fixture that
  picks one at run time by a `framework` parameter (the suites' `server`): pytest runs each value's
  tests together, so each (module, kind) is one step;
- a variant a test declares with `@pytest.mark.vllm_server_variant(...)` (or `sglang_...`): the
  settings it passes to `vllm_server_factory`, one step per marker. A factory call that matches no
  declared variant is started when it is made, as before.

A test that will be skipped before it runs (a `skip` or true `skipif` marker, which is also how the
plugin skips what is not applicable and known gaps) asks for nothing. Each step says whether speed
is measured while its server serves (`measures_speed`: a module with a test in the `performance`
group): nothing may be starting beside it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

KINDS = ("vllm", "sglang")
VARIANT_MARKERS = {kind: f"{kind}_server_variant" for kind in KINDS}
SPEED_GROUP = "performance"  # the group of throughput and latency gates


@dataclass
class Step:
    kind: str
    owner: str  # the module's node id (a module's server), or the test's (a variant it declares)
    first: int  # run-order index of the first test that asks for this server
    settings: dict = field(default_factory=dict)  # args, env, tiny_model: the marker's keywords
    variant: bool = False
    measures_speed: bool = False  # speed is measured while it serves: nothing starts beside it


def server_plan(
    items, will_skip: Callable[[object], bool], group_of: Callable[[str], str | None]
) -> list[Step]:
    """The servers `items` ask for, in run order: each module's once per kind, at its first test
    that runs, and each declared variant at its test."""
    speed_modules = {
        item.nodeid.split("::", 1)[0] for item in items if group_of(item.nodeid) == SPEED_GROUP
    }
    steps: list[Step] = []
    module_steps: set[tuple[str, str]] = set()
    for index, item in enumerate(items):
        if will_skip(item):
            continue
        module = item.nodeid.split("::", 1)[0]
        speed = module in speed_modules
        for kind in module_server_kinds(item):
            if (module, kind) not in module_steps:
                module_steps.add((module, kind))
                marker = item.get_closest_marker(f"{kind}_server")
                settings = dict(marker.kwargs) if marker else {}
                steps.append(Step(kind, module, index, settings, measures_speed=speed))
        for kind, name in VARIANT_MARKERS.items():
            # pytest lists a function's markers bottom decorator first: in the order they are written
            for marker in reversed(list(item.iter_markers(name=name))):
                steps.append(
                    Step(kind, item.nodeid, index, dict(marker.kwargs), True, measures_speed=speed)
                )
    return steps


def module_server_kinds(item) -> list[str]:
    """The kinds of module server `item` asks for through its fixtures."""
    names = getattr(item, "fixturenames", ())
    kinds = [kind for kind in KINDS if f"{kind}_server" in names]
    callspec = getattr(item, "callspec", None)
    framework = callspec.params.get("framework") if callspec is not None else None
    if framework in KINDS and "server" in names and framework not in kinds:
        kinds.append(framework)
    return kinds
