"""Summary of one captured graph: its kernel set, op shapes and launch counts.

A :class:`Summary` is what goldens store and compare, so it holds only what must
not change silently (kernels, CPU ops with shapes, launch counts) and nothing that
changes run to run (timestamps, ids, correlation ids, streams, durations, pids).
``environment`` is informational and never part of equality.

Two inputs give one result (issue #3, point 2):

* :func:`summarize_profile` reads a live ``torch.profiler.profile`` inside its
  ``on_trace_ready`` callback through ``prof.profiler.kineto_results.events()``
  (names, shapes, dtypes, activity types, correlation ids) — no export, no
  re-parse.  Each relevant ``_KinetoEvent`` is turned into the same small dict a
  Chrome trace holds, so both inputs go through one code path and summaries of
  the same capture are equal.
* :func:`summarize_trace_file` / :func:`summarize_events` read Chrome/Kineto
  trace files or their event dicts.

How the summary is built (one pass over the events, then work on the few
relevant ones):

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
* **replay** — :func:`replay_kernels_from_events` / ``_from_profile`` pick the
  GPU events whose ``correlation`` equals a ``cudaGraphLaunch``/``hipGraphLaunch``
  (``cuGraphLaunch``) correlation, which excludes fill kernels launched outside
  the graph; :func:`with_replay` makes them the kernels and runs the data-loss
  check (issue point 4).
"""

from __future__ import annotations

import copy
import json
import re
import warnings
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator, Optional, Sequence, Union

from .errors import GraphCaptureError, TraceFormatError, UsageError
from .gcpause import gc_paused as _gc_paused
from .keys import CaptureKey
from .normalize import (
    DEFAULT_LEVEL,
    LEVELS,
    check_level,
    compile_patterns,
    is_coarser_or_equal,
    matches_any,
    normalize_kernel_name,
)
from .platform import environment_from_trace, platform_from_trace
from .tracefile import load_trace, trace_stem

__all__ = [
    "SCHEMA_VERSION", "LEVELS", "KINDS", "Summary", "KernelEvidenceWarning",
    "summarize_events", "summarize_trace_file", "summarize_profile",
    "replay_kernels_from_events", "replay_kernels_from_profile", "with_replay",
    "key_from_trace_name", "load_summary_file",
]

SCHEMA_VERSION = 1
KINDS = ("kernel", "memcpy", "memset")

KERNEL_LAUNCH_APIS = frozenset({
    "cudaLaunchKernel", "cudaLaunchKernelExC", "cudaLaunchKernelEx", "cudaLaunchCooperativeKernel",
    "cudaLaunchCooperativeKernelMultiDevice", "cuLaunchKernel", "cuLaunchKernelEx", "cuLaunchCooperativeKernel",
    "hipLaunchKernel", "hipExtModuleLaunchKernel", "hipModuleLaunchKernel", "hipExtLaunchKernel",
    "hipLaunchCooperativeKernel", "hipModuleLaunchCooperativeKernel", "hipLaunchKernelExC", "hipExtLaunchKernelGGL",
    "hipHccModuleLaunchKernel",
})
_MEMCPY_API = re.compile(r"^(?:cuda|cu|hip)Memcpy\w*Async$|^hipMemcpyWithStream$")
_MEMSET_API = re.compile(r"^(?:cuda|cu|hip)Memset\w*Async$")
_API_SUFFIX = re.compile(r"(?:_v\d+|_ptsz|_ptds|_spt)+$")
_BEGIN_CAPTURE = re.compile(r"^(?:cuda|cu|hip)StreamBeginCapture")
_END_CAPTURE = re.compile(r"^(?:cuda|cu|hip)StreamEndCapture")
_GRAPH_LAUNCH = re.compile(r"^(?:cuda|cu|hip)GraphLaunch(?:_v\d+|_ptsz|_spt)*$")
_RUNTIME_CATS = frozenset({"cuda_runtime", "cuda_driver", "hip_runtime", "hip_driver"})
_GPU_CATS = {"kernel": "kernel", "gpu_memcpy": "memcpy", "gpu_memset": "memset"}
_INTERESTING_RUNTIME = re.compile(r"^(?:cuda|cu|hip)(?:Launch|ExtLaunch|ModuleLaunch|ExtModuleLaunch|HccModuleLaunch|"
                                  r"Memcpy|Memset|StreamBeginCapture|StreamEndCapture|GraphLaunch)")


