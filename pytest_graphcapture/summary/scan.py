"""A summary from trace events: the capture windows and the ops, launches and kernels in them (with their ops)."""

from __future__ import annotations

import json
from array import array
from collections import Counter
from typing import Any, Iterable, Optional, Sequence

from ..errors import UsageError
from ..keys import CaptureKey
from .collect import Collector, events_from_dicts, feed_records, shown
from .model import Summary, merge_kernel
from .normalize import DEFAULT_LEVEL, check_level, normalize_kernel_name

#: Why an NVIDIA replay's kernels name no op: its launch calls name no kernel and no node ids match them.
REPLAY_UNATTRIBUTED = (
    "the graph replay's kernels are not linked to the capture's launch calls (the trace carries no graph "
    "node ids), so they name no launching op"
)

#: The replay carries graph node ids, but there is no capture window to match them to.
REPLAY_NO_CAPTURE = (
    "the graph replay's kernels carry graph node ids but the capture trace has no capture window to match "
    "them to, so they name no launching op"
)

#: The replay's graph node ids do not line up with the capture's launches.
REPLAY_NODES_DIFFER = (
    "the graph replay's nodes, in graph node id order, do not match the capture window's launches one by one "
    "(count or kernel/memcpy/memset kinds differ), so they name no launching op"
)

#: Read from the graph itself, but the capture trace has no capture window to match the nodes to.
GRAPH_NO_CAPTURE = (
    "the graph's nodes were read from the graph itself but the capture trace has no capture window to match "
    "them to, so they name no launching op"
)

#: The graph's nodes, in the order capture created them, do not line up with the capture's launch calls.
GRAPH_NODES_DIFFER = (
    "the graph's kernel, memcpy and memset nodes, in the order capture created them, do not match the capture "
    "window's launch calls one by one (count or kernel/memcpy/memset kinds differ), so they name no launching op"
)


def _enclosing_ops(spans: Any, launch_ts: Sequence[float], launch_tid: Sequence[int]) -> list[int]:
    """For each launch, the op index (into ``spans.op_refs``) of the innermost op enclosing it, -1 if none."""
    result = [-1] * len(launch_ts)
    threads: dict[int, Any] = {}
    for index, tid in enumerate(spans.span_tid):
        members = threads.get(tid)
        if members is None:
            members = threads[tid] = array("l")
        members.append(index)
    pids = [pid for pid, _ in spans.threads]
    by_thread: dict[Any, Any] = {}
    for index, (ts, tid) in enumerate(zip(launch_ts, launch_tid)):
        if ts == ts:  # not NaN
            key = tid if tid in threads else (_ANY, pids[tid])
            group = by_thread.get(key)
            if group is None:
                group = by_thread[key] = array("l")
            group.append(index)
    if not by_thread:
        return result
    order = _SpanOrder(spans)
    for tid in list(threads):
        threads[tid] = order.sorted(threads[tid])
    starts, ends, refs = spans.span_start, spans.span_end, spans.span_ref
    for tid, indices in by_thread.items():
        if tid.__class__ is tuple:  # (_ANY, pid of the launching thread)
            pid = tid[1]
            items = order.sorted(
                [i for thread, members in threads.items() if pid is None or pids[thread] == pid for i in members]
            )
        else:
            items = threads[tid]
        stack: list = []
        position = 0
        count = len(items)
        for index in sorted(indices, key=launch_ts.__getitem__):
            ts = launch_ts[index]
            while position < count and starts[items[position]] <= ts:
                span = items[position]
                while stack and ends[stack[-1]] < starts[span]:
                    stack.pop()
                stack.append(span)
                position += 1
            while stack and ends[stack[-1]] < ts:
                stack.pop()
            if stack:
                result[index] = refs[stack[-1]]
    return result


_ANY = object()

_INF = float("inf")


def _resorted(run: Any, key: Any) -> Any:
    """``run`` (a list or an array slice) sorted by ``key``, of the same type."""
    items = sorted(run, key=key)
    return array("l", items) if run.__class__ is array else items


class _SpanOrder:
    """Span indexes sorted outer first: by start, then longer first, then op name and dims (a fixed order)."""

    def __init__(self, spans: Any) -> None:
        ops = spans.op_refs
        ranked = sorted(range(len(ops)), key=lambda r: (ops[r]["name"], json.dumps(ops[r]["input_dims"])))
        self.rank = [0] * len(ops)
        for position, ref in enumerate(ranked):
            self.rank[ref] = position
        self.starts, self.ends, self.refs = spans.span_start, spans.span_end, spans.span_ref

    def key(self, index: int) -> tuple:
        return (self.starts[index], -self.ends[index], self.rank[self.refs[index]])

    def sorted(self, indices: Sequence[int]) -> Any:
        """``indices`` in span order (stable), as a compact array."""
        starts = self.starts
        previous = -_INF
        for index in indices:  # already in start order (the usual case): no sort, no list
            start = starts[index]
            if not previous <= start:
                ordered = sorted(indices, key=starts.__getitem__)
                break
            previous = start
        else:
            ordered = indices if indices.__class__ is array else array("l", indices)
        run = 0
        total = len(ordered)
        while run < total:
            end = run + 1
            first = starts[ordered[run]]
            while end < total and starts[ordered[end]] == first:
                end += 1
            if end - run > 1:
                ordered[run:end] = _resorted(ordered[run:end], self.key)
            run = end
        return ordered if ordered.__class__ is array else array("l", ordered)


