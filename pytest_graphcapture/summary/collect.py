"""Trace events into the compact records a summary needs, one event at a time and keeping none.
One feeder (:func:`feed_records`) holds the rules of which events count."""

from __future__ import annotations

import json
import re
from array import array
from typing import Any, Iterable, Iterator, Optional

import msgspec

from .._io import is_text
from ..errors import TraceEventError
from .normalize import gpu_work, normalize_op_name

KERNEL_LAUNCH_APIS = frozenset(
    "cudaLaunchKernel cudaLaunchKernelExC cudaLaunchKernelEx cudaLaunchCooperativeKernel "
    "cudaLaunchCooperativeKernelMultiDevice cuLaunchKernel cuLaunchKernelEx cuLaunchCooperativeKernel "
    "hipLaunchKernel hipExtModuleLaunchKernel hipModuleLaunchKernel hipExtLaunchKernel "
    "hipLaunchCooperativeKernel hipModuleLaunchCooperativeKernel hipLaunchKernelExC hipExtLaunchKernelGGL "
    "hipHccModuleLaunchKernel".split()
)

_MEMCPY_API = re.compile(r"^(?:cuda|cu|hip)Memcpy\w*Async$|^hipMemcpyWithStream$")

_MEMSET_API = re.compile(r"^(?:cuda|cu|hip)Memset\w*Async$")

_API_SUFFIX = re.compile(r"(?:_v\d+|_ptsz|_ptds|_spt)+$")

_BEGIN_CAPTURE = re.compile(r"^(?:cuda|cu|hip)StreamBeginCapture")

_END_CAPTURE = re.compile(r"^(?:cuda|cu|hip)StreamEndCapture")

_GRAPH_LAUNCH = re.compile(r"^(?:cuda|cu|hip)GraphLaunch(?:_v\d+|_ptsz|_spt)*$")

RUNTIME_CATS = frozenset({"cuda_runtime", "cuda_driver", "hip_runtime", "hip_driver"})

GPU_CATS = {"kernel": "kernel", "gpu_memcpy": "memcpy", "gpu_memset": "memset"}

INTERESTING_RUNTIME = re.compile(
    r"^(?:cuda|cu|hip)(?:Launch|ExtLaunch|ModuleLaunch|ExtModuleLaunch|HccModuleLaunch|"
    r"Memcpy|Memset|StreamBeginCapture|StreamEndCapture|GraphLaunch)"
)

_SKIP = ("skip", None)


def api_base(name: str) -> str:
    return _API_SUFFIX.sub("", name)


def _classify_runtime(name: str) -> tuple:
    """(role, base API) of a runtime call name; role ``skip`` for calls a summary ignores."""
    if not INTERESTING_RUNTIME.match(name):
        return _SKIP
    if _BEGIN_CAPTURE.match(name):
        return ("begin", None)
    if _END_CAPTURE.match(name):
        return ("end", None)
    if _GRAPH_LAUNCH.match(name):
        return ("graph", None)
    api = api_base(name)
    if api in KERNEL_LAUNCH_APIS:
        return ("kernel", api)
    if _MEMCPY_API.match(api):
        return ("memcpy", api)
    if _MEMSET_API.match(api):
        return ("memset", api)
    return _SKIP


_NUMBER_TYPES = (int, float)

#: ``args`` field absent (a JSON ``null`` is kept apart: it groups differently).
MISSING: Any = type("Missing", (), {"__repr__": lambda self: "MISSING"})()


def _parsed(value: Any) -> Any:
    """An args value as the stdlib parses it (the fast reader hands some over as JSON text)."""
    return json.loads(value) if value.__class__ is bytes else value


def _event(kind: str, name: Any, ts: Any) -> str:
    """How a message names an event: its kind, name and time, escaped to plain ASCII."""
    label = json.dumps(name) if name.__class__ is str else "?"
    if len(label) > 80:
        label = label[:77] + '..."'
    return f"{kind} event {label}" + (f" at ts {_short(ts)}" if ts.__class__ in _NUMBER_TYPES else "")


