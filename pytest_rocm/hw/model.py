"""The platform a run sees: vendor, GPUs and stack versions (docs/architecture.md, "Platforms,
verdicts and conclusions").

Plain dataclasses that serialise to and from JSON, so a platform detected on
the controller can be handed to xdist workers, written into the manifest, and
read back as a simulated profile.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

SCHEMA = "pytest-rocm/platform/1"

VENDORS = ("amd", "nvidia", "cpu")


@dataclass
class Gpu:
    index: int
    vendor: str  # "amd" or "nvidia"
    sku: str | None = None  # normalised: "MI300X", "H100", ... or None when unknown
    arch: str | None = None  # "gfx942", "sm_90", ...
    raw_name: str | None = None  # the name exactly as the tool printed it
    memory_gb: float | None = None
    device_id: str | None = None  # PCI device id, "0x74a1"
    pci_bus: str | None = None
    partition: str | None = None  # "SPX/NPS1" style, where the tool reports it
    compute_units: int | None = None

    def label(self) -> str:
        return self.sku or (f"{self.arch} (unknown SKU)" if self.arch else "unknown GPU")


@dataclass
class SourceResult:
    """What one detection source said: answered (with how many GPUs) or failed (with why)."""

    name: str
    ok: bool
    detail: str = (
        ""  # for ok: a short summary; for failures: the error, naming the fix where we know it
    )
    gpu_count: int | None = None


@dataclass
class Platform:
    vendor: str = "cpu"
    gpus: list[Gpu] = field(default_factory=list)
    # rocm, hip, cuda, driver, torch, vllm, ...
    versions: dict[str, str] = field(default_factory=dict)
    sources: list[SourceResult] = field(default_factory=list)
    profile: str | None = None  # name of the simulated profile, None when detected live

    @property
    def gpu_count(self) -> int:
        return len(self.gpus)

    @property
    def is_amd(self) -> bool:
        return self.vendor == "amd"

    def skus(self) -> list[str]:
        return sorted({g.sku for g in self.gpus if g.sku})

    def archs(self) -> list[str]:
        return sorted({g.arch for g in self.gpus if g.arch})

    def describe(self) -> str:
        """'8 x MI300X (gfx942)' or 'no GPU (cpu)': used in skip reasons and summaries."""
        if not self.gpus:
            return "no GPU (cpu)"
        kinds: dict[str, int] = {}
        for gpu in self.gpus:
            kinds[gpu.label()] = kinds.get(gpu.label(), 0) + 1
        return " + ".join(f"{n} x {label}" for label, n in kinds.items())

    def keys(self) -> list[str]:
        """The keys baselines and server settings are looked up by, most specific first: SKU, arch,
        vendor (those known)."""
        first = self.gpus[0] if self.gpus else None
        return [k for k in (first and first.sku, first and first.arch, self.vendor) if k]

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["schema"] = SCHEMA
        data["gpu_count"] = self.gpu_count
        data["description"] = self.describe()
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Platform:
        """A platform from its JSON form; ValueError naming the field for anything malformed (a
        profile drives device locks and waits: a duplicate index or a path as an index must never
        get through)."""
        if not isinstance(data, dict):
            raise ValueError(
                f"expected a JSON object with vendor and gpus, got {type(data).__name__}"
            )
        vendor = data.get("vendor", "cpu")
        if vendor not in VENDORS:
            raise ValueError(f"vendor {vendor!r} is not one of {', '.join(VENDORS)}")
        raw_gpus = data.get("gpus", [])
        if not isinstance(raw_gpus, list) or not all(isinstance(g, dict) for g in raw_gpus):
            raise ValueError("gpus must be a list of objects")
        if len(raw_gpus) > MAX_GPUS:
            raise ValueError(f"{len(raw_gpus)} GPUs: a runner has at most {MAX_GPUS}")
        gpus = []
        for i, g in enumerate(raw_gpus):
            known = {k: v for k, v in g.items() if k in Gpu.__dataclass_fields__}
            known.setdefault("index", i)
            known.setdefault("vendor", vendor)
            gpus.append(_checked_gpu(known, i))
        indices = [gpu.index for gpu in gpus]
        if len(set(indices)) != len(indices):
            raise ValueError(f"gpus: duplicate device index in {indices}")
        versions = data.get("versions", {})
        if not isinstance(versions, dict):
            raise ValueError("versions must be an object of name -> version")
        try:
            sources = [SourceResult(**s) for s in data.get("sources", [])]
        except TypeError as exc:
            raise ValueError(f"sources: {exc}") from None
        return cls(
            vendor=vendor,
            gpus=gpus,
            versions={str(k): str(v) for k, v in versions.items()},
            sources=sources,
            profile=data.get("profile"),
        )


MAX_GPUS = 64


def _checked_gpu(fields: dict, position: int) -> Gpu:
    where = f"gpus[{position}]"
    index = fields["index"]
    if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < MAX_GPUS:
        raise ValueError(
            f"{where}.index must be a whole number from 0 to {MAX_GPUS - 1}, got {index!r}"
        )
    if fields["vendor"] not in ("amd", "nvidia"):
        raise ValueError(f"{where}.vendor must be amd or nvidia, got {fields['vendor']!r}")
    memory = fields.get("memory_gb")
    if memory is not None and (
        isinstance(memory, bool) or not isinstance(memory, (int, float)) or memory < 0
    ):
        raise ValueError(f"{where}.memory_gb must be a number of GB, got {memory!r}")
    for name in ("sku", "arch", "raw_name", "device_id", "pci_bus", "partition"):
        if fields.get(name) is not None and not isinstance(fields[name], str):
            raise ValueError(f"{where}.{name} must be a string, got {fields[name]!r}")
    return Gpu(**fields)
