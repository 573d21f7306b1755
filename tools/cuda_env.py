"""What the measurement scripts record of the device they ran on (tools/measure_cuda.py, tools/measure_oom.py)."""

from __future__ import annotations


def cuda_properties(torch, device) -> dict:
    """The GPU's name, total memory as torch reports it, CUDA and cuDNN versions, compute capability."""
    props = torch.cuda.get_device_properties(device)
    return {
        "gpu": props.name,
        "totalMemory": props.total_memory,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version(),
        "capability": f"{props.major}.{props.minor}",
    }