class KernelEvidenceWarning(UserWarning):
    """The kernel evidence of a capture is incomplete (e.g. the profiler dropped records)."""


# --------------------------------------------------------------------------- Summary


def _kernel_sort_key(entry: dict) -> tuple:
    return (entry["name"], entry.get("kind", "kernel"), entry.get("grid") or [], entry.get("block") or [])


def _op_sort_key(entry: dict) -> tuple:
    # One encoding of [dims, types] orders exactly like (dims, types) encoded apart: a complete
    # JSON array is never a strict prefix of another, so the dims decide first.  Half the cost.
    return (entry["name"], json.dumps([entry["input_dims"], entry["input_types"]]))


@dataclass(eq=False)
class Summary:
    """One captured graph, as goldens store it.  Equality ignores ``environment``."""

    key: CaptureKey
    platform: str
    kernels: list = field(default_factory=list)
    ops: list = field(default_factory=list)
    launches: dict = field(default_factory=lambda: {"total": 0, "by_api": {}})
    complete: bool = True
    incomplete_reason: Optional[str] = None
    environment: dict = field(default_factory=dict)
    level: str = DEFAULT_LEVEL
    schema_version: int = SCHEMA_VERSION

    def __post_init__(self) -> None:
        # Canonical order so that equal content always serializes to equal bytes.
        self.kernels = sorted(self.kernels, key=_kernel_sort_key)
        self.ops = sorted(self.ops, key=_op_sort_key)
        by_api = self.launches.get("by_api", {}) if isinstance(self.launches, dict) else {}
        self.launches = {"total": int(self.launches.get("total", 0)), "by_api": dict(sorted(by_api.items()))}

    def to_dict(self) -> dict:
        """JSON-ready dict; see notes/summary_api.md for the layout."""
        return {
            "schema_version": self.schema_version,
            "key": self.key.to_dict(),
            "platform": self.platform,
            "level": self.level,
            "kernels": [dict(k) for k in self.kernels],
            "ops": [dict(o) for o in self.ops],
            "launches": {"total": self.launches["total"], "by_api": dict(self.launches["by_api"])},
            "complete": {"value": self.complete, "reason": self.incomplete_reason},
            "environment": self.environment,
        }

    def to_json(self) -> str:
        """Canonical JSON text: sorted keys, indent 2, trailing newline."""
        return json.dumps(self.to_dict(), sort_keys=True, indent=2) + "\n"

    def comparable(self) -> dict:
        """``to_dict()`` without ``environment``: what equality and goldens compare."""
        data = self.to_dict()
        del data["environment"]
        return data

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Summary):
            return NotImplemented
        return self.comparable() == other.comparable()

    __hash__ = None  # type: ignore[assignment]  # mutable, compared by content

    @classmethod
    def from_dict(cls, data: Any, *, source: str = "<summary>") -> "Summary":
        """Validate and build a Summary; raise TraceFormatError(source, problem) on bad content."""
        return _summary_from_dict(data, source)

    def normalized(self, level: str, *, ignore_kernels: Iterable[str] = (), ignore_ops: Iterable[str] = ()) -> "Summary":
        """Copy with kernel names at ``level`` (equal names merged) and ignored kernels/ops removed.

        Ignore patterns are regular expressions matched with ``re.search`` against the
        (normalized) kernel name or the op name.  Going finer than ``self.level`` is an
        error because the finer information is gone.
        """
        check_level(level)
        if not is_coarser_or_equal(level, self.level):
            raise UsageError(
                f"cannot normalize {self.key} from level {self.level!r} to the finer level {level!r}"
            )
        kernel_patterns = compile_patterns(ignore_kernels, what="kernel ignore pattern")
        op_patterns = compile_patterns(ignore_ops, what="op ignore pattern")
        merged: dict[tuple, dict] = {}
        for entry in self.kernels:
            kind = entry.get("kind", "kernel")
            name = normalize_kernel_name(entry["name"], level) if kind == "kernel" else entry["name"]
            if kernel_patterns and matches_any(name, kernel_patterns):
                continue
            _merge_kernel(merged, name, kind, entry.get("grid"), entry.get("block"), entry["count"])
        # Filtering keeps the ops in canonical order, so the copy skips __post_init__'s re-sort
        # (the costliest part of a golden check); only the merged kernels need sorting.
        normalized = copy.copy(self)
        normalized.kernels = sorted(merged.values(), key=_kernel_sort_key)
        normalized.ops = [dict(o) for o in self.ops if not (op_patterns and matches_any(o["name"], op_patterns))]
        normalized.launches = {"total": self.launches["total"], "by_api": dict(self.launches["by_api"])}
        normalized.environment = dict(self.environment)
        normalized.level = level
        return normalized

    def kernel_count(self) -> int:
        """Total kernel/memcpy/memset node count."""
        return sum(k["count"] for k in self.kernels)

    def op_count(self) -> int:
        """Total CPU op count."""
        return sum(o["count"] for o in self.ops)


