"""GitHub through github3.py: auth, bounded retries, and a publish that converges to one check run.

Retries, in two layers:
- idempotent requests (GET and the like) are retried by urllib3's `Retry`, mounted on github3's requests
  session: 5xx, 429, and 403 secondary rate limits with `Retry-After`, with backoff and a cap on any wait;
- POST and PATCH are never replayed blind (a create that timed out may have happened, and every PATCH with
  annotations appends them): `publish` reads the state again and sends only what is missing, a bounded
  number of times, waiting out primary rate limits (`X-RateLimit-Reset`, capped).

So a publish that is interrupted and run again, or that met a 502 after GitHub applied the request, ends in
the same state: one check per name and head SHA, each annotation once.
"""

from __future__ import annotations

import datetime as dt
import time
from dataclasses import dataclass
from typing import Callable

import github3
import requests
from github3.checks import CheckRun
from requests.adapters import HTTPAdapter
from urllib3.util.retry import Retry

from pytest_rocm.github.checks import ANNOTATIONS_PER_REQUEST, CheckContent

CONNECT_TIMEOUT_S = 5.0
READ_TIMEOUT_S = 20.0
MAX_WAIT_S = 120.0  # no single wait (Retry-After, rate-limit reset) longer than this
ATTEMPTS = 6
TRANSIENT_STATUS = (429, 500, 502, 503, 504)
GITHUB_ERRORS = (github3.exceptions.GitHubException, requests.RequestException)


class PublishError(RuntimeError):
    """Publishing failed: GitHub refused (`refused`: credentials, permissions, a request it will not take) or
    kept failing past the retries; the message says what failed last (never a token)."""

    def __init__(self, message: str, refused: bool = False):
        super().__init__(message)
        self.refused = refused


class GitHubRetry(Retry):
    """urllib3's Retry, also honouring `Retry-After` on GitHub's 403 secondary rate limits, with waits capped."""

    RETRY_AFTER_STATUS_CODES = frozenset({403, 413, 429, 503})

    def get_retry_after(self, response):
        seconds = super().get_retry_after(response)
        return None if seconds is None else min(seconds, MAX_WAIT_S)


