"""Platform keys: which accelerator a capture ran on, as a stable short string.

Goldens are stored per platform, because the kernel set legitimately differs
between GPU generations and vendors.  Keys:

* ``cpu`` — no accelerator (eager CPU backend, or a trace without device properties);
* ``cuda-sm{major}{minor}`` — NVIDIA, e.g. ``cuda-sm90`` for H100/H200, ``cuda-sm80`` for A100;
* ``rocm-{gfx}`` — AMD, the gfx architecture with feature flags dropped
  (``gfx942:sramecc+:xnack-`` → ``rocm-gfx942``).

From a live device the key comes from ``torch.cuda.get_device_properties`` (on ROCm,
``torch.version.hip`` is set and ``gcnArchName`` names the architecture).  A trace
file only records Kineto's ``deviceProperties`` (``computeMajor``/``computeMinor``)
plus runtime-version keys; a trace is ROCm when it has ``hip_runtime_version``,
``hip_driver_version`` or ``roctracer_version``.  HIP reports a "compute capability"
derived from the gfx name, so it is mapped back with :data:`ROCM_COMPUTE_TO_GFX`.
That mapping is lossy where AMD reuses a capability (gfx908 and gfx90a both report
9.0; gfx1100/1101/1102 all report 11.0): the table picks the datacenter / first
part, and a ``gcnArchName`` present in the trace always wins.  The override of a
detected key (option and hook) lives in the plugin, and the key of a live torch
device in :mod:`pytest_graphcapture.engine.backend`: this module imports no torch.
"""

from __future__ import annotations

import math
import re
from typing import Any, Optional

from .._io import is_text

CPU = "cpu"

#: HIP (computeMajor, computeMinor) → gfx architecture.  HIP derives major/minor
#: from the gfx name (gfx942 → 9.4), so the first digits are recoverable but the
#: stepping is not; the entries below pick the part a CI machine most likely has.
ROCM_COMPUTE_TO_GFX: dict[tuple[int, int], str] = {
    (9, 0): "gfx90a",  # MI200 (MI210/MI250/MI250X); MI100 (gfx908) also reports 9.0
    (9, 4): "gfx942",  # MI300X / MI300A / MI325X
    (9, 5): "gfx950",  # MI350X / MI355X
    (10, 3): "gfx1030",  # RDNA2 (RX 6800/6900, W6800)
    (11, 0): "gfx1100",  # RDNA3 (RX 7900 XTX, W7900); gfx1101/1102 also report 11.0
    (12, 0): "gfx1200",  # RDNA4 (RX 9060)
    (12, 1): "gfx1201",  # RDNA4 (RX 9070)
}

_ROCM_KEYS = ("hip_runtime_version", "hip_driver_version", "roctracer_version", "rocprofiler_version")
_GFX = re.compile(r"gfx[0-9a-fA-F]+")


def gfx_key(arch: str) -> str:
    """``rocm-gfx942`` from ``gfx942:sramecc+:xnack-`` (feature flags dropped)."""
    match = _GFX.search(str(arch))
    base = match.group(0).lower() if match else str(arch).split(":", 1)[0].strip().lower()
    return f"rocm-{base}"


def cuda_key(major: int, minor: int) -> str:
    """``cuda-sm90`` from compute capability 9.0."""
    return f"cuda-sm{int(major)}{int(minor)}"


def rocm_gfx_from_compute(major: int, minor: int) -> str:
    """gfx name for a HIP compute capability (table above; ``gfx{major}{minor}0`` otherwise)."""
    return ROCM_COMPUTE_TO_GFX.get((int(major), int(minor)), f"gfx{int(major)}{int(minor)}0")


def _first_device(trace: dict) -> Optional[dict]:
    props = trace.get("deviceProperties")
    if not isinstance(props, list):
        return None
    for entry in props:
        if isinstance(entry, dict) and isinstance(entry.get("computeMajor"), int):
            return entry
    return None


def is_rocm_trace(trace: dict) -> bool:
    """Whether a trace was recorded by the ROCm (roctracer/rocprofiler) backend."""
    return any(key in trace for key in _ROCM_KEYS)


