"""Detect the platform from every source we know, in order of trust, never failing the run.

Each source either answers (GPUs and/or versions) or is recorded as failed with
its error. The most trusted source that saw GPUs defines the GPU list; the
others fill in fields it lacks (memory, partition mode, arch) when they see the
same number of GPUs.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import fields
from pathlib import Path

from pytest_rocm.hw import SOURCE_NAMES
from pytest_rocm.hw import profiles as profiles  # re-exported: plugin/context.py reads its class
from pytest_rocm.hw.model import Platform, SourceResult
from pytest_rocm.hw.parsers import (
    Parsed,
    UnexpectedOutput,
    amd_smi,
    collect_env,
    kfd_sysfs,
    nvidia_smi,
    rocm_smi,
    rocminfo,
    torch_query,
)

TOOL_TIMEOUT_S = 20  # a hung GPU can make amd-smi hang; never let detection hang the run

# name -> (command, parser). Order is the order of trust (docs/architecture.md, "Platforms, verdicts
# and conclusions"), after torch.
TOOLS: dict[str, tuple[list[str], Callable[[str], Parsed]]] = {
    "amd-smi": (["amd-smi", "static", "--json"], amd_smi.parse),
    "amd-smi-version": (["amd-smi", "version", "--json"], amd_smi.parse),
    "rocminfo": (["rocminfo"], rocminfo.parse),
    "rocm-smi": (
        ["rocm-smi", "--showproductname", "--showmeminfo", "vram", "--json"],
        rocm_smi.parse,
    ),
    "nvidia-smi": (["nvidia-smi", *nvidia_smi.QUERY_ARGS], nvidia_smi.parse),
}
FILE_SOURCES: dict[str, Callable[[str], Parsed]] = {
    "amd-smi": amd_smi.parse,
    "amd-smi-version": amd_smi.parse,
    "rocminfo": rocminfo.parse,
    "rocm-smi": rocm_smi.parse,
    "nvidia-smi": nvidia_smi.parse,
    "collect-env": collect_env.parse,
}
assert SOURCE_NAMES == (*FILE_SOURCES, "sysfs")


ROCM_BIN = Path("/opt/rocm/bin")


def find_tool(name: str, folders: tuple[Path, ...] = (ROCM_BIN,)) -> str | None:
    """A tool on PATH, else in the given folders (ROCm installs its tools off PATH)."""
    return shutil.which(name) or next(
        (
            str(p)
            for p in (folder / name for folder in folders)
            if p.is_file() and os.access(p, os.X_OK)
        ),
        None,
    )


def run_tool(command: list[str]) -> str:
    """Run a tool and return its stdout; raise with a message a user can act on."""
    exe = find_tool(command[0])
    if exe is None:
        raise FileNotFoundError(f"{command[0]} is not installed (not on PATH nor in /opt/rocm/bin)")
    try:
        done = subprocess.run(
            [exe, *command[1:]],
            capture_output=True,
            text=True,
            timeout=TOOL_TIMEOUT_S,
            errors="replace",
        )
    except subprocess.TimeoutExpired as exc:
        raise TimeoutError(
            f"`{' '.join(command)}` did not answer in {TOOL_TIMEOUT_S} s (hung GPU or driver?)"
        ) from exc
    if done.returncode != 0 and not done.stdout.strip():
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise RuntimeError(f"`{' '.join(command)}` exited with {done.returncode}: {last}")
    return done.stdout


def _attempt(name: str, get: Callable[[], Parsed]) -> tuple[SourceResult, Parsed | None]:
    try:
        parsed = get()
    except FileNotFoundError as exc:
        return SourceResult(name, False, f"missing: {exc}"), None
    except PermissionError as exc:
        return SourceResult(
            name, False, f"permission denied: {exc} (is the user in the render and video groups?)"
        ), None
    except UnexpectedOutput as exc:
        return SourceResult(name, False, f"unexpected output: {exc}"), None
    except Exception as exc:  # noqa: BLE001 - a detection source must never crash the run
        return SourceResult(name, False, f"{type(exc).__name__}: {exc}"), None
    summary = f"{len(parsed.gpus)} GPU(s)" if parsed.gpus else "no GPUs listed"
    if parsed.versions:
        summary += "; " + ", ".join(f"{k} {v}" for k, v in sorted(parsed.versions.items()))
    for note in parsed.notes:
        summary += f"; note: {note}"
    return SourceResult(name, True, summary, len(parsed.gpus)), parsed


def merge(answers: list[tuple[SourceResult, Parsed | None]]) -> Platform:
    """Combine source answers (already in order of trust) into one platform."""
    platform = Platform(sources=[result for result, _ in answers])
    parsed_ok = [parsed for _, parsed in answers if parsed is not None]
    primary = next((p for p in parsed_ok if p.gpus), None)
    if primary is not None:
        platform.gpus = [g for g in primary.gpus]
        platform.vendor = primary.gpus[0].vendor
        for other in parsed_ok:
            if other is primary or len(other.gpus) != len(platform.gpus):
                continue
            for mine, theirs in zip(platform.gpus, other.gpus):
                for f in fields(mine):
                    if getattr(mine, f.name) is None and getattr(theirs, f.name) is not None:
                        setattr(mine, f.name, getattr(theirs, f.name))
    for parsed in parsed_ok:
        for key, value in parsed.versions.items():
            platform.versions.setdefault(key, value)
    return platform


def _rocm_version_file() -> Parsed:
    text = Path("/opt/rocm/.info/version").read_text().strip()
    return Parsed(versions={"rocm": text})


def detect_live(sysfs_root: Path = kfd_sysfs.DEFAULT_ROOT) -> Platform:
    answers = [_attempt("torch", torch_query.probe)]
    for name, (command, parser) in TOOLS.items():
        answers.append(_attempt(name, functools.partial(_run_and_parse, command, parser)))
    answers.append(_attempt("sysfs", functools.partial(kfd_sysfs.parse_dir, sysfs_root)))
    answers.append(_attempt("rocm-version-file", _rocm_version_file))
    return merge(answers)


def detect_from_files(sources: dict[str, str]) -> Platform:
    """Parse saved tool output (`--source amd-smi=FILE`) instead of running the tools."""
    answers = []
    ordered = sorted(
        sources.items(), key=lambda kv: SOURCE_NAMES.index(kv[0]) if kv[0] in SOURCE_NAMES else 99
    )
    for name, path in ordered:
        if name == "sysfs":
            answers.append(
                _attempt(f"sysfs={path}", functools.partial(kfd_sysfs.parse_dir, Path(path)))
            )
        elif name in FILE_SOURCES:
            answers.append(
                _attempt(
                    f"{name}={path}", functools.partial(_read_and_parse, FILE_SOURCES[name], path)
                )
            )
        else:
            answers.append(
                (
                    SourceResult(
                        f"{name}={path}",
                        False,
                        f"unknown source {name!r}: use one of {', '.join(SOURCE_NAMES)}",
                    ),
                    None,
                )
            )
    return merge(answers)


def _run_and_parse(command: list[str], parser: Callable[[str], Parsed]) -> Parsed:
    return parser(run_tool(command))


def _read_and_parse(parser: Callable[[str], Parsed], path: str) -> Parsed:
    return parser(_read(path))


def _read(path: str) -> str:
    return Path(path).read_text(encoding="utf-8", errors="replace")


def detect(profile: str | None = None, sources: dict[str, str] | None = None) -> Platform:
    """The platform for this run: a simulated profile if asked for, saved outputs if given, else
    live."""
    profile = profile or os.environ.get("PYTEST_ROCM_PLATFORM") or None
    if profile:
        return profiles.load(profile)
    if sources:
        return detect_from_files(sources)
    return detect_live()
