"""Summaries of a live ``torch.profiler.profile``, read inside its ``on_trace_ready`` callback.

The in-memory Kineto results (``prof.profiler.kineto_results.events()``) are turned
into the same small event dicts a Chrome trace holds, so live profiles and trace
files go through one code path (:mod:`.scan`) and give equal summaries.  No torch
import: the profile object is only called through its methods.
"""

from __future__ import annotations

import json
from typing import Any, Iterator, Optional

from .._io import gc_paused
from ..errors import GraphCaptureError
from ..keys import CaptureKey
from .model import Summary
from .normalize import (
    DEFAULT_LEVEL,
)
from .scan import _GPU_CATS, _INTERESTING_RUNTIME, _RUNTIME_CATS, KERNEL_LAUNCH_APIS, _api_base, _build, _scan


def _kineto_results(prof: Any) -> Any:
    """The ``_ProfilerResult`` of a torch.profiler.profile (or autograd profile) object."""
    inner = getattr(prof, "profiler", None)
    results = getattr(inner, "kineto_results", None) if inner is not None else None
    if results is None:
        results = getattr(prof, "kineto_results", None)
    if results is None:
        raise GraphCaptureError(
            "the profiler has no results: call summarize_profile from on_trace_ready of a Kineto profiler "
            "(torch.profiler.profile), after its active step"
        )
    return results


def _metadata(event: Any) -> dict:
    try:
        text = event.metadata_json()
    except Exception:  # older torch builds: no metadata on this event type
        return {}
    if not text:
        return {}
    try:
        value = json.loads("{" + text + "}")
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _infer_activity(event: Any) -> str:
    """Activity type for torch builds whose _KinetoEvent lacks activity_type()."""
    device = str(event.device_type())
    name = event.name()
    if "CPU" not in device:
        if name.startswith("Memcpy"):
            return "gpu_memcpy"
        if name.startswith("Memset"):
            return "gpu_memset"
        return "kernel"
    if getattr(event, "is_user_annotation", None) and event.is_user_annotation():
        return "user_annotation"
    if getattr(event, "is_python_function", None) and event.is_python_function():
        return "python_function"
    if _INTERESTING_RUNTIME.match(name):
        return "cuda_runtime"
    return "cpu_op"


def _profile_events(prof: Any) -> Iterator[dict]:
    """Yield Chrome-trace-like dicts for the relevant events of a live profile, cheaply."""
    events = _kineto_results(prof).events()
    if not events:
        return
    probe = events[0]
    has_activity = hasattr(probe, "activity_type")
    has_structured = hasattr(probe, "structured_input_shapes")
    # The system thread id (what a Chrome trace writes as ``tid``) is the device resource id of
    # CPU events; start_thread_id() numbers op threads differently from runtime-call threads.
    thread = (lambda e: e.device_resource_id()) if hasattr(probe, "device_resource_id") else (lambda e: None)
    span = (lambda e: e.duration_ns()) if hasattr(probe, "duration_ns") else (lambda e: None)
    for event in events:
        activity = event.activity_type() if has_activity else _infer_activity(event)
        if activity == "cpu_op":
            dims = event.structured_input_shapes() if has_structured else event.shapes()
            yield {
                "cat": "cpu_op",
                "name": event.name(),
                "ts": event.start_ns(),
                "dur": span(event),
                "tid": thread(event),
                "args": {"Input Dims": dims, "Input type": event.dtypes()},
            }
        elif activity in _RUNTIME_CATS:
            name = event.name()
            if not _INTERESTING_RUNTIME.match(name):
                continue
            args = {"correlation": event.correlation_id()}
            if _api_base(name) in KERNEL_LAUNCH_APIS:
                meta = _metadata(event)
                for field_name in ("kernel", "grid", "block"):
                    if field_name in meta:
                        args[field_name] = meta[field_name]
            yield {"cat": activity, "name": name, "ts": event.start_ns(), "tid": thread(event), "args": args}
        elif activity in _GPU_CATS:
            args = {"correlation": event.correlation_id()}
            if activity == "kernel":
                meta = _metadata(event)
                for field_name in ("grid", "block"):
                    if field_name in meta:
                        args[field_name] = meta[field_name]
            yield {"cat": activity, "name": event.name(), "ts": event.start_ns(), "args": args}
        elif activity == "user_annotation":
            yield {"cat": activity, "name": event.name(), "ts": event.start_ns()}


def summarize_profile(
    prof: Any, key: CaptureKey, *, platform: str, level: str = DEFAULT_LEVEL, environment: Optional[dict] = None
) -> Summary:
    """Summarize a live ``torch.profiler.profile`` inside its ``on_trace_ready`` callback.

    Reads the in-memory Kineto results (no export, no re-parse); with a schedule the
    callback sees only the active step, which is exactly the capture step.
    """
    if environment is None:
        environment = {
            "profiler": {
                flag: bool(getattr(prof, flag, False))
                for flag in ("record_shapes", "with_stack", "with_flops", "profile_memory")
            }
        }
    # Paused GC: summarizing allocates many short-lived dicts, which otherwise set off a full
    # collection of the whole (torch-sized) heap every few captures.
    with gc_paused():
        return _build(_scan(_profile_events(prof)), key, platform, level, environment)


def replay_kernels_from_profile(prof: Any) -> list:
    """:func:`replay_kernels_from_events` for a live profile of a graph replay."""
    return _scan(_profile_events(prof)).replay_kernels()
