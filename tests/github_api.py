"""A loopback GitHub REST API for the tests, held to GitHub's official OpenAPI description.

Every request body is validated against the operation's schema in `data/github/openapi-subset.json`
(cut from `@octokit/openapi`, see `data/github/extract.py`) and refused with GitHub's 422 error
shape when it does not fit; every response the fake sends is validated too (a violation is kept in
`errors`, and the tests require none). Webhook payloads are checked with `validate_webhook` against
`@octokit/openapi-webhooks`.

Faults, to show that publishing converges: `every=(n, status)` fails every n-th request before
applying it; `script` is a list of one-shot faults for the next requests: "502", "429", "secondary"
(403 with Retry-After), "primary" (403 with X-RateLimit-Remaining 0 and a reset time), "hang" (the
request is applied, then the answer comes too late for the client's read timeout), "applied-502"
(applied, then a 502), "late" (the answer never comes in time, and GitHub applies the request
`late_s` later, as it does while it still works on a request its client gave up on: at most 10 s,
docs.github.com/en/rest/using-the-rest-api/troubleshooting- the-rest-api#timeouts). `script_for`
holds faults for the next requests of one method and path prefix only.

Actions state, filled by the workflow harness (tests/actions.py): workflow runs, their jobs (with
the runner group that ran them) and artifacts (their zips; a download redirects to a loopback "blob
storage" URL, as GitHub's does), and the parents of commits. Tokens in `read_only_tokens` (a fork's
GITHUB_TOKEN) may read but not write: GitHub's 403 "Resource not accessible by integration".

State is what the tests assert on: check runs, their annotations, dispatches.
"""

from __future__ import annotations

import copy
import datetime as dt
import itertools
import json
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import jsonschema
from openapi_schema_validator import OAS30Validator

DATA = Path(__file__).resolve().parent / "data" / "github"
SPEC = json.loads((DATA / "openapi-subset.json").read_text())


def _nullable_enums(node) -> None:
    """OpenAPI 3.0.3: `nullable: true` adds null to the allowed values, also of an `enum` (GitHub
    sends `"conclusion": null` while a check runs); openapi-schema-validator wants null listed in
    the enum itself."""
    if isinstance(node, dict):
        if node.get("nullable") and isinstance(node.get("enum"), list) and None not in node["enum"]:
            node["enum"].append(None)
        for value in node.values():
            _nullable_enums(value)
    elif isinstance(node, list):
        for value in node:
            _nullable_enums(value)


_nullable_enums(SPEC)
WEBHOOKS = json.loads((DATA / "webhooks-subset.json").read_text())
EXAMPLES = json.loads((DATA / "webhook-examples.json").read_text())["examples"]


def _webhook_validator(name: str):
    schema = WEBHOOKS["webhooks"][name]["post"]["requestBody"]["content"]["application/json"][
        "schema"
    ]
    root = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "components": WEBHOOKS["components"],
        **schema,
    }
    return jsonschema.Draft202012Validator(root)


def _webhook_name(event: str) -> str | None:
    name = event.replace("_", "-").replace(".", "-")
    return name if name in WEBHOOKS["webhooks"] else None


ACTIONS_APP_ID = 15368  # the GitHub Actions App: the GITHUB_TOKEN's, and the checks of Actions jobs
EMPTY = {"boolean": False, "string": "", "array": [], "object": {}, "integer": 0, "number": 0}


def example(event: str) -> dict:
    """A real webhook payload (from @octokit/webhooks-examples) to start a test's event from.

    The examples predate a few fields the current schema requires (`has_discussions`, `auto_merge`,
    an App's `events`): those are added with an empty value of their type (null where allowed);
    nothing else changes."""
    payload = copy.deepcopy(EXAMPLES[event])
    name = _webhook_name(event)
    for _ in range(10):
        missing = (
            [e for e in _webhook_validator(name).iter_errors(payload) if e.validator == "required"]
            if name
            else []
        )
        if not missing:
            break
        for error in missing:
            for prop in error.validator_value:
                if prop not in error.instance:
                    kind = (error.schema.get("properties") or {}).get(prop, {}).get("type", "null")
                    kinds = kind if isinstance(kind, list) else [kind]
                    error.instance[prop] = None if "null" in kinds else EMPTY.get(kinds[0])
    return payload


def validate_webhook(name: str, payload: dict) -> None:
    """Raise jsonschema.ValidationError when `payload` is not a valid `name` webhook (e.g.
    pull-request-labeled)."""
    _webhook_validator(name).validate(payload)


def _route(template: str) -> re.Pattern:
    return re.compile("^" + re.sub(r"\{(\w+)\}", r"(?P<\1>[^/]+)", template) + "$")


ROUTES = [
    (_route(path), path, method) for path, methods in SPEC["paths"].items() for method in methods
]


SEARCH_CAP = 1000  # results a filtered search of workflow runs reaches