def _merge_kernel(merged: dict, name: str, kind: str, grid: Any, block: Any, count: int) -> None:
    grid_t = tuple(grid) if grid is not None else None
    block_t = tuple(block) if block is not None else None
    mkey = (kind, name, grid_t, block_t)
    entry = merged.get(mkey)
    if entry is None:
        entry = {"name": name, "kind": kind, "count": 0}
        if grid is not None:
            entry["grid"] = list(grid)
        if block is not None:
            entry["block"] = list(block)
        merged[mkey] = entry
    entry["count"] += count


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _summary_from_dict(data: Any, source: str) -> Summary:
    def bad(problem: str) -> TraceFormatError:
        return TraceFormatError(source, problem)

    if not isinstance(data, dict):
        raise bad(f"summary must be a JSON object, got {type(data).__name__}")
    required = ("schema_version", "key", "platform", "kernels", "ops", "launches", "complete")
    missing = [k for k in required if k not in data]
    if missing:
        raise bad(f"summary is missing {', '.join(missing)}")
    version = data["schema_version"]
    if not _is_int(version):
        raise bad("schema_version must be an integer")
    if version != SCHEMA_VERSION:
        raise bad(f"schema_version {version} is not supported (this version reads {SCHEMA_VERSION})")
    key_data = data["key"]
    if not isinstance(key_data, dict) or not isinstance(key_data.get("runner"), str):
        raise bad("key must be an object with runner, batch_size, variant, rank")
    if not _is_int(key_data.get("batch_size")) or not _is_int(key_data.get("rank", 0)):
        raise bad("key.batch_size and key.rank must be integers")
    if key_data.get("variant") is not None and not isinstance(key_data.get("variant"), str):
        raise bad("key.variant must be a string or null")
    try:
        key = CaptureKey.from_dict(key_data)
    except (ValueError, KeyError, TypeError) as exc:
        raise bad(f"bad key: {exc}") from None
    if not isinstance(data["platform"], str) or not data["platform"]:
        raise bad("platform must be a non-empty string")
    level = data.get("level", DEFAULT_LEVEL)
    if level not in LEVELS:
        raise bad(f"level must be one of {', '.join(LEVELS)}, got {level!r}")
    kernels = data["kernels"]
    if not isinstance(kernels, list):
        raise bad("kernels must be a list")
    clean_kernels = []
    for i, entry in enumerate(kernels):
        where = f"kernels[{i}]"
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
            raise bad(f"{where} must be an object with a string name")
        if not _is_int(entry.get("count")) or entry["count"] < 1:
            raise bad(f"{where}.count must be a positive integer")
        kind = entry.get("kind", "kernel")
        if kind not in KINDS:
            raise bad(f"{where}.kind must be one of {', '.join(KINDS)}, got {kind!r}")
        item = {"name": entry["name"], "kind": kind, "count": entry["count"]}
        for dim in ("grid", "block"):
            if dim in entry:
                value = entry[dim]
                if not isinstance(value, list) or not all(_is_int(v) for v in value):
                    raise bad(f"{where}.{dim} must be a list of integers")
                item[dim] = list(value)
        clean_kernels.append(item)
    ops = data["ops"]
    if not isinstance(ops, list):
        raise bad("ops must be a list")
    clean_ops = []
    for i, entry in enumerate(ops):
        where = f"ops[{i}]"
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
            raise bad(f"{where} must be an object with a string name")
        if not isinstance(entry.get("input_dims", []), list) or not isinstance(entry.get("input_types", []), list):
            raise bad(f"{where}.input_dims and input_types must be lists")
        if not _is_int(entry.get("count")) or entry["count"] < 1:
            raise bad(f"{where}.count must be a positive integer")
        clean_ops.append({"name": entry["name"], "input_dims": entry.get("input_dims", []),
                          "input_types": entry.get("input_types", []), "count": entry["count"]})
    launches = data["launches"]
    if not isinstance(launches, dict) or not _is_int(launches.get("total")) or not isinstance(launches.get("by_api", {}), dict):
        raise bad("launches must be an object with an integer total and a by_api object")
    by_api = launches.get("by_api", {})
    if not all(isinstance(k, str) and _is_int(v) for k, v in by_api.items()):
        raise bad("launches.by_api must map API names to integers")
    complete = data["complete"]
    if isinstance(complete, bool):
        value, reason = complete, data.get("incomplete_reason")
    elif isinstance(complete, dict) and isinstance(complete.get("value"), bool):
        value, reason = complete["value"], complete.get("reason")
    else:
        raise bad('complete must be {"value": bool, "reason": string or null}')
    if reason is not None and not isinstance(reason, str):
        raise bad("complete.reason must be a string or null")
    environment = data.get("environment", {})
    if environment is None:
        environment = {}
    if not isinstance(environment, dict):
        raise bad("environment must be an object")
    return Summary(key=key, platform=data["platform"], kernels=clean_kernels, ops=clean_ops,
                   launches={"total": launches["total"], "by_api": dict(by_api)}, complete=value,
                   incomplete_reason=reason, environment=environment, level=level, schema_version=version)


