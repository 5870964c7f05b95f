"""The coverage dashboard: a static site built from history (`rocm-gate dashboard`), needing no
server and no network. Charts are SVG drawn at build time, each with an accessible name and its
numbers in a table beside it.

The store is read once, into plain data; the pages are rendered from that data alone, by Jinja2
templates that escape every value with no way to turn that off (a test id, a reason or a SKU a pull
request wrote is text on every page, never markup).

- `data`: the one read of the store (history's queries and trunk health) into plain data;
- `render`: the template environment (escaping always on, a missing field an error) and a table's
  cells;
- `charts`: the SVG bar and line charts, laid out as data for their template;
- `site`: the pages (overview, commit x group grid, suspects and flaky tests, accepted stacks and
  drift, a page per test that failed on main) and writing the site;
- `templates/`: the pages' Jinja2 templates.
"""

__all__ = ["charts", "data", "render", "site"]
