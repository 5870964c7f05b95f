"""The type checker's ratchet: mypy's errors in pytest_rocm/ and rocm-gate/rocm_gate/ may only shrink.

`mypy-baseline.txt` holds today's errors, one per line, with line numbers taken out (an edit above an
error moves it, it does not make it new). An error not in the baseline fails the check, naming it; a
baseline error that is gone is reported, and `--update` writes the smaller baseline.

    .venv/bin/python scripts/mypy-ratchet.py [--update]
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BASELINE = ROOT / "mypy-baseline.txt"
LINE = re.compile(r"^(?P<file>[^:]+):\d+(?::\d+)?: error: (?P<what>.*)$")


def errors() -> Counter:
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "pytest_rocm", "rocm-gate/rocm_gate"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    if done.returncode not in (0, 1):
        sys.exit(f"mypy did not run: {done.stderr.strip() or done.stdout.strip()}")
    found = Counter()
    for line in done.stdout.splitlines():
        hit = LINE.match(line)
        if hit:
            found[f"{hit['file']}: {hit['what']}"] += 1
    return found


def main() -> int:
    now = errors()
    before = Counter(
        line for line in BASELINE.read_text(encoding="utf-8").splitlines() if line.strip()
    )
    new = now - before
    gone = before - now
    if "--update" in sys.argv[1:]:
        BASELINE.write_text("".join(f"{e}\n" for e in sorted(now.elements())), encoding="utf-8")
        print(f"mypy-baseline.txt: {sum(now.values())} error(s)")
        return 0
    for error in sorted(new.elements()):
        print(f"new type error: {error}")
    if gone:
        print(
            f"{sum(gone.values())} baseline error(s) fixed: run `scripts/mypy-ratchet.py --update` "
            "to lower the baseline"
        )
    print(f"mypy: {sum(now.values())} error(s), baseline {sum(before.values())}")
    return 1 if new else 0


if __name__ == "__main__":
    raise SystemExit(main())