def _require_text(text: str, kind: str, name: Any, ts: Any, field: str) -> None:
    """A string a summary writes must be Unicode text: a lone surrogate escape (``\\ud800``) cannot be written."""
    if not is_text(text):
        raise TraceEventError(
            f"{_event(kind, name, ts)}: {field} holds a lone surrogate escape, which is not text "
            "(no profiler writes one) and no summary can hold"
        )


def _is_shape(value: Any) -> bool:
    """A list of integers, or of such lists (a tensor list): what Kineto records for one input."""
    if value.__class__ is not list:
        return False
    for item in value:
        if item.__class__ is not int and not _is_shape(item):
            return False
    return True


def _check_signature(name: str, ts: Any, dims: Any, types: Any) -> None:
    """Refuse ``Input Dims``/``Input type`` values no profiler writes, naming the event."""
    try:
        dims, types = _parsed(dims), _parsed(types)
    except ValueError as exc:  # an integer with more digits than int() reads
        raise TraceEventError(f"{_event('cpu_op', name, ts)}: Input Dims or Input type does not parse: {exc}") from None
    if dims is not MISSING and dims is not None:
        if dims.__class__ is not list or not all(_is_shape(shape) for shape in dims):
            raise TraceEventError(
                f"{_event('cpu_op', name, ts)}: Input Dims is {_short(dims)}, expected a list with one shape "
                "(a list of integers, or of such lists) per input"
            )
    if types is not MISSING and types is not None:
        if types.__class__ is not list or not all(item.__class__ is str for item in types):
            raise TraceEventError(
                f"{_event('cpu_op', name, ts)}: Input type is {_short(types)}, expected a list of type names (strings)"
            )
        for item in types:
            _require_text(item, "cpu_op", name, ts, "Input type")


def _short(value: Any) -> str:
    """A value as JSON for a message, cut to a readable length."""
    text = json.dumps(value)
    return text if len(text) <= 60 else text[:57] + "..."


#: The ``args`` field naming a replayed kernel's graph node (CUPTI activity records v5+; not in torch 2.11).
GRAPH_NODE_ARG = "graph node id"

_NO_DIMS_TEXT = str([])


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


def _hashable(value: Any) -> Any:
    """An id usable as a dict key: JSON scalars as they are, a list or object by its JSON text."""
    if value is None or value.__class__ in (int, float, str, bool):
        return value
    return ("json", json.dumps(value, sort_keys=True, default=repr))


