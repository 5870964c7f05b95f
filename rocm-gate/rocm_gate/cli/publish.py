"""`rocm-gate publish`: the merge-blocking check run of a gate run's results.

Two ways to call it:

  rocm-gate publish --workflow-run --runner-class mi300x-8 --gate-workflow OWNER/REPO/.github/workflows/rocm-gate.yml@SHA \\
      --runner-group rocm-mi300x-8
      In the publish workflow (`on: workflow_run`, the default branch's definition, the App's key). Everything
      comes from GitHub: the gate run named by $GITHUB_EVENT_PATH, the commit (the PR's head, or the SHA a
      dispatch's run-name names), whether the run was approved (it used the pinned gate workflow and its gate
      job ran on the class's runner group), and its results artifact, downloaded through the API. What the run
      may write at each stage: rocm-gate/rocm_gate/github/publishing.py.
  rocm-gate publish RESULTS_DIR --sha SHA
      Results you made yourself, on a commit you name (another CI, a demo); `--dry-run` prints the check.

One check per runner class, head SHA and gate run (`rocm-gate / MI300X-8`, external_id = the run
id). The results decide the conclusion:

  gate report      check run
  success          success (never for a simulated platform, which only --allow-simulated lets through at all)
  failure          failure
  neutral          neutral (only with infra evidence after reruns; otherwise as incomplete)
  incomplete       action_required (`--incomplete neutral`: neutral, with a warning)
  skipped          action_required (no blocking gate ran; `--incomplete neutral`: neutral, with a warning)
  no results       cancelled / timed_out as the workflow run ended, else action_required

With --trunk (main's state on the run's SKU, `rocm-gate history trunk`, fetched from the default
branch's workflow), each blocking failure is new (blocks), pre-existing on main or flaky on main
(neither blocks): a `failure` whose every blocking failure is one of the latter becomes neutral
(action_required when the run is also incomplete); main's failures that pass here are listed as
fixed (rocm-gate/rocm_gate/trunk/attribution.py).

Results are untrusted input (the PR's code wrote them): the strict loader checks every file, and
their claims (head and tested commit, platform) are checked against GitHub's facts; results that
fail publish a blocking check saying why (exit 2).

Exit status: 0 published (or nothing to write, said why), 2 bad input or refused results or GitHub
refused the request, 4 not published after the attempts (the payload is written to --unsent).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from pytest_rocm.schemas import values
from rocm_gate.cli import exits, github_options, main_state


def add_parser(commands, name: str) -> None:
    parser = commands.add_parser(
        name,
        help="publish a run's results as a GitHub check run",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "results",
        metavar="RESULTS_DIR",
        nargs="?",
        help="results you made yourself (gate-report.json, manifest.json, parity.json)",
    )
    github_options.add(parser)
    trusted = parser.add_argument_group("in the publish workflow (on: workflow_run)")
    trusted.add_argument(
        "--workflow-run",
        action="store_true",
        help="publish the gate run of the workflow_run event in $GITHUB_EVENT_PATH",
    )
    trusted.add_argument(
        "--gate-workflow",
        metavar="PIN",
        help="OWNER/REPO/.github/workflows/rocm-gate.yml@<40-hex>: the pin the caller workflow uses",
    )
    trusted.add_argument("--runner-group", help="the self-hosted runner group of the runner class")
    local = parser.add_argument_group("with RESULTS_DIR")
    local.add_argument(
        "--sha", help="the commit the check lands on (a PR's head, not its merge commit)"
    )
    local.add_argument("--sha-from-results", action="store_true", help=argparse.SUPPRESS)
    local.add_argument("--run-id", help="kept as the check's external_id (default: $GITHUB_RUN_ID)")
    local.add_argument(
        "--details-url",
        help="the run's page (default: built from $GITHUB_SERVER_URL, repository, run id)",
    )
    local.add_argument(
        "--in-progress", action="store_true", help="mark the check running (start of a run)"
    )
    local.add_argument("--run-conclusion", help="how the run ended (used when it left no results)")
    local.add_argument(
        "--dry-run", action="store_true", help="print the check run as JSON; send nothing"
    )
    parser.add_argument(
        "--runner-class",
        help="names the check `rocm-gate / CLASS` (with RESULTS_DIR, default: the SKU the run saw)",
    )
    parser.add_argument(
        "--incomplete",
        choices=("block", "neutral"),
        default="block",
        help="conclusion of an incomplete run, or one where no blocking gate ran: block "
        "(action_required, the default) or neutral (soft rollout, with a warning)",
    )
    parser.add_argument(
        "--allow-simulated",
        action="store_true",
        help="publish results of a simulated platform (a demo): SIMULATED in the title and summary, "
        "and never `success`",
    )
    parser.add_argument(
        "--path-prefix",
        default="",
        help="prefix of the test ids' paths in the repository (for annotations)",
    )
    parser.add_argument(
        "--base-parity",
        metavar="FILE",
        help="the base branch's last parity.json, for the change per group",
    )
    parser.add_argument(
        "--trunk",
        metavar="FILE",
        action="append",
        help="main's state on a SKU (`rocm-gate history trunk`, made on the default branch; repeat for "
        "each SKU, the run's own is used): each blocking failure is then new (blocks), pre-existing, "
        'flaky or quarantined on main (none blocks); README "Conclusions"',
    )
    parser.add_argument(
        "--trunk-max-age",
        type=values.Option(values.hours, high=2160.0),
        default=48.0,
        metavar="HOURS",
        help="a trunk state older than this, or made before the commit the run's code is based on, "
        "excuses nothing (0 to 2160; default 48)",
    )
    main_state.add(parser)
    parser.add_argument(
        "--unsent",
        metavar="FILE",
        default="rocm-gate-unsent-check.json",
        help="where the payload goes when GitHub cannot be reached (default: %(default)s)",
    )


def _sha(value: str | None, what: str) -> str:
    sha = (value or "").lower()
    if len(sha) != 40 or any(c not in "0123456789abcdef" for c in sha):
        raise github_options.OptionError(f"{what} must be a full 40-hex commit SHA, got {value!r}")
    return sha


def _optional_artifact(path: str | None, kind: str, option: str) -> dict | None:
    """The `kind` artifact an option names, through the strict loader (None when not given)."""
    if not path:
        return None
    from pytest_rocm.schemas.loader import ArtifactError, load_artifact

    try:
        return load_artifact(path, kind)
    except ArtifactError as exc:
        raise github_options.OptionError(f"{option} {exc}") from None


def _unsent(args, payload: dict, exc) -> int:
    Path(args.unsent).write_text(json.dumps(payload, indent=2) + "\n")
    print(
        f"rocm-gate publish: not published: {exc}\n  the check run it would have sent is in {args.unsent}",
        file=sys.stderr,
    )
    return exits.BAD_INPUT if getattr(exc, "refused", False) else exits.NOT_DONE


def run(args) -> int:
    try:
        if args.sha_from_results:
            raise github_options.OptionError(
                "--sha-from-results is gone: the commit a check lands on never comes from the results (the PR's code "
                "writes them); publish with --workflow-run, which takes it from GitHub"
            )
        base_parity = _optional_artifact(args.base_parity, "parity", "--base-parity")
        args.trunk_state = [
            _optional_artifact(path, "trunk", "--trunk") for path in args.trunk or ()
        ] or None
        if args.workflow_run:
            if args.results:
                raise github_options.OptionError(
                    "--workflow-run downloads the results itself: give no RESULTS_DIR"
                )
            return _from_workflow_run(args, base_parity)
        if not args.results:
            raise github_options.OptionError(
                "give RESULTS_DIR with --sha, or --workflow-run in the publish workflow"
            )
        return _from_folder(args, base_parity)
    except github_options.OptionError as exc:
        print(f"rocm-gate publish: {exc}", file=sys.stderr)
        return exits.BAD_INPUT


def _from_workflow_run(args, base_parity) -> int:
    from rocm_gate.github import api, provenance, publishing

    for flag in ("runner_class", "gate_workflow", "runner_group"):
        if not getattr(args, flag):
            raise github_options.OptionError(f"--workflow-run needs --{flag.replace('_', '-')}")
    if os.environ.get("GITHUB_EVENT_NAME") not in (None, "", "workflow_run"):
        raise github_options.OptionError(
            f"--workflow-run reads a workflow_run event, not "
            f"{os.environ['GITHUB_EVENT_NAME']} ($GITHUB_EVENT_NAME)"
        )
    if github_options.app_id() is None:
        raise github_options.OptionError(
            "--workflow-run writes as the GitHub App (ROCM_GATE_APP_ID, "
            "ROCM_GATE_APP_PRIVATE_KEY, ROCM_GATE_APP_INSTALLATION_ID): with the Actions "
            "token its checks could not be told from a fork's jobs of the same name"
        )
    event = github_options.read_event(os.environ.get("GITHUB_EVENT_PATH"))
    event_run = event.get("workflow_run")
    if not isinstance(event_run, dict) or event.get("action") not in (
        "requested",
        "in_progress",
        "completed",
    ):
        raise github_options.OptionError(
            f"{os.environ.get('GITHUB_EVENT_PATH')}: not a workflow_run event"
        )
    options = publishing.Options(
        runner_class=args.runner_class.lower(),
        gate_workflow=args.gate_workflow,
        runner_group=args.runner_group,
        incomplete=args.incomplete,
        allow_simulated=args.allow_simulated,
        path_prefix=args.path_prefix,
        base_parity=base_parity,
        trunk=args.trunk_state,
        trunk_max_age_h=args.trunk_max_age,
    )
    main_state.check_hours(args, "publish")
    client = github_options.api_client(args)
    # the gate's caller file, as GitHub names the run's workflow (the publish caller starts only
    # for it): its completed runs are what main's state is caught up from
    workflow = Path(str(event_run.get("path") or "rocm-gate.yml")).name
    live = main_state.live(
        args,
        client,
        workflow,
        args.gate_workflow,
        {options.runner_class: args.runner_group},
        allow_simulated=args.allow_simulated,
    )
    options.main_state = live
    try:
        outcome = publishing.publish_run(client, event_run, event["action"], options)
    except provenance.RunRefused as exc:
        print(f"rocm-gate publish: {exc}", file=sys.stderr)
        return exits.BAD_INPUT
    except api.PublishError as exc:
        return _unsent(args, {"workflow_run": event_run.get("id"), "stage": event["action"]}, exc)
    finally:
        if live is not None:
            live.close()
    main_state.write_outputs(live)
    for line in client.log + (live.log if live else []):
        print(f"rocm-gate publish: {line}")
    print(
        f"{outcome.name} on {outcome.run.head_sha[:12]} (run {outcome.run.run_id}, {outcome.run.event}): "
        f"{outcome.action}" + (f" {outcome.published.html_url}" if outcome.published else "")
    )
    for problem in outcome.problems:
        print(f"rocm-gate publish: results refused: {problem}", file=sys.stderr)
    return exits.BAD_INPUT if outcome.problems else exits.OK


def _from_folder(args, base_parity) -> int:
    from rocm_gate.github import api, artifacts, checks

    sha = _sha(args.sha, "--sha")
    repo = (
        github_options.repo(args)
        if not args.dry_run
        else (args.repo or os.environ.get("GITHUB_REPOSITORY", "owner/repo"))
    )
    run_id = args.run_id or os.environ.get("GITHUB_RUN_ID")
    details_url = args.details_url or (
        f"{os.environ.get('GITHUB_SERVER_URL', 'https://github.com')}/{repo}/actions/runs/{run_id}"
        if run_id
        else None
    )
    status = exits.OK
    try:
        results = artifacts.read_results(Path(args.results))
        claimed = results.head_sha or results.tested_sha
        if claimed and claimed != sha:
            raise artifacts.ArtifactError(
                f"{Path(args.results) / 'manifest.json'}: the run was for {claimed}, not "
                f"{sha}: refusing to publish its results for another commit"
            )
        if results.simulated_profile and not args.allow_simulated:
            raise artifacts.ArtifactError(
                f"{Path(args.results) / 'manifest.json'}: the results come from the simulated "
                f"platform {results.simulated_profile!r}: a simulated run makes no check "
                "(--allow-simulated for a demo, marked SIMULATED and never success)"
            )
        name = checks.check_name(results, args.runner_class)
        content = checks.build(
            results,
            name,
            details_url,
            args.path_prefix,
            args.incomplete,
            base_parity,
            trunk=args.trunk_state,
            trunk_max_age_h=args.trunk_max_age,
        )
    except artifacts.ArtifactError as exc:
        # the check still ends, and blocks: a run without believable results proves nothing
        name = checks.check_name(None, args.runner_class)
        content = checks.missing_results(
            name,
            None if not isinstance(exc, artifacts.ResultsMissing) else args.run_conclusion,
            str(exc),
            details_url,
        )
        print(f"rocm-gate publish: {exc}", file=sys.stderr)
        status = exits.OK if isinstance(exc, artifacts.ResultsMissing) else exits.BAD_INPUT
    payload = {
        "repo": repo,
        "head_sha": sha,
        "name": content.name,
        "external_id": run_id,
        "details_url": details_url,
        "status": "in_progress" if args.in_progress else "completed",
        "conclusion": None if args.in_progress else content.conclusion,
        "output": content.output(content.annotations),
        "actions": content.actions,
    }
    if args.dry_run:
        print(json.dumps(payload, indent=2))
        return status
    try:
        client = github_options.api_client(args, repo)
        done = api.converge(client, sha, content, run_id, details_url, args.in_progress)
    except api.PublishError as exc:
        return _unsent(args, payload, exc)
    for line in client.log:
        print(f"rocm-gate publish: {line}")
    verb = (
        "created"
        if done.created
        else "updated"
        if done.status != "unchanged"
        else "left as it was (completed)"
    )
    state = "in_progress" if args.in_progress else content.conclusion
    print(
        f"{verb} check {content.name!r} on {sha[:12]}: {state}, {len(content.annotations)} annotation(s) "
        f"({done.annotations_sent} sent now) {done.html_url}"
    )
    return status
