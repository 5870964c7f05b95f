"""`nvidia-smi --query-gpu=index,name,memory.total,pci.bus_id,driver_version,compute_cap --format=csv`."""

from __future__ import annotations

import csv
import io
import re

from pytest_rocm.hw.model import Gpu
from pytest_rocm.hw.parsers import Parsed, UnexpectedOutput, gib
from pytest_rocm.hw.skus import identify_nvidia

QUERY_FIELDS = ("index", "name", "memory.total", "pci.bus_id", "driver_version", "compute_cap")
QUERY_ARGS = ["--query-gpu=" + ",".join(QUERY_FIELDS), "--format=csv"]


def parse(text: str) -> Parsed:
    rows = [r for r in csv.reader(io.StringIO(text.strip()), skipinitialspace=True) if r]
    if not rows:
        raise UnexpectedOutput("nvidia-smi printed nothing")
    header = [h.split(" [")[0].strip().lower() for h in rows[0]]
    if "name" in header:
        rows = rows[1:]
    else:
        header = list(QUERY_FIELDS[: len(rows[0])])  # --format=csv,noheader: our own field order
    if "name" not in header:
        raise UnexpectedOutput(
            f"nvidia-smi CSV has no 'name' column (columns: {', '.join(header)})"
        )
    parsed = Parsed()
    for position, row in enumerate(rows):
        if len(row) != len(header):
            raise UnexpectedOutput(
                f"nvidia-smi CSV row {position + 1} has {len(row)} fields, expected {len(header)}"
            )
        fields = dict(zip(header, (v.strip() for v in row)))
        memory = None
        if fields.get("memory.total"):
            value, _, unit = fields["memory.total"].partition(" ")
            memory = gib(value, unit or "MiB")
        sku, arch = identify_nvidia(fields["name"], fields.get("compute_cap"))
        if fields.get("driver_version"):
            parsed.versions["driver"] = f"nvidia {fields['driver_version']}"
        parsed.gpus.append(
            Gpu(
                index=int(fields.get("index", position)),
                vendor="nvidia",
                sku=sku,
                arch=arch,
                raw_name=fields["name"],
                memory_gb=memory,
                pci_bus=fields.get("pci.bus_id"),
            )
        )
    cuda = re.search(r"CUDA Version:\s*([\d.]+)", text)
    if cuda:
        parsed.versions["cuda"] = cuda.group(1)
    return parsed
