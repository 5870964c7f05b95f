"""The default health probe: a small known-good GPU workload with a memory check.

Run as `python -m pytest_rocm.results.health_probe` with the devices to check made visible
(HIP_VISIBLE_DEVICES / CUDA_VISIBLE_DEVICES). Exit 0 when every visible device
computes a matrix product that matches the CPU and can allocate memory; exit 1,
naming the device and what failed, otherwise. Without torch or without a visible
GPU (a simulated platform on a CPU machine) there is nothing to probe: exit 0
and say so. Replace it with `--rocm-health-probe CMD` (for example a site
health check, or a scripted probe on simulated profiles).
"""

from __future__ import annotations

import importlib.util
import os
import sys

MATRIX = 512
ALLOCATE_GB = 1


# Device nodes of the GPU drivers: without any, there is nothing to probe (and no need to import
# torch).
DEVICE_NODES = ("/dev/kfd", "/dev/nvidiactl", "/dev/nvidia0")


NO_DEVICES = "no GPU device node (/dev/kfd, /dev/nvidia*): nothing to probe"


def has_device_nodes() -> bool:
    return any(os.path.exists(node) for node in DEVICE_NODES)


def probe() -> tuple[bool, str]:
    if not has_device_nodes():
        return True, NO_DEVICES
    if importlib.util.find_spec("torch") is None:
        return True, "torch is not installed: nothing to probe"
    import torch

    if not torch.cuda.is_available() or torch.cuda.device_count() == 0:
        return True, "no GPU visible: nothing to probe"
    generator = torch.Generator().manual_seed(0)
    a = torch.randn(MATRIX, MATRIX, generator=generator)
    b = torch.randn(MATRIX, MATRIX, generator=generator)
    expected = a @ b
    for index in range(torch.cuda.device_count()):
        device = torch.device("cuda", index)
        try:
            got = (a.to(device) @ b.to(device)).cpu()
            torch.cuda.synchronize(device)
            if not torch.allclose(got, expected, rtol=1e-3, atol=1e-2):
                return False, f"device {index}: matrix product differs from the CPU's"
            block = torch.empty(ALLOCATE_GB * 1024**3 // 4, dtype=torch.float32, device=device)
            block.fill_(1.0)
            if float(block[-1]) != 1.0:
                return False, f"device {index}: memory read back wrong"
            del block
            torch.cuda.empty_cache()
        except RuntimeError as exc:  # HIP/CUDA errors surface as RuntimeError
            return False, f"device {index}: {str(exc).splitlines()[0]}"
    return True, f"{torch.cuda.device_count()} device(s) healthy"


def main() -> int:
    ok, detail = probe()
    print(detail)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