def platform_from_trace(trace: dict) -> str:
    """Platform key from a trace's ``deviceProperties`` and runtime-version keys (``cpu`` without)."""
    device = _first_device(trace)
    if device is None:
        return CPU
    arch = device.get("gcnArchName")
    if isinstance(arch, str) and arch.strip() and is_text(arch):  # a lone surrogate escape counts as no name
        return gfx_key(arch)
    major = device["computeMajor"]
    minor = device.get("computeMinor", 0)
    minor = minor if isinstance(minor, int) else 0
    if is_rocm_trace(trace):
        return f"rocm-{rocm_gfx_from_compute(major, minor)}"
    return cuda_key(major, minor)


#: Runtime and driver versions that Kineto records as the API's integer (CUDA's
#: ``cudaRuntimeGetVersion`` / ``cudaDriverGetVersion``, HIP's ``hipRuntimeGetVersion`` /
#: ``hipDriverGetVersion``), and the live spelling (``torch.version.cuda`` / ``.hip``) they map to.
CUDA_VERSION_KEYS = ("cuda_runtime_version", "cuda_driver_version")
HIP_VERSION_KEYS = ("hip_runtime_version", "hip_driver_version")
_HIP_GIT_SUFFIX = re.compile(r"^(\d+\.\d+\.\d+)-\w+$")


def version_text(key: str, value: Any) -> Any:
    """A runtime/driver version as ``torch.version`` spells it; other keys and values unchanged.

    CUDA encodes ``1000 * major + 10 * minor`` (``13000`` → ``"13.0"``, ``12040`` → ``"12.4"``,
    as ``torch.version.cuda``).  HIP encodes ``HIP_VERSION = 10**7 * major + 10**5 * minor +
    patch`` (``70253211`` → ``"7.2.53211"``); ``torch.version.hip`` adds a git hash
    (``"7.2.53211-1a2b3c4d5"``), dropped here.  An integer outside those encodings (older HIP
    releases encoded differently) is kept as recorded rather than guessed at.
    """
    if key in CUDA_VERSION_KEYS and type(value) is int and value >= 1000 and value % 10 == 0:
        return f"{value // 1000}.{value % 1000 // 10}"
    if key in HIP_VERSION_KEYS:
        if type(value) is int and value >= 10**7:
            return f"{value // 10**7}.{value // 10**5 % 100}.{value % 10**5}"
        match = _HIP_GIT_SUFFIX.match(value) if isinstance(value, str) else None
        if match:
            return match.group(1)
    return value


PROFILER_FLAGS = ("record_shapes", "with_stack", "with_flops", "profile_memory", "with_modules")


def _flag(value: Any) -> bool:
    return value not in (None, 0, "0", False, "", "false", "False")


def environment_from_trace(trace: dict) -> dict:
    """Informational environment of a trace: device, versions, profiler flags (never compared).

    Runtime and driver versions are spelled as the live path spells them (:func:`version_text`),
    so a golden and its own trace agree on them.
    """
    env: dict[str, Any] = {}
    device = _first_device(trace)
    if device is not None:
        name = device.get("name")
        env["device_name"] = name if isinstance(name, str) and name else None
        props = trace.get("deviceProperties")
        env["device_count"] = len(props) if isinstance(props, list) else None
    metadata = trace.get("metadata") if isinstance(trace.get("metadata"), dict) else {}
    torch_version = metadata.get("torch_version") or trace.get("torch_version")
    if torch_version is not None:
        env["torch_version"] = str(torch_version)
    for key in (
        "cuda_runtime_version",
        "cuda_driver_version",
        "cupti_version",
        "hip_runtime_version",
        "hip_driver_version",
        "roctracer_version",
    ):
        if key in trace and isinstance(trace[key], (int, float, str)):
            env[key] = version_text(key, trace[key])
    flags = {flag: _flag(trace.get(flag)) for flag in PROFILER_FLAGS}
    env["profiler"] = flags
    dist = trace.get("distributedInfo")
    if isinstance(dist, dict):
        env["distributed"] = {k: dist[k] for k in ("backend", "rank", "world_size") if k in dist}
    return _writable(env)


def _writable(value: Any) -> Any:
    """``value`` with what a golden's JSON cannot hold made writable: the environment is informational.

    A string that is not text (a lone surrogate escape) keeps its escapes as ``\\udXXX``
    text; a number beyond the double range (``1e999``) becomes None.  A damaged field of
    a trace's header must not stop its summary.
    """
    if isinstance(value, str):
        return value if is_text(value) else value.encode("utf-8", "backslashreplace").decode("utf-8")
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: _writable(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_writable(item) for item in value]
    return value