class Collector:
    """Compact records of the events a summary needs, fed one event at a time."""

    def __init__(self) -> None:
        self.annotations: list = []
        self.annotation_spans: list = []  # (name, start, end, pid) of annotations with a time and duration
        # CPU ops: every op with a string name, in event order.
        self.op_ts = array("d")
        self.op_group = array("l")
        self.op_thread = array("l")
        self._groups: dict = {}  # (name, dims key, types key) -> group index
        self._group_rows: list = []  # (name, dims, types) per group, as fed (see add_op)
        # Spans of ops with a number ts and dur, for attribution.
        self.span_start = array("d")
        self.span_end = array("d")
        self.span_tid = array("l")
        self.span_ref = array("l")
        self._refs: dict = {}  # (name, dims key) -> span reference
        self._ref_rows: list = []  # (name, dims) per span reference, as fed
        self._op_refs: Optional[list] = None
        self._coarse: Optional[tuple] = None  # (groups seen, mapping, rows) of op_groups()
        self._tids: dict = {}  # (pid, thread id) -> thread index
        self.threads: list = []  # (pid, thread id) of each thread index
        self._last_tid: Any = _NOTHING  # the thread asked for last, and its index
        self._last_pid: Any = _NOTHING
        self._last_thread = -1
        # Runtime calls.
        self.captures: list = []  # (role "begin"/"end", ts or None, thread index, stream) per capture call
        self.graph_corr: set = set()
        self.launch_ts = array("d")
        self.launch_desc = array("l")
        self.launch_tid = array("l")
        self._descs: dict = {}
        self.desc_rows: list = []  # (api, kind, kernel name or None, grid, block)
        self.launch_at: dict = {}  # correlation -> launch index (the last launch with it)
        # GPU events (kernel / memcpy / memset).
        self.gpu_ts = array("d")
        self.gpu_corr: list = []
        self.gpu_desc = array("l")
        self.gpu_node: list = []  # graph node id (int) or None
        self._gpu_descs: dict = {}
        self.gpu_rows: list = []  # (kind, name, grid, block)
        self._roles: dict = {}
        self._op_names: dict = {}

    # -- feeding -----------------------------------------------------------------------------------------------

    def add_annotation(self, name: str, ts: Any, dur: Any, pid: Any = None) -> None:
        """One ``user_annotation`` (a ``record_function`` range): its name, and its span where it has one."""
        self.annotations.append(name)
        if ts.__class__ in _NUMBER_TYPES and dur.__class__ in _NUMBER_TYPES:
            self.annotation_spans.append((name, ts, ts + dur, pid if pid.__class__ in (int, str) else None))

    def add_op(self, name: str, ts: Any, dur: Any, tid: Any, dims: Any, types: Any, pid: Any = None) -> None:
        """One ``cpu_op`` event (``pid``/``tid``: its process and thread)."""
        normal = self._op_names.get(name)
        if normal is None:
            _require_text(name, "cpu_op", name, ts, "the name")
            normal = self._op_names[name] = normalize_op_name(name)
        if dims is MISSING:
            dims_key = _NO_DIMS_TEXT
        elif dims.__class__ is bytes:
            dims_key = dims
        else:
            dims_key = str(dims)
        if types is MISSING:
            types_key = _NO_DIMS_TEXT
        elif types.__class__ is bytes:
            types_key = types
        else:
            types_key = str(types)
        gkey = (normal, dims_key, types_key)
        group = self._groups.get(gkey)
        if group is None:
            _check_signature(name, ts, dims, types)
            group = self._groups[gkey] = len(self._group_rows)
            self._group_rows.append((normal, dims, types))
        if tid == self._last_tid and pid == self._last_pid:  # most events follow one of their own thread
            thread = self._last_thread
        else:
            thread = self._tid(tid, pid)
        self.op_thread.append(thread)
        kind = ts.__class__
        if kind is not float:
            if kind is not int:
                self.op_ts.append(_NAN)
                self.op_group.append(group)
                return
            if not -_EXACT <= ts <= _EXACT:
                self._widen()
        self.op_ts.append(ts)
        self.op_group.append(group)
        kind = dur.__class__
        if kind is not float and kind is not int:
            return
        try:
            end = ts + dur
        except OverflowError:  # an integer beyond the double range plus a float: no span to attribute with
            return
        if end.__class__ is int and not -_EXACT <= end <= _EXACT:
            self._widen()
        rkey = (normal, dims_key)
        ref = self._refs.get(rkey)
        if ref is None:
            ref = self._refs[rkey] = len(self._ref_rows)
            self._ref_rows.append((normal, dims))
        self.span_start.append(ts)
        self.span_end.append(end)
        self.span_tid.append(thread)
        self.span_ref.append(ref)

    def add_runtime(
        self,
        name: str,
        ts: Any,
        tid: Any,
        correlation: Any,
        kernel: Any,
        grid: Any,
        block: Any,
        pid: Any = None,
        stream: Any = None,
    ) -> None:
        """One runtime (``cuda_runtime``/``cuda_driver``/``hip_*``) call (``stream``: its ``args.stream``, if any)."""
        role = self._roles.get(name)
        if role is None:
            role = self._roles[name] = _classify_runtime(name)
        tag, api = role
        if tag == "skip":
            return
        if ts.__class__ not in _NUMBER_TYPES:
            ts = None
        if tag == "begin" or tag == "end":
            self.captures.append((tag, ts, self._tid(tid, pid), None if stream is None else _hashable(stream)))
        elif tag == "graph":
            if correlation is not None:
                self.graph_corr.add(_hashable(correlation))
        else:
            if tag != "kernel" or not (kernel.__class__ is str or isinstance(kernel, str)) or not kernel:
                kernel = None
            grid = _dims3(grid)
            block = _dims3(block)
            dkey = (api, tag, kernel, tuple(grid) if grid else None, tuple(block) if block else None)
            desc = self._descs.get(dkey)
            if desc is None:
                if kernel is not None:
                    _require_text(kernel, "runtime", name, ts, "args.kernel")
                desc = self._descs[dkey] = len(self.desc_rows)
                self.desc_rows.append((api, tag, kernel, grid, block))
            if correlation is not None:
                self.launch_at[_hashable(correlation)] = len(self.launch_desc)
            if ts is None:
                ts = _NAN
            elif ts.__class__ is int and not -_EXACT <= ts <= _EXACT:
                self._widen()
            self.launch_ts.append(ts)
            self.launch_desc.append(desc)
            self.launch_tid.append(self._tid(tid, pid))

    def add_gpu(self, kind: str, name: str, ts: Any, correlation: Any, grid: Any, block: Any, node: Any = None) -> None:
        """One ``kernel``/``gpu_memcpy``/``gpu_memset`` event (``kind``: kernel, memcpy or memset)."""
        grid = _dims3(grid)
        block = _dims3(block)
        dkey = (kind, name, tuple(grid) if grid else None, tuple(block) if block else None)
        desc = self._gpu_descs.get(dkey)
        if desc is None:
            _require_text(name, kind, name, ts, "the name")
            desc = self._gpu_descs[dkey] = len(self.gpu_rows)
            kind, name = gpu_work(kind, name)  # a memset is a memset in every CUPTI mode
            self.gpu_rows.append((kind, name, grid, block))
        if ts.__class__ not in _NUMBER_TYPES:
            ts = _NAN
        elif ts.__class__ is int and not -_EXACT <= ts <= _EXACT:
            self._widen()
        self.gpu_ts.append(ts)
        self.gpu_corr.append(None if correlation is None else _hashable(correlation))
        self.gpu_desc.append(desc)
        self.gpu_node.append(node if node.__class__ is int else None)

    # -- reading -----------------------------------------------------------------------------------------------

    def op_groups(self) -> tuple[list, list]:
        """(coarse group of each op group, coarse rows ``(name, dims, types)``)."""
        cached = self._coarse
        if cached is not None and cached[0] == len(self._group_rows):
            return cached[1], cached[2]  # a trace split into keys asks once per key
        coarse_of: dict = {}
        mapping = []
        rows = []
        for name, dims, types in self._group_rows:
            dims, types = _parsed(dims), _parsed(types)
            key = (
                name,
                _NO_DIMS_TEXT if dims is MISSING else str(dims),
                _NO_DIMS_TEXT if types is MISSING else str(types),
            )
            index = coarse_of.get(key)
            if index is None:
                index = coarse_of[key] = len(rows)
                rows.append((name, [] if dims is MISSING else dims, [] if types is MISSING else types))
            mapping.append(index)
        self._coarse = (len(self._group_rows), mapping, rows)
        return mapping, rows

    @property
    def op_refs(self) -> list:
        """The ``{"name", "input_dims"}`` op of each span reference (one shared dict per distinct op)."""
        if self._op_refs is None or len(self._op_refs) != len(self._ref_rows):
            shared: dict = {}
            refs = []
            for name, dims in self._ref_rows:
                dims = _parsed(dims)
                dims = dims if isinstance(dims, list) else []
                key = (name, str(dims))
                op = shared.get(key)
                if op is None:
                    op = shared[key] = {"name": name, "input_dims": dims}
                refs.append(op)
            self._op_refs = refs
        return self._op_refs

    # -- storage -----------------------------------------------------------------------------------------------

    def _tid(self, tid: Any, pid: Any = None) -> int:
        """The thread index of (``pid``, ``tid``): thread ids are unique only within their process."""
        self._last_tid, self._last_pid = tid, pid
        self._last_thread = self._thread(tid, pid)
        return self._last_thread

    def _thread(self, tid: Any, pid: Any) -> int:
        if tid is not None and tid.__class__ is not int:
            tid = _hashable(tid)
        if pid is not None and pid.__class__ is not int:
            pid = _hashable(pid)
        key = (pid, tid)
        index = self._tids.get(key)
        if index is None:
            index = self._tids[key] = len(self._tids)
            self.threads.append(key)
        return index

    def thread_label(self, index: int) -> str:
        """How messages name thread ``index``: ``pid 1, thread 7`` (the parts the trace gave)."""
        pid, tid = self.threads[index]
        parts = [f"{what} {shown(value)}" for what, value in (("pid", pid), ("thread", tid)) if value is not None]
        return ", ".join(parts) or "no pid or thread"

    def _widen(self) -> None:
        """Keep times as the parser made them from now on: a double cannot hold every one exactly."""
        for name in _TIME_COLUMNS:
            column = getattr(self, name)
            if column.__class__ is not list:
                setattr(self, name, list(column))


