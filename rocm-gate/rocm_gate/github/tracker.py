"""The failure tracker: one GitHub issue per SKU and framework that says what is red on main, kept
up to date.

SGLang's AMD failure tracker is an issue a bot maintains; this is that, from a trunk state
(trunk/state.py, `rocm-gate history trunk`) and history's suspects. The issue shows, per test
failing on main: since which commit, for how long, the suspect range, when it last failed and how
(its fingerprint); then flaky tests, test ids main no longer runs (gone: renamed, moved or deleted),
infra suspects and drain candidates; tests that are green again but flipped in the window are collapsed.
A table cell writes a `|` of a test id as `\\|` (schemas/markdown.py: `cell`): the id shows as it is.

Idempotent: the issue is found by its label and the marker line in its body (`<!-- rocm-gate-tracker SKU
FRAMEWORK -->`), among the issues the tracker itself made (by the App it writes as, on the issue; with
Actions' token, by Actions' bot; with a personal token, by the token's own user, as GitHub's `/user`
names it): anyone else may open an issue with that label and that line, and it is never taken over. It is written only when its title, body or state would change. Its text depends only
on the inputs (the trunk state's newest main commit stands for "now"), so a second run with the same
state writes nothing. A create that may have been applied (GitHub's timeout) is looked for again before
it is sent again, with the attempts of any write. Every string from results is escaped
(schemas/markdown.py); the body is cut to GitHub's 65,536 characters at a line's end, as the check is.
"""

from __future__ import annotations

from dataclasses import dataclass

from pytest_rocm.schemas import markdown as md
from rocm_gate.github.api import Ambiguous, Client, PublishError

LABEL = "rocm-gate-tracker"
BODY_LIMIT = 65536
ROWS = 200  # failing tests listed in full; the rest are counted


@dataclass
class Tracked:
    number: int
    action: str  # created, updated, unchanged
    html_url: str | None


def marker(sku: str, framework: str) -> str:
    return f"<!-- {LABEL} {md.plain(sku, 100)} {md.plain(framework, 100)} -->"


def _hours(seconds) -> str:
    if seconds is None:
        return "unknown"
    return f"{seconds / 3600:.1f} h" if seconds < 86400 * 2 else f"{seconds / 86400:.1f} days"


def _sha(commit) -> str:
    return md.code(((commit or {}).get("sha") or "none")[:12])


def render(trunk: dict, framework: str, suspects: list[dict] = ()) -> tuple[str, str]:
    """(title, body) of the tracker issue of one trunk state."""
    sku = trunk["sku"]
    tests = trunk["tests"]
    failing = sorted(
        ((n, t) for n, t in tests.items() if t["state"] == "failing"),
        key=lambda item: (-(item[1].get("red_seconds") or 0), item[0]),
    )
    flaky = sorted(
        (n, t) for n, t in tests.items() if t["flaky_count"] and t["state"] in ("passing", "flaky")
    )
    gone = sorted((n, t) for n, t in tests.items() if t["state"] == "gone")
    quiet = sorted(
        (n, t) for n, t in tests.items() if t["state"] == "passing" and not t["flaky_count"]
    )
    newest = trunk.get("newest") or {}
    title = md.plain(
        f"rocm-gate: main on {sku} ({framework}): {len(failing)} failing, {len(flaky)} flaky", 250
    )
    lines = [
        marker(sku, framework),
        f"## Main on {md.code(sku)} ({md.code(framework)})",
        "",
        f"From {trunk['main_runs']} main run(s) over {trunk['main_commits']} commit(s), newest "
        f"{_sha(newest)} ({md.code(newest.get('started') or 'unknown')}). This issue is rewritten by "
        "`rocm-gate tracker`; edits are lost.",
        "",
        f"### Failing on main ({len(failing)})",
        "",
    ]
    if failing:
        lines += [
            "| test | broken since | red for | last green | suspects | last failed | failure |",
            "|---|---|---|---|---|---|---|",
        ]
        for name, t in failing[:ROWS]:
            suspects_text = (
                (
                    f"{t['suspect_count']}: "
                    + ", ".join(s[:12] for s in (t.get("suspects") or [])[:5])
                    + (" ..." if (t["suspect_count"] or 0) > 5 else "")
                )
                if t.get("suspect_count")
                else ("before the window" if t.get("last_green") is None else "tested commits only")
            )
            lines.append(
                f"| {md.cell(name)} | {_sha(t['since'])} | {_hours(t.get('red_seconds'))} | "
                f"{_sha(t['last_green']) if t.get('last_green') else 'none in the window'} | "
                f"{md.cell(suspects_text)} | {md.cell(t.get('last_failed') or 'unknown')} | "
                f"{md.cell('; '.join(t['fingerprints'][:2]) or 'no message', 200)} |"
            )
        if len(failing) > ROWS:
            lines.append(f"| and {len(failing) - ROWS} more | | | | | | |")
    else:
        lines.append("Nothing is failing on main.")
    lines += ["", f"### Flaky on main ({len(flaky)})", ""]
    lines += [
        f"- {md.code(n)}: flaky on {t['flaky_count']} main commit(s) (a pass and a fail on one "
        "commit, or a failure between passes on alternate commits)"
        for n, t in flaky[:ROWS]
    ] or ["None."]
    if gone:
        lines += ["", f"### Gone from main's runs ({len(gone)})", ""]
        lines += [
            f"- {md.code(n)}: main's newest complete runs no longer run it, since "
            f"{_sha(t.get('gone'))}"
            + (f"; it continues as {md.code(t['moved_to'])}" if t.get("moved_to") else "")
            for n, t in gone[:ROWS]
        ]
    # history's suspects name their SKU: this issue is one SKU's (an MI300X node is no MI355X drain
    # candidate)
    own = [s for s in suspects if s.get("sku") == sku]
    infra = [s for s in own if s.get("kind") == "suspected real bug"]
    drain = [s for s in own if s.get("kind") == "drain candidate"]
    lines += ["", f"### Infra suspects ({len(infra)}) and drain candidates ({len(drain)})", ""]
    lines += [
        f"- {s['kind']}: {md.code(s['test'])}: {md.code(s['reason'])}"
        for s in (infra + drain)[:ROWS]
    ] or ["None."]
    if quiet:
        lines += ["", f"<details><summary>Green again ({len(quiet)})</summary>", ""]
        lines += [f"- {md.code(n)}: {t['flips']} flip(s) in the window" for n, t in quiet[:ROWS]]
        lines += ["", "</details>"]
    body = md.cut_page("\n".join(lines) + "\n", BODY_LIMIT, "\n\n... (cut at GitHub's limit)\n")
    return title, body


