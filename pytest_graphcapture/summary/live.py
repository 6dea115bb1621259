"""Summaries of a live ``torch.profiler.profile``, read inside its ``on_trace_ready`` callback.
Kineto's in-memory events become the event dicts a trace holds, so live profiles and files share one path."""

from __future__ import annotations

import json
import operator
import os
import tempfile
from typing import Any, Callable, Optional, Union

from .._io import gc_paused
from ..errors import GraphCaptureError
from ..keys import CaptureKey
from .collect import GPU_CATS, GRAPH_NODE_ARG, INTERESTING_RUNTIME, KERNEL_LAUNCH_APIS, RUNTIME_CATS, api_base
from .files import collect_trace_file, summarize_graphs
from .model import Summary
from .normalize import (
    DEFAULT_LEVEL,
)
from .platform import event_caps
from .scan import Scan, build_summary, scan_events


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
    if INTERESTING_RUNTIME.match(name):
        return "cuda_runtime"
    return "cpu_op"


def _method(kind: type, probe: Any, name: str) -> Optional[Callable[[Any], Any]]:
    """Event method ``name`` as a one-argument function, or None when the events lack it."""
    method = getattr(kind, name, None)
    if callable(method):
        return method
    return operator.methodcaller(name) if hasattr(probe, name) else None


def _none(event: Any) -> None:
    return None


def _profile_events(prof: Any) -> list:
    """Chrome-trace-like dicts for the relevant events of a live profile, cheaply."""
    return _event_dicts(_kineto_results(prof).events())


def _event_dicts(events: Any) -> list:
    """Chrome-trace-like dicts for the relevant Kineto ``events``."""
    if not events:
        return []
    probe = events[0]
    kind = type(probe)
    activity_of = _method(kind, probe, "activity_type") or _infer_activity
    dims_of = _method(kind, probe, "structured_input_shapes") or _method(kind, probe, "shapes") or _none
    # A trace's ``tid`` is the device resource id of CPU events (start_thread_id() numbers threads otherwise).
    thread_of = _method(kind, probe, "device_resource_id") or _none
    span_of = _method(kind, probe, "duration_ns") or _none
    name_of = _method(kind, probe, "name") or _none
    start_of = _method(kind, probe, "start_ns") or _none
    types_of = _method(kind, probe, "dtypes") or _none
    out: list = []
    append = out.append
    for event in events:
        activity = activity_of(event)
        if activity == "cpu_op":
            append(
                {
                    "cat": "cpu_op",
                    "name": name_of(event),
                    "ts": start_of(event),
                    "dur": span_of(event),
                    "tid": thread_of(event),
                    "args": {"Input Dims": dims_of(event), "Input type": types_of(event)},
                }
            )
        else:
            other = _other_event(event, activity, thread_of)
            if other is not None:
                append(other)
    return out


def _other_event(event: Any, activity: str, thread_of: Callable[[Any], Any]) -> Optional[dict]:
    """The dict of a runtime, GPU or annotation event; None for events a summary never reads."""
    if activity in RUNTIME_CATS:
        name = event.name()
        if not INTERESTING_RUNTIME.match(name):
            return None
        args = {"correlation": event.correlation_id()}
        if api_base(name) in KERNEL_LAUNCH_APIS:
            meta = _metadata(event)
            for field_name in ("kernel", "grid", "block"):
                if field_name in meta:
                    args[field_name] = meta[field_name]
        return {"cat": activity, "name": name, "ts": event.start_ns(), "tid": thread_of(event), "args": args}
    if activity in GPU_CATS:
        args = {"correlation": event.correlation_id()}
        meta = _metadata(event)
        for field_name in ("grid", "block", GRAPH_NODE_ARG) if activity == "kernel" else (GRAPH_NODE_ARG,):
            if field_name in meta:
                args[field_name] = meta[field_name]
        return {"cat": activity, "name": event.name(), "ts": event.start_ns(), "args": args}
    if activity == "user_annotation":
        # With its span: the gate's ranges around the graphs of a capture forward split the key.
        return {"cat": activity, "name": event.name(), "ts": event.start_ns(), "dur": event.duration_ns()}
    return None


def summarize_profile(
    prof: Any,
    key: CaptureKey,
    *,
    platform: str,
    level: str = DEFAULT_LEVEL,
    environment: Optional[dict] = None,
    export: Optional[Callable[[], Union[str, "os.PathLike[str]"]]] = None,
    graphs: bool = False,
) -> Summary:
    """Summarize a live ``torch.profiler.profile`` inside its ``on_trace_ready`` callback."""
    if environment is None:
        environment = {
            "profiler": {
                flag: bool(getattr(prof, flag, False))
                for flag in ("record_shapes", "with_stack", "with_flops", "profile_memory")
            }
        }
    # GC paused: the many short-lived dicts would set off full collections of a torch-sized heap.
    with gc_paused():
        scan = _scan_profile(prof, export)
        if graphs:
            return summarize_graphs(scan, key, platform, level, environment)
        return build_summary(scan, key, platform, level, environment)


def replay_kernels_from_profile(
    prof: Any, *, export: Optional[Callable[[], Union[str, "os.PathLike[str]"]]] = None
) -> list:
    """:func:`replay_kernels_from_events` for a live profile of a graph replay."""
    return _scan_profile(prof, export).replay_kernels()


def _scan_profile(prof: Any, export: Optional[Callable[[], Union[str, "os.PathLike[str]"]]]) -> Scan:
    events = _kineto_results(prof).events()
    if events and not event_caps(events[0]).readable:
        del events
        if export is not None:
            return collect_trace_file(export())[0]
        with tempfile.TemporaryDirectory(prefix="graphcapture-") as folder:
            path = os.path.join(folder, "profile.json")
            prof.export_chrome_trace(path)
            return collect_trace_file(path)[0]
    return scan_events(_event_dicts(events))
