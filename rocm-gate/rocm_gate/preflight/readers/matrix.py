"""GPU-by-GPU tables of amd-smi (`topology`: ACCESS TABLE, LINK TYPE TABLE) and rocm-smi
(`--showtopo`).

Both print a title, a header row of GPU names and one row per GPU. A pair of GPUs in an 8-GPU node
must be able to reach each other (ACCESS `ENABLED`) over XGMI; a PCIE link type means the fabric is
down.
"""

from __future__ import annotations

import re

from rocm_gate.preflight.evidence import Line, Reading, finding

_TITLES = {  # title pattern -> (kind, cell value that is healthy)
    re.compile(r"ACCESS TABLE", re.I): ("access", "ENABLED"),
    re.compile(r"LINK TYPE TABLE|Link Type between two GPUs", re.I): ("link_type", "XGMI"),
}
_DIAGONAL = {"0", "N/A", "X", "SELF", "-"}


def tables(lines: list[Line]):
    """Yield (kind, healthy value, header, rows as (line, row name, cells)) for each known table."""
    index = 0
    while index < len(lines):
        kind = next(
            (k for pattern, k in _TITLES.items() if pattern.search(lines[index].text)), None
        )
        index += 1
        if kind is None:
            continue
        while index < len(lines) and not lines[index].text.strip():
            index += 1
        if index >= len(lines):
            return
        header = lines[index].text.split()
        rows = []
        index += 1
        while index < len(lines):
            cells = lines[index].text.split()
            if len(cells) != len(header) + 1:
                break
            rows.append((lines[index], cells[0], cells[1:]))
            index += 1
        yield kind[0], kind[1], header, rows


def link_type_findings(reading: Reading, lines: list[Line]) -> None:
    for kind, healthy, header, rows in tables(lines):
        bad = []
        for line, name, cells in rows:
            reading.understood += 1
            for column, cell in zip(header, cells):
                if column != name and cell.upper() not in _DIAGONAL and cell.upper() != healthy:
                    bad.append((line, name, column, cell))
        if kind == "access":
            for line, name, column, cell in bad:
                reading.add(
                    finding(
                        "topology.access", "failed", f"{name} cannot reach {column} ({cell})", line
                    )
                )
            if rows and not bad:
                reading.add(
                    finding(
                        "topology.access",
                        "ok",
                        f"all {len(rows)} GPUs reach each other",
                        rows[0][0],
                    )
                )
        else:
            for line, name, column, cell in bad:
                reading.add(
                    finding(
                        "topology.link_type",
                        "degraded",
                        f"{name} to {column} is linked over {cell}, "
                        "not XGMI (a fabric link is down: collectives slow down)",
                        line,
                    )
                )
            if rows and not bad:
                reading.add(
                    finding(
                        "topology.link_type",
                        "ok",
                        f"all {len(rows)} GPUs linked over XGMI",
                        rows[0][0],
                    )
                )
