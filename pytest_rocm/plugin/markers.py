"""The markers users write (docs/architecture.md, "Markers and fixtures"): parsed, validated, and
matched against the platform.

Each marker's arguments are checked by calling a function with the marker's own
signature, so a misspelt keyword gives Python's exact complaint, which we turn
into a collection error naming the test and what is allowed.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from typing import Any

import pytest

from pytest_rocm.errors import BadInput
from pytest_rocm.hw.model import Gpu, Platform
from pytest_rocm.hw.skus import ALL_SKUS, KNOWN_AMD_ARCHS, NVIDIA_ARCH_BY_SKU, normalise_sku

MARKER_HELP = {
    "rocm_gate": "rocm_gate(group, blocking=True): a gate test in a group "
    "(attention, engine, api, multimodal, spec_decode, distributed_moe, accuracy, performance); "
    "blocking gates decide the check's conclusion.",
    "hardware": "hardware(sku=None, arch=None, gpus=1, min_memory_gb=None, vendor=None): the test needs this "
    "hardware; elsewhere it is skipped as not applicable, with both sides in the reason.",
    "rocm_known_gap": "rocm_known_gap(reason, issue, mode='skip'): a known ROCm gap with its tracking issue URL; "
    "on AMD platforms the test is skipped (mode='skip') or expected to fail (mode='xfail').",
    "vllm_server": "vllm_server(args=[...], env={...}, tiny_model=None): extra arguments and environment for the "
    "module's `vllm_server` fixture (on the module's pytestmark); tiny_model={'architecture': "
    "'idefics3', ...} serves a tiny model of another architecture instead of the run's model.",
    "sglang_server": "sglang_server(args=[...], env={...}, tiny_model=None): extra arguments and environment for the "
    "module's `sglang_server` fixture (on the module's pytestmark); tiny_model as for vllm_server.",
    "vllm_server_variant": "vllm_server_variant(args=[...], env={...}, tiny_model=None): a server this test starts "
    "with `vllm_server_factory` and these settings, declared so it is started ahead of need; one marker per "
    "server (they stack).",
    "sglang_server_variant": "sglang_server_variant(args=[...], env={...}, tiny_model=None): as "
    "vllm_server_variant, for `sglang_server_factory`.",
}
SERVER_MARKERS = ("vllm_server", "sglang_server")
VARIANT_MARKERS = ("vllm_server_variant", "sglang_server_variant")  # stackable: one per server

KNOWN_GAP_MODES = ("skip", "xfail")
VENDORS = ("amd", "nvidia")
_ISSUE_URL = re.compile(r"^https?://[^\s/]+/\S+/(issues|pull|pulls|-/issues)/\d+/?$")
KNOWN_ARCHS = KNOWN_AMD_ARCHS | set(NVIDIA_ARCH_BY_SKU.values())


class MarkerError(BadInput):
    """A marker with a wrong argument; the message says what is allowed."""


@dataclass(frozen=True)
class Gate:
    group: str
    blocking: bool


@dataclass(frozen=True)
class Hardware:
    skus: tuple[str, ...] = ()
    archs: tuple[str, ...] = ()
    gpus: int = 1
    min_memory_gb: float | None = None
    vendor: str | None = None

    def accepts(self, gpu: Gpu) -> bool:
        return (
            (not self.skus or gpu.sku in self.skus)
            and (not self.archs or gpu.arch in self.archs)
            and (self.vendor is None or gpu.vendor == self.vendor)
            and (self.min_memory_gb is None or (gpu.memory_gb or 0) >= self.min_memory_gb)
        )

    def describe(self) -> str:
        what = (
            " or ".join(self.skus)
            or " or ".join(self.archs)
            or (f"{self.vendor.upper()} GPU" if self.vendor else "GPU")
        )
        text = f"{self.gpus} x {what}"
        if self.skus and self.archs:
            text += f" ({' or '.join(self.archs)})"
        if self.min_memory_gb is not None:
            text += f" with >= {self.min_memory_gb:g} GB each"
        return text

    def unmet_reason(self, platform: Platform) -> str | None:
        """None when the platform meets this requirement, else 'needs ..., this runner has ...'."""
        fitting = sum(1 for gpu in platform.gpus if self.accepts(gpu))
        if fitting >= self.gpus:
            return None
        return f"needs {self.describe()}, this runner has {platform.describe()}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "sku": list(self.skus),
            "arch": list(self.archs),
            "gpus": self.gpus,
            "min_memory_gb": self.min_memory_gb,
            "vendor": self.vendor,
        }


@dataclass(frozen=True)
class KnownGap:
    reason: str
    issue: str
    mode: str = "skip"

    def label(self) -> str:
        return f"known gap: {self.reason} ({self.issue})"


def _as_tuple(value: Any, what: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        return (value,)
    if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
        return tuple(value)
    raise MarkerError(f"{what} must be a string or a list of strings, got {value!r}")


def _gate_args(group: Any, blocking: Any = True) -> tuple[Any, Any]:
    return group, blocking


def _hardware_args(
    sku: Any = None, arch: Any = None, gpus: Any = 1, min_memory_gb: Any = None, vendor: Any = None
) -> tuple[Any, ...]:
    return sku, arch, gpus, min_memory_gb, vendor


def _known_gap_args(reason: Any, issue: Any = None, mode: Any = "skip") -> tuple[Any, Any, Any]:
    return reason, issue, mode


def _server_args(args: Any = (), env: Any = None, tiny_model: Any = None) -> tuple[Any, Any, Any]:
    return args, env, tiny_model


def _call(func: Callable[..., Any], mark: pytest.Mark, name: str) -> Any:
    try:
        return func(*mark.args, **mark.kwargs)
    except TypeError as exc:
        message = str(exc).replace(func.__name__ + "()", name)
        raise MarkerError(f"@pytest.mark.{name}: {message}. Usage: {MARKER_HELP[name]}") from exc


def parse_gate(mark: pytest.Mark, allowed_groups: AbstractSet[str]) -> Gate:
    group, blocking = _call(_gate_args, mark, "rocm_gate")
    if group not in allowed_groups:
        raise MarkerError(
            f"@pytest.mark.rocm_gate: unknown group {group!r}; allowed: {', '.join(sorted(allowed_groups))} "
            "(add groups with the `rocm_groups` ini option)"
        )
    if not isinstance(blocking, bool):
        raise MarkerError(
            f"@pytest.mark.rocm_gate: blocking must be True or False, got {blocking!r}"
        )
    return Gate(group=group, blocking=blocking)


def parse_server(mark: pytest.Mark, name: str) -> None:
    """Check a server marker's arguments (the fixture reads them when it starts the server)."""
    args, env, tiny_model = _call(_server_args, mark, name)
    if tiny_model is not None:
        # imported here: every pytest run loads this module, few tests name a tiny model
        from pytest_rocm.serving.tiny_models import spec_problem

        problem = spec_problem(tiny_model)
        if problem:
            raise MarkerError(f"@pytest.mark.{name}: tiny_model {problem}")
    if isinstance(args, str) or not all(isinstance(a, str) for a in args):
        raise MarkerError(f"@pytest.mark.{name}: args must be a list of strings, got {args!r}")
    if env is not None and not (
        isinstance(env, dict)
        and all(isinstance(k, str) and isinstance(v, str) for k, v in env.items())
    ):
        raise MarkerError(f"@pytest.mark.{name}: env must map strings to strings, got {env!r}")