def _created_in(created: str, given: str | None) -> bool:
    """Whether GitHub's `created` filter (`>=T`, `<=T`, `>T`, `<T`, `A..B`, or a date) holds a run
    created at `created`; timestamps compare as text, a date alone as its day."""
    if not given:
        return True
    for op, test in ((">=", str.__ge__), ("<=", str.__le__), (">", str.__gt__), ("<", str.__lt__)):
        if given.startswith(op):
            return test(created, given[len(op) :])
    if ".." in given:
        low, high = given.split("..", 1)
        high = high if "T" in high else high + "T23:59:59Z"
        return (low == "*" or created >= low) and (high == "*" or created <= high)
    return created.startswith(given)


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class FakeGitHub:
    def __init__(self, token: str = "ghs_testtoken", app_public_key=None, hang_s: float = 3.0):
        self.tokens = {token}
        self.app_public_key = (
            app_public_key  # an App's key: /app/installations/../access_tokens mints tokens
        )
        self.hang_s = hang_s
        self.every: tuple[int, int] | None = None
        self.script: list[str] = []
        self.fail_after: int | None = (
            None  # every request after this many fails with 502 (an outage)
        )
        self.permissions: dict[str, str] = {}  # login -> role_name
        self.pulls: dict[int, dict] = {}
        self.pull_files: dict[int, list[str]] = {}  # PR number -> the paths it changes
        # "BASE...HEAD" -> the paths HEAD changes since its merge base with BASE (the compare API)
        self.compare_files: dict[str, list[str]] = {}
        self.check_runs: dict[int, dict] = {}
        self.annotations: dict[int, list[dict]] = {}
        self.dispatches: list[dict] = []
        # id -> the fields of a REST workflow run that the harness sets
        self.workflow_runs: dict[int, dict] = {}
        self.jobs: dict[int, list[dict]] = {}  # run id -> jobs (fields of a REST job)
        # id -> {"run_id", "name", "data" (zip bytes), "expired"}
        self.artifacts: dict[int, dict] = {}
        self.commits: dict[str, list[str]] = {}  # sha -> parent shas
        self.commit_dates: dict[str, str] = {}  # sha -> committer date (GitHub's timestamp)
        self.refuse_annotation = None  # annotation -> why GitHub refuses it, or None
        # (run id, attempt) -> the run as that attempt ended (the harness keeps each; a re-run's
        # newer attempt replaces the run's own fields)
        self.run_attempts: dict[tuple[int, int], dict] = {}
        self.branches: dict[str, str] = {}  # branch -> its head commit
        self.default_branch = "main"
        # number -> {"repo", "title", "body", "state", "labels", "user"}
        self.issues: dict[int, dict] = {}
        self.read_only_tokens: set[str] = set()
        # token -> the App it belongs to (minted tokens: the JWT's App)
        self.token_apps: dict[str, int] = {}
        self.late_s = 0.5
        self.script_for: list[tuple[str, str, str]] = []  # (method, path prefix, fault)
        self.errors: list[str] = []
        self.log: list[tuple[str, str, int]] = []
        self._ids = itertools.count(4001)
        self._count = 0
        self._lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()

    # the state the tests read
    def checks(self, sha: str, name: str | None = None, app_id: int | None = None) -> list[dict]:
        return [
            r
            for r in self.check_runs.values()
            if r["head_sha"] == sha
            and (name is None or r["name"] == name)
            and (app_id is None or r.get("app_id", ACTIONS_APP_ID) == app_id)
        ]

    def actions_check(self, repo: str, sha: str, name: str, conclusion: str) -> None:
        """The check run GitHub Actions itself makes for a job (named after the job, on the PR's
        head)."""
        run = {
            "id": next(self._ids),
            "repo": repo,
            "head_sha": sha,
            "name": name,
            "status": "completed",
            "conclusion": conclusion,
            "started_at": _now(),
            "completed_at": _now(),
            "details_url": None,
            "external_id": None,
            "output": {"title": name, "summary": ""},
            "actions": [],
            "app_id": ACTIONS_APP_ID,
        }
        self.annotations[run["id"]] = []
        self.check_runs[run["id"]] = run

    # --- request handling ---
    def _handler(self):
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def _send(self, status: int, body=None, headers: dict | None = None):
                raw = isinstance(body, bytes)
                data = body if raw else b"" if body is None else json.dumps(body).encode()
                try:
                    self.send_response(status)
                    for key, value in (headers or {}).items():
                        self.send_header(key, value)
                    if body is not None and not raw:
                        self.send_header("Content-Type", "application/json; charset=utf-8")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):  # the client gave up (a hang)
                    pass

            def _any(self, method: str):
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                status, body, headers, after = fake.handle(method, self.path, self.headers, raw)
                if after == "hang":
                    time.sleep(fake.hang_s)
                self._send(status, body, headers)

            def do_GET(self):
                self._any("get")

            def do_POST(self):
                self._any("post")

            def do_PATCH(self):
                self._any("patch")

        return Handler

    def handle(self, method: str, target: str, headers, raw: bytes):
        split = urlsplit(target)
        query = {k: v[-1] for k, v in parse_qs(split.query).items()}
        with self._lock:
            self._count += 1
            count = self._count
            fault = self.script.pop(0) if self.script else None
            for i, (verb, prefix, scripted) in enumerate(self.script_for):
                if fault is None and verb == method and split.path.startswith(prefix):
                    fault = scripted
                    del self.script_for[i]
                    break
        if self.fail_after is not None and count > self.fail_after:
            fault = "502"
        if self.every and count % self.every[0] == 0 and fault is None:
            fault = str(self.every[1])
        result = self._handle(method, split.path, query, headers, raw, fault)
        self.log.append((method.upper(), split.path, result[0]))
        return result

    def _handle(self, method, path, query, headers, raw, fault):
        if path.startswith("/_blob/"):  # an artifact's pre-signed storage URL: no API, no token
            artifact = self.artifacts.get(int(path.rsplit("/", 1)[1]))
            return (
                (200, artifact["data"], {"Content-Type": "application/zip"}, None)
                if artifact
                else (404, None, {}, None)
            )
        if fault in ("502", "500", "503"):
            return int(fault), {"message": "Server Error"}, {}, None
        if fault == "ok":  # a placeholder in `script_for`: this request goes through
            fault = None
        if fault == "429":
            return 429, {"message": "Too many requests"}, {"Retry-After": "1"}, None
        if fault == "secondary":
            return (
                403,
                {
                    "message": "You have exceeded a secondary rate limit. Please wait a few minutes before you "
                    "try again.",
                    "documentation_url": "https://docs.github.com/rest/overview/rate-limits-for-the-rest-api",
                },
                {"Retry-After": "1"},
                None,
            )
        if fault == "primary":
            return (
                403,
                {
                    "message": "API rate limit exceeded for installation.",
                    "documentation_url": "https://docs.github.com/rest/overview/rate-limits-for-the-rest-api",
                },
                {"X-RateLimit-Remaining": "0", "X-RateLimit-Reset": str(int(time.time()) + 1)},
                None,
            )
        for pattern, template, verb in ROUTES:  # noqa: B007 (the matched route's template is read after the loop)
            match = pattern.match(path)
            if match and verb == method:
                break
        else:
            return (
                404,
                {"message": "Not Found", "documentation_url": "https://docs.github.com/rest"},
                {},
                None,
            )
        operation = SPEC["paths"][template][method]
        params = match.groupdict()
        auth = headers.get("Authorization") or ""
        if template.startswith("/app/"):
            return self._mint_token(auth, params)
        scheme, _, token = auth.partition(" ")
        if scheme.lower() not in ("token", "bearer") or token not in self.tokens:
            return (
                401,
                {"message": "Bad credentials", "documentation_url": "https://docs.github.com/rest"},
                {},
                None,
            )
        if method != "get" and token in self.read_only_tokens:
            return (
                403,
                {
                    "message": "Resource not accessible by integration",
                    "documentation_url": "https://docs.github.com/rest",
                },
                {},
                None,
            )
        # who writes: an App's token, else Actions'
        params["_app"] = self.token_apps.get(token, ACTIONS_APP_ID)
        body = None
        if raw:
            try:
                body = json.loads(raw)
            except ValueError:
                return 400, {"message": "Problems parsing JSON"}, {}, None
        schema = (
            ((operation.get("requestBody") or {}).get("content") or {})
            .get("application/json", {})
            .get("schema")
        )
        if schema is not None:
            problems = [
                f"{'/'.join(map(str, e.absolute_path)) or 'body'}: {e.message[:200]}"
                for e in OAS30Validator(schema).iter_errors(body)
            ]
            if problems:
                return (
                    422,
                    {
                        "message": "Invalid request.\n\n" + "\n".join(problems),
                        "documentation_url": operation.get("externalDocs", {}).get("url", ""),
                        "status": "422",
                    },
                    {},
                    None,
                )
        handler = getattr(self, "_" + operation["operationId"].replace("/", "_").replace("-", "_"))
        if fault == "late":  # applied after the client gave up, and no answer in time
            threading.Timer(
                self.late_s,
                lambda: self._apply_late(handler, operation, template, params, query, body),
            ).start()
            return 502, {"message": "Server Error"}, {}, "hang"
        status, answer = handler(params, query, body)
        headers_out = {}
        if isinstance(answer, tuple):  # (body, headers): a redirect
            answer, headers_out = answer
        if status < 400:
            self._check_response(operation, status, answer, template)
        after = "hang" if fault == "hang" else None
        if fault == "applied-502":
            return 502, {"message": "Server Error"}, {}, None
        return status, answer, headers_out, after

    def _apply_late(self, handler, operation, template, params, query, body):
        status, answer = handler(params, query, body)
        if status < 400:
            self._check_response(operation, status, answer, template)

    def _check_response(self, operation, status, answer, template):
        content = (operation["responses"].get(str(status)) or {}).get("content") or {}
        schema = content.get("application/json", {}).get("schema")
        if schema is None:
            if answer is not None:
                self.errors.append(f"{template}: {status} has no body in the description")
            return
        for error in OAS30Validator(schema).iter_errors(answer):
            self.errors.append(
                f"{template} {status}: {'/'.join(map(str, error.absolute_path))}: {error.message[:200]}"
            )

    def _example(self, template, method, status):
        content = SPEC["paths"][template][method]["responses"][status]["content"][
            "application/json"
        ]
        examples = content.get("examples") or {}
        return copy.deepcopy(
            next(iter(examples.values()))["value"] if examples else content["example"]
        )

    def _mint_token(self, auth, params):
        import jwt

        scheme, _, token = auth.partition(" ")
        try:
            claims = jwt.decode(token, self.app_public_key, algorithms=["RS256"])
        except Exception as exc:  # any bad JWT is GitHub's 401
            return (
                401,
                {"message": f"A JSON web token could not be decoded ({type(exc).__name__})"},
                {},
                None,
            )
        minted = f"ghs_installation_{params['installation_id']}_{claims['iss']}"
        self.tokens.add(minted)
        self.token_apps[minted] = int(claims["iss"])
        expires = (dt.datetime.now(dt.UTC) + dt.timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
        answer = {
            **self._example("/app/installations/{installation_id}/access_tokens", "post", "201"),
            "token": minted,
            "expires_at": expires,
        }
        self._check_response(
            SPEC["paths"]["/app/installations/{installation_id}/access_tokens"]["post"],
            201,
            answer,
            "/app/installations/{installation_id}/access_tokens",
        )
        return 201, answer, {}, None

    # --- operations (named by operationId) ---
    def _repos_get(self, p, q, body):
        repo = self._example("/repos/{owner}/{repo}", "get", "200")
        full = f"{p['owner']}/{p['repo']}"
        repo.update(
            name=p["repo"],
            full_name=full,
            url=f"{self.url}/repos/{full}",
            default_branch=self.default_branch,
        )
        repo["owner"]["login"] = p["owner"]
        for part in (repo, repo.get("source") or {}, repo.get("parent") or {}):
            # required by the schema, absent from GitHub's own example
            part.setdefault("language", "Python")
        return 200, repo

    def _render(self, run: dict) -> dict:
        out = self._example("/repos/{owner}/{repo}/check-runs/{check_run_id}", "get", "200")
        base = f"{self.url}/repos/{run['repo']}/check-runs/{run['id']}"
        out.update(
            {
                k: run[k]
                for k in (
                    "id",
                    "head_sha",
                    "name",
                    "status",
                    "conclusion",
                    "started_at",
                    "completed_at",
                    "details_url",
                    "external_id",
                )
            }
        )
        out.update(
            url=base,
            html_url=f"https://github.com/{run['repo']}/runs/{run['id']}",
            node_id=f"CR_{run['id']}",
            pull_requests=[],
            check_suite={"id": 5},
        )
        if out.get("app"):
            out["app"] = {**out["app"], "id": run.get("app_id", ACTIONS_APP_ID)}
        out["output"] = {
            "title": run["output"].get("title"),
            "summary": run["output"].get("summary"),
            "text": run["output"].get("text"),
            "annotations_count": len(self.annotations[run["id"]]),
            "annotations_url": f"{base}/annotations",
        }
        return out

    def _apply(self, run: dict, body: dict) -> tuple[int, dict] | None:
        refused = self._refused_output(body.get("output") or {})
        if refused:
            return 422, {"message": f"Invalid request.\n\n{refused}", "status": "422"}
        status = body.get("status", run["status"])
        conclusion = body.get("conclusion", run["conclusion"] if status == "completed" else None)
        if status == "completed" and not conclusion:  # GitHub's own rule, beyond the schema
            return 422, {
                "message": "Invalid request.\n\nconclusion is required when status is completed",
                "status": "422",
            }
        for key in ("name", "details_url", "external_id", "started_at", "actions"):
            if key in body:
                run[key] = body[key]
        run["status"], run["conclusion"] = status, conclusion if status == "completed" else None
        if status == "completed":
            run["completed_at"] = body.get("completed_at") or _now()
        if "output" in body:
            output = dict(body["output"])
            self.annotations[run["id"]] += [dict(a) for a in output.pop("annotations", [])]
            run["output"] = output
        return None

    def _refused_output(self, output: dict) -> str | None:
        """What GitHub refuses in a check's output beyond its description: a summary or text over
        65,535 bytes (GitHub counts UTF-8 bytes, the description characters), and an annotation the
        test marks as one GitHub will not take (`refuse_annotation`: GitHub refuses some for reasons
        it does not describe, such as a path it cannot resolve)."""
        for key in ("summary", "text"):
            size = len(str(output.get(key) or "").encode("utf-8", "surrogatepass"))
            if size > 65535:
                return f"output.{key} is too long (maximum is 65535 bytes, got {size})"
        for annotation in output.get("annotations") or []:
            why = self.refuse_annotation(annotation) if self.refuse_annotation else None
            if why:
                return f"output.annotations: {why}"
        return None

    def _checks_create(self, p, q, body):
        run = {
            "id": next(self._ids),
            "repo": f"{p['owner']}/{p['repo']}",
            "head_sha": body["head_sha"],
            "name": body["name"],
            "status": "queued",
            "conclusion": None,
            "started_at": _now(),
            "completed_at": None,
            "details_url": None,
            "external_id": None,
            "output": {},
            "actions": [],
            "app_id": p["_app"],
        }
        self.annotations[run["id"]] = []
        refused = self._apply(run, body)
        if refused:
            return refused
        self.check_runs[run["id"]] = run
        return 201, self._render(run)

    def _lookup(self, p):
        run = self.check_runs.get(int(p["check_run_id"]))
        return run if run and run["repo"] == f"{p['owner']}/{p['repo']}" else None

    def _checks_get(self, p, q, body):
        run = self._lookup(p)
        return (200, self._render(run)) if run else (404, {"message": "Not Found"})

    def _checks_update(self, p, q, body):
        run = self._lookup(p)
        if run is None:
            return 404, {"message": "Not Found"}
        return self._apply(run, body) or (200, self._render(run))

    def _render_issue(self, issue: dict) -> dict:
        out = self._example("/repos/{owner}/{repo}/issues/{issue_number}", "patch", "200")
        base = f"{self.url}/repos/{issue['repo']}/issues/{issue['number']}"
        out.update(
            number=issue["number"],
            id=issue["number"] + 90000,
            node_id=f"I_{issue['number']}",
            title=issue["title"],
            body=issue["body"],
            state=issue["state"],
            url=base,
            html_url=f"https://github.com/{issue['repo']}/issues/{issue['number']}",
            labels=[{**out["labels"][0], "name": name} for name in issue["labels"]]
            if out.get("labels")
            else [],
            closed_at=None if issue["state"] == "open" else _now(),
            updated_at=issue["updated_at"],
        )
        # who made it: a user, or an App (its bot user, and the App on the issue: GitHub's
        # `performed_via_github_app`)
        bot = issue["user"].endswith("[bot]")
        out["user"] = {**out["user"], "login": issue["user"], "type": "Bot" if bot else "User"}
        check_app = self._example("/repos/{owner}/{repo}/check-runs/{check_run_id}", "get", "200")[
            "app"
        ]
        out["performed_via_github_app"] = (
            {**check_app, "id": issue["app"]} if issue.get("app") is not None else None
        )
        out.pop("pull_request", None)
        return out

    def _issues_list_for_repo(self, p, q, body):
        repo = f"{p['owner']}/{p['repo']}"
        wanted = set(filter(None, q.get("labels", "").split(",")))
        state = q.get("state", "open")
        found = [
            i
            for _, i in sorted(self.issues.items())
            if i["repo"] == repo
            and wanted <= set(i["labels"])
            and (state == "all" or i["state"] == state)
        ]
        return 200, [self._render_issue(i) for i in self._page(found, q)]

    def _issues_create(self, p, q, body):
        number = next(self._ids)
        labels = [
            label if isinstance(label, str) else label.get("name")
            for label in body.get("labels") or []
        ]
        self.issues[number] = {
            "repo": f"{p['owner']}/{p['repo']}",
            "number": number,
            "title": body["title"],
            "body": body.get("body"),
            "state": "open",
            "labels": labels,
            # the token's App writes it: Actions' own bot, or an App's
            "user": "github-actions[bot]" if p["_app"] == ACTIONS_APP_ID else "rocm-gate[bot]",
            "app": p["_app"],
            "updated_at": _now(),
        }
        return 201, self._render_issue(self.issues[number])

    def _issues_update(self, p, q, body):
        issue = self.issues.get(int(p["issue_number"]))
        if issue is None or issue["repo"] != f"{p['owner']}/{p['repo']}":
            return 404, {"message": "Not Found"}
        for key in ("title", "body", "state"):
            if key in body:
                issue[key] = body[key]
        issue["updated_at"] = _now()
        return 200, self._render_issue(issue)

    def _page(self, items, q):
        per, page = min(int(q.get("per_page", 30)), 100), int(q.get("page", 1))
        return items[(page - 1) * per : page * per]

    def _checks_list_for_ref(self, p, q, body):
        runs = [
            r
            for r in self.check_runs.values()
            if r["repo"] == f"{p['owner']}/{p['repo']}"
            and r["head_sha"] == p["ref"]
            and ("check_name" not in q or r["name"] == q["check_name"])
            and ("app_id" not in q or str(r.get("app_id", ACTIONS_APP_ID)) == q["app_id"])
        ]
        runs.sort(key=lambda r: -r["id"])
        if q.get("filter", "latest") == "latest":  # GitHub's default: the newest run of each name
            seen, latest = set(), []
            for r in runs:
                if r["name"] not in seen:
                    seen.add(r["name"])
                    latest.append(r)
            runs = latest
        return 200, {
            "total_count": len(runs),
            "check_runs": [self._render(r) for r in self._page(runs, q)],
        }

    def _checks_list_annotations(self, p, q, body):
        run = self._lookup(p)
        if run is None:
            return 404, {"message": "Not Found"}
        items = [
            {
                "path": a["path"],
                "start_line": a["start_line"],
                "end_line": a["end_line"],
                "start_column": a.get("start_column"),
                "end_column": a.get("end_column"),
                "annotation_level": a["annotation_level"],
                "title": a.get("title"),
                "message": a["message"],
                "raw_details": a.get("raw_details"),
                "blob_href": f"https://github.com/{run['repo']}/blob/x/{a['path']}",
            }
            for a in self.annotations[run["id"]]
        ]
        return 200, self._page(items, q)

    def _repos_get_collaborator_permission_level(self, p, q, body):
        role = self.permissions.get(p["username"])
        if role is None:
            return 404, {"message": "Not Found"}
        answer = self._example(
            "/repos/{owner}/{repo}/collaborators/{username}/permission", "get", "200"
        )
        answer["role_name"] = role
        answer["permission"] = {"maintain": "write", "triage": "read"}.get(role, role)
        answer["user"].update(login=p["username"], role_name=role)
        return 200, answer

    def _pulls_get(self, p, q, body):
        pull = self.pulls.get(int(p["pull_number"]))
        return (200, pull) if pull else (404, {"message": "Not Found"})

    def _actions_create_workflow_dispatch(self, p, q, body):
        self.dispatches.append(
            {"repo": f"{p['owner']}/{p['repo']}", "workflow": p["workflow_id"], **body}
        )
        return 204, None

    # --- Actions: workflow runs, jobs, artifacts (filled by tests/actions.py), commits ---
    def _render_run(self, run: dict) -> dict:
        out = self._example("/repos/{owner}/{repo}/actions/runs/{run_id}", "get", "200")
        base = f"{self.url}/repos/{run['repo']}/actions/runs/{run['id']}"
        out.update(
            {
                k: run[k]
                for k in (
                    "id",
                    "name",
                    "event",
                    "status",
                    "conclusion",
                    "head_sha",
                    "head_branch",
                    "path",
                    "display_title",
                    "run_attempt",
                    "referenced_workflows",
                    "created_at",
                    "updated_at",
                )
                if k in run
            }
        )
        # the repository the run's head commit came from: a fork's for a fork's PR
        head_repo = copy.deepcopy(out.get("head_repository") or {})
        head_repo.update(full_name=run.get("head_repository", run["repo"]))
        out.update(
            head_repository=head_repo,
            url=base,
            html_url=f"https://github.com/{run['repo']}/actions/runs/{run['id']}",
            jobs_url=f"{base}/jobs",
            artifacts_url=f"{base}/artifacts",
            pull_requests=run.get("pull_requests", []),
            workflow_id=run.get("workflow_id", 1),
            run_number=run["id"],
            node_id=f"WFR_{run['id']}",
        )
        return out

    def _actions_get_workflow_run(self, p, q, body):
        run = self.workflow_runs.get(int(p["run_id"]))
        if run is None or run["repo"] != f"{p['owner']}/{p['repo']}":
            return 404, {"message": "Not Found"}
        return 200, self._render_run(run)

    def _actions_get_workflow_run_attempt(self, p, q, body):
        """One attempt of a run as it was (a re-run keeps the id; each attempt has its own times):
        the attempts the harness kept, else the run's current one."""
        run = self.workflow_runs.get(int(p["run_id"]))
        if run is None or run["repo"] != f"{p['owner']}/{p['repo']}":
            return 404, {"message": "Not Found"}
        attempt = int(p["attempt_number"])
        kept = self.run_attempts.get((run["id"], attempt))
        if kept is None and run.get("run_attempt", 1) != attempt:
            return 404, {"message": "Not Found"}
        return 200, self._render_run(kept or run)

    def _actions_list_workflow_runs(self, p, q, body):
        """GitHub's listing: newest first, filtered by `created` (`>=T`, `<=T`, `A..B`, inclusive),
        `status`, `branch`, `event`, `head_sha`; a filtered search reaches only its first 1,000
        results (its `total_count` still counts them all)."""
        runs = [
            r
            for r in self.workflow_runs.values()
            if r["repo"] == f"{p['owner']}/{p['repo']}"
            and p["workflow_id"] in (str(r.get("workflow_id")), r["path"].rsplit("/", 1)[-1])
            and q.get("status") in (None, r["status"], r["conclusion"])
            and q.get("branch") in (None, r["head_branch"])
            and q.get("event") in (None, r["event"])
            and q.get("head_sha") in (None, r["head_sha"])
            and _created_in(r["created_at"], q.get("created"))
        ]
        runs.sort(key=lambda r: (r["created_at"], r["id"]), reverse=True)
        filtered = any(k in q for k in ("created", "status", "branch", "event", "head_sha"))
        reachable = runs[:SEARCH_CAP] if filtered else runs
        return 200, {
            "total_count": len(runs),
            "workflow_runs": [self._render_run(r) for r in self._page(reachable, q)],
        }

    def _actions_list_jobs_for_workflow_run(self, p, q, body):
        run = self.workflow_runs.get(int(p["run_id"]))
        if run is None:
            return 404, {"message": "Not Found"}
        template = self._example("/repos/{owner}/{repo}/actions/runs/{run_id}/jobs", "get", "200")[
            "jobs"
        ][0]
        jobs = []
        for job in self.jobs.get(run["id"], []):
            out = copy.deepcopy(template)
            out.update(
                {
                    k: job.get(k)
                    for k in (
                        "id",
                        "name",
                        "status",
                        "conclusion",
                        "labels",
                        "runner_name",
                        "runner_group_name",
                        "runner_group_id",
                        "runner_id",
                        "started_at",
                        "completed_at",
                    )
                },
                created_at=job.get("started_at"),
            )
            out.update(
                run_id=run["id"],
                head_sha=run["head_sha"],
                workflow_name=run["name"],
                steps=[],
                head_branch=run["head_branch"],
                run_attempt=1,
                node_id=f"J_{job['id']}",
                url=f"{self.url}/repos/{run['repo']}/actions/jobs/{job['id']}",
                run_url=f"{self.url}/repos/{run['repo']}/actions/runs/{run['id']}",
            )
            jobs.append(out)
        return 200, {"total_count": len(jobs), "jobs": self._page(jobs, q)}

    def _render_artifact(self, artifact_id: int, artifact: dict) -> dict:
        run = self.workflow_runs[artifact["run_id"]]
        out = self._example("/repos/{owner}/{repo}/actions/runs/{run_id}/artifacts", "get", "200")[
            "artifacts"
        ][0]
        out.update(
            id=artifact_id,
            name=artifact["name"],
            size_in_bytes=len(artifact["data"]),
            created_at=artifact.get("created_at", out.get("created_at")),
            expired=artifact.get("expired", False),
            node_id=f"A_{artifact_id}",
            url=f"{self.url}/repos/{run['repo']}/actions/artifacts/{artifact_id}",
            archive_download_url=f"{self.url}/repos/{run['repo']}/actions/artifacts/{artifact_id}/zip",
            workflow_run={
                "id": run["id"],
                "repository_id": 1,
                "head_repository_id": 1,
                "head_branch": run["head_branch"],
                "head_sha": run["head_sha"],
            },
        )
        return out

    def _actions_list_workflow_run_artifacts(self, p, q, body):
        found = [
            (i, a)
            for i, a in sorted(self.artifacts.items())
            if a["run_id"] == int(p["run_id"]) and ("name" not in q or a["name"] == q["name"])
        ]
        items = [self._render_artifact(i, a) for i, a in found]
        return 200, {"total_count": len(items), "artifacts": self._page(items, q)}

    def _actions_download_artifact(self, p, q, body):
        artifact = self.artifacts.get(int(p["artifact_id"]))
        if artifact is None or artifact.get("expired"):
            return 410, {"message": "Artifact has expired"}
        return 302, (None, {"Location": f"{self.url}/_blob/{p['artifact_id']}"})

    def _actions_list_artifacts_for_repo(self, p, q, body):
        found = [
            (i, a)
            for i, a in sorted(self.artifacts.items(), reverse=True)
            if self.workflow_runs[a["run_id"]]["repo"] == f"{p['owner']}/{p['repo']}"
            and ("name" not in q or a["name"] == q["name"])
        ]
        items = [self._render_artifact(i, a) for i, a in found]
        return 200, {"total_count": len(items), "artifacts": self._page(items, q)}

    def _repos_list_commits(self, p, q, body):
        """A branch's (or commit's) history, newest first by committer date, as GitHub lists it:
        every commit reachable from it, each with its parents; `since` keeps the later ones."""
        start = self.branches.get(q.get("sha") or self.default_branch) or q.get("sha")
        if start not in self.commits:
            return 404, {
                "message": "Not Found",
                "documentation_url": "https://docs.github.com/rest",
            }
        seen, todo = set(), [start]
        while todo:
            sha = todo.pop()
            if sha in seen or sha not in self.commits:
                continue
            seen.add(sha)
            todo += self.commits[sha]
        order = self._log_order(seen)
        if q.get("since"):
            order = [c for c in order if self.commit_dates.get(c, "") >= q["since"]]
        template = self._example("/repos/{owner}/{repo}/commits", "get", "200")[0]
        items = []
        for sha in self._page(order, q):
            item = copy.deepcopy(template)
            date = self.commit_dates.get(sha, "2026-01-01T00:00:00Z")
            item.update(
                sha=sha,
                node_id=f"C_{sha}",
                url=f"{self.url}/repos/{p['owner']}/{p['repo']}/commits/{sha}",
            )
            item["commit"]["committer"]["date"] = date
            item["commit"]["author"]["date"] = date
            item["parents"] = [
                {
                    "sha": parent,
                    "url": f"{self.url}/repos/{p['owner']}/{p['repo']}/commits/{parent}",
                }
                for parent in self.commits[sha]
            ]
            items.append(item)
        return 200, items

    def _log_order(self, commits: set[str]) -> list[str]:
        """`git log`'s order: newest first, and never a parent before its child (commits of one
        second are common here)."""
        children = {c: 0 for c in commits}
        for sha in commits:
            for parent in self.commits[sha]:
                if parent in children:
                    children[parent] += 1
        ready = [c for c, n in children.items() if n == 0]
        order = []
        while ready:
            ready.sort(key=lambda c: (self.commit_dates.get(c, ""), c))
            sha = ready.pop()
            order.append(sha)
            for parent in self.commits[sha]:
                if parent in children:
                    children[parent] -= 1
                    if children[parent] == 0:
                        ready.append(parent)
        return order

    def _repos_get_commit(self, p, q, body):
        parents = self.commits.get(p["ref"])
        if parents is None:  # GitHub answers a SHA it does not have with 422, not 404
            return 422, {
                "message": "No commit found for SHA: " + p["ref"],
                "documentation_url": "https://docs.github.com/rest/commits/commits#get-a-commit",
                "status": "422",
            }
        out = self._example("/repos/{owner}/{repo}/commits/{ref}", "get", "200")
        if p["ref"] in self.commit_dates:
            out["commit"]["committer"]["date"] = self.commit_dates[p["ref"]]
        out.update(
            sha=p["ref"],
            node_id=f"C_{p['ref']}",
            files=[],
            parents=[
                {
                    "sha": sha,
                    "url": f"{self.url}/repos/{p['owner']}/{p['repo']}/commits/{sha}",
                    "html_url": f"https://github.com/{p['owner']}/{p['repo']}/commit/{sha}",
                }
                for sha in parents
            ],
        )
        return 200, out

    def _pulls_list_files(self, p, q, body):
        template = self._example("/repos/{owner}/{repo}/pulls/{pull_number}/files", "get", "200")[0]
        items = [
            {
                **template,
                "filename": name,
                "sha": "0" * 40,
                "status": "modified",
                "additions": 1,
                "deletions": 0,
                "changes": 1,
            }
            for name in self.pull_files.get(int(p["pull_number"]), [])
        ]
        return 200, self._page(items, q)

    def _repos_compare_commits_with_basehead(self, p, q, body):
        """GitHub's compare (`BASE...HEAD`): the files HEAD changes since the merge base, at most 300
        of them (the first page names the files; docs.github.com/en/rest/commits/commits#compare-two-
        commits)."""
        base, _, head = p["basehead"].partition("...")
        base = self.branches.get(base) or base
        found = self._merge_base(base, self.branches.get(head) or head)
        files = self.compare_files.get(p["basehead"])
        if files is None and found is not None:
            files = []  # the graph is known, the files are not: none named
        if files is None:
            return 404, {
                "message": "Not Found",
                "documentation_url": "https://docs.github.com/rest",
            }
        out = self._example("/repos/{owner}/{repo}/compare/{basehead}", "get", "200")
        template = out["files"][0] if out.get("files") else {}
        out.update(
            status="ahead",
            files=[
                {**template, "filename": name, "status": "modified", "sha": "0" * 40}
                for name in files[:300]
            ],
        )
        if found is not None:
            out["merge_base_commit"] = {**out["merge_base_commit"], "sha": found}
        return 200, out

    def _merge_base(self, base: str, head: str) -> str | None:
        """The newest common ancestor of two commits the fake knows (breadth first from `head`)."""
        if base not in self.commits or head not in self.commits:
            return None
        ancestors, todo = set(), [base]
        while todo:
            sha = todo.pop()
            if sha not in ancestors and sha in self.commits:
                ancestors.add(sha)
                todo += self.commits[sha]
        queue, seen = [head], set()
        while queue:
            sha = queue.pop(0)
            if sha in ancestors:
                return sha
            if sha not in seen:
                seen.add(sha)
                queue += self.commits.get(sha, [])
        return None