# the GitHub Actions App: its GITHUB_TOKEN writes as `github-actions[bot]`
ACTIONS_APP_ID = 15368


def _made_by_tracker(issue: dict, app_id: int | None, token_user: str | None = None) -> bool:
    """The tracker made this issue: the App it writes as is on it, or, with Actions' token, Actions'
    own bot opened it, or, with a personal token, its user (`token_user`) opened it, with no App. A
    person's issue with the same label and marker line is not the tracker's."""
    app = (issue.get("performed_via_github_app") or {}).get("id")
    if app_id is not None:
        return app == app_id
    user = issue.get("user") or {}
    if token_user is not None and app is None and user.get("login") == token_user:
        return True
    return app == ACTIONS_APP_ID or (
        user.get("type") == "Bot" and user.get("login") == "github-actions[bot]"
    )


def token_user(client: Client) -> str | None:
    """The user a personal token writes as (GitHub's `/user`), None for an App's token (the
    tracker's App, or Actions': GitHub refuses them `/user`) or where GitHub names no user."""
    if client.app_id is not None:
        return None
    try:
        me = client.get("/user", ok_missing=True)
    except PublishError as exc:
        if exc.refused:  # an installation token: "Resource not accessible by integration"
            return None
        raise
    login = me.get("login") if isinstance(me, dict) else None
    return login if isinstance(login, str) and not login.endswith("[bot]") else None


def _find(client: Client, sku: str, framework: str, user: str | None = None) -> dict | None:
    mark = marker(sku, framework)
    found = [
        i
        for i in client.paged("/repos/{repo}/issues", None, {"labels": LABEL, "state": "all"})
        if isinstance(i, dict)
        and "pull_request" not in i
        and (i.get("body") or "").startswith(mark)
        and _made_by_tracker(i, client.app_id, user)
    ]
    # the first one, should two exist
    return min(found, key=lambda i: i["number"]) if found else None


def keep(client: Client, trunk: dict, framework: str, suspects: list[dict] = ()) -> Tracked:
    """Create or update the tracker issue of the trunk state's SKU and this framework."""
    title, body = render(trunk, framework, suspects)
    user = token_user(client)
    existing = _find(client, trunk["sku"], framework, user)
    for _ in range(client.attempts if existing is None else 0):
        try:
            made = client.write(
                "POST", "/repos/{repo}/issues", {"title": title, "body": body, "labels": [LABEL]}
            )
            return Tracked(made["number"], "created", made.get("html_url"))
        except Ambiguous as exc:  # it may have landed: look before sending it again
            client.settle(exc)
            existing = _find(client, trunk["sku"], framework, user)
            if existing is not None:
                break
    if existing is None:
        raise PublishError(
            f"creating the tracker issue of {trunk['sku']}: no clear answer from GitHub after "
            f"{client.attempts} attempts; run the tracker again"
        )
    if (
        existing.get("title") == title
        and existing.get("body") == body
        and existing.get("state") == "open"
    ):
        return Tracked(existing["number"], "unchanged", existing.get("html_url"))
    client.write_again(
        "PATCH",
        f"/repos/{{repo}}/issues/{existing['number']}",
        {"title": title, "body": body, "state": "open"},
    )
    return Tracked(existing["number"], "updated", existing.get("html_url"))
