"""The live torch device: its platform key and its informational environment.

The trace-side counterparts (keys and environment read back from a trace file)
are in :mod:`pytest_graphcapture.summary.platform`, which shares the key
spelling (:func:`~pytest_graphcapture.summary.platform.cuda_key`,
:func:`~pytest_graphcapture.summary.platform.gfx_key`).
"""

from __future__ import annotations

from typing import Any, Optional

import torch

from ..summary.platform import CPU, PROFILER_FLAGS, cuda_key, gfx_key, has_driver_version, rocm_gfx_from_compute


def _device_index(device: Any) -> Optional[int]:
    """CUDA device index for ``device`` (None for CPU)."""
    if device is None:
        return torch.cuda.current_device() if torch.cuda.is_available() else None
    if isinstance(device, int) and not isinstance(device, bool):
        return device
    dev = torch.device(device)
    if dev.type != "cuda":
        return None
    return dev.index if dev.index is not None else torch.cuda.current_device()


def detect_platform(device: Any = None) -> str:
    """Platform key of a live torch device (``"cuda:0"``, ``torch.device``, index, or None = current)."""
    index = _device_index(device)
    if index is None:
        return CPU
    props = torch.cuda.get_device_properties(index)
    if getattr(torch.version, "hip", None):
        arch = getattr(props, "gcnArchName", "") or ""
        if arch:
            return gfx_key(arch)
        return f"rocm-{rocm_gfx_from_compute(props.major, props.minor)}"
    return cuda_key(props.major, props.minor)


def environment_from_device(device: Any = None, *, profiler: Any = None) -> dict:
    """Informational environment of a live device: name, torch/CUDA/HIP versions, driver.

    ``profiler`` (a ``torch.profiler.profile``) adds its flags (record_shapes, with_stack, ...).
    """
    env: dict[str, Any] = {"torch_version": str(torch.__version__)}
    index = _device_index(device)
    if index is None:
        env["device_name"] = "cpu"
    else:
        props = torch.cuda.get_device_properties(index)
        env["device_name"] = props.name or None
        env["device_count"] = torch.cuda.device_count()
        if getattr(torch.version, "hip", None):
            env["hip_runtime_version"] = str(torch.version.hip)
            arch = getattr(props, "gcnArchName", None)
            if arch:
                env["gcn_arch_name"] = arch
        else:
            env["cuda_runtime_version"] = str(torch.version.cuda)
        try:
            driver = torch.cuda.driver_version() if has_driver_version(torch) else None
        except Exception:  # informational only: a missing driver query must not fail a capture
            driver = None
        if driver is not None:
            env["driver_version"] = driver
    if profiler is not None:
        env["profiler"] = {flag: bool(getattr(profiler, flag, False)) for flag in PROFILER_FLAGS}
    return env
