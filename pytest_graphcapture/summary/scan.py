"""Building a summary from trace events: one pass over the events, then work on the few relevant ones.

Two inputs give one result:

* :func:`summarize_profile` reads a live ``torch.profiler.profile`` inside its
  ``on_trace_ready`` callback through ``prof.profiler.kineto_results.events()``
  (names, shapes, dtypes, activity types, correlation ids) — no export, no
  re-parse.  Each relevant ``_KinetoEvent`` is turned into the same small dict a
  Chrome trace holds, so both inputs go through one code path and summaries of
  the same capture are equal.
* :func:`summarize_trace_file` / :func:`summarize_events` read Chrome/Kineto
  trace files or their event dicts.

How the summary is built:

* **Capture window** — events between a stream's BeginCapture and EndCapture
  runtime calls (``cudaStreamBeginCapture*``, ``hipStreamBeginCapture*``,
  ``cuStreamBeginCapture*`` … ``*StreamEndCapture*``), inclusive of their start
  times; several pairs form a union.  Without capture calls (eager CPU backend,
  or an eager GPU step) the window is the whole trace, i.e. the profiler's active
  step.
* **ops** — every ``cpu_op`` event in the window, *at all nesting levels*
  (``aten::linear`` and the ``aten::addmm`` inside it both count).  Counting
  every level needs no call-tree reconstruction, so it is cheap and identical for
  live and file inputs, and a change anywhere in the dispatch shows up.  Ops are
  grouped by (name, ``Input Dims``, ``Input type``).
* **launches** — launch runtime events in the window: the kernel launch APIs
  (:data:`KERNEL_LAUNCH_APIS`) plus ``*Memcpy*Async``/``*Memset*Async`` (and
  ``hipMemcpyWithStream``).  ``by_api`` uses the base API name (CUPTI version
  suffixes such as ``_v7000``/``_ptsz`` dropped).
* **kernels** — with a capture window, from the launch events: on ROCm they carry
  ``args.kernel``/``grid``/``block``; on NVIDIA they carry no kernel name, so the
  summary is marked incomplete until :func:`with_replay` supplies the graph's
  kernels.  Without a capture window, the executed ``kernel``/``gpu_memcpy``/
  ``gpu_memset`` events are the kernels.  Memcpy/memset nodes are listed with
  ``kind`` ``memcpy``/``memset`` and keep their recorded name (they are not
  symbols, so normalization levels do not touch them).
* **attribution** — each kernel entry names the op whose call launched it
  (:mod:`.attribute`): the innermost ``cpu_op`` around the launch call on its thread.
* **replay** — :func:`replay_kernels_from_events` / ``_from_profile`` pick the
  GPU events whose ``correlation`` equals a ``cudaGraphLaunch``/``hipGraphLaunch``
  (``cuGraphLaunch``) correlation, which excludes fill kernels launched outside
  the graph; :func:`with_replay` makes them the kernels and runs the data-loss
  check (:mod:`.replay`).
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Any, Iterable, Optional

from ..errors import UsageError
from ..keys import CaptureKey
from .attribute import enclosing_ops, op_spans
from .model import Summary, _merge_kernel
from .normalize import (
    DEFAULT_LEVEL,
    check_level,
    normalize_kernel_name,
    normalize_op_name,
)

KERNEL_LAUNCH_APIS = frozenset(
    {
        "cudaLaunchKernel",
        "cudaLaunchKernelExC",
        "cudaLaunchKernelEx",
        "cudaLaunchCooperativeKernel",
        "cudaLaunchCooperativeKernelMultiDevice",
        "cuLaunchKernel",
        "cuLaunchKernelEx",
        "cuLaunchCooperativeKernel",
        "hipLaunchKernel",
        "hipExtModuleLaunchKernel",
        "hipModuleLaunchKernel",
        "hipExtLaunchKernel",
        "hipLaunchCooperativeKernel",
        "hipModuleLaunchCooperativeKernel",
        "hipLaunchKernelExC",
        "hipExtLaunchKernelGGL",
        "hipHccModuleLaunchKernel",
    }
)

_MEMCPY_API = re.compile(r"^(?:cuda|cu|hip)Memcpy\w*Async$|^hipMemcpyWithStream$")

_MEMSET_API = re.compile(r"^(?:cuda|cu|hip)Memset\w*Async$")

_API_SUFFIX = re.compile(r"(?:_v\d+|_ptsz|_ptds|_spt)+$")

_BEGIN_CAPTURE = re.compile(r"^(?:cuda|cu|hip)StreamBeginCapture")

_END_CAPTURE = re.compile(r"^(?:cuda|cu|hip)StreamEndCapture")

_GRAPH_LAUNCH = re.compile(r"^(?:cuda|cu|hip)GraphLaunch(?:_v\d+|_ptsz|_spt)*$")

_RUNTIME_CATS = frozenset({"cuda_runtime", "cuda_driver", "hip_runtime", "hip_driver"})

_GPU_CATS = {"kernel": "kernel", "gpu_memcpy": "memcpy", "gpu_memset": "memset"}

_INTERESTING_RUNTIME = re.compile(
    r"^(?:cuda|cu|hip)(?:Launch|ExtLaunch|ModuleLaunch|ExtModuleLaunch|HccModuleLaunch|"
    r"Memcpy|Memset|StreamBeginCapture|StreamEndCapture|GraphLaunch)"
)


def _api_base(name: str) -> str:
    return _API_SUFFIX.sub("", name)


def _dims3(value: Any) -> Optional[list]:
    """``[x, y, z]`` of ints, else None (Kineto writes grid/block as 3 ints)."""
    if (
        value.__class__ is list
        and len(value) == 3
        and value[0].__class__ is int
        and value[1].__class__ is int
        and value[2].__class__ is int
    ):
        return value
    return None


_NUMBER_TYPES = (int, float)


def _number(value: Any) -> Optional[float]:
    return value if value.__class__ in _NUMBER_TYPES else None


class _Scan:
    """Everything a summary needs, bucketed in one pass over the events.

    The pass only sorts events into buckets by ``cat``; the per-event work
    (runtime-name classification with a per-name cache, op grouping) happens
    afterwards on the few relevant buckets, so scanning costs little next to
    JSON parsing.
    """

    __slots__ = ("cpu_ops", "runtime", "gpu", "annotations", "_classified")

    def __init__(self) -> None:
        self.cpu_ops: list = []
        self.runtime: list = []
        self.gpu: list = []
        self.annotations: list = []
        self._classified: Optional[tuple] = None

    def classify(self) -> tuple:
        """(begins, ends, launches, graph correlations, launch thread by correlation) from the runtime events."""
        if self._classified is not None:
            return self._classified
        begins: list = []
        ends: list = []
        launches: list = []  # (ts, api, kind, kernel name or None, grid, block, tid)
        graph_corr: set = set()
        launch_at: dict = {}  # correlation -> (ts, tid) of each launch call
        cache: dict = {}
        for event in self.runtime:
            name = event.get("name")
            if name.__class__ is not str:
                continue
            role = cache.get(name)
            if role is None:
                role = cache[name] = _classify_runtime(name)
            if role is _SKIP:
                continue
            tag, api = role
            args = event.get("args")
            if args.__class__ is not dict:
                args = {}
            if tag == "begin":
                begins.append(_number(event.get("ts")))
            elif tag == "end":
                ends.append(_number(event.get("ts")))
            elif tag == "graph":
                corr = args.get("correlation")
                if corr is not None:
                    graph_corr.add(corr)
            else:
                kernel = args.get("kernel") if tag == "kernel" else None
                corr = args.get("correlation")
                if corr is not None:
                    launch_at[corr] = (_number(event.get("ts")), event.get("tid"))
                launches.append(
                    (
                        _number(event.get("ts")),
                        api,
                        tag,
                        kernel if isinstance(kernel, str) and kernel else None,
                        _dims3(args.get("grid")),
                        _dims3(args.get("block")),
                        event.get("tid"),
                    )
                )
        self._classified = (begins, ends, launches, graph_corr, launch_at)
        return self._classified

    def windows(self) -> Optional[list]:
        """List of (start, end) capture windows; None when the trace has no capture calls."""
        begins, ends = self.classify()[:2]
        if not begins and not ends:
            return None
        begins = sorted(b for b in begins if b is not None)
        ends = sorted(e for e in ends if e is not None)
        windows = []
        inf = float("inf")
        if ends and (not begins or ends[0] < begins[0]):
            windows.append((-inf, ends[0]))  # capture began before the profiled window
        for start in begins:
            end = next((e for e in ends if e >= start), inf)
            windows.append((start, end))
        return windows

    @staticmethod
    def _inside(ts: Any, windows: Optional[list]) -> bool:
        if windows is None:
            return True
        if ts is None:
            return False
        for start, end in windows:
            if start <= ts <= end:
                return True
        return False

    def gpu_events(self) -> list:
        """(ts, correlation, kind, name, grid, block) for each kernel/memcpy/memset event."""
        out = []
        append = out.append
        for event in self.gpu:
            name = event.get("name")
            if name.__class__ is not str:
                continue
            args = event.get("args")
            if args.__class__ is not dict:
                args = _EMPTY_ARGS
            ts = event.get("ts")
            append(
                (
                    ts if ts.__class__ in _NUMBER_TYPES else None,
                    args.get("correlation"),
                    _GPU_CATS[event["cat"]],
                    name,
                    _dims3(args.get("grid")),
                    _dims3(args.get("block")),
                )
            )
        return out

    def replay_kernels(self) -> list:
        """GPU events correlated with a graph launch, in time order."""
        graph_corr = self.classify()[3]
        if not graph_corr:
            return []
        picked = [g for g in self.gpu_events() if g[1] is not None and g[1] in graph_corr]
        picked.sort(key=lambda g: g[0] if g[0] is not None else 0)
        return [_raw_kernel(kind, name, grid, block) for _, _, kind, name, grid, block in picked]

    def gpu_kernels(self) -> list:
        """Every executed kernel/memcpy/memset (the kernels of an eager step), each with its launching op."""
        launch_at = self.classify()[4]
        events = self.gpu_events()
        calls = [launch_at.get(g[1], (None, None)) if g[1] is not None else (None, None) for g in events]
        ops = enclosing_ops(op_spans(self.cpu_ops), calls) if any(c[0] is not None for c in calls) else []
        return [
            _raw_kernel(kind, name, grid, block, ops[i] if ops else None)
            for i, (_, _, kind, name, grid, block) in enumerate(events)
        ]


_SKIP = object()


def _classify_runtime(name: str) -> Any:
    if not _INTERESTING_RUNTIME.match(name):
        return _SKIP
    if _BEGIN_CAPTURE.match(name):
        return ("begin", None)
    if _END_CAPTURE.match(name):
        return ("end", None)
    if _GRAPH_LAUNCH.match(name):
        return ("graph", None)
    api = _api_base(name)
    if api in KERNEL_LAUNCH_APIS:
        return ("kernel", api)
    if _MEMCPY_API.match(api):
        return ("memcpy", api)
    if _MEMSET_API.match(api):
        return ("memset", api)
    return _SKIP


def _raw_kernel(kind: str, name: str, grid: Any, block: Any, op: Optional[dict] = None) -> dict:
    entry = {"name": name, "kind": kind}
    if op:
        entry["op"] = op
    if grid is not None:
        entry["grid"] = grid
    if block is not None:
        entry["block"] = block
    return entry


def _scan(events: Iterable[dict]) -> _Scan:
    scan = _Scan()
    ops_append = scan.cpu_ops.append
    runtime_append = scan.runtime.append
    gpu_append = scan.gpu.append
    runtime_cats = _RUNTIME_CATS
    gpu_cats = _GPU_CATS
    for event in events:
        cat = event.get("cat")
        if cat == "cpu_op":
            ops_append(event)
        elif cat in runtime_cats:
            runtime_append(event)
        elif cat in gpu_cats:
            gpu_append(event)
        elif cat == "user_annotation":
            name = event.get("name")
            if name.__class__ is str:
                scan.annotations.append(name)
    return scan


def _build(scan: _Scan, key: CaptureKey, platform: str, level: str, environment: Optional[dict]) -> Summary:
    check_level(level)
    if not isinstance(key, CaptureKey):
        raise UsageError(f"key must be a CaptureKey, got {type(key).__name__}")
    begins, ends, all_launches = scan.classify()[:3]
    windows = scan.windows()
    inside = _Scan._inside

    op_groups: dict[tuple, list] = {}
    op_names: dict[str, str] = {}
    for event in scan.cpu_ops:
        if windows is not None and not inside(_number(event.get("ts")), windows):
            continue
        name = event.get("name")
        if name.__class__ is not str:
            continue
        name = op_names.get(name) or op_names.setdefault(name, normalize_op_name(name))
        args = event.get("args")
        if args.__class__ is dict:
            dims = args.get("Input Dims", _EMPTY)
            types = args.get("Input type", _EMPTY)
        else:
            dims = types = _EMPTY
        gkey = (name, str(dims), str(types))
        group = op_groups.get(gkey)
        if group is None:
            op_groups[gkey] = [name, dims, types, 1]
        else:
            group[3] += 1
    ops = [
        {
            "name": n,
            "input_dims": list(d) if isinstance(d, list) else [],
            "input_types": list(t) if isinstance(t, list) else [],
            "count": c,
        }
        for n, d, t, c in op_groups.values()
    ]

    launches_in = [launch for launch in all_launches if inside(launch[0], windows)]
    by_api = Counter(launch[1] for launch in launches_in)
    launches = {"total": len(launches_in), "by_api": dict(by_api)}

    complete, reason = True, None
    raw: list = []
    if windows is not None:
        named = [launch for launch in launches_in if launch[2] != "kernel" or launch[3] is not None]
        by = enclosing_ops(op_spans(scan.cpu_ops), [(launch[0], launch[6]) for launch in named]) if named else []
        unnamed = len(launches_in) - len(named)
        for (_, api, kind, kernel, grid, block, _), op in zip(named, by):
            if kind == "kernel":
                raw.append(_raw_kernel("kernel", kernel, grid, block, op))
            else:
                raw.append(_raw_kernel(kind, api, None, None, op))
        if unnamed:
            complete = False
            reason = (
                f"{unnamed} of {len(launches_in)} launches in the capture window carry no kernel name "
                "(NVIDIA records names only for executed kernels); a graph replay must supply the kernels"
            )
        if not begins or not ends:
            complete = False
            missing = "EndCapture" if begins and not ends else "BeginCapture"
            extra = f"the trace has no {missing} call, so the capture window is cut off by the profiler window"
            reason = f"{reason}; {extra}" if reason else extra
    else:
        raw = scan.gpu_kernels()
    kernels = _entries(raw, level)
    return Summary(
        key=key,
        platform=platform,
        kernels=kernels,
        ops=ops,
        launches=launches,
        complete=complete,
        incomplete_reason=reason,
        environment=dict(environment or {}),
        level=level,
    )


_EMPTY: list = []


_EMPTY_ARGS: dict = {}


def _entries(raw_kernels: Iterable[dict], level: str) -> list:
    """Group raw per-launch kernel dicts into summary entries at ``level``."""
    cache: dict[str, str] = {}
    merged: dict[tuple, dict] = {}
    for raw in raw_kernels:
        kind = raw.get("kind", "kernel")
        name = raw["name"]
        if kind == "kernel":
            normal = cache.get(name)
            if normal is None:
                normal = cache[name] = normalize_kernel_name(name, level)
            name = normal
        _merge_kernel(merged, name, kind, raw.get("grid"), raw.get("block"), 1, raw.get("op"))
    return list(merged.values())


def summarize_events(
    events: Iterable[dict],
    *,
    key: CaptureKey,
    platform: str,
    level: str = DEFAULT_LEVEL,
    environment: Optional[dict] = None,
) -> Summary:
    """Summarize Chrome-trace-style event dicts (the ``traceEvents`` of a trace)."""
    return _build(_scan(events), key, platform, level, environment)


def replay_kernels_from_events(events: Iterable[dict]) -> list:
    """The graph's kernels in a replay trace: GPU events correlated with a graph launch.

    Returns one dict per executed node (``name``, ``kind`` and ``grid``/``block`` when
    recorded), in time order; kernels launched outside the graph are excluded.
    """
    return _scan(events).replay_kernels()
