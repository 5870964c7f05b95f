"""Main's first-parent commits, from GitHub: what `git rev-list --first-parent` of the default branch
gives in a checkout (history/commits.py), for a publish or sweep that has no checkout.

GitHub lists a branch's commits newest first, every commit reachable from its head
(docs.github.com/en/rest/commits/commits#list-commits), each with its parents; following the first
parent from the head keeps the commits that landed on the branch and leaves out the commits of a
merged branch. The walk stops once every commit asked for (`needed`: the tested main commits and a
PR's base) is behind it, or at `limit` commits, and says whether it found them all: a list that
misses a tested commit would drop that commit's runs from main's state, so a caller treats an
incomplete list as no list.
"""

from __future__ import annotations

from dataclasses import dataclass

from rocm_gate.github.api import Client

__all__ = ["Mainline", "first_parent"]

PAGE = 100


@dataclass
class Mainline:
    commits: list[str]  # oldest first, up to the branch's head
    dates: dict[str, str]  # sha -> committer date (GitHub's)
    complete: bool  # every needed commit is on it
    missing: list[str]  # the needed commits the walk did not reach


def first_parent(client: Client, branch: str, needed: set[str], limit: int = 5000) -> Mainline:
    """The branch's first-parent line, from its head back to the oldest commit in `needed` (or
    `limit` commits)."""
    known: dict[str, tuple[str | None, str]] = {}  # sha -> (first parent, committer date)
    pages = _Pages(client, branch, known)
    cursor = pages.head()
    line: list[str] = []
    left = {sha.lower() for sha in needed if sha}
    while cursor is not None and left and len(line) < limit:
        while cursor not in known and pages.more():
            pass
        if cursor not in known:
            break
        line.append(cursor)
        left.discard(cursor)
        cursor = known[cursor][0]
    commits = list(reversed(line))
    return Mainline(
        commits=commits,
        dates={sha: known[sha][1] for sha in commits},
        complete=not left,
        missing=sorted(left),
    )


class _Pages:
    """The branch's commits, a page at a time, into `known`."""

    def __init__(self, client: Client, branch: str, known: dict):
        self.client, self.branch, self.known = client, branch, known
        self.page, self.done, self.first = 0, False, None

    def head(self) -> str | None:
        self.more()
        return self.first

    def more(self) -> bool:
        """Fetch the next page; False when there is none."""
        if self.done:
            return False
        self.page += 1
        body = self.client.get(
            "/repos/{repo}/commits", {"sha": self.branch, "per_page": PAGE, "page": self.page}
        )
        items = [c for c in body or [] if isinstance(c, dict) and isinstance(c.get("sha"), str)]
        for commit in items:
            parents = [p.get("sha") for p in commit.get("parents") or [] if isinstance(p, dict)]
            date = ((commit.get("commit") or {}).get("committer") or {}).get("date") or ""
            self.known[commit["sha"].lower()] = (
                parents[0].lower() if parents and isinstance(parents[0], str) else None,
                str(date),
            )
        if self.first is None and items:
            self.first = items[0]["sha"].lower()
        self.done = len(items) < PAGE
        return bool(items)
