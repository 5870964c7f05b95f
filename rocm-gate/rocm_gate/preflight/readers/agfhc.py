"""AMD GPU Field Health Check (`agfhc`): each test's PASS/FAIL line and the program's return
code.

Reads AGFHC 1.23 (`agfhc -r all_lvl1`, ROCm 7.0, MI350X); captures: tests/data/samples/preflight/agfhc.
"""

from __future__ import annotations

import re

from rocm_gate.preflight.evidence import Line, Reading, finding

_RESULT = re.compile(r"^(PASS|FAIL|ERROR|SKIP\w*):\s*(\S+)")
_EXIT = re.compile(r"Program exiting with return code (\w+)\s*\[(\d+)\]")
_KNOWN = re.compile(
    r"^(Log Directory:|Product:|The following tests|Test\s+Title|Executing tests:|Summary:|Tests:|"
    r"Total Time:|Total:|Log directory:|-+$|\w+\s{2,}.*\d:\d\d:\d\d$|[A-Z]+[\w ]*$)"
)


def read(lines: list[Line], limits: dict) -> Reading:
    reading = Reading()
    exit_seen = False
    for line in lines:
        text = line.text.strip()
        if not text:
            continue
        if match := _RESULT.match(text):
            reading.understood += 1
            passed = match.group(1) == "PASS" or match.group(1).startswith("SKIP")
            reading.add(
                finding(
                    "agfhc.test",
                    "ok" if passed else "failed",
                    f"{match.group(2)}: {match.group(1)}" if not passed else "every test passed",
                    line,
                )
            )
        elif match := _EXIT.search(text):
            reading.understood += 1
            exit_seen = True
            code = int(match.group(2))
            reading.add(
                finding(
                    "agfhc.exit",
                    "ok" if code == 0 else "failed",
                    f"agfhc exited with {match.group(1)} [{code}]",
                    line,
                )
            )
        elif _KNOWN.match(text):
            reading.understood += 1
        else:
            reading.unread.append(line)
    if not exit_seen:
        reading.add(
            finding("agfhc.exit", "failed", "agfhc did not print its return code (stopped early?)")
        )
    return reading
