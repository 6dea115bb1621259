"""Platform keys (``cpu``, ``cuda-sm90``, ``rocm-gfx942``) and environment from a trace; what the profiler offers."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, Callable, Optional

from .._io import is_text


@dataclass(frozen=True)
class _Capability:
    """One version-dependent thing the plugin uses: where it is probed, and what is done without it."""

    name: str
    #: The object and member probed (``_KinetoEvent.activity_type``).
    probe: str
    #: What the plugin does on builds without it.
    without: str


#: Every torch capability the plugin consults, in the order docs/compatibility.md lists them.
CAPABILITIES: tuple[_Capability, ...] = (
    _Capability(
        "event kinds",
        "_KinetoEvent.activity_type",
        "a live summary reads the cycle's Chrome trace (its events' kinds are guessed from their names "
        "otherwise, which takes runtime calls and [memory] records for ops)",
    ),
    _Capability(
        "list shapes",
        "_KinetoEvent.structured_input_shapes",
        "a live summary reads the cycle's Chrome trace (shapes() records [] for list arguments such as "
        "aten::cat's tensors)",
    ),
    _Capability(
        "event metadata",
        "_KinetoEvent.metadata_json",
        "a live summary reads the cycle's Chrome trace, which carries kernels' grid, block and graph node ids",
    ),
    # With ``_capture_end_hook`` and ``_instantiate_hook`` beside it (:func:`graph_hooks`).
    _Capability(
        "graph lifecycle hooks",
        "torch.cuda.graphs.register_graph_capture_start_hook",
        "the engine-loop gate observes captures by wrapping torch.cuda.CUDAGraph.capture_begin and capture_end "
        "for the capture function's duration, and reads no engine graph's nodes (its kernels come from the "
        "profiled replay)",
    ),
    # Probed on its payload (:func:`graph_data_has_launches`): grid_dim, block_dim, shared_mem_bytes, edges.
    _Capability(
        "graph data with launch shapes",
        "CUDAGraph.get_graph_data",
        "a captured graph's nodes are read through cuda-bindings (engine/readout.py), else its kernels "
        "come from the profiled replay",
    ),
    _Capability(
        "driver version",
        "torch.cuda.driver_version",
        "the environment of a GPU capture names no driver version (informational only)",
    ),
)


@dataclass(frozen=True)
class EventCaps:
    """What one build's Kineto events answer (see :data:`CAPABILITIES`)."""

    activity_type: bool
    structured_input_shapes: bool
    metadata_json: bool

    @property
    def readable(self) -> bool:
        """Whether a live summary can be built from the events alone (else it reads the Chrome trace)."""
        return self.activity_type and self.structured_input_shapes and self.metadata_json


def event_caps(event: Any) -> EventCaps:
    """The capabilities of Kineto events like ``event`` (probed on the instance, so wrappers answer too)."""
    return EventCaps(
        activity_type=callable(getattr(event, "activity_type", None)),
        structured_input_shapes=callable(getattr(event, "structured_input_shapes", None)),
        metadata_json=callable(getattr(event, "metadata_json", None)),
    )


def has_driver_version(torch: Any) -> bool:
    """Whether ``torch`` (the module) can report the GPU driver version (``torch.cuda.driver_version``)."""
    return callable(getattr(getattr(torch, "cuda", None), "driver_version", None))


#: The three global capture hooks the engine-loop gate registers, as ``torch.cuda.graphs`` names them.
_GRAPH_HOOKS = (
    "register_graph_capture_start_hook",
    "register_graph_capture_end_hook",
    "register_graph_instantiate_hook",
)


def graph_hooks(torch: Any) -> Optional[tuple[Callable[..., Any], ...]]:
    """torch's registration functions of :data:`_GRAPH_HOOKS` (start, end, instantiate), or None without all three."""
    graphs = getattr(getattr(torch, "cuda", None), "graphs", None)
    found = tuple(getattr(graphs, name, None) for name in _GRAPH_HOOKS)
    return found if all(callable(f) for f in found) else None  # type: ignore[return-value]


#: The fields a node of ``CUDAGraph.get_graph_data()`` must carry for its kernels to be read with launch shapes.
_GRAPH_DATA_NODE_FIELDS = ("index", "node_type", "kernel_name", "grid_dim", "block_dim", "shared_mem_bytes")


def graph_data_has_launches(payload: Any) -> bool:
    """Whether a ``get_graph_data()`` payload is the form with launch shapes and edges (torch 2.15's)."""
    if not isinstance(payload, dict) or not isinstance(payload.get("nodes"), list):
        return False
    if not isinstance(payload.get("edges"), list):
        return False
    return all(isinstance(n, dict) and all(f in n for f in _GRAPH_DATA_NODE_FIELDS) for n in payload["nodes"])


CPU = "cpu"

#: HIP (computeMajor, computeMinor) → gfx architecture; the stepping is lost (gfx942 → 9.4), so the entries
#: pick the part a CI machine most likely has.
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


def _is_rocm_trace(trace: dict) -> bool:
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
    if _is_rocm_trace(trace):
        return f"rocm-{rocm_gfx_from_compute(major, minor)}"
    return cuda_key(major, minor)


#: Runtime and driver versions Kineto records as the API's integer (``cudaRuntimeGetVersion`` …), and the
#: live spelling (``torch.version.cuda`` / ``.hip``) each maps to.
_CUDA_VERSION_KEYS = ("cuda_runtime_version", "cuda_driver_version")

_HIP_VERSION_KEYS = ("hip_runtime_version", "hip_driver_version")

_HIP_GIT_SUFFIX = re.compile(r"^(\d+\.\d+\.\d+)-\w+$")


def version_text(key: str, value: Any) -> Any:
    """A runtime/driver version as ``torch.version`` spells it; other keys and values unchanged."""
    if key in _CUDA_VERSION_KEYS and type(value) is int and value >= 1000 and value % 10 == 0:
        return f"{value // 1000}.{value % 1000 // 10}"
    if key in _HIP_VERSION_KEYS:
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
    """Informational environment of a trace: device, versions, profiler flags (never compared)."""
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
    """``value`` with what a golden's JSON cannot hold made writable: the environment is informational."""
    if isinstance(value, str):
        return value if is_text(value) else value.encode("utf-8", "backslashreplace").decode("utf-8")
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: _writable(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_writable(item) for item in value]
    return value
