"""The options of the commands that judge checks against main's state, live (publish, sweep): the
history store (`--db`, or $ROCM_GATE_DB: a SQLite file or a PostgreSQL URL, never printed with its
password), how far back the store is caught up with GitHub, and the trunk state's window
(knowledge/live.py)."""

from __future__ import annotations

import os

from pytest_rocm.schemas import values
from rocm_gate.cli.arguments import whole_number
from rocm_gate.trunk.state import WINDOW

ENVIRONMENT = "ROCM_GATE_DB"


def add(parser) -> None:
    group = parser.add_argument_group("main's state, live")
    group.add_argument(
        "--db",
        metavar="STORE",
        help="the history store: a SQLite file, or postgresql://... (default: $ROCM_GATE_DB). Each "
        "check is judged against main's state built from it at that moment, after adding every "
        "main run GitHub lists as completed that it lacks; a main run's own results are added once "
        "its check is written",
    )
    group.add_argument(
        "--catch-up-hours",
        # above 0 and at most 90 days: GitHub keeps artifacts that long at most
        type=values.Option(values.hours, above=True, high=24 * 90.0),
        default=48.0,
        metavar="HOURS",
        help="gate runs created this many hours back are added to the store when it lacks them "
        "(above 0 and at most 2160; default 48)",
    )
    group.add_argument(
        "--window",
        type=whole_number(1, "--window must be at least 1 commit, got {value}"),
        default=WINDOW,
        help=f"main commits of the SKU that main's state looks at (default {WINDOW})",
    )


def target(args) -> str | None:
    return args.db or os.environ.get(ENVIRONMENT) or None


def check_hours(args, command: str):
    """An OptionError for a catch-up window that is no number of hours."""
    from rocm_gate.cli.github_options import OptionError

    hours = args.catch_up_hours
    if not (hours > 0 and hours <= 24 * 90):
        raise OptionError(
            f"{command}: --catch-up-hours must be a number of hours above 0 and at most 2160 (90 "
            f"days: GitHub keeps artifacts that long at most), got {hours}"
        )


def live(args, client, workflow: str, gate_workflow: str, groups: dict[str, str], **more):
    """The live main state of `--db`, or None where no store is given."""
    store = target(args)
    if store is None:
        return None
    from rocm_gate.knowledge.live import LiveState

    return LiveState(
        store,
        client,
        workflow,
        gate_workflow,
        groups,
        window=args.window,
        catch_up_hours=args.catch_up_hours,
        **more,
    )


def write_outputs(live_state) -> None:
    """Tell the workflow whether the store took runs ($GITHUB_OUTPUT `store-changed`): the
    embedded store is then carried on by the publish workflow's history job."""
    path = os.environ.get("GITHUB_OUTPUT")
    if not path or live_state is None:
        return
    with open(path, "a", encoding="utf-8") as out:
        out.write(f"store-changed={'true' if live_state.changed else 'false'}\n")
