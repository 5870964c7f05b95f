"""Verdicts: tell a real regression from an infrastructure fault or a flake, with evidence.

A signature alone never decides: a new kernel that writes out of bounds prints
"Memory access fault" too. The rules (docs/architecture.md, "Platforms, verdicts and conclusions"),
per failed test:

- no infra signature: a later attempt passes -> `flaky`; every attempt fails -> `regression`;
- infra signature: the device failed its health probe -> `infra` (the device is named);
  the probe passed and a rerun passed -> `infra`; the probe passed and the failure
  reproduced on a rerun -> `regression`, noting that it reproduced after a healthy probe;
- not rerun at all (a non-blocking test, `--rocm-reruns 0`, a rerun that could not start):
  `unconfirmed`, never `regression`: only a failure that came back is confirmed;
- an attempt that failed in a process a device fault had poisoned before it (`after_fault`,
  results/poisoning.py) proves nothing: a test whose every failure is such is `infra`, naming the
  test that faulted, never `regression` or `flaky`; otherwise the rules above apply to the attempts
  that ran in a clean process (a rerun in the very process its own fault poisoned counts as none);
- a pass on the very server an earlier attempt failed on (`servers`, or, where the pass names none,
  the same process) proves nothing: a warm server's state may be what failed the test, and may have
  moved past it. Such passes are set aside and the rules above apply to the rest, so a test that
  passed only there is not `flaky` (its fresh rerun failed: `regression`; none ran: `unconfirmed`).

Verdicts are computed from records alone, so `rocm-gate verdict DIR` rebuilds them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from pytest_rocm.errors import BadInput
from pytest_rocm.results.gpu_faults import signature_pattern

# A host that is not this machine: a test's own server listens on localhost, and a refused or
# failing request to it is the server's (the change's) until a rerun says otherwise; only a remote
# host makes a network fault.
_REMOTE = r"(?!(?:localhost|127(?:\.\d{1,3}){3}|0\.0\.0\.0|\[?::1\]?)(?:[:'/\]\s]|$))"
# Network faults on the way to a remote host, as the libraries print them:
NETWORK = "|".join(
    (
        # urllib3/requests: refused, reset, DNS, connect or read timeouts, after the retries
        rf"host='{_REMOTE}[^']+', port=\d+\): (?:Max retries exceeded|Read timed out)",
        # urllib3's NameResolutionError, and the resolver's own words (no host is ever this
        # machine's)
        r"Failed to resolve '[^']+'|Temporary failure in name resolution|Name or service not known"
        r"|nodename nor servname provided|No address associated with hostname|getaddrinfo failed",
        # aiohttp's ClientConnectorError
        rf"Cannot connect to host {_REMOTE}\S+:\d+ ssl:",
        # HTTP 5xx or 429 from a remote host: requests, httpx (and huggingface_hub, which wraps it),
        # hub retries
        rf"(?:(?:5\d\d|429) (?:Server|Client) Error: [^\n]*? for url: |(?:Server|Client) error '(?:5\d\d|429) [^'\n]*' "
        rf"for url '|HTTP Error (?:5\d\d|429) thrown while requesting [A-Z]+ |429 Too Many Requests for url: )https?://{_REMOTE}",
        # huggingface_hub: the Hub unreachable and nothing cached; a download that broke off; a retried request
        r"An error happened while trying to locate the file on the Hub",
        rf"Error while downloading from https?://{_REMOTE}|' thrown while requesting [A-Z]+ https?://{_REMOTE}",
        # transformers: the Hub unreachable and nothing cached
        rf"We couldn't connect to 'https?://{_REMOTE}",
    )
)

# The runtimes' own texts of the errors that leave a CUDA or HIP context unusable (CUDA's runtime API
# reference, "this leaves the process in an inconsistent state ... the process must be terminated
# and relaunched"; HIP's hipGetErrorString for the same codes), as PyTorch raises them: `CUDA error:
# <text>` / `HIP error: <text>`, with recent PyTorch's "Search for `cudaErrorAssert'" line. The
# first six are distinctive enough to match alone (Triton and custom ops print them without a
# prefix); the rest only after a runtime's prefix.
_DISTINCT = (
    "device-side assert triggered",
    "an illegal memory access was encountered",
    "unspecified launch failure",
    "an illegal instruction was encountered",
    "the launch timed out and was terminated",
    "uncorrectable ECC error encountered",
)
_PREFIXED = (
    "misaligned address",
    "hardware stack error",
    "invalid program counter",
    "operation not supported on global/shared address space",
    # not sticky by the runtimes' reference, but what a poisoned context often answers next: taking
    # it for a fault costs a fresh process, never a verdict (the fresh rerun decides)
    "unknown error",
)
_CODES = (
    "Assert|IllegalAddress|LaunchFailure|MisalignedAddress|IllegalInstruction|LaunchTimeout"
    "|LaunchTimeOut|HardwareStackError|InvalidPc|InvalidAddressSpace|ECCUncorrectable"
    "|ECCNotCorrectable"
)
_DRIVER_CODES = (
    "ASSERT|ILLEGAL_ADDRESS|LAUNCH_FAILED|MISALIGNED_ADDRESS|ILLEGAL_INSTRUCTION|LAUNCH_TIMEOUT"
    "|HARDWARE_STACK_ERROR|INVALID_PC|INVALID_ADDRESS_SPACE|ECC_UNCORRECTABLE"
)
DEVICE_FAULT = "|".join(
    (
        # (plain words, spaces, `-` and `/`: nothing a pattern reads as more than itself)
        "|".join(_DISTINCT),
        r"(?:CUDA|HIP)(?: driver| runtime)? error: (?:" + "|".join(_PREFIXED) + ")",
        r"Triton Error \[(?:CUDA|HIP)\]: (?:" + "|".join(_PREFIXED) + ")",
        # the error's name: PyTorch's "Search for `hipErrorIllegalAddress'" line, CuPy, numba
        rf"\b(?:cuda|hip)Error(?:{_CODES})\b",
        rf"\bCUDA_ERROR_(?:{_DRIVER_CODES})\b",
        # a BLAS or DNN kernel that failed to run: the symptom of a fault the library's own call met
        r"\b(?:CUBLAS|CUDNN|HIPBLAS|HIPBLASLT)_STATUS_EXECUTION_FAILED\b",
        # the HSA runtime's own reports of a kernel fault (ROCm)
        r"Memory access fault by GPU",
        r"HSA_STATUS_ERROR_(?:MEMORY_APERTURE_VIOLATION|MEMORY_FAULT|ILLEGAL_INSTRUCTION|EXCEPTION)\b",
    )
)
# name -> pattern, matched against a failure's text, its captured output and any attached log. The
# GPU's own fault texts (a hang, a reset, a memory access fault, the kernel's RAS, init, link and
# driver errors) come from the one catalog node acceptance reads the kernel log with
# (results/gpu_faults.toml), so a fault that refuses a node is infrastructure in a test too.
DEFAULT_SIGNATURES: dict[str, str] = {
    "hsa_error": r"HSA_STATUS_ERROR_[A-Z_]+",
    "hip_no_device": r"hipErrorNoDevice|no ROCm-capable device is detected",
    "hip_launch_failure": r"hipErrorLaunchFailure|hipErrorIllegalAddress|hipErrorECCNotCorrectable",
    "gpu_hang": signature_pattern("gpu_hang"),
    "memory_access_fault": signature_pattern("memory_access_fault"),
    # a kernel fault in PyTorch's CUDA or HIP wording (sticky for its process: results/poisoning.py)
    "device_fault": DEVICE_FAULT,
    "amdgpu_reset": signature_pattern("amdgpu_reset"),
    # the kernel's RAS, init, XGMI link, poison and driver errors (results/gpu_faults.toml)
    "amdgpu_fault": signature_pattern("amdgpu_fault"),
    "collective_error": r"(?:RCCL|NCCL) (?:WARN|ERROR|error)|nccl(?:Unhandled\w*Error|SystemError|RemoteError|InternalError)"
    r"|Watchdog caught collective operation timeout|(?:RCCL|NCCL) (?:communicator|init)\w* (?:failed|timed out)",
    "no_space": r"No space left on device",
    # a server that found the machine's memory taken while it started (serving/process.py:
    # memory_problem), or vLLM's CPU worker finding less free memory than its fixed KV cache
    # (VLLM_CPU_KVCACHE_SPACE)
    "machine_memory": r"memory the machine's other processes took while the server started"
    r"|on kv cache allocation is less than requested memory for kv",
    "server_not_healthy": r"did not become healthy|server (?:exited|died)(?: with (?:exit )?code -?\d+)? before becoming healthy",
    "timeout": r"Timeout \(>[\d.]+s\) from pytest-timeout|pytest-rocm: timed out after",
    # exit code 134 (128 + SIGABRT) is what a KFD GPU hang leaves; vLLM's AMD CI retries it once.
    "kfd_hang_exit": r"(?:exit(?:ed)?(?: with)? (?:code|status)|returncode[=:]?)\s*-?134\b|\bSIGABRT\b",
    "killed_by_signal": r"(?:killed|terminated) by signal|\bSIG(?:KILL|SEGV|BUS|TERM)\b|returncode[=:]?\s*-(?:9|11|7|15)\b",
    "worker_crashed": r"worker '\w+' crashed while running",
    # refused, reset, unresolvable or timed out on the way to a remote host (huggingface.co, a CDN),
    # or a 5xx/429 from one; never a request to this machine (the test's own server)
    "network": NETWORK,
}

VERDICTS = (
    "pass",
    "regression",
    "unconfirmed",
    "infra",
    "flaky",
    "interrupted",
    "known_gap",
    "skipped",
    "not_applicable",
)


@dataclass(frozen=True)
class Signature:
    name: str
    pattern: re.Pattern

    def search(self, text: str) -> str | None:
        match = self.pattern.search(text)
        if match is None:
            return None
        start = text.rfind("\n", 0, match.start()) + 1
        end = text.find("\n", match.end())
        return text[start : end if end >= 0 else None].strip()[:300]


class SignatureError(BadInput):
    pass


def build_signatures(extra: list[str] | tuple[str, ...] = ()) -> list[Signature]:
    """The defaults, plus `name=regex` lines from configuration; `!name` removes a default."""
    table = dict(DEFAULT_SIGNATURES)
    for line in extra:
        line = line.strip()
        if not line:
            continue
        if line.startswith("!"):
            if table.pop(line[1:], None) is None:
                raise SignatureError(
                    f"rocm_infra_signatures: {line!r} removes no known signature; "
                    f"known: {', '.join(sorted(table))}"
                )
            continue
        name, sep, pattern = line.partition("=")
        if not sep or not name.strip() or not pattern.strip():
            raise SignatureError(f"rocm_infra_signatures: {line!r} is not `name=regex` or `!name`")
        table[name.strip()] = pattern.strip()
    signatures = []
    for name, pattern in table.items():
        try:
            signatures.append(Signature(name, re.compile(pattern)))
        except re.error as exc:
            raise SignatureError(
                f"rocm_infra_signatures: {name}: bad regex {pattern!r} ({exc})"
            ) from exc
    return signatures


def failure_evidence(text: str) -> str:
    """The lines of a pytest failure that say what happened (its `E   ` lines), not the test's source
    code that pytest prints around them: a test that checks a log for "GPU Hang" must not look like
    one. Texts without such lines (a crash message, a `pytest.fail(pytrace=False)`) are kept
    whole."""
    lines = [line for line in text.splitlines() if line.startswith("E ")]
    return "\n".join(lines) if lines else text


def find_signature(texts: list[str], signatures: list[Signature]) -> dict | None:
    """The first signature found in any of the texts: {"name", "line"} (the matched line as
    evidence)."""
    for text in texts:
        if not text:
            continue
        for signature in signatures:
            line = signature.search(text)
            if line is not None:
                return {"name": signature.name, "line": line}
    return None


def decide(attempts: list[dict], probes: list[dict]) -> tuple[str, str]:
    """Verdict and its explanation for a test whose first attempt failed.

    `attempts`: in order, each {"status": passed|failed|error|crashed, "signature": {...}|None,
    "gpus": [...]}, and for a failed one that ran after a device fault had poisoned its process,
    "after_fault": {"nodeid", "process", "line"}. `probes`: health probes run after failed attempts,
    each {"ok", "devices", ...}.
    """
    warm = warm_passes(attempts)
    if warm:
        verdict, why = decide([a for i, a in enumerate(attempts) if i not in warm], probes)
        first = min(warm)
        return verdict, why + (
            f"; attempt {first + 1} passed on the server an earlier attempt failed on "
            f"({attempts[first].get('servers', ['the same process'])[0]}), which proves nothing: "
            "only a fresh server does"
        )
    collateral = [a for a in attempts if a["status"] != "passed" and a.get("after_fault")]
    if collateral:
        clean = [a for a in attempts if not (a["status"] != "passed" and a.get("after_fault"))]
        fault = collateral[0]["after_fault"]
        where = f"in the same process ({fault['process']}: {fault['line']!r})"
        if clean and clean[0]["status"] != "passed":
            verdict, why = decide(clean, probes)
            if verdict == "unconfirmed":
                why += (
                    f"; its rerun ran after {fault['nodeid']} faulted {where}, which proves nothing"
                )
            return verdict, why
        if clean:
            return "infra", (
                f"failed only after {fault['nodeid']} faulted {where}, then passed in a process no "
                "fault had poisoned"
            )
        return "infra", (
            f"failed only after {fault['nodeid']} faulted {where}: collateral of that fault; not "
            "rerun in a fresh process"
        )
    later = attempts[1:]
    signature = next(
        (a["signature"] for a in attempts if a["status"] != "passed" and a.get("signature")), None
    )
    bad_probe = next((p for p in probes if not p.get("ok")), None)
    rerun_passed = any(a["status"] == "passed" for a in later)
    if signature is None:
        if rerun_passed:
            return (
                "flaky",
                f"failed without an infrastructure signature, then passed on attempt {_first_pass(attempts)}",
            )
        if later:
            return "regression", f"failed the same way on all {len(attempts)} attempts"
        return (
            "unconfirmed",
            "failed without an infrastructure signature; not rerun, so not confirmed",
        )
    evidence = f"{signature['name']}: {signature['line']!r}"
    if bad_probe is not None:
        devices = ",".join(map(str, bad_probe.get("devices", []))) or "?"
        return "infra", (
            f"{evidence}; the health probe then failed on device(s) {devices}: the runner is unhealthy "
            f"({bad_probe.get('detail', '')})"
        )
    if rerun_passed:
        return "infra", f"{evidence}; the device passed its health probe and the rerun passed"
    if later:
        devices = ",".join(map(str, later[-1].get("gpus") or [])) or "the same runner"
        return "regression", (
            f"{evidence}; reproduced on {devices} after the device passed its health probe "
            "(a real fault that looks like a hardware one)"
        )
    return "unconfirmed", f"{evidence}; not rerun, so neither confirmed nor excused"


def warm_passes(attempts: list[dict]) -> set[int]:
    """The passing attempts (by index) on a server an earlier attempt failed on: the same server
    named in both, or, where the pass names none, the same process as a failure that used one."""
    failed_on: set[str] = set()
    failed_in: set[str] = set()
    warm = set()
    for index, attempt in enumerate(attempts):
        servers = set(attempt.get("servers") or ())
        if attempt["status"] != "passed":
            failed_on |= servers
            if servers:
                failed_in.add(attempt.get("worker") or "?")
        elif servers & failed_on or (not servers and (attempt.get("worker") or "?") in failed_in):
            warm.add(index)
    return warm


def _first_pass(attempts: list[dict]) -> int:
    """The first passing attempt, counted from 1 (as the reasons say "on all 2 attempts")."""
    return next(i for i, a in enumerate(attempts, start=1) if a["status"] == "passed")
