"""One reader per tool: `read(lines, limits) -> Reading`. `READERS` maps the tool names of
`--source TOOL=FILE`.

A reader turns what the tool printed into findings (each naming the line it came from), judged
against the SKU's limits where the tool measures something with a threshold. Lines it does not
understand are kept as `unread` and reported, never guessed at. Authors' abridgement marks (`...`,
`. . .`) are not unread.
"""

from __future__ import annotations

import re

from rocm_gate.preflight.readers import (
    agfhc,
    amd_smi,
    babelstream,
    dmesg,
    lspci,
    rccl_tests,
    rocm_smi,
    rocminfo,
    rvs,
    transferbench,
)

__all__ = ["READERS", "TOOLS", "is_filler"]

# tool -> (reader, layer it proves)
READERS = {
    "amd-smi": (amd_smi.read, "hardware"),
    "rocm-smi": (rocm_smi.read, "hardware"),
    "rocminfo": (rocminfo.read, "hardware"),
    "lspci": (lspci.read, "hardware"),
    "rvs": (rvs.read, "hardware"),
    "agfhc": (agfhc.read, "hardware"),
    "babelstream": (babelstream.read, "hardware"),
    "transferbench": (transferbench.read, "hardware"),
    "dmesg": (dmesg.read, "hardware"),
    "rccl-tests": (rccl_tests.read, "communication"),
}
TOOLS = tuple(READERS)
ABRIDGED = re.compile(r"^\s*(\.\s?){3,}\s*$|^\s*(…|\[output truncated\]|<snip>)\s*$")


def is_filler(text: str) -> bool:
    """Blank lines and the marks authors leave where they cut a log."""
    return not text.strip() or bool(ABRIDGED.match(text))
