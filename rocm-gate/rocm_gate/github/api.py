"""GitHub's REST API through github3.py: auth, one retry rule per request, and check runs that
converge.

Requests (`Client`):
- every request has its own budget of attempts, so a publish of 3,000 annotations under a 1-in-3 rate of 502s
  sends all of them, as a publish of 6 does;
- a read (GET) is retried on 5xx, 429, rate limits, read timeouts and dropped connections, waiting what GitHub
  asks (`Retry-After`, `X-RateLimit-Reset`, each wait capped at MAX_WAIT_S), else a doubling backoff;
- writes are paced: at least PACE_S between two of them (GitHub's guidance against its secondary rate limits:
  make writes serially, a second apart; docs.github.com/en/rest/using-the-rest-api/best-practices-for-using-the-
  rest-api), and no body carries `null` where GitHub's schema wants a string (an absent field is left out);
- a write (POST, PATCH) is never replayed blind. One that failed after it was sent (a read timeout, a 5xx) may
  have been applied, or may still be: GitHub works on a request for up to 10 seconds before it gives up
  (docs.github.com/en/rest/using-the-rest-api/troubleshooting-the-rest-api#timeouts). So the writer waits until
  SETTLE_S after it sent the request, reads the state again and sends only what is missing (`Ambiguous`). A
  write GitHub refused before doing anything (429, a rate limit, a connection that never opened) is sent again
  after the wait.

Check runs (`converge`): one check per (name, head SHA, external_id = the gate run's id) whatever
the order or timing of writes. The oldest such check is the one kept; any other (a create GitHub
applied after its answer was lost, two publishers at once) is completed as a copy of it without
annotations, since GitHub cannot delete a check and shows the newest. A completed check is never
made `in_progress` again. Annotations are appended by GitHub on every update, so they are read back
and each is sent once, by content; they are all sent before the check is completed, so a publish
cut off midway leaves a running check, which the sweep finishes, never a completed one that lacks
some.

The App's installation token is minted with the same attempts as any read (`connect`): one 502
there must not fail a publish.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import github3
import requests
from requests.adapters import HTTPAdapter

from pytest_rocm.errors import NotDone
from pytest_rocm.schemas.markdown import cut_page
from rocm_gate.github.checks import ANNOTATIONS_PER_REQUEST, CUT_NOTE, TEXT_LIMIT, CheckContent

__all__ = [
    "Ambiguous",
    "Client",
    "GITHUB_ERRORS",
    "PublishError",
    "connect",
    "converge",
    "describe",
]

CONNECT_TIMEOUT_S = 5.0
READ_TIMEOUT_S = 20.0
MAX_WAIT_S = 120.0  # no single wait (Retry-After, rate-limit reset) longer than this
ATTEMPTS = 6
SETTLE_S = 10.0  # GitHub's own limit on processing one request
MAX_DOWNLOAD_BYTES = 256 * 1024 * 1024
TRANSIENT_STATUS = (500, 502, 503, 504)
PACE_S = 1.0  # between two writes
GITHUB_ERRORS = (github3.exceptions.GitHubException, requests.RequestException)


class PublishError(NotDone):
    """GitHub refused (`refused`: credentials, permissions, a request it will not take) or kept
    failing past the attempts; the message says what failed last (never a token)."""

    def __init__(self, message: str, refused: bool = False):
        super().__init__(message)
        self.refused = refused


class Ambiguous(Exception):
    """A write that failed after it was sent: it may have been applied. Read the state again after
    `settle`."""

    def __init__(self, what: str, sent_at: float):
        super().__init__(what)
        self.sent_at = sent_at


def connect(
    api_url: str,
    token: str | None = None,
    app_id: str | None = None,
    private_key: str | None = None,
    installation_id: str | None = None,
    read_timeout: float = READ_TIMEOUT_S,
    attempts: int = ATTEMPTS,
    backoff: float = 1.0,
    sleep: Callable[[float], None] = time.sleep,
) -> github3.GitHub:
    """A github3 client for `api_url` (api.github.com, GitHub Enterprise's /api/v3, or a loopback
    server).

    Auth: an App (id, private key, installation id: an installation token minted now), else `token` (an
    Actions GITHUB_TOKEN or another installation token: check runs need one, a personal token is
    refused by GitHub). Retries are `Client`'s, so the session itself retries nothing."""
    gh = github3.GitHub()
    session = gh.session
    session.base_url = api_url.rstrip("/")
    session.default_connect_timeout, session.default_read_timeout = CONNECT_TIMEOUT_S, read_timeout
    adapter = HTTPAdapter(max_retries=0)
    session.mount("https://", adapter)
    session.mount("http://", adapter)
    if app_id and private_key and installation_id:
        # the JWT's `iss` must be a string for PyJWT 2.10+; a 5xx or a dropped connection while
        # minting is tried again, as any read is
        for attempt in range(attempts):
            try:
                gh.login_as_app_installation(
                    private_key.encode(), str(app_id), int(installation_id)
                )
                break
            except (github3.exceptions.ServerError, requests.RequestException):
                if attempt + 1 == attempts:
                    raise
                sleep(min(backoff * 2**attempt, MAX_WAIT_S))
    elif token:
        # The Actions token is an installation token; github3 only allows check runs under this
        # auth.
        expires = (dt.datetime.now(dt.UTC) + dt.timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
        session.app_installation_token_auth({"token": token, "expires_at": expires})
    return gh


def describe(exc: BaseException | None) -> str:
    response = getattr(exc, "response", None)
    if response is not None and getattr(response, "status_code", None):
        request = getattr(response, "request", None)
        where = f" from {request.method} {response.url}" if request is not None else ""
        return f"HTTP {response.status_code}{where}: {str(exc)[:300]}"
    return f"{type(exc).__name__}: {str(exc)[:300]}"


def _rate_limited(response: requests.Response) -> bool:
    if response.status_code == 429:
        return True
    headers = response.headers
    return response.status_code == 403 and (
        "Retry-After" in headers or headers.get("X-RateLimit-Remaining") == "0"
    )


def _wait_for(response: requests.Response | None, attempt: int, backoff: float) -> float:
    """Seconds to wait before the next attempt: a rate limit's own time when it gives one, else
    backoff."""
    headers = response.headers if response is not None else {}
    if headers.get("Retry-After", "").isascii() and headers.get("Retry-After", "").isdigit():
        return min(float(headers["Retry-After"]), MAX_WAIT_S)
    reset = headers.get("X-RateLimit-Reset", "")
    if headers.get("X-RateLimit-Remaining") == "0" and reset.isascii() and reset.isdigit():
        return min(max(float(headers["X-RateLimit-Reset"]) - time.time(), 0.0) + 1.0, MAX_WAIT_S)
    return min(backoff * 2**attempt, MAX_WAIT_S)


class _Refused(Exception):
    def __init__(self, response: requests.Response):
        super().__init__(f"HTTP {response.status_code}")
        self.response = response


@dataclass
class Client:
    """One repository's API with the retry rule of the module docstring."""

    gh: github3.GitHub
    repo: str
    attempts: int = ATTEMPTS
    backoff: float = 1.0
    settle_s: float = SETTLE_S
    sleep: Callable[[float], None] = time.sleep
    log: list[str] = field(default_factory=list)  # what was retried, for the command's output
    app_id: int | None = (
        None  # the App this publisher writes as: checks of any other app are not its own
    )
    pace_s: float = PACE_S  # between two writes
    _last_write: float = field(default=-1e9, repr=False)

    @property
    def base(self) -> str:
        return self.gh.session.base_url

    def _url(self, path: str) -> str:
        return (
            path
            if path.startswith(("http://", "https://"))
            else f"{self.base}{path.format(repo=self.repo)}"
        )

    def get(self, path: str, params: dict | None = None, *, ok_missing: bool = False):
        """The JSON of a GET, retried as the module says; None for a 404 when `ok_missing` (and for
        the 422 GitHub answers a commit it does not have with: "No commit found for SHA")."""
        last = None
        for attempt in range(self.attempts):
            try:
                response = self.gh.session.get(self._url(path), params=params)
            # connection or read timeout: nothing changed, ask again
            except requests.RequestException as exc:
                last = exc
                self._pause(None, attempt, f"GET {path}: {type(exc).__name__}")
                continue
            if ok_missing and (
                response.status_code == 404
                or (response.status_code == 422 and b"No commit found" in response.content)
            ):
                return None
            if response.status_code < 300:
                return response.json() if response.content else None
            if response.status_code in TRANSIENT_STATUS or _rate_limited(response):
                last = github3.exceptions.error_for(response)
                self._pause(response, attempt, f"GET {path}: HTTP {response.status_code}")
                continue
            raise PublishError(
                f"GitHub refused GET {path}: {describe(github3.exceptions.error_for(response))}",
                refused=True,
            )
        raise PublishError(
            f"GET {path} failed {self.attempts} times; the last error: {describe(last)}"
        )

    def paged(
        self,
        path: str,
        key: str | None,
        params: dict | None = None,
        per_page: int = 100,
        start_page: int = 1,
    ) -> list:
        items: list = []
        page = start_page
        while True:
            body = self.get(path, {**(params or {}), "per_page": per_page, "page": page})
            chunk = (body or {}).get(key, []) if key else (body or [])
            items += chunk
            if len(chunk) < per_page:
                return items
            page += 1

    def write(self, method: str, path: str, body: dict | None = None):
        """One POST or PATCH. Sent again only when GitHub refused it before doing anything;
        `Ambiguous` when it may have been applied; PublishError when GitHub will not take it."""
        for attempt in range(self.attempts):
            wait = self._last_write + self.pace_s - time.monotonic()
            if wait > 0:
                self.sleep(wait)
            sent_at = self._last_write = time.monotonic()
            try:
                response = self.gh.session.request(method, self._url(path), json=body)
            except requests.ConnectionError as exc:
                if isinstance(
                    exc, requests.exceptions.ConnectTimeout
                ) or "Connection refused" in str(exc):
                    # never reached GitHub
                    self._pause(None, attempt, f"{method} {path}: no connection")
                    continue
                raise Ambiguous(f"{method} {path}: {type(exc).__name__}", sent_at) from None
            # a read timeout: GitHub has it, and may act on it
            except requests.RequestException as exc:
                raise Ambiguous(f"{method} {path}: {type(exc).__name__}", sent_at) from None
            if response.status_code < 300:
                return response.json() if response.content else None
            if _rate_limited(response):
                self._pause(response, attempt, f"{method} {path}: rate limited")
                continue
            if response.status_code in TRANSIENT_STATUS:
                raise Ambiguous(f"{method} {path}: HTTP {response.status_code}", sent_at)
            raise PublishError(
                f"GitHub refused {method} {path}: {describe(github3.exceptions.error_for(response))}",
                refused=True,
            )
        raise PublishError(f"{method} {path} was refused for rate limits {self.attempts} times")

    def write_again(self, method: str, path: str, body: dict):
        """A write that changes nothing when GitHub gets it twice (a PATCH without annotations):
        sent again after each ambiguous failure, each time after settling, up to the attempts."""
        for attempt in range(self.attempts):
            try:
                return self.write(method, path, body)
            except Ambiguous as exc:
                if attempt + 1 == self.attempts:
                    raise PublishError(
                        f"{exc}: tried {self.attempts} times without a clear answer"
                    ) from None
                self.settle(exc)

    def settle(self, ambiguous: Ambiguous) -> None:
        """Wait until GitHub has finished with the ambiguous request (SETTLE_S after it was
        sent)."""
        self.log.append(f"{ambiguous}: reading the state again before sending what is missing")
        left = ambiguous.sent_at + self.settle_s - time.monotonic()
        if left > 0:
            self.sleep(left)

    def _pause(self, response, attempt: int, what: str) -> None:
        if attempt + 1 < self.attempts:
            wait = _wait_for(response, attempt, self.backoff)
            self.log.append(
                f"{what}: attempt {attempt + 1} of {self.attempts}, waiting {wait:.1f} s"
            )
            self.sleep(wait)

    def download(self, path: str, limit: int = MAX_DOWNLOAD_BYTES) -> bytes:
        """The bytes behind a GET that redirects to storage (an artifact's zip), at most `limit` of
        them."""
        data = bytearray()
        self.download_to(path, data.extend, limit, data.clear)
        return bytes(data)

    def download_to(self, path: str, write, limit: int, restart) -> None:
        """Stream the bytes behind a GET that redirects to storage into `write`, at most `limit` of
        them; `restart()` before an attempt after the first (what an interrupted attempt wrote is
        dropped)."""
        last = None
        for attempt in range(self.attempts):
            try:
                with self.gh.session.get(
                    self._url(path), stream=True, allow_redirects=True
                ) as response:
                    if response.status_code in TRANSIENT_STATUS or _rate_limited(response):
                        last = f"HTTP {response.status_code}"
                        self._pause(response, attempt, f"GET {path}: {last}")
                        continue
                    if response.status_code >= 300:
                        raise PublishError(
                            f"GitHub refused GET {path}: HTTP {response.status_code}", refused=True
                        )
                    if attempt:
                        restart()
                    size = 0
                    for chunk in response.iter_content(1 << 20):
                        size += len(chunk)
                        if size > limit:
                            raise PublishError(
                                f"GET {path}: more than {limit:,} bytes; refusing it", refused=True
                            )
                        write(chunk)
                    return
            except requests.RequestException as exc:
                last = f"{type(exc).__name__}"
                self._pause(None, attempt, f"GET {path}: {last}")
        raise PublishError(f"GET {path} failed {self.attempts} times; the last error: {last}")

    # --- what the publisher asks ------------------------------------------------------------------

    def checks(self, sha: str, name: str) -> list[dict]:
        """Every check run of `name` on `sha` written by this App (all runs, not GitHub's default of
        the newest per name). A check of the same name from any other app (a fork's Actions job can
        be called `rocm-gate / MI300X-8`) is never read as ours."""
        params = {"check_name": name, "filter": "all"}
        if self.app_id is not None:
            params["app_id"] = self.app_id
        return [
            r
            for r in self.paged(f"/repos/{{repo}}/commits/{sha}/check-runs", "check_runs", params)
            if r["name"] == name
            and r["head_sha"] == sha
            and (self.app_id is None or (r.get("app") or {}).get("id") == self.app_id)
        ]

    def permission(self, user: str) -> str:
        """The user's permission on the repository: admin, maintain, write, triage, read or none."""
        body = self.get(f"/repos/{{repo}}/collaborators/{user}/permission", ok_missing=True)
        return (body or {}).get("role_name") or (body or {}).get("permission") or "none"

    def changed_files(self, base: str, head: str, limit: int = 300) -> list[str] | None:
        """The paths commit `head` changes since its merge base with `base` (GitHub's compare; a
        renamed file counts by both names): what a PR changes as of that very commit, whatever was
        pushed since. GitHub names at most 300 files; None when there may be more, or when it does
        not know the commits."""
        body = self.get(f"/repos/{{repo}}/compare/{base}...{head}", ok_missing=True)
        if not isinstance(body, dict) or not isinstance(body.get("files"), list):
            return None
        files = []
        for entry in body["files"]:
            if isinstance(entry, dict):
                files += [entry[key] for key in ("filename", "previous_filename") if entry.get(key)]
        return None if len(body["files"]) >= limit else files

    def dispatch(self, workflow: str, ref: str, inputs: dict) -> None:
        """Start `workflow` (a file name or id) on `ref` with `inputs` (POST .../dispatches, 204). A
        dispatch whose answer was lost is not sent again: a second run of the same gate is worse
        than none."""
        try:
            self.write(
                "POST",
                f"/repos/{{repo}}/actions/workflows/{workflow}/dispatches",
                {"ref": ref, "inputs": inputs},
            )
        except Ambiguous as exc:
            raise PublishError(
                f"{exc}: the dispatch may or may not have started a run; look at the workflow's "
                "runs before dispatching again"
            ) from None


def _annotation_key(a: dict) -> tuple:
    return (a["path"], a["start_line"], a.get("title") or "", a["message"])


def _batches(
    content: CheckContent, listed: list[dict], refused: list[dict] | tuple = ()
) -> tuple[int, list[list[dict]]]:
    """(how many annotations GitHub holds, the batches of those it lacks and has not refused; at
    least one, maybe empty)."""
    have = {_annotation_key(a) for a in listed} | {_annotation_key(a) for a in refused}
    missing = [a for a in content.annotations if _annotation_key(a) not in have]
    return len(listed), [
        missing[i : i + ANNOTATIONS_PER_REQUEST]
        for i in range(0, len(missing), ANNOTATIONS_PER_REQUEST)
    ] or [[]]


def _given(body: dict) -> dict:
    """`body` without the fields that have no value: GitHub's schema refuses `null` for a string
    (`details_url`, `external_id` of a publish from a local folder)."""
    return {key: value for key, value in body.items() if value is not None}


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class Published:
    check_id: int
    html_url: str
    created: bool
    annotations_sent: int
    status: str = (
        "completed"  # completed | in_progress | unchanged (a completed check is never reopened)
    )
    duplicates: int = 0


def converge(
    client: Client,
    sha: str,
    content: CheckContent,
    external_id: str | None,
    details_url: str | None,
    in_progress: bool = False,
) -> Published:
    """Create or update this run's check until GitHub holds exactly `content` (see the module
    docstring)."""
    tries: dict[str, int] = {}
    runs, created = _find_or_create(client, sha, content, external_id, details_url, tries)
    canonical, extras = runs[0], runs[1:]
    if in_progress:  # never reopen a completed check; a running one needs nothing more
        status = "unchanged" if canonical["status"] == "completed" else "in_progress"
        return Published(canonical["id"], canonical["html_url"], created, 0, status, len(extras))
    path = f"/repos/{{repo}}/check-runs/{canonical['id']}"
    refused: list[dict] = []
    sent = _send_annotations(client, path, content, tries, refused)
    if refused:  # a refused annotation degrades the check, never loses it
        client.log.append(
            f"GitHub refused {len(refused)} annotation(s): left out, the check completed"
        )
        content = replace(
            content,
            summary=(
                f"> [!NOTE]\n> GitHub refused {len(refused)} of {len(content.annotations)} "
                "annotation(s): they are left out; every failure is listed here and in the run's "
                f"gate-report.json.\n\n{content.summary}"
            ),
        )
    _complete(client, path, content, external_id, details_url, tries)
    for extra in extras:  # what late creates left: copies without annotations, so none stands apart
        if extra["status"] == "completed" and extra["conclusion"] == content.conclusion:
            continue
        body = {
            "status": "completed",
            "conclusion": content.conclusion,
            "completed_at": _now(),
            **_given({"details_url": details_url}),
            "output": {
                "title": content.title,
                "summary": cut_page(
                    f"A duplicate of {canonical['html_url']}, which has the annotations.\n\n"
                    f"{content.summary}",
                    TEXT_LIMIT,
                    CUT_NOTE,
                ),
            },
        }
        client.write_again("PATCH", f"/repos/{{repo}}/check-runs/{extra['id']}", body)
    return Published(
        canonical["id"], canonical["html_url"], created, sent, "completed", len(extras)
    )


def _find_or_create(
    client: Client,
    sha: str,
    content: CheckContent,
    external_id: str | None,
    details_url: str | None,
    tries: dict[str, int],
) -> tuple[list[dict], bool]:
    """This run's checks on the commit, oldest first, and whether this call created one: where
    there is none, one is created and read back (a create GitHub did not answer may land twice)."""
    created = False
    while True:
        runs = sorted(
            (
                r
                for r in client.checks(sha, content.name)
                if external_id is None or r.get("external_id") == external_id
            ),
            key=lambda r: r["id"],
        )
        if runs:
            return runs, created
        _spend(client, tries, "create the check")
        try:
            client.write(
                "POST",
                "/repos/{repo}/check-runs",
                _given(
                    {
                        "name": content.name,
                        "head_sha": sha,
                        "details_url": details_url,
                        "external_id": external_id,
                        "status": "in_progress",
                        "started_at": _now(),
                        "output": {"title": "running", "summary": f"{content.name} is running."},
                    }
                ),
            )
            created = True
        except Ambiguous as exc:
            client.settle(exc)


def _send_annotations(
    client: Client, path: str, content: CheckContent, tries: dict[str, int], refused: list[dict]
) -> int:
    """Send what GitHub does not hold yet, each annotation once, a batch at a time; how many were
    sent. A batch GitHub refuses (422) is halved until the annotation it refuses is alone, which is
    left out (added to `refused`): one bad annotation never loses the others, nor the check."""
    held, batches = _batches(content, client.paged(f"{path}/annotations", None), refused)
    sent, index = 0, 0
    while index < len(batches) and batches[index]:
        batch = batches[index]
        _spend(client, tries, f"annotations {held + 1} to {held + len(batch)}")
        try:
            client.write("PATCH", path, {"output": content.output(batch)})
            landed = True
        except PublishError as exc:
            if not exc.refused:
                raise
            if len(batch) == 1:
                refused.append(batch[0])
                index += 1
            else:
                half = len(batch) // 2
                batches[index : index + 1] = [batch[:half], batch[half:]]
            continue
        # landed or not? GitHub's count of annotations says, once it is done with it
        except Ambiguous as exc:
            client.settle(exc)
            count = (client.get(path).get("output") or {}).get("annotations_count", -1)
            if count == held + len(batch):
                landed = True
            elif count == held:
                landed = False  # send it again
            else:  # something else changed it: read every annotation again
                held, batches = _batches(
                    content, client.paged(f"{path}/annotations", None), refused
                )
                index = 0
                continue
        if landed:
            held, sent, index = held + len(batch), sent + len(batch), index + 1
    return sent


def _complete(
    client: Client,
    path: str,
    content: CheckContent,
    external_id: str | None,
    details_url: str | None,
    tries: dict[str, int],
) -> None:
    """Complete the check with its conclusion, once every annotation is held."""
    common = _given(
        {"details_url": details_url, "external_id": external_id, "actions": content.actions}
    )
    while True:
        _spend(client, tries, "complete the check")
        try:
            client.write(
                "PATCH",
                path,
                {
                    "status": "completed",
                    "conclusion": content.conclusion,
                    "completed_at": _now(),
                    "output": content.output(),
                    **common,
                },
            )
            return
        except Ambiguous as exc:
            client.settle(exc)
            now = client.get(path)
            if now.get("status") == "completed" and now.get("conclusion") == content.conclusion:
                return


def _spend(client: Client, tries: dict[str, int], key: str) -> None:
    """Count one more attempt at the write `key`; past the budget, give up naming it."""
    tries[key] = tries.get(key, 0) + 1
    if tries[key] > client.attempts:
        raise PublishError(
            f"{key}: tried {client.attempts} times without a clear answer from GitHub"
        )