#: The time columns, turned into lists by ``Collector._widen``.
_TIME_COLUMNS = ("op_ts", "span_start", "span_end", "launch_ts", "gpu_ts")

#: The largest magnitude up to which every integer is a double.
_EXACT = 2**53

_NAN = float("nan")

#: Equal to no value a trace holds.
_NOTHING: Any = object()


def shown(value: Any) -> Any:
    """A value kept by :func:`_hashable`, as the trace wrote it."""
    return value[1] if value.__class__ is tuple else value


class _EventArgs(msgspec.Struct):
    """The ``args`` fields a summary reads."""

    correlation: Any = None
    kernel: Any = None
    grid: Any = None
    block: Any = None
    graph_node_id: Any = msgspec.field(default=None, name=GRAPH_NODE_ARG)
    stream: Any = None
    # JSON text from the slice parser (parsing costs more than grouping by the text), parsed values from dicts.
    input_dims: msgspec.Raw = msgspec.field(default=msgspec.UNSET, name="Input Dims")
    input_type: msgspec.Raw = msgspec.field(default=msgspec.UNSET, name="Input type")


class Event(msgspec.Struct):
    """The fields of a trace event a summary reads."""

    name: Any = None
    cat: Any = None
    ts: Any = None
    dur: Any = None
    tid: Any = None
    pid: Any = None
    args: Optional[_EventArgs] = None