def op_label(op: Optional[dict]) -> str:
    """How messages name a launching op: ``aten::mm [[32,4096],[4096,4096]]``."""
    if not op:
        return "(no op)"
    return f"{op['name']} {json.dumps(op.get('input_dims', []), separators=(',', ':'))}"


def attributed_share(kernels: Iterable[dict]) -> tuple[int, int]:
    """(kernel nodes that name their op, all kernel nodes) of summary kernel entries."""
    named = total = 0
    for entry in kernels:
        total += entry["count"]
        if entry.get("op"):
            named += entry["count"]
    return named, total


class CaptureWindows:
    """The capture windows of a trace, per thread, and the capture calls that could not be paired."""

    def __init__(self, of: list, problems: list, spans: Optional[list] = None) -> None:
        self.of = of
        self.problems = problems
        #: Every window once, in capture order: ``(start, end, pid of the capturing thread)``.
        self.spans = spans or []


def _pair_captures(scan: Collector, op_threads: set) -> Optional[CaptureWindows]:
    """Pair the BeginCapture/EndCapture calls of ``scan`` into windows; None when it has no capture calls."""
    if not scan.captures:
        return None
    inf = float("inf")
    calls: dict = {}
    untimed: list = []
    for role, ts, thread, stream in scan.captures:
        if ts is None:
            untimed.append((role, ts, thread, stream))
        else:
            calls.setdefault((thread, stream), []).append((ts, role != "begin", role))
    by_thread: dict = {}
    open_begins: list = []
    lone_ends: list = []
    for (thread, stream), timed in calls.items():
        timed.sort(key=lambda call: call[:2])  # at equal times a Begin comes first
        windows = by_thread.setdefault(thread, [])
        started: list = []
        for ts, _, role in timed:
            if role == "begin":
                started.append(ts)
            elif started:
                windows.append((started.pop(), ts))
            else:
                windows.append((-inf, ts))
                lone_ends.append((ts, thread, stream))
        for ts in started:
            windows.append((ts, inf))
            open_begins.append((ts, thread, stream))
    threads = scan.threads
    lent: dict = {}  # pid -> windows of its capture threads that recorded no op (None: of calls without pid)
    every: dict = {}  # pid -> windows of all its capture threads
    for thread, windows in by_thread.items():
        pid = threads[thread][0]
        every.setdefault(pid, []).extend(windows)
        if thread not in op_threads:
            lent.setdefault(pid, []).extend(windows)
    everywhere = [window for windows in every.values() for window in windows]
    of = []
    for thread, (pid, tid) in enumerate(threads):
        if thread in by_thread:
            of.append(by_thread[thread])
        elif tid is None:  # the trace does not say the thread: any capture of its process may hold it
            of.append(everywhere if pid is None else every.get(pid, []) + every.get(None, []))
        else:
            of.append(lent.get(pid, []) + lent.get(None, []))
    problems = []
    if open_begins:
        problems.append(
            _unpaired(
                scan,
                open_begins,
                "BeginCapture",
                "EndCapture call after it on its thread",
                "cut off by the end of the profiler window (or ended on another thread)",
            )
        )
    if lone_ends:
        problems.append(
            _unpaired(
                scan,
                lone_ends,
                "EndCapture",
                "BeginCapture call before it on its thread",
                "cut off by the start of the profiler window (or began on another thread)",
            )
        )
    for role in ("begin", "end"):
        nameless = [(None, thread, stream) for tag, _, thread, stream in untimed if tag == role]
        if nameless:
            what = "BeginCapture" if role == "begin" else "EndCapture"
            problems.append(_unpaired(scan, nameless, what, "time stamp", "unknown"))
    spans = sorted({(w[0], w[1], threads[t][0]) for t, ws in by_thread.items() for w in ws}, key=window_order)
    return CaptureWindows(of, problems, spans)


def window_order(span: tuple) -> tuple:
    return (span[0], span[1], str(span[2]))


