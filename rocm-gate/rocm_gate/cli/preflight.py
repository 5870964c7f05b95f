"""`rocm-gate preflight`: prove this runner in five layers before it takes a job.

Layers, in order: hardware (amd-smi, rocm-smi, lspci, RVS, AGFHC, BabelStream, TransferBench, kernel
log), communication (rccl-tests), framework (doctor and the pinned stack), workload (the suite's
smoke test on each GPU) and recovery (the node's history: should it be drained?). Each layer ends
`ok`, `degraded`, `failed` or `skipped` with the reason; after a failed layer the later ones are
skipped.

With --source TOOL=FILE the tools' saved outputs are read (repeatable, several files per tool);
without, the quick tools run on this node, and --benchmarks also runs rccl-tests, BabelStream and
TransferBench.

Exit status: 0 accepted (may take a job; degraded layers are listed), 3 refused (a layer failed),
4 not proven (a layer named by --require was skipped), 2 bad input.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from datetime import UTC, datetime
from pathlib import Path

from rocm_gate.cli import exits
from rocm_gate.cli.arguments import sku, tool_file, whole_number
from rocm_gate.preflight import LAYERS
from rocm_gate.preflight.readers import TOOLS

# the longest capture is a kernel log of a few MB; /dev/zero must not fill memory
MAX_SOURCE_BYTES = 64 * 2**20


def _layers(value: str) -> tuple[str, ...]:
    if value.strip().lower() == "none":
        return ()
    names = tuple(n.strip() for n in value.split(",") if n.strip())
    unknown = [n for n in names if n not in LAYERS]
    if unknown:
        raise argparse.ArgumentTypeError(
            f"unknown layer(s) {', '.join(unknown)}; use {', '.join(LAYERS)} or none"
        )
    return names


def add_parser(commands, name: str) -> None:
    from rocm_gate.preflight.layers import DEFAULT_REQUIRED

    parser = commands.add_parser(
        name,
        help="prove this runner in five layers before it takes a job",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--source",
        metavar="TOOL=FILE",
        type=tool_file(TOOLS, "tool"),
        action="append",
        default=[],
        help=f"read a tool's saved output instead of running it (repeatable): {', '.join(TOOLS)}",
    )
    parser.add_argument(
        "--sku", type=sku, help="the runner's SKU (default: named by the outputs or detected)"
    )
    parser.add_argument(
        "--thresholds",
        metavar="FILE",
        help="per-SKU thresholds (default: the packaged thresholds.toml)",
    )
    parser.add_argument(
        "--platform",
        metavar="NAME|FILE",
        help="framework layer: a simulated profile instead of detecting",
    )
    parser.add_argument(
        "--expect-gpus",
        type=whole_number(0, "a GPU count cannot be negative, got {value}"),
        metavar="N",
        help="framework layer: exactly N GPUs (default: the SKU's node size from the thresholds)",
    )
    parser.add_argument(
        "--stack",
        metavar="FILE",
        help="framework layer: the runner image's manifest (JSON: image, packages)",
    )
    parser.add_argument(
        "--expect-stack", metavar="FILE", help="framework layer: the stack the job pins (same form)"
    )
    parser.add_argument(
        "--smoke-command",
        metavar="CMD",
        help="workload layer: a short serving test, run on each GPU alone",
    )
    parser.add_argument(
        "--smoke-timeout",
        type=whole_number(1, "a timeout is at least 1 s, got {value}"),
        default=600,
        metavar="S",
        help="workload layer: seconds per GPU (default 600)",
    )
    parser.add_argument(
        "--history",
        metavar="DIR",
        help="recovery layer: earlier preflight.json and gate-report.json files",
    )
    parser.add_argument(
        "--node", help="this node's name (default: NODE_NAME, RUNNER_NAME, ... or the hostname)"
    )
    parser.add_argument(
        "--benchmarks",
        action="store_true",
        help="live: also run rccl-tests, BabelStream, TransferBench",
    )
    parser.add_argument(
        "--kernel-log-since",
        default="-1h",
        metavar="WHEN",
        help="live: read the kernel log from then on (journalctl --since; default -1h, the last job)",
    )
    parser.add_argument(
        "--require",
        type=_layers,
        default=DEFAULT_REQUIRED,
        metavar="LAYERS",
        help=f"layers that must not be skipped (default {','.join(DEFAULT_REQUIRED)}; 'none' for none)",
    )
    parser.add_argument(
        "--out", metavar="FILE", help="write the evidence as JSON (schema pytest-rocm/preflight/1)"
    )
    parser.add_argument(
        "--json", action="store_true", help="print the evidence as JSON instead of the summary"
    )


def _read_json(path: str, what: str) -> dict:
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ValueError(f"{path}: no such file ({what})") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path}: not valid JSON ({what}): {exc}") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a JSON object ({what}) with 'image' and 'packages'")
    return data


def _outputs(args, platform, benchmark_timeout_s: float) -> list:
    from rocm_gate.preflight import live
    from rocm_gate.preflight.layers import ToolOutput

    if args.source:
        outputs = []
        for tool, path in args.source:
            try:
                with open(path, "rb") as handle:  # a pipe too: --source dmesg=<(journalctl -k)
                    raw = handle.read(MAX_SOURCE_BYTES + 1)
            except OSError as exc:
                raise ValueError(
                    f"{path}: cannot read it ({exc.strerror}); check the path given to --source {tool}="
                ) from None
            if len(raw) > MAX_SOURCE_BYTES:
                raise ValueError(
                    f"{path}: over {MAX_SOURCE_BYTES // 2**20} MiB, far more than {tool} prints; "
                    f"check the path given to --source {tool}="
                )
            # a BOM is not text
            outputs.append(ToolOutput(tool, path, raw.decode("utf-8-sig", errors="replace")))
        return outputs
    commands = live.quick_commands(args.kernel_log_since)
    if args.benchmarks:
        commands += live.benchmark_commands(platform.gpu_count if platform else 0)
    benchmarks = {tool for tool, _ in live.benchmark_commands(0)}
    return [
        live.run(tool, command, benchmark_timeout_s if tool in benchmarks else live.QUICK_TIMEOUT_S)
        for tool, command in commands
    ]


def run(args) -> int:
    from pytest_rocm.hw import detect
    from pytest_rocm.hw.profiles import ProfileError
    from rocm_gate.preflight import acceptance, drain, layers, live, thresholds

    started = datetime.now(UTC).isoformat(timespec="seconds")
    try:
        if args.out:
            check_writable(args.out)
        table = thresholds.load(args.thresholds)
        stack = _read_json(args.stack, "the runner image's manifest") if args.stack else None
        expected_stack = (
            _read_json(args.expect_stack, "the stack the job pins") if args.expect_stack else None
        )
        platform = (
            detect.detect(profile=args.platform)
            if args.platform
            else None
            if args.source
            else detect.detect_live()
        )
        # before any output is read: the SKU the flags, the runner class or the GPUs name
        timeout_s = table.for_sku(
            acceptance.choose_sku(args.sku, _runner_class_sku(), [], platform)[0]
        ).get("rccl_timeout_s", live.BENCHMARK_TIMEOUT_S)
        outputs = _outputs(args, platform, timeout_s)
        history = drain.read_history(Path(args.history)) if args.history else None
    except (thresholds.ThresholdError, ProfileError, drain.EvidenceFolderError, ValueError) as exc:
        print(f"rocm-gate preflight: {exc}", file=sys.stderr)
        return exits.BAD_INPUT
    runner_sku, sku_from = acceptance.choose_sku(args.sku, _runner_class_sku(), outputs, platform)
    decision, evidence = acceptance.accept(
        acceptance.Inputs(
            outputs=outputs,
            limits=table.for_sku(runner_sku),
            sku=runner_sku,
            sku_from=sku_from,
            node=layers.node_name(args.node),
            platform=platform,
            history=history,
            stack=stack,
            expected_stack=expected_stack,
            expect_gpus=args.expect_gpus,
            smoke_command=args.smoke_command,
            smoke_timeout=args.smoke_timeout,
            require=args.require,
            from_files=bool(args.source),
            thresholds=str(table.path),
            started=started,
        )
    )
    code = {layers.ACCEPTED: exits.OK, layers.REFUSED: exits.NO, layers.NOT_PROVEN: exits.NOT_DONE}[
        decision
    ]
    evidence["exit_code"] = code
    if args.out:
        from pytest_rocm.schemas.artifacts import write_json_atomic

        try:
            write_json_atomic(args.out, evidence)
        except OSError as exc:
            print(
                f"rocm-gate preflight: {args.out}: cannot write the evidence ({exc.strerror or exc})",
                file=sys.stderr,
            )
            return exits.BAD_INPUT
    print(json.dumps(evidence, indent=2) if args.json else acceptance.render(evidence))
    return code


def _runner_class_sku() -> str | None:
    """The SKU the runner class sets on its runners (runners/values: PYTEST_ROCM_SKU); a value
    that is not a SKU is no SKU."""
    from pytest_rocm.hw.skus import normalise_sku

    return normalise_sku(os.environ.get("PYTEST_ROCM_SKU", "").strip()) or None


def check_writable(out: str) -> None:
    """Refuse an --out the evidence cannot be written to before the run starts (the run takes
    minutes)."""
    try:
        _check_writable(out)
    except OSError as exc:  # a name too long, a loop of links: said, not a traceback
        raise ValueError(
            f"{out}: not a path a file can be written to ({exc.strerror or exc})"
        ) from None


def _check_writable(out: str) -> None:
    path = Path(out)
    if out.endswith(("/", "\\")) or path.is_dir():
        raise ValueError(
            f"{out}: a folder; give --out a file name, such as {path / 'preflight.json'}"
        )
    if path.is_symlink() or path.exists() and not path.is_file():
        # The write renames a new file over the path: it would replace a link or a device
        # (/dev/null) itself.
        raise ValueError(
            f"{out}: not a plain file (a link or a device); give --out the path of a file"
        )
    if path.exists() and not os.access(path, os.W_OK):
        raise ValueError(f"{out}: not writable (check its permissions)")
    ancestor = path.parent
    while not ancestor.exists() and ancestor != ancestor.parent:
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise ValueError(
            f"{out}: {ancestor} is a file, not a folder; give --out a path in a folder"
        )
    if not os.access(ancestor, os.W_OK | os.X_OK):
        raise ValueError(f"{out}: cannot create files in {ancestor} (check its permissions)")