def parse_hardware(mark: pytest.Mark) -> Hardware:
    sku, arch, gpus, min_memory_gb, vendor = _call(_hardware_args, mark, "hardware")
    skus = []
    for value in _as_tuple(sku, "hardware(sku=...)"):
        known = normalise_sku(value)
        if known is None:
            raise MarkerError(
                f"@pytest.mark.hardware: unknown SKU {value!r}; allowed: {', '.join(ALL_SKUS)}"
            )
        skus.append(known)
    archs = []
    for value in _as_tuple(arch, "hardware(arch=...)"):
        if value.lower() not in KNOWN_ARCHS:
            raise MarkerError(
                f"@pytest.mark.hardware: unknown arch {value!r}; allowed: {', '.join(sorted(KNOWN_ARCHS))}"
            )
        archs.append(value.lower())
    if not isinstance(gpus, int) or isinstance(gpus, bool) or gpus < 1:
        raise MarkerError(
            f"@pytest.mark.hardware: gpus must be a whole number >= 1, got {gpus!r} "
            "(a test that needs no GPU needs no hardware marker)"
        )
    if min_memory_gb is not None and (
        isinstance(min_memory_gb, bool)
        or not isinstance(min_memory_gb, (int, float))
        or min_memory_gb <= 0
    ):
        raise MarkerError(
            f"@pytest.mark.hardware: min_memory_gb must be a positive number, got {min_memory_gb!r}"
        )
    if vendor is not None and vendor not in VENDORS:
        raise MarkerError(
            f"@pytest.mark.hardware: vendor must be one of {', '.join(VENDORS)}, got {vendor!r}"
        )
    return Hardware(
        skus=tuple(skus),
        archs=tuple(archs),
        gpus=gpus,
        min_memory_gb=float(min_memory_gb) if min_memory_gb is not None else None,
        vendor=vendor,
    )


def parse_known_gap(mark: pytest.Mark) -> KnownGap:
    reason, issue, mode = _call(_known_gap_args, mark, "rocm_known_gap")
    if not isinstance(reason, str) or not reason.strip():
        raise MarkerError(
            "@pytest.mark.rocm_known_gap: reason must be a non-empty string saying what does not work"
        )
    if not isinstance(issue, str) or not _ISSUE_URL.match(issue):
        raise MarkerError(
            f"@pytest.mark.rocm_known_gap: issue must be the URL of the tracking issue "
            f"(https://github.com/OWNER/REPO/issues/N), got {issue!r}"
        )
    if mode not in KNOWN_GAP_MODES:
        raise MarkerError(
            f"@pytest.mark.rocm_known_gap: mode must be one of {', '.join(KNOWN_GAP_MODES)}, got {mode!r}"
        )
    return KnownGap(reason=reason.strip(), issue=issue, mode=mode)