def _unpaired(scan: Collector, calls: list, what: str, missing: str, window: str) -> str:
    """One sentence naming the ``what`` calls (``(ts, thread, stream)``) that have no ``missing``."""
    calls = sorted(calls, key=lambda call: (call[0] is None, call[0] or 0, call[1]))
    places = []
    for ts, thread, stream in calls[:3]:
        at = "" if ts is None else f" at ts {ts}"
        on = scan.thread_label(thread) + ("" if stream is None else f", stream {shown(stream)}")
        places.append(f"{at} on {on}".strip())
    more = f" and {len(calls) - 3} more" if len(calls) > 3 else ""
    if len(calls) == 1:
        return f"the {what} call {places[0]} has no {missing}, so its capture window is {window}"
    return (
        f"{len(calls)} {what} calls ({'; '.join(places)}{more}) have no {missing}, "
        f"so their capture windows are {window}"
    )


class Scan(Collector):
    """The collected records of one trace, and what a summary reads from them."""

    def windows(self) -> Optional[CaptureWindows]:
        """The capture windows of the trace (:func:`_pair_captures`); None when it has no capture calls."""
        return _pair_captures(self, set(self.op_thread))

    def replay_kernels(self) -> list:
        """GPU events correlated with a graph launch, in time order."""
        graph_corr = self.graph_corr
        if not graph_corr:
            return []
        picked = [i for i, corr in enumerate(self.gpu_corr) if corr is not None and corr in graph_corr]
        gpu_ts = self.gpu_ts
        picked.sort(key=lambda i: gpu_ts[i] if gpu_ts[i] == gpu_ts[i] else 0)
        rows = self.gpu_rows
        kernels = [_raw_kernel(*rows[self.gpu_desc[i]]) for i in picked]
        for kernel, i in zip(kernels, picked):
            if self.gpu_node[i] is not None:
                kernel["node"] = self.gpu_node[i]
        return kernels

    def gpu_kernels(self) -> dict:
        """``{(gpu description, op index): count}`` of the executed kernels/memcpys/memsets, in event order."""
        launch_at = self.launch_at
        nan = float("nan")
        call_ts = array("d")
        call_tid = array("l")
        for corr in self.gpu_corr:
            index = launch_at.get(corr) if corr is not None else None
            if index is None:
                call_ts.append(nan)
                call_tid.append(-1)
            else:
                call_ts.append(self.launch_ts[index])
                call_tid.append(self.launch_tid[index])
        ops = _enclosing_ops(self, call_ts, call_tid)
        counted: dict = {}
        for pair in zip(self.gpu_desc, ops):
            counted[pair] = counted.get(pair, 0) + 1
        return counted

    def op_entries(self, windows: Optional[CaptureWindows]) -> list:
        """Op groups with their counts in the windows, in the order they first occur there."""
        fine: dict = {}
        op_group = self.op_group
        if windows is None:
            for group in op_group:
                fine[group] = fine.get(group, 0) + 1
        else:
            inside, of = _inside, windows.of
            for ts, group, thread in zip(self.op_ts, op_group, self.op_thread):
                if inside(ts, of[thread]):
                    fine[group] = fine.get(group, 0) + 1
        return self.entries_of(fine)

    def entries_of(self, fine: dict) -> list:
        """Op entries of ``{op group: count}`` (the groups as fed), equal parsed values merged."""
        mapping, rows = self.op_groups()
        counts: dict = {}
        for group, count in fine.items():
            coarse = mapping[group]
            counts[coarse] = counts.get(coarse, 0) + count
        out = []
        for group, count in counts.items():
            name, dims, types = rows[group]
            out.append(
                {
                    "name": name,
                    "input_dims": list(dims) if isinstance(dims, list) else [],
                    "input_types": list(types) if isinstance(types, list) else [],
                    "count": count,
                }
            )
        return out


def _inside(ts: Any, windows: list) -> bool:
    """Whether time ``ts`` lies in one of ``windows`` (a NaN time lies in none)."""
    for start, end in windows:
        if start <= ts <= end:
            return True
    return False


def _raw_kernel(kind: str, name: str, grid: Any, block: Any, op: Optional[dict] = None) -> dict:
    entry = {"name": name, "kind": kind}
    if op:
        entry["op"] = op
    if grid is not None:
        entry["grid"] = grid
    if block is not None:
        entry["block"] = block
    return entry


def scan_events(events: Iterable[dict]) -> Scan:
    scan = Scan()
    feed_records(scan, events_from_dicts(events))
    return scan


def build_summary(scan: Scan, key: CaptureKey, platform: str, level: str, environment: Optional[dict]) -> Summary:
    check_level(level)
    if not isinstance(key, CaptureKey):
        raise UsageError(f"key must be a CaptureKey, got {type(key).__name__}")
    windows = scan.windows()
    ops = scan.op_entries(windows)
    launch_desc = scan.launch_desc
    if windows is None:
        return window_summary(scan, key, platform, level, environment, ops, range(len(launch_desc)), None, None)
    of = windows.of
    launches_in = [i for i, (ts, thread) in enumerate(zip(scan.launch_ts, scan.launch_tid)) if _inside(ts, of[thread])]
    by = launching_ops(scan, launches_in)
    return window_summary(scan, key, platform, level, environment, ops, launches_in, by, windows.problems)


