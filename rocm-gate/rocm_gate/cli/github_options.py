"""Options shared by the commands that talk to GitHub (publish, sweep, trust, rerun, tracker): where
the API is, which repository, how requests are tried and paced (the same for every command), and the
credentials, read from the environment as GitHub Actions sets it; the event payload the job was given
(`read_event`).

Credentials: a GitHub App (ROCM_GATE_APP_ID, ROCM_GATE_APP_PRIVATE_KEY or ROCM_GATE_APP_PRIVATE_KEY_FILE,
ROCM_GATE_APP_INSTALLATION_ID: an installation token is minted per run), else GITHUB_TOKEN (the Actions
token is an installation token of the Actions App). No credential is ever printed.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from pytest_rocm.errors import BadInput
from pytest_rocm.schemas import values


class OptionError(BadInput):
    pass


def runner_class_and_group(value: str) -> tuple[str, str]:
    runner_class, sep, group = value.partition("=")
    if not sep or not runner_class or not group:
        raise argparse.ArgumentTypeError(
            f"expected CLASS=RUNNER_GROUP (mi300x-8=rocm-mi300x-8), got {value!r}"
        )
    return runner_class.lower(), group


def add_gate_runs(parser) -> None:
    """Which gate runs a command lists on GitHub and checks as publish does (sweep, history sync):
    the caller workflow, the reusable workflow's pin, and each runner class's runner group."""
    parser.add_argument(
        "--workflow",
        default="rocm-gate.yml",
        help="the gate's caller workflow file (default: %(default)s)",
    )
    parser.add_argument(
        "--gate-workflow",
        metavar="PIN",
        required=True,
        help="OWNER/REPO/.github/workflows/rocm-gate.yml@<40-hex>: the pin the caller uses",
    )
    parser.add_argument(
        "--class",
        dest="classes",
        type=runner_class_and_group,
        action="append",
        required=True,
        metavar="CLASS=RUNNER_GROUP",
        help="a runner class and its self-hosted runner group (repeat)",
    )


# What each request option takes (pytest_rocm/schemas/values.py): a NaN, an infinity, a negative or
# a huge value is refused by name before any request is sent (a pace of 1e9 s waited forever after
# the first write, with the check left in progress).
TIMEOUT = values.Option(values.seconds, high=600.0, above=True)
ATTEMPTS = values.Option(values.count, low=1, high=100, unit="attempts")
BACKOFF = values.Option(values.seconds, high=120.0, hint="each wait is capped at 120 s")
SETTLE = values.Option(values.seconds, high=600.0)
PACE = values.Option(values.seconds, high=60.0, hint="GitHub asks for 1 between writes")
PACE_ENVIRONMENT = "ROCM_GATE_PACE"


def add(parser, repo_help: str = "owner/name (default: $GITHUB_REPOSITORY)") -> None:
    group = parser.add_argument_group("GitHub")
    group.add_argument(
        "--api-url",
        help="the REST API root (default: $GITHUB_API_URL, else https://api.github.com)",
    )
    group.add_argument("--repo", help=repo_help)
    group.add_argument(
        "--timeout",
        type=TIMEOUT,
        default=20.0,
        metavar="S",
        help="read timeout per request, above 0 and at most 600 (default 20)",
    )
    group.add_argument(
        "--attempts",
        type=ATTEMPTS,
        default=6,
        help="attempts per request before giving up, 1 to 100 (default 6)",
    )
    group.add_argument(
        "--backoff",
        type=BACKOFF,
        default=2.0,
        metavar="S",
        help="first wait after a failed attempt, doubled each time, capped at 120 s (0 to 120; "
        "default 2)",
    )
    group.add_argument(
        "--settle",
        type=SETTLE,
        default=10.0,
        metavar="S",
        help="after a write that may have been applied, wait until S seconds after it was sent "
        "before reading the state again (0 to 600; default 10: GitHub's own limit per request)",
    )
    group.add_argument(
        "--pace",
        type=PACE,
        # a string: checked by PACE only where --pace is not given, so --help never reads it
        default=values.environment(PACE_ENVIRONMENT, "1"),
        metavar="S",
        help="at least S seconds between two writes, as GitHub asks against its secondary rate "
        f"limits (0 to 60; default 1, or ${PACE_ENVIRONMENT})",
    )


def repo(args) -> str:
    value = args.repo or os.environ.get("GITHUB_REPOSITORY", "")
    if value.count("/") != 1 or not all(value.split("/")):
        raise OptionError(f"--repo/$GITHUB_REPOSITORY must be owner/name, got {value!r}")
    return value


def api_client(args, repo_name: str | None = None):
    """The repository's API client with the request options (attempts, backoff, settle, pace) and,
    for an App, its id (only its own checks count)."""
    from rocm_gate.github import api

    return api.Client(
        client(args),
        repo_name or repo(args),
        attempts=args.attempts,
        backoff=args.backoff,
        settle_s=args.settle,
        pace_s=args.pace,
        app_id=app_id(),
    )


def client(args):
    from rocm_gate.github.api import connect

    api_url = args.api_url or os.environ.get("GITHUB_API_URL") or "https://api.github.com"
    if not api_url.startswith(("https://", "http://")):
        raise OptionError(f"--api-url/$GITHUB_API_URL must be an http(s) URL, got {api_url!r}")
    env = os.environ
    key = env.get("ROCM_GATE_APP_PRIVATE_KEY")
    if not key and env.get("ROCM_GATE_APP_PRIVATE_KEY_FILE"):
        try:
            key = Path(env["ROCM_GATE_APP_PRIVATE_KEY_FILE"]).read_text()
        except OSError as exc:
            raise OptionError(
                f"$ROCM_GATE_APP_PRIVATE_KEY_FILE: cannot read it ({exc.strerror})"
            ) from None
    app = (env.get("ROCM_GATE_APP_ID"), key, env.get("ROCM_GATE_APP_INSTALLATION_ID"))
    if any(app) and not all(app):
        raise OptionError(
            "a GitHub App needs all of ROCM_GATE_APP_ID, ROCM_GATE_APP_PRIVATE_KEY(_FILE) and "
            "ROCM_GATE_APP_INSTALLATION_ID"
        )
    token = env.get("GITHUB_TOKEN")
    if not all(app) and not token:
        raise OptionError(
            "no credentials: set GITHUB_TOKEN (an installation token, such as Actions' own) or the "
            "ROCM_GATE_APP_* variables"
        )
    try:
        return connect(
            api_url,
            token=token,
            app_id=app[0],
            private_key=app[1],
            installation_id=app[2],
            read_timeout=args.timeout,
            attempts=args.attempts,
            backoff=args.backoff,
        )
    except Exception as exc:  # minting the installation token: say what failed, never the key
        raise OptionError(
            f"cannot authenticate to {api_url}: {type(exc).__name__}: {str(exc)[:200]}"
        ) from None


def app_id() -> int | None:
    """The GitHub App's id (ROCM_GATE_APP_ID) when the credentials are an App's, else None."""
    value = os.environ.get("ROCM_GATE_APP_ID", "").strip()
    if not value:
        return None
    if not value.isascii() or not value.isdigit():
        raise OptionError(f"$ROCM_GATE_APP_ID must be the App's numeric id, got {value!r}")
    return int(value)


def read_event(path: str | None) -> dict:
    """The event payload GitHub wrote for this job (--event-path or $GITHUB_EVENT_PATH): a JSON
    object, else OptionError naming the file."""
    if not path:
        raise OptionError("no event: give --event-path or set $GITHUB_EVENT_PATH")
    try:
        event = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise OptionError(f"{path}: cannot read the event payload ({str(exc)[:200]})") from None
    if not isinstance(event, dict):
        raise OptionError(f"{path}: the event payload is not a JSON object")
    return event