def load_summary_file(path: Union[str, Path]) -> Summary:
    """Read a summary JSON file written by :meth:`Summary.to_json`."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise TraceFormatError(path, f"cannot read summary: {exc}") from None
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise TraceFormatError(path, f"invalid JSON: {exc}") from None
    return Summary.from_dict(data, source=str(path))


# --------------------------------------------------------------------------- scanning


def _api_base(name: str) -> str:
    return _API_SUFFIX.sub("", name)


def _dims3(value: Any) -> Optional[list]:
    """``[x, y, z]`` of ints, else None (Kineto writes grid/block as 3 ints)."""
    if (value.__class__ is list and len(value) == 3 and value[0].__class__ is int
            and value[1].__class__ is int and value[2].__class__ is int):
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
        """(begins, ends, launches, graph correlations) from the runtime events."""
        if self._classified is not None:
            return self._classified
        begins: list = []
        ends: list = []
        launches: list = []  # (ts, api, kind, kernel name or None, grid, block)
        graph_corr: set = set()
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
                launches.append((_number(event.get("ts")), api, tag,
                                 kernel if isinstance(kernel, str) and kernel else None,
                                 _dims3(args.get("grid")), _dims3(args.get("block"))))
        self._classified = (begins, ends, launches, graph_corr)
        return self._classified

    def windows(self) -> Optional[list]:
        """List of (start, end) capture windows; None when the trace has no capture calls."""
        begins, ends, _, _ = self.classify()
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
            append((ts if ts.__class__ in _NUMBER_TYPES else None, args.get("correlation"), _GPU_CATS[event["cat"]],
                    name, _dims3(args.get("grid")), _dims3(args.get("block"))))
        return out

    def replay_kernels(self) -> list:
        """GPU events correlated with a graph launch, in time order."""
        graph_corr = self.classify()[3]
        if not graph_corr:
            return []
        picked = [g for g in self.gpu_events() if g[1] is not None and g[1] in graph_corr]
        picked.sort(key=lambda g: (g[0] if g[0] is not None else 0))
        return [_raw_kernel(kind, name, grid, block) for _, _, kind, name, grid, block in picked]


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


def _raw_kernel(kind: str, name: str, grid: Any, block: Any) -> dict:
    entry = {"name": name, "kind": kind}
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
    begins, ends, all_launches, _ = scan.classify()
    windows = scan.windows()
    inside = _Scan._inside

    op_groups: dict[tuple, list] = {}
    for event in scan.cpu_ops:
        if windows is not None and not inside(_number(event.get("ts")), windows):
            continue
        name = event.get("name")
        if name.__class__ is not str:
            continue
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
        {"name": n, "input_dims": list(d) if isinstance(d, list) else [],
         "input_types": list(t) if isinstance(t, list) else [], "count": c}
        for n, d, t, c in op_groups.values()
    ]

    launches_in = [l for l in all_launches if inside(l[0], windows)]
    by_api = Counter(l[1] for l in launches_in)
    launches = {"total": len(launches_in), "by_api": dict(by_api)}

    complete, reason = True, None
    raw: list = []
    if windows is not None:
        unnamed = 0
        for _, api, kind, kernel, grid, block in launches_in:
            if kind == "kernel":
                if kernel is None:
                    unnamed += 1
                    continue
                raw.append(_raw_kernel("kernel", kernel, grid, block))
            else:
                raw.append(_raw_kernel(kind, api, None, None))
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
        raw = [_raw_kernel(kind, name, grid, block) for _, _, kind, name, grid, block in scan.gpu_events()]
    kernels = _entries(raw, level)
    return Summary(key=key, platform=platform, kernels=kernels, ops=ops, launches=launches, complete=complete,
                   incomplete_reason=reason, environment=dict(environment or {}), level=level)


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
        _merge_kernel(merged, name, kind, raw.get("grid"), raw.get("block"), 1)
    return list(merged.values())


# --------------------------------------------------------------------------- public API


def summarize_events(events: Iterable[dict], *, key: CaptureKey, platform: str, level: str = DEFAULT_LEVEL,
                     environment: Optional[dict] = None) -> Summary:
    """Summarize Chrome-trace-style event dicts (the ``traceEvents`` of a trace)."""
    return _build(_scan(events), key, platform, level, environment)


def replay_kernels_from_events(events: Iterable[dict]) -> list:
    """The graph's kernels in a replay trace: GPU events correlated with a graph launch.

    Returns one dict per executed node (``name``, ``kind`` and ``grid``/``block`` when
    recorded), in time order; kernels launched outside the graph are excluded.
    """
    return _scan(events).replay_kernels()


_KEY_NAME = re.compile(r"^(?P<runner>.+?)_bs_(?P<bs>\d+)(?:_(?P<variant>.+?))?_rank(?P<rank>\d+)$")
_BS_TOKEN = re.compile(r"(?:^|[^A-Za-z0-9])bs[_=](\d+)(?![0-9])")
_BS_ANNOTATION = re.compile(r"(?:^|[^A-Za-z0-9])bs\s*[=_:]\s*(\d+)(?![0-9])|^capture_(\d+)(?:_|$)")
_RANK_TOKEN = re.compile(r"(?:^|[^A-Za-z0-9])rank_?(\d+)(?![0-9])")


def key_from_trace_name(path: Union[str, Path], annotations: Sequence[str] = (), trace: Optional[dict] = None) -> CaptureKey:
    """Capture key from a trace file name (``{runner}_bs_{bs}[_{variant}]_rank{r}.json.gz``).

    Other names: runner = file stem; batch size from a ``bs_N``/``bs=N`` token in the
    name, else from annotations such as ``step[DECODE bs=32]`` or ``capture_32_DECODE``;
    rank from a ``rankN`` token or the trace's ``distributedInfo``, else 0.
    """
    stem = trace_stem(path)
    match = _KEY_NAME.match(stem)
    if match:
        return CaptureKey(match.group("runner"), int(match.group("bs")), match.group("variant"),
                          int(match.group("rank")))
    token = _BS_TOKEN.search(stem)
    batch: Optional[int] = int(token.group(1)) if token else None
    if batch is None:
        found = set()
        for name in annotations:
            for m in _BS_ANNOTATION.finditer(name):
                found.add(int(m.group(1) or m.group(2)))
        if len(found) > 1:
            raise TraceFormatError(path, f"annotations name several batch sizes {sorted(found)}; pass the key explicitly")
        batch = found.pop() if found else None
    if batch is None or batch < 1:
        raise TraceFormatError(
            path, "cannot tell the batch size: name the file {runner}_bs_{bs}_rank{r}.json.gz "
                  "or record an annotation like 'bs=32'"
        )
    rank_match = _RANK_TOKEN.search(stem)
    rank = int(rank_match.group(1)) if rank_match else None
    if rank is None and trace is not None and isinstance(trace.get("distributedInfo"), dict):
        dist_rank = trace["distributedInfo"].get("rank")
        rank = dist_rank if _is_int(dist_rank) and dist_rank >= 0 else None
    return CaptureKey(stem, batch, None, rank or 0)


def summarize_trace_file(path: Union[str, Path], *, key: Optional[CaptureKey] = None, level: str = DEFAULT_LEVEL,
                         replay_path: Union[str, Path, None] = None, max_bytes: Optional[int] = None) -> Summary:
    """Summarize a ``.json``/``.json.gz`` trace file, optionally with the graph's replay trace."""
    check_level(level)
    with _gc_paused():
        trace = load_trace(path, max_bytes=max_bytes)
        scan = _scan(trace["traceEvents"])
        if key is None:
            key = key_from_trace_name(path, scan.annotations, trace)
        summary = _build(scan, key, platform_from_trace(trace), level, environment_from_trace(trace))
        del trace, scan
        replay = None
        if replay_path is not None:
            replay_trace = load_trace(replay_path, max_bytes=max_bytes)
            replay = _scan(replay_trace["traceEvents"]).replay_kernels()
            del replay_trace
    if replay is not None:
        summary = with_replay(summary, replay)
    return summary