def launching_ops(scan: Scan, launches: list) -> list:
    """The op (index into ``scan.op_refs``, -1 for none) whose call made each launch of ``launches``."""
    if not launches:
        return []
    call_ts = array("d", (scan.launch_ts[i] for i in launches))
    call_tid = array("l", (scan.launch_tid[i] for i in launches))
    return _enclosing_ops(scan, call_ts, call_tid)


def window_summary(
    scan: Scan,
    key: CaptureKey,
    platform: str,
    level: str,
    environment: Optional[dict],
    ops: list,
    launches_in: Any,
    by: Optional[list],
    problems: Optional[list],
) -> Summary:
    """The Summary of ``ops`` and the launches ``launches_in`` (indexes into the scan's launches)."""
    rows = scan.desc_rows
    launch_desc = scan.launch_desc
    by_api = Counter(rows[launch_desc[i]][0] for i in launches_in)
    launches = {"total": len(launches_in), "by_api": dict(by_api)}

    complete, reason = True, None
    launch_ops = None
    if by is not None:
        call_ts = [scan.launch_ts[i] for i in launches_in]
        named = [j for j, i in enumerate(launches_in) if rows[launch_desc[i]][1] != "kernel" or rows[launch_desc[i]][2]]
        counted: dict = {}
        for j in named:
            pair = (launch_desc[launches_in[j]], by[j])
            counted[pair] = counted.get(pair, 0) + 1
        op_refs = scan.op_refs
        in_call_order = sorted(range(len(launches_in)), key=lambda j: call_ts[j])
        launch_ops = [
            (rows[launch_desc[launches_in[j]]][1], op_refs[by[j]] if by[j] >= 0 else None) for j in in_call_order
        ]
        found = []
        for (desc, op), count in counted.items():
            api, kind, kernel, grid, block = rows[desc]
            if kind == "kernel":
                found.append(("kernel", kernel, grid, block, op, count))
            else:
                found.append((kind, api, None, None, op, count))
        unnamed = len(launches_in) - len(named)
        if unnamed:
            complete = False
            reason = (
                f"{unnamed} of {len(launches_in)} launches in the capture window carry no kernel name "
                "(NVIDIA records names only for executed kernels); a graph replay must supply the kernels"
            )
        if problems:
            complete = False
            reason = "; ".join(([reason] if reason else []) + problems)
    else:
        gpu_rows = scan.gpu_rows
        found = [(*gpu_rows[desc], op, count) for (desc, op), count in scan.gpu_kernels().items()]
    refs = scan.op_refs
    kernels = _entries_of(((k, n, g, b, refs[op] if op >= 0 else None, c, None) for k, n, g, b, op, c in found), level)
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
        launch_ops=launch_ops,
        # Kernels named by the capture's launch events (ROCm); an eager trace's kernels ran, no source.
        kernel_source="capture-window" if by is not None and kernels else None,
    )


def _entries_of(found: Iterable[tuple], level: str) -> list:
    """Summary entries at ``level`` from ``(kind, name, grid, block, op, count, launch)`` in first-seen order."""
    cache: dict[str, str] = {}
    merged: dict[tuple, dict] = {}
    for kind, name, grid, block, op, count, launch in found:
        if kind == "kernel":
            normal = cache.get(name)
            if normal is None:
                normal = cache[name] = normalize_kernel_name(name, level)
            name = normal
        merge_kernel(merged, name, kind, grid, block, count, op, launch)
    return list(merged.values())


def kernel_entries(raw_kernels: Iterable[dict], level: str) -> list:
    """Group raw per-launch kernel dicts into summary entries at ``level``."""
    rows = (
        (r.get("kind", "kernel"), r["name"], r.get("grid"), r.get("block"), r.get("op"), 1, r.get("launch"))
        for r in raw_kernels
    )
    return _entries_of(rows, level)


def summarize_events(
    events: Iterable[dict],
    *,
    key: CaptureKey,
    platform: str,
    level: str = DEFAULT_LEVEL,
    environment: Optional[dict] = None,
) -> Summary:
    """Summarize Chrome-trace-style event dicts (the ``traceEvents`` of a trace)."""
    return build_summary(scan_events(events), key, platform, level, environment)


def replay_kernels_from_events(events: Iterable[dict]) -> list:
    """The graph's kernels in a replay trace: GPU events correlated with a graph launch."""
    return scan_events(events).replay_kernels()