#: Decodes ``[`` + a slice of events + ``]`` into event records, the op shapes left as JSON text.
DECODER = msgspec.json.Decoder(list[Event])

_NO_ARGS = _EventArgs()


def events_from_dicts(events: Iterable[dict]) -> Iterator[Event]:
    """Event records of Chrome-trace event dicts (a live profile, a whole-file read); a non-object ``args`` is none."""
    unset = msgspec.UNSET
    for event in events:
        args = event.get("args")
        if args.__class__ is dict:
            args = _EventArgs(
                args.get("correlation"),
                args.get("kernel"),
                args.get("grid"),
                args.get("block"),
                args.get(GRAPH_NODE_ARG),
                args.get("stream"),
                args.get("Input Dims", unset),
                args.get("Input type", unset),
            )
        else:
            args = None
        yield Event(
            event.get("name"),
            event.get("cat"),
            event.get("ts"),
            event.get("dur"),
            event.get("tid"),
            event.get("pid"),
            args,
        )


def feed_records(collector: Collector, events: Iterable[Event]) -> None:
    """Hand event records to ``collector``: the one place that says which events a summary reads."""
    runtime_cats, gpu_cats, unset, raw = RUNTIME_CATS, GPU_CATS, msgspec.UNSET, msgspec.Raw
    for event in events:
        cat, name = event.cat, event.name
        # A category or name that is not a string (a list, an object) is no event a summary reads.
        if cat.__class__ is not str or name.__class__ is not str:
            continue
        args = event.args
        if args is None:
            args = _NO_ARGS
        if cat == "cpu_op":
            dims, types = args.input_dims, args.input_type
            collector.add_op(
                name,
                event.ts,
                event.dur,
                event.tid,
                MISSING if dims is unset else bytes(dims) if dims.__class__ is raw else dims,
                MISSING if types is unset else bytes(types) if types.__class__ is raw else types,
                event.pid,
            )
        elif cat in runtime_cats:
            collector.add_runtime(
                name, event.ts, event.tid, args.correlation, args.kernel, args.grid, args.block, event.pid, args.stream
            )
        elif cat in gpu_cats:
            collector.add_gpu(
                gpu_cats[cat], name, event.ts, args.correlation, args.grid, args.block, args.graph_node_id
            )
        elif cat == "user_annotation":
            collector.add_annotation(name, event.ts, event.dur, event.pid)