# --------------------------------------------------------------------------- live profiler


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
    for event in events:
        activity = event.activity_type() if has_activity else _infer_activity(event)
        if activity == "cpu_op":
            dims = event.structured_input_shapes() if has_structured else event.shapes()
            yield {"cat": "cpu_op", "name": event.name(), "ts": event.start_ns(),
                   "args": {"Input Dims": dims, "Input type": event.dtypes()}}
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
            yield {"cat": activity, "name": name, "ts": event.start_ns(), "args": args}
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


def summarize_profile(prof: Any, key: CaptureKey, *, platform: str, level: str = DEFAULT_LEVEL,
                      environment: Optional[dict] = None) -> Summary:
    """Summarize a live ``torch.profiler.profile`` inside its ``on_trace_ready`` callback.

    Reads the in-memory Kineto results (no export, no re-parse); with a schedule the
    callback sees only the active step, which is exactly the capture step.
    """
    if environment is None:
        environment = {"profiler": {flag: bool(getattr(prof, flag, False))
                                    for flag in ("record_shapes", "with_stack", "with_flops", "profile_memory")}}
    # Paused GC: summarizing allocates many short-lived dicts, which otherwise set off a full
    # collection of the whole (torch-sized) heap every few captures.
    with _gc_paused():
        return _build(_scan(_profile_events(prof)), key, platform, level, environment)


