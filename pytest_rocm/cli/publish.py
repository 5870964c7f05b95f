"""`rocm-gate publish RESULTS_DIR`: create or update the merge-blocking check run of a run's results.

One check per runner class and head SHA (`rocm-gate / MI300X`), found again by name, SHA and
`external_id` (the run id), so publishing twice, or again after an interruption, updates the same check.
`--in-progress` marks it running at the start of a run; without it the results decide the conclusion:

  gate report      check run
  success          success
  failure          failure
  neutral          neutral (only with infra evidence after reruns; otherwise as incomplete)
  incomplete       action_required (`--incomplete neutral`: neutral, with a warning)
  skipped          action_required (no blocking gate ran; `--incomplete neutral`: neutral, with a warning)
  no results       cancelled / timed_out as the workflow run ended, else action_required

Results are untrusted input (they may come from a fork's run): sizes, schemas and the SHA the run claims
are checked first; results that fail are published as a blocking check saying why (exit 2).

Exit status: 0 published, 2 bad input (also: GitHub refused the credentials or the request), 4 not
published after the retries. Whenever nothing was published the payload is written to --unsent.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from pytest_rocm.cli import github_options
from pytest_rocm.cli.arguments import whole_number

EXIT_OK, EXIT_BAD_INPUT, EXIT_NOT_PUBLISHED = 0, 2, 4


def add_parser(commands, name: str) -> None:
    parser = commands.add_parser(name, help="publish a run's results as a GitHub check run",
                                 description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("results", metavar="RESULTS_DIR", help="the run's folder (gate-report.json, manifest.json, parity.json)")
    github_options.add(parser)
    parser.add_argument("--sha", help="the commit (default: $GITHUB_SHA)")
    parser.add_argument("--sha-from-results", action="store_true",
                        help="the commit is the one the results say they tested (manifest git_sha): for runs "
                             "started by a dispatch, whose workflow run names the default branch's commit")
    parser.add_argument("--runner-class", help="names the check `rocm-gate / CLASS` (default: the SKU the run saw)")
    parser.add_argument("--run-id", help="the gate run's id, kept as the check's external_id (default: $GITHUB_RUN_ID)")
    parser.add_argument("--details-url", help="the run's page (default: built from $GITHUB_SERVER_URL, repository and run id)")
    parser.add_argument("--in-progress", action="store_true", help="mark the check running (start of a run)")
    parser.add_argument("--run-conclusion", help="how the gate workflow run ended (used when it left no results)")
    parser.add_argument("--incomplete", choices=("block", "neutral"), default="block",
                        help="conclusion of an incomplete run, or one where no blocking gate ran: block "
                             "(action_required, the default) or neutral (soft rollout, with a warning)")
    parser.add_argument("--path-prefix", default="", help="prefix of the test ids' paths in the repository (for annotations)")
    parser.add_argument("--base-parity", metavar="FILE", help="the base branch's last parity.json, for the change per group")
    parser.add_argument("--unsent", metavar="FILE", default="rocm-gate-unsent-check.json",
                        help="where the payload goes when GitHub cannot be reached (default: %(default)s)")
    parser.add_argument("--attempts", type=whole_number(1, "--attempts must be at least 1, got {value}"), default=6,
                        help="attempts before giving up (default 6)")
    parser.add_argument("--backoff", type=float, default=2.0, metavar="S",
                        help="first wait after a failed attempt, doubled each time, capped at 120 s (default 2)")
    parser.add_argument("--dry-run", action="store_true", help="print the check run as JSON; send nothing")


def _env_sha(args) -> str:
    if args.sha_from_results:
        try:
            manifest = json.loads((Path(args.results) / "manifest.json").read_text(encoding="utf-8"))
            claimed = manifest.get("git_sha") if isinstance(manifest, dict) else None
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            raise github_options.OptionError(f"--sha-from-results: cannot read {args.results}/manifest.json ({exc})") from None
        args.sha = claimed or ""
    sha = (args.sha or os.environ.get("GITHUB_SHA") or "").lower()
    if len(sha) != 40 or any(c not in "0123456789abcdef" for c in sha):
        raise github_options.OptionError(f"--sha/$GITHUB_SHA must be a full 40-hex commit SHA, got {sha!r}")
    return sha


def run(args) -> int:
    from pytest_rocm.github import api, artifacts, checks

    try:
        sha = _env_sha(args)
        repo = github_options.repo(args) if not args.dry_run else (args.repo or os.environ.get("GITHUB_REPOSITORY", "owner/repo"))
        base_parity = json.loads(Path(args.base_parity).read_text()) if args.base_parity else None
    except (github_options.OptionError, OSError, ValueError) as exc:
        print(f"rocm-gate publish: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    run_id = args.run_id or os.environ.get("GITHUB_RUN_ID")
    details_url = args.details_url or (f"{os.environ.get('GITHUB_SERVER_URL', 'https://github.com')}/{repo}/actions/runs/{run_id}"
                                       if run_id else None)
    status = EXIT_OK
    try:
        results = artifacts.read_results(Path(args.results), sha)
        name = checks.check_name(results, args.runner_class)
        content = checks.build(results, name, details_url, args.path_prefix, args.incomplete, base_parity)
    except artifacts.ArtifactError as exc:
        # the check still ends, and blocks: a run without believable results proves nothing
        name = checks.check_name(None, args.runner_class)
        content = checks.missing_results(name, None if not isinstance(exc, artifacts.ResultsMissing)
                                         else args.run_conclusion, str(exc), details_url)
        print(f"rocm-gate publish: {exc}", file=sys.stderr)
        status = EXIT_OK if isinstance(exc, artifacts.ResultsMissing) else EXIT_BAD_INPUT
    payload = {"repo": repo, "head_sha": sha, "name": content.name, "external_id": run_id, "details_url": details_url,
               "status": "in_progress" if args.in_progress else "completed",
               "conclusion": None if args.in_progress else content.conclusion, "output": content.output(content.annotations),
               "actions": content.actions}
    if args.dry_run:
        print(json.dumps(payload, indent=2))
        return status
    try:
        gh = github_options.client(args)
        done = api.publish(gh, repo, sha, content, run_id, details_url, args.in_progress,
                           attempts=args.attempts, backoff=args.backoff)
    except github_options.OptionError as exc:
        print(f"rocm-gate publish: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except api.PublishError as exc:
        Path(args.unsent).write_text(json.dumps(payload, indent=2) + "\n")
        print(f"rocm-gate publish: not published: {exc}\n  the check run it would have sent is in {args.unsent}",
              file=sys.stderr)
        return EXIT_BAD_INPUT if exc.refused else EXIT_NOT_PUBLISHED
    verb = "created" if done.created else "updated"
    state = "in_progress" if args.in_progress else content.conclusion
    print(f"{verb} check {content.name!r} on {sha[:12]}: {state}, {len(content.annotations)} annotation(s) "
          f"({done.annotations_sent} sent now) {done.html_url}")
    return status
