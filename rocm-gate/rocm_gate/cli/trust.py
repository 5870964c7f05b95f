"""`rocm-gate trust`: may the event's code reach a self-hosted GPU runner, and which exact commits?

Reads the event GitHub delivered ($GITHUB_EVENT_NAME, $GITHUB_EVENT_PATH, and $GITHUB_SHA: for
pull_request the merge commit the run tests) and asks the API for the sender's permission. Fork code
is trusted only for the head SHA a writer approved (the label `rocm-ci-approved`'s own `labeled`
event, or a dispatch naming the SHA); a new push needs a new approval; another label's event is a
no-op; pull_request_target is refused (see rocm-gate/rocm_gate/github/trust.py). The label is not an option:
nothing a caller passes chooses it. Prints the decision as JSON and, under Actions, writes
`trusted`, `head-sha`, `tested-sha`, `pr`, `noop` and `reason` to $GITHUB_OUTPUT.

Exit status: 0 decided (read `trusted`), 3 refused with --require, 2 bad input.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from rocm_gate.cli import exits, github_options


def add_parser(commands, name: str) -> None:
    parser = commands.add_parser(
        name,
        help="decide whether an event's code may run on the GPU runners",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--event-name", help="default: $GITHUB_EVENT_NAME")
    parser.add_argument("--event-path", help="the event payload (default: $GITHUB_EVENT_PATH)")
    parser.add_argument(
        "--require", action="store_true", help="exit 3 when not trusted (a guard step)"
    )
    github_options.add(parser)


def run(args) -> int:
    from rocm_gate.github import api, trust

    try:
        event_name = args.event_name or os.environ.get("GITHUB_EVENT_NAME") or ""
        if not event_name:
            raise github_options.OptionError(
                "no event name: give --event-name or set $GITHUB_EVENT_NAME"
            )
        event = github_options.read_event(args.event_path or os.environ.get("GITHUB_EVENT_PATH"))
        repo = github_options.repo(args)
        client = None

        def permission_of(login: str) -> str:
            nonlocal client
            client = client or github_options.api_client(args, repo)
            return client.permission(login)

        def files_of(base: str, head: str) -> list[str] | None:
            nonlocal client
            client = client or github_options.api_client(args, repo)
            return client.changed_files(base, head)

        decision = trust.decide(
            event_name, event, permission_of, os.environ.get("GITHUB_SHA"), files_of
        )
    except github_options.OptionError as exc:
        print(f"rocm-gate trust: {exc}", file=sys.stderr)
        return exits.BAD_INPUT
    except (api.PublishError, *api.GITHUB_ERRORS) as exc:
        print(
            f"rocm-gate trust: cannot ask GitHub for the sender's permission: {exc}",
            file=sys.stderr,
        )
        return exits.BAD_INPUT
    print(json.dumps(decision.to_dict()))
    if os.environ.get("GITHUB_OUTPUT"):
        with open(os.environ["GITHUB_OUTPUT"], "a", encoding="utf-8") as out:
            for key, value in decision.to_dict().items():
                text = (
                    "true"
                    if value is True
                    else "false"
                    if value is False
                    else ""
                    if value is None
                    else str(value)
                )
                out.write(
                    f"{key.replace('_', '-')}={text.replace(chr(10), ' ').replace(chr(13), ' ')}\n"
                )
    return exits.NO if args.require and not decision.trusted else exits.OK
