"""main's commits, from a checkout of the default branch: what history's windows and the trunk
state count (a run of a commit not on this list never counts as main's)."""

from __future__ import annotations

import subprocess

from pytest_rocm.errors import BadInput

__all__ = ["main_commits"]


def main_commits(checkout: str, newest: str | None) -> list[str]:
    """main's first-parent commits up to the newest tested one, oldest first, from a checkout."""
    if newest is None:
        return []
    try:
        done = subprocess.run(
            [
                "git",
                "-C",
                checkout,
                "rev-list",
                "--first-parent",
                "--reverse",
                "--max-count=20000",
                "--end-of-options",
                newest,
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise BadInput(f"--repo {checkout}: git failed ({exc})") from None
    if done.returncode != 0:
        raise BadInput(
            f"--repo {checkout}: cannot list main's commits up to {newest[:12]} (the newest tested "
            f"main commit): {done.stderr.strip()[:300]}; fetch main's history into that checkout"
        )
    return done.stdout.split()
