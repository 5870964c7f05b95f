"""The device the trial's tests run on: real PyTorch on a GPU, or, without one, a stand-in runtime that
behaves as CUDA's and HIP's did on a real H100 (`../h100-sticky-fault/`): a kernel fault raises PyTorch's
error, and every later call in the same process raises it again (the fault is sticky for the process),
while a fresh process starts clean.

STANDIN_RUNTIME=1 forces the stand-in; STANDIN_WORDING picks the text it raises (`WORDING`).
TRIAL_MODE: `regression` faults on every attempt (the code is wrong), `transient` on the first attempt
only (the machine's fault: a marker file in TRIAL_STATE remembers it), `clean` never.
"""
import os
import pathlib

# What PyTorch raises, first line and the lines after it, per runtime and version.
WORDING = {
    # torch 2.11+cu130 on an H100 (recorded in ../h100-sticky-fault/)
    "cuda": (
        "AcceleratorError",
        "CUDA error: device-side assert triggered\n"
        "Search for `cudaErrorAssert' in https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__TYPES.html "
        "for more information.\n"
        "CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below "
        "might be incorrect.\nFor debugging consider passing CUDA_LAUNCH_BLOCKING=1\n"
        "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.",
    ),
    # older PyTorch on CUDA: a RuntimeError, an illegal memory access
    "cuda-old": (
        "RuntimeError",
        "CUDA error: an illegal memory access was encountered\n"
        "CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below "
        "might be incorrect.\nFor debugging consider passing CUDA_LAUNCH_BLOCKING=1.",
    ),
    # recent PyTorch on ROCm: the HIP runtime's text and its error's name
    "hip": (
        "AcceleratorError",
        "HIP error: an illegal memory access was encountered\n"
        "Search for `hipErrorIllegalAddress' in https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__TYPES.html "
        "for more information.\n"
        "HIP kernel errors might be asynchronously reported at some other API call, so the stacktrace below "
        "might be incorrect.\nFor debugging consider passing AMD_SERIALIZE_KERNEL=3\n"
        "Compile with `TORCH_USE_HIP_DSA` to enable device-side assertions.",
    ),
    # older PyTorch on ROCm: the runtime's text only
    "hip-old": (
        "RuntimeError",
        "HIP error: an illegal memory access was encountered\n"
        "HIP kernel errors might be asynchronously reported at some other API call, so the stacktrace below "
        "might be incorrect.\nFor debugging consider passing AMD_SERIALIZE_KERNEL=3.",
    ),
}


class AcceleratorError(RuntimeError):
    """torch.AcceleratorError's stand-in (a RuntimeError, as PyTorch's is)."""


def real() -> bool:
    if os.environ.get("STANDIN_RUNTIME"):
        return False
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


def fault_now(name: str) -> bool:
    """Whether the kernel called `name` faults now, as TRIAL_MODE says."""
    mode = os.environ.get("TRIAL_MODE", "regression")
    if mode == "transient":
        return first_time(name)
    return mode == "regression"


def first_time(name: str) -> bool:
    """True the first time any process of the run asks for `name` (a marker file in TRIAL_STATE)."""
    marks = pathlib.Path(os.environ.get("TRIAL_STATE", "trial_state"))
    marks.mkdir(parents=True, exist_ok=True)
    flag = marks / name
    if flag.exists():
        return False
    flag.write_text("faulted once")
    return True


class StandIn:
    """One process's device context: clean until a kernel faults, then every call raises."""

    def __init__(self):
        self.poisoned = None

    def call(self, faults: bool = False, wait: bool = True) -> None:
        """A call on the device; `faults`: its kernel faults; `wait`: the call waits for the kernel
        (without waiting, the fault shows at the process's next call, as CUDA's and HIP's do)."""
        if self.poisoned is not None:
            raise self.poisoned
        if faults:
            kind, text = WORDING[os.environ.get("STANDIN_WORDING", "cuda")]
            self.poisoned = AcceleratorError(text) if kind == "AcceleratorError" else RuntimeError(text)
            if wait:
                raise self.poisoned


STANDIN = StandIn()


def gather(out_of_range: bool) -> float:
    """x[index].sum() with one index past the end when `out_of_range` (a device-side assert on CUDA)."""
    if real():
        import torch

        x = torch.arange(16, device="cuda", dtype=torch.float32)
        index = torch.tensor([3, 40 if out_of_range else 5], device="cuda")
        return float(x[index].sum())
    STANDIN.call(faults=out_of_range)
    return 8.0


def launch_gather(out_of_range: bool) -> None:
    """x[index] with one index past the end, launched and not waited for: the test passes, and the
    next call in the process meets the fault."""
    if real():
        import torch

        x = torch.arange(16, device="cuda", dtype=torch.float32)
        x[torch.tensor([3, 40 if out_of_range else 5], device="cuda")]
        return
    STANDIN.call(faults=out_of_range, wait=False)


def ones_sum(n: int) -> float:
    if real():
        import torch

        return float(torch.ones(n, device="cuda").sum())
    STANDIN.call()
    return float(n)


def layer_norm_mean_error() -> float:
    """The largest |mean| of a layer norm's rows (0 up to rounding)."""
    if real():
        import torch

        x = torch.randn(64, 1024, device="cuda")
        out = torch.nn.functional.layer_norm(x, (1024,))
        return float(out.mean(-1).abs().max())
    STANDIN.call()
    return 0.0


def sdpa_error() -> float:
    """The largest difference of fused attention from its plain math (fp16 on the GPU)."""
    if real():
        import torch
        import torch.nn.functional as F

        torch.manual_seed(0)
        q, k, v = (torch.randn(4, 8, 512, 64, device="cuda", dtype=torch.float16) for _ in range(3))
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        qf, kf, vf = q.float(), k.float(), v.float()
        scores = (qf @ kf.transpose(-1, -2)) / 8.0
        mask = torch.ones(512, 512, device="cuda", dtype=torch.bool).tril()
        ref = scores.masked_fill(~mask, float("-inf")).softmax(-1) @ vf
        return float((out.float() - ref).abs().max())
    STANDIN.call()
    return 0.0


def visible_devices() -> int:
    if real():
        import torch

        return torch.cuda.device_count()
    STANDIN.call()
    return 1