def replay_kernels_from_profile(prof: Any) -> list:
    """:func:`replay_kernels_from_events` for a live profile of a graph replay."""
    return _scan(_profile_events(prof)).replay_kernels()


# --------------------------------------------------------------------------- replay + data-loss check


def _describe_counter_diff(expected: Counter, actual: Counter, limit: int = 3) -> str:
    parts = []
    missing = expected - actual
    extra = actual - expected
    for label, diff in (("missing from the replay", missing), ("only in the replay", extra)):
        if diff:
            items = sorted(diff.items())
            shown = ", ".join(f"{n} x{c}" for n, c in items[:limit])
            more = f" and {len(items) - limit} more" if len(items) > limit else ""
            parts.append(f"{label}: {shown}{more}")
    return "; ".join(parts)


def with_replay(summary: Summary, replay_kernels: Sequence[dict]) -> Summary:
    """Return a copy of a capture ``summary`` whose kernels come from the graph replay.

    Where the capture window already named every node (ROCm launch events carry
    ``kernel``/``grid``/``block``) and the check below passes, the capture's entries
    are kept: they are the same kernels, plus launch configuration the replay lacks.

    Data-loss check (issue point 4): when the capture window recorded launches, their
    count must equal the replay's node count, and where the capture named its kernels
    (ROCm) the kernel multiset at the summary's level must match too.  Otherwise the
    result is marked incomplete with the reason and a :class:`KernelEvidenceWarning`
    naming the key is emitted — dropped profiler records must never look like a
    kernel regression.
    """
    replay_entries = _entries(replay_kernels, summary.level)
    problems = []
    captured = summary.launches["total"]
    if captured and captured != len(replay_kernels):
        problems.append(f"the capture window recorded {captured} launches but the replay ran {len(replay_kernels)} graph nodes")
    capture_named = [k for k in summary.kernels if k.get("kind", "kernel") == "kernel"]
    if captured and capture_named:
        expected = Counter()
        for k in summary.kernels:
            label = k["name"] if k.get("kind", "kernel") == "kernel" else f"<{k['kind']}>"
            expected[label] += k["count"]
        actual = Counter()
        for k in replay_entries:
            label = k["name"] if k["kind"] == "kernel" else f"<{k['kind']}>"
            actual[label] += k["count"]
        if expected != actual:
            problems.append("kernel multiset differs: " + _describe_counter_diff(expected, actual))
    # When the capture named every node (ROCm) and agrees with the replay, keep its entries:
    # they are the same kernels, and the launch events also carry grid/block.
    keep_capture = bool(captured and capture_named and not problems and summary.complete)
    kernels = [dict(k) for k in summary.kernels] if keep_capture else replay_entries
    result = Summary(key=summary.key, platform=summary.platform, kernels=kernels, ops=[dict(o) for o in summary.ops],
                     launches={"total": summary.launches["total"], "by_api": dict(summary.launches["by_api"])},
                     complete=True, incomplete_reason=None, environment=dict(summary.environment),
                     level=summary.level, schema_version=summary.schema_version)
    if problems:
        reason = "; ".join(problems) + " (the profiler probably dropped records)"
        result.complete = False
        result.incomplete_reason = reason
        warnings.warn(f"graph capture {summary.key}: kernel evidence incomplete: {reason}", KernelEvidenceWarning,
                      stacklevel=2)
    return result
