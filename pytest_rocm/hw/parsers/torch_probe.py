"""torch: the build (HIP or CUDA) and the devices it sees. Only imported when torch is installed."""

from __future__ import annotations

import importlib.util

from pytest_rocm.hw.model import Gpu
from pytest_rocm.hw.parsers import Parsed
from pytest_rocm.hw.skus import identify_amd, identify_nvidia, normalise_arch


def probe() -> Parsed:
    if importlib.util.find_spec("torch") is None:
        raise FileNotFoundError("torch is not installed")
    import torch

    parsed = Parsed(versions={"torch": torch.__version__})
    hip = getattr(torch.version, "hip", None)
    cuda = getattr(torch.version, "cuda", None)
    if hip:
        parsed.versions["hip"] = hip
    elif cuda:
        parsed.versions["cuda"] = cuda
    if not (hip or cuda) or not torch.cuda.is_available():
        return parsed  # a CPU build, or no device visible: versions only
    for index in range(torch.cuda.device_count()):
        props = torch.cuda.get_device_properties(index)
        memory = round(props.total_memory / 1024**3, 1)
        if hip:
            sku, arch = identify_amd(props.name, normalise_arch(getattr(props, "gcnArchName", "")),
                                     None, memory, props.multi_processor_count)
        else:
            sku, arch = identify_nvidia(props.name, f"{props.major}.{props.minor}")
        parsed.gpus.append(Gpu(index=index, vendor="amd" if hip else "nvidia", sku=sku, arch=arch,
                               raw_name=props.name, memory_gb=memory,
                               compute_units=props.multi_processor_count if hip else None))
    return parsed
