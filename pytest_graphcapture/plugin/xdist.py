"""Pin pytest-xdist workers to GPUs: worker ``gwN`` uses visible device ``N mod count``."""

from __future__ import annotations

import os
import re
from typing import Optional


def pin_worker_gpu(worker_id: str, environ: Optional[dict] = None) -> Optional[str]:
    """Pin xdist worker ``gwN`` to visible device ``N mod count``; returns what was done.

    When ``CUDA_VISIBLE_DEVICES`` (or ``HIP_VISIBLE_DEVICES`` / ``ROCR_VISIBLE_DEVICES``)
    lists devices, it is narrowed to the chosen one.  Otherwise the devices are counted
    with torch (NVML, without creating a CUDA context where torch allows it) and
    ``CUDA_VISIBLE_DEVICES`` is set — or, when CUDA is already initialized,
    ``torch.cuda.set_device`` is called.
    """
    environ = os.environ if environ is None else environ
    match = re.fullmatch(r"gw(\d+)", worker_id or "")
    if match is None:
        return None
    n = int(match.group(1))
    for var in ("CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES"):
        value = environ.get(var)
        if value is not None and value.strip():
            devices = [d.strip() for d in value.split(",") if d.strip()]
            chosen = devices[n % len(devices)]
            environ[var] = chosen
            return f"{var}={chosen}"
    import torch

    count_nvml = getattr(torch.cuda, "_device_count_amdsmi" if torch.version.hip else "_device_count_nvml", None)
    count = count_nvml() if callable(count_nvml) else -1
    via_runtime = count < 0
    if via_runtime:
        count = torch.cuda.device_count()
    if count <= 0:
        return None
    index = n % count
    if via_runtime or torch.cuda.is_initialized():
        # The CUDA runtime has read the environment already: select the device instead.
        torch.cuda.set_device(index)
        return f"torch.cuda.set_device({index})"
    environ["CUDA_VISIBLE_DEVICES"] = str(index)
    return f"CUDA_VISIBLE_DEVICES={index}"
