"""The coverage dashboard: a static site built from history (`rocm-gate dashboard`), needing no
server and no network. Charts are SVG drawn at build time, each with an accessible name and its
numbers in a table beside it.

- `charts`: the SVG bar and line charts;
- `site`: the pages (overview, commit x group grid, suspects and flaky tests, accepted stacks and drift).
"""

__all__ = ["charts", "site"]
