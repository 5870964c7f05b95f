"""Which GitHub runs the store holds: the catch-up of a publish or a sweep asks before it downloads a
run's results (knowledge/sync.py), so a run is fetched once, whichever job stored it.

A run from GitHub is stored under its origin and `ID-ATTEMPT/ARTIFACT` (`store.identity`), so one
question answers for every origin it may have been stored under (a main run whose results named
another commit is stored as `pr`).
"""

from __future__ import annotations

from rocm_gate.history.store import identity

__all__ = ["failing", "newest_main", "stored"]

# every origin a run is stored under (results/manifest.py: origin_kind, or the caller's override)
ORIGINS_STORED = ("main", "pr", "other")


def stored(conn, runs: list[str]) -> set[str]:
    """The runs (`ID-ATTEMPT/ARTIFACT`) among `runs` that the store holds, under any origin."""
    keys = {identity(origin, "", run): run for run in runs for origin in ORIGINS_STORED}
    found: set[str] = set()
    names = list(keys)
    for start in range(0, len(names), 500):  # bounded IN lists, for any engine
        chunk = names[start : start + 500]
        rows = conn.execute(
            f"SELECT digest FROM runs WHERE digest IN ({', '.join('?' for _ in chunk)})", chunk
        ).fetchall()
        found |= {keys[row[0]] for row in rows}
    return found


def newest_main(conn, sku: str) -> str | None:
    """When the newest main run of `sku` completed (GitHub's time, else its manifest's end, else its
    start), or None."""
    row = conn.execute(
        "SELECT MAX(COALESCE(completed, finished, started)) FROM runs WHERE origin = 'main' AND sku = ?",
        (sku,),
    ).fetchone()
    return row[0] if row else None


def failing(conn, run: str) -> set[str] | None:
    """The blocking gates that failed (regression, unconfirmed) in a stored run (`ID-ATTEMPT/ARTIFACT`);
    None where the store does not hold the run."""
    keys = [identity(origin, "", run) for origin in ORIGINS_STORED]
    row = conn.execute(
        f"SELECT id FROM runs WHERE digest IN ({', '.join('?' for _ in keys)})", keys
    ).fetchone()
    if row is None:
        return None
    return {
        name
        for (name,) in conn.execute(
            "SELECT t.name FROM results r JOIN tests t ON t.id = r.test_id WHERE r.run_id = ? "
            "AND r.blocking = 1 AND r.verdict IN ('regression', 'unconfirmed')",
            (row[0],),
        )
    }
