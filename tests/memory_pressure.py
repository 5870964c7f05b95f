"""Another process taking the machine's memory while a server starts, at the worst moment, on
purpose.

SGLang on the CPU measures the machine's free memory twice at start-up: once before it loads the
weights ("Memory baseline taken" in its log) and again when it sizes its KV cache. Memory that
anything else on the machine takes between the two was once charged to the KV cache, so a busy CI
machine made the start fail at random (issue 29, item 14). `TakeMemoryAtBaseline` makes that happen
every time: when the server logs its baseline it freezes the server's process group (SIGSTOP), takes
`size` bytes of resident memory, lets the server go on (SIGCONT), and holds the memory until it is
closed.
"""

from __future__ import annotations

import os
import re
import signal
import threading
import time
from pathlib import Path

BASELINE = "Memory baseline taken"
# SGLang's own measurement when it starts loading the weights, after the baseline (GB of 2**30
# bytes).
LOAD_BEGIN_TEXT = "Load weight begin"
LOAD_BEGIN = re.compile(r"Load weight begin\. avail mem=([\d.]+) GB")


def available_bytes() -> int:
    """MemAvailable from /proc/meminfo: what SGLang's CPU path reads (through psutil)."""
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no MemAvailable in /proc/meminfo")


class TakeMemoryAtBaseline:
    def __init__(self, server, size: int):
        self.server = server  # a serving.process.Server, watched from before its start
        self.size = size
        self.available_before: int | None = None  # what was free just before the memory was taken
        self.taken_at: float | None = None
        self.late = False  # the server had begun loading its weights before the memory was taken
        self._held = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(timeout=30)
        self._held = None

    def _watch(self) -> None:
        while not self._stop.is_set():
            process = self.server.process
            if process is not None and process.poll() is None and self._logged(BASELINE):
                os.killpg(process.pid, signal.SIGSTOP)
                try:
                    self.late = self._logged(LOAD_BEGIN_TEXT)
                    self.available_before = available_bytes()
                    # filled, so resident: a calloc'd buffer would not count
                    self._held = b"\x01" * self.size
                    self.taken_at = time.monotonic()
                finally:
                    os.killpg(process.pid, signal.SIGCONT)
                return
            time.sleep(0.01)

    def _logged(self, text: str) -> bool:
        try:
            return text in self.server.log_path.read_text(errors="replace")
        except OSError:
            return False

    def sglang_saw_gb(self) -> float | None:
        """The free memory SGLang measured when it began loading the weights, after the memory was
        taken."""
        match = LOAD_BEGIN.search(self.server.log_path.read_text(errors="replace"))
        return float(match[1]) if match else None
