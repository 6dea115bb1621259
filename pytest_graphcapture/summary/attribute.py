"""Which CPU op launched each kernel: the innermost op enclosing the launch call on its thread.

A kernel swap (a library bump sends a GEMM shape to another kernel) only reads as a
swap when the diff can say which op and which input shapes launched the old and the
new kernel.  The link is:

* GPU event → launch runtime call: equal ``correlation`` ids (eager traces); in a
  capture window the launch call itself is the evidence (ROCm names the kernel there);
* launch call → op: the innermost ``cpu_op`` whose ``[ts, ts + dur]`` holds the
  launch's ``ts`` *on the launching thread* (``pid`` and ``tid``: thread ids are per
  process).  Ops on one thread nest properly, so one sweep with a stack finds the
  innermost op of every launch.

The op is stored as ``{"name", "input_dims"}``: what stays equal run to run (no
timestamps or ids).  A launch outside every op stays unattributed.
"""

from __future__ import annotations

import json
from array import array
from typing import Any, Iterable, Optional, Sequence

#: Why kernels from an NVIDIA graph replay carry no op: the replay ran inside one ``cudaGraphLaunch``,
#: the capture's launch calls name no kernel, and the trace has no graph node ids to match them by.
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


def enclosing_ops(spans: Any, launch_ts: Sequence[float], launch_tid: Sequence[int]) -> list[int]:
    """For each launch, the op index (into ``spans.op_refs``) of the innermost op enclosing it, -1 if none.

    ``spans`` holds the collected op spans (:class:`~.collect.Collector`: ``span_start``,
    ``span_end``, ``span_tid``, ``span_ref``); a launch is its time (``NaN``: none) and
    its thread index.  A launch on a thread that ran no op (live profiles of old
    torch builds number threads differently for ops and runtime calls) is matched
    against the ops of every thread of its process together, the best evidence left
    (every thread's, when the launch names no process).
    """
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
        """``indices`` in span order (stable), as a compact array.

        Sorting by start alone needs no key tuples (spans are millions in a large
        trace); only runs of equal starts are then ordered by the full key.
        """
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
