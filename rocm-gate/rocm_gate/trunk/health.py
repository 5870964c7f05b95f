"""Trunk health: per SKU and group, what main's runs say of it over time (the dashboard's table),
each run's cell decided by trunk/judgement.py (`health_cell`), the rows read through
history/queries.py."""

from __future__ import annotations

from collections import defaultdict

from rocm_gate.history import queries
from rocm_gate.history.backends import Connection
from rocm_gate.trunk.judgement import health_cell

__all__ = ["trunk_health"]


def trunk_health(conn: Connection, window: int = 30, landed: frozenset | None = None) -> list[dict]:
    """Per SKU and group, over main runs: the state now (trunk/judgement.py: health_cell: a group
    whose only failures are quarantined gates is `quarantined`, which is not green), the current
    streak (green or not, in runs), the last green run, flips over the last `window` runs, and the
    median time to recovery (first failing run to the next green one). A group fails in a run when
    one of its blocking gates, or a gate a quarantine holds, regressed or failed unconfirmed there."""
    series: dict[tuple[str, str], list[tuple]] = defaultdict(list)
    for run_id, sku, started, sha, group, red, held in queries.group_health_rows(conn, landed):
        series[(sku, group)].append((run_id, started, sha, health_cell(red, held)))
    out = []
    for (sku, group), runs_ in sorted(series.items()):
        state = runs_[-1][3]
        streak = next(
            (i for i, r in enumerate(reversed(runs_)) if (r[3] == "green") != (state == "green")),
            len(runs_),
        )
        green = [r for r in runs_ if r[3] == "green"]
        last = runs_[-window:]
        flips = sum(1 for a, b in zip(last, last[1:]) if (a[3] == "green") != (b[3] == "green"))
        recoveries, red_since = [], None
        for _run_id, started, _sha, cell in runs_:
            if cell != "green" and red_since is None:
                red_since = started
            elif cell == "green" and red_since is not None:
                seconds = queries.seconds_between(red_since, started)
                if seconds is not None:
                    recoveries.append(seconds)
                red_since = None
        recoveries.sort()
        median = recoveries[len(recoveries) // 2] if recoveries else None
        out.append(
            {
                "sku": sku,
                "group": group,
                "state": state,
                "streak": streak,
                "last_green": {"run": green[-1][0], "started": green[-1][1], "sha": green[-1][2]}
                if green
                else None,
                "flips": flips,
                "runs": len(last),
                "recoveries": len(recoveries),
                "median_recovery_s": median,
            }
        )
    return out