def connect(api_url: str, token: str | None = None, app_id: str | None = None, private_key: str | None = None,
            installation_id: str | None = None, read_timeout: float = READ_TIMEOUT_S,
            retries: int = 4, backoff: float = 1.0) -> github3.GitHub:
    """A github3 client for `api_url` (api.github.com, GitHub Enterprise's /api/v3, or a loopback server).

    Auth: an App (id, private key, installation id: an installation token minted now), else `token` (an
    Actions GITHUB_TOKEN or another installation token: check runs need one, a personal token is refused by
    GitHub)."""
    gh = github3.GitHub()
    session = gh.session
    session.base_url = api_url.rstrip("/")
    session.default_connect_timeout, session.default_read_timeout = CONNECT_TIMEOUT_S, read_timeout
    retry = GitHubRetry(total=retries, connect=retries, read=retries, status=retries, backoff_factor=backoff,
                        backoff_max=MAX_WAIT_S, status_forcelist=TRANSIENT_STATUS, respect_retry_after_header=True,
                        raise_on_status=False)
    adapter = HTTPAdapter(max_retries=retry)
    session.mount("https://", adapter)
    session.mount("http://", adapter)
    if app_id and private_key and installation_id:
        # the JWT's `iss` must be a string for PyJWT 2.10+
        gh.login_as_app_installation(private_key.encode(), str(app_id), int(installation_id))
    elif token:
        # The Actions token is an installation token; github3 only allows check runs under this auth.
        expires = (dt.datetime.now(dt.timezone.utc) + dt.timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
        session.app_installation_token_auth({"token": token, "expires_at": expires})
    return gh


def _get_json(gh: github3.GitHub, path: str, params: dict | None = None):
    response = gh.session.get(gh.session.base_url + path, params=params)
    if response.status_code != 200:
        raise github3.exceptions.error_for(response)
    return response.json()


def _paged(gh: github3.GitHub, path: str, key: str | None, params: dict | None = None, per_page: int = 100) -> list:
    items, page = [], 1
    while True:
        body = _get_json(gh, path, {**(params or {}), "per_page": per_page, "page": page})
        chunk = body[key] if key else body
        items += chunk
        if len(chunk) < per_page:
            return items
        page += 1


def find_check(gh, repo: str, sha: str, name: str, external_id: str | None) -> dict | None:
    """This run's check for the SHA: same name and external_id (the run id). Another run of the same SHA (a
    rerun button, a new push of the same commit) gets a check of its own, as GitHub Actions does: GitHub shows
    and requires the newest of a name, and the older one's annotations do not leak into it. Without a run id,
    the newest check of that name."""
    runs = [r for r in _paged(gh, f"/repos/{repo}/commits/{sha}/check-runs", "check_runs",
                              {"check_name": name, "filter": "all"}) if r["name"] == name and r["head_sha"] == sha]
    if external_id:
        runs = [r for r in runs if r.get("external_id") == external_id]
    return max(runs, key=lambda r: r["id"]) if runs else None


def _annotation_key(a: dict) -> tuple:
    return (a["path"], a["start_line"], a.get("title") or "", a["message"])


@dataclass
class Published:
    check_id: int
    html_url: str
    created: bool
    annotations_sent: int


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _converge(gh, repo: str, sha: str, content: CheckContent, external_id: str | None, details_url: str | None,
              in_progress: bool, known: dict) -> Published:
    """One attempt. `known` keeps what earlier attempts of this publish established (the repository, the
    check, the annotations GitHub holds), so a retry does not redo requests that already succeeded; what a
    failed request may or may not have done is read again."""
    if "run" not in known:
        found = find_check(gh, repo, sha, content.name, external_id)
        if found is None:
            if "repository" not in known:
                known["repository"] = gh.repository(*repo.split("/", 1))
            known["annotations"] = set()
            known["dirty"] = True  # if the create fails, the next attempt lists again before creating
            run = known["repository"].create_check_run(
                name=content.name, head_sha=sha, details_url=details_url, external_id=external_id,
                status="in_progress", started_at=_now(),
                output={"title": "running", "summary": f"{content.name} is running."})
            if run is None:
                raise PublishError(f"creating the check {content.name!r} returned no check run")
            known.update(created=True, dirty=False)
        else:
            run = CheckRun(found, gh.session)
        known["run"] = run
    run, created = known["run"], known.get("created", False)
    common = {"details_url": details_url, "external_id": external_id, "actions": content.actions or None}
    if in_progress:
        run.update(status="in_progress", output={"title": "running", "summary": f"{content.name} is running."},
                   **common)
        return Published(run.id, run.html_url, created, 0)
    if known.get("annotations") is None or known.get("dirty"):  # a PATCH with annotations may have landed
        known["annotations"] = {_annotation_key(a) for a in
                                _paged(gh, f"/repos/{repo}/check-runs/{run.id}/annotations", None)}
        known["dirty"] = False
    missing = [a for a in content.annotations if _annotation_key(a) not in known["annotations"]]
    batches = [missing[i:i + ANNOTATIONS_PER_REQUEST] for i in range(0, len(missing), ANNOTATIONS_PER_REQUEST)]
    first, rest = (batches[0], batches[1:]) if batches else (None, [])
    if not known.get("completed"):
        known["dirty"] = bool(first)
        if not run.update(status="completed", conclusion=content.conclusion, completed_at=_now(),
                          output=content.output(first), **common):
            raise PublishError(f"updating the check {content.name!r} returned nothing")
        known.update(completed=True, dirty=False, sent=known.get("sent", 0) + len(first or []))
        known["annotations"] |= {_annotation_key(a) for a in first or []}
    else:
        rest = batches
    for batch in rest:  # GitHub appends annotations given in later updates
        known["dirty"] = True
        run.update(output=content.output(batch))
        known.update(dirty=False, sent=known.get("sent", 0) + len(batch))
        known["annotations"] |= {_annotation_key(a) for a in batch}
    return Published(run.id, run.html_url, created, known.get("sent", 0))


def _wait_for(exc: Exception, attempt: int, backoff: float) -> float:
    """Seconds to wait before the next attempt: a rate limit's own time when it gives one, else backoff."""
    response = getattr(exc, "response", None)
    headers = getattr(response, "headers", None) or {}
    if headers.get("Retry-After", "").isdigit():
        return min(float(headers["Retry-After"]), MAX_WAIT_S)
    if headers.get("X-RateLimit-Remaining") == "0" and headers.get("X-RateLimit-Reset", "").isdigit():
        return min(max(float(headers["X-RateLimit-Reset"]) - time.time(), 0.0) + 1.0, MAX_WAIT_S)
    return min(backoff * 2 ** attempt, MAX_WAIT_S)


def _transient(exc: Exception) -> bool:
    if isinstance(exc, (requests.RequestException, github3.exceptions.TransportError)):
        return True
    code = getattr(exc, "code", None) or getattr(getattr(exc, "response", None), "status_code", None)
    if code in TRANSIENT_STATUS:
        return True
    headers = getattr(getattr(exc, "response", None), "headers", None) or {}
    return code == 403 and ("Retry-After" in headers or headers.get("X-RateLimit-Remaining") == "0")


def publish(gh, repo: str, sha: str, content: CheckContent, external_id: str | None = None,
            details_url: str | None = None, in_progress: bool = False, attempts: int = ATTEMPTS,
            backoff: float = 1.0, sleep: Callable[[float], None] = time.sleep) -> Published:
    """Create or update the check of `content.name` on `sha` until GitHub holds exactly `content`."""
    last, known = None, {}
    for attempt in range(attempts):
        try:
            return _converge(gh, repo, sha, content, external_id, details_url, in_progress, known)
        except (github3.exceptions.GitHubException, requests.RequestException) as exc:
            if not _transient(exc):
                raise PublishError(f"GitHub refused the request: {describe(exc)}", refused=True) from None
            last = exc
            if attempt + 1 < attempts:
                sleep(_wait_for(exc, attempt, backoff))
    raise PublishError(f"gave up after {attempts} attempts; the last error: {describe(last)}")


def describe(exc: Exception | None) -> str:
    response = getattr(exc, "response", None)
    if response is not None and getattr(response, "status_code", None):
        return f"HTTP {response.status_code} from {response.request.method} {response.url}: {str(exc)[:300]}"
    return f"{type(exc).__name__}: {str(exc)[:300]}"


def permission(gh, repo: str, user: str) -> str:
    """The user's permission on the repository: admin, maintain, write, triage, read or none."""
    try:
        body = _get_json(gh, f"/repos/{repo}/collaborators/{user}/permission")
    except github3.exceptions.NotFoundError:
        return "none"
    return body.get("role_name") or body.get("permission") or "none"


def pull_request(gh, repo: str, number: int) -> dict:
    return _get_json(gh, f"/repos/{repo}/pulls/{number}")


def dispatch(gh, repo: str, workflow: str, ref: str, inputs: dict) -> None:
    """Start `workflow` (a file name or id) on `ref` with `inputs` (POST .../dispatches, 204)."""
    response = gh.session.post(f"{gh.session.base_url}/repos/{repo}/actions/workflows/{workflow}/dispatches",
                               json={"ref": ref, "inputs": inputs})
    if response.status_code not in (200, 204):
        raise github3.exceptions.error_for(response)
