"""Run the preflight's tools on this node (where installed) and hand their output to the readers.

Quick tools (amd-smi, rocm-smi, lspci, the kernel log) always run; the benchmarks (rccl-tests,
BabelStream, TransferBench) take minutes and run with `--benchmarks`, with the commands AMD's
acceptance guide uses. RVS and AGFHC need a site's configuration files: run them in the image's own
health job and give their output with `--source rvs=FILE`. Every command has a timeout: a hung GPU
hangs its tools.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from pytest_rocm.hw.detect import ROCM_BIN, find_tool
from rocm_gate.preflight.evidence import hang_line
from rocm_gate.preflight.layers import ToolOutput

QUICK_TIMEOUT_S = 60
# where ROCm images put the tools off PATH
TOOL_FOLDERS = (ROCM_BIN, Path("/opt/rocm/share/rccl-tests"))
BENCHMARK_TIMEOUT_S = (
    900  # when the thresholds file sets no rccl_timeout_s (the packaged one says why 900)
)


def quick_commands(kernel_log_since: str) -> list[tuple[str, list[str]]]:
    return [
        ("amd-smi", ["amd-smi", "metric", "--json"]),
        ("amd-smi", ["amd-smi", "bad-pages"]),
        ("amd-smi", ["amd-smi", "topology"]),
        # not `xgmi`: its LINK METRIC TABLE's bit rate is the GPU's static maximum, judged nowhere;
        # not `xgmi --link-status`: amd-smi before ROCm 6.4 refuses the flag (give its output with
        # --source amd-smi=FILE where the node has it); not the default view (`amd-smi` alone):
        # amd-smi before ROCm 6.4 prints its help
        ("amd-smi", ["amd-smi", "firmware"]),
        # idle means idle: a process left on a GPU (`metric` gives each GPU's activity and VRAM)
        ("amd-smi", ["amd-smi", "process", "--json"]),
        ("rocm-smi", ["rocm-smi"]),
        ("rocminfo", ["rocminfo"]),
        ("lspci", ["lspci", "-vv", "-d", "1002:"]),
        ("dmesg", ["journalctl", "-k", "--no-pager", f"--since={kernel_log_since}"]),
    ]


def benchmark_commands(gpus: int) -> list[tuple[str, list[str]]]:
    return [
        (
            "rccl-tests",
            ["all_reduce_perf", "-b", "8", "-e", "8G", "-f", "2", "-g", str(max(gpus, 1))],
        ),
        ("babelstream", ["hip-stream", "-n", "50", "-s", "268435456"]),
        ("transferbench", ["TransferBench", "a2a"]),
    ]


def run(tool: str, command: list[str], timeout_s: float) -> ToolOutput:
    label = " ".join(command)
    exe = find_tool(command[0], TOOL_FOLDERS)
    if exe is None and tool == "dmesg":  # no systemd journal (containers): the kernel ring buffer
        # (its `[Sun Oct  6 00:50:49 2024]` stamps are cut like any other: readers/dmesg.py)
        command, exe = ["dmesg", "--ctime"], find_tool("dmesg")
        label = " ".join(command)
    if exe is None:
        return ToolOutput(tool, label, None, f"{command[0]} is not installed")
    try:
        done = subprocess.run(
            [exe, *command[1:]], capture_output=True, text=True, timeout=timeout_s, errors="replace"
        )
    except subprocess.TimeoutExpired as exc:
        partial = (
            exc.stdout.decode(errors="replace")
            if isinstance(exc.stdout, bytes)
            else (exc.stdout or "")
        )
        return ToolOutput(tool, label, f"{partial}\n{hang_line(timeout_s)}\n")
    except OSError as exc:
        return ToolOutput(tool, label, None, f"could not run: {exc}")
    if done.returncode != 0 and not done.stdout.strip():
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return ToolOutput(tool, label, None, f"exited with {done.returncode}: {last}")
    return ToolOutput(tool, label, done.stdout)
