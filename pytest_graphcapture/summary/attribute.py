"""Which CPU op launched each kernel: the innermost op enclosing the launch call on its thread.

A kernel swap (a library bump sends a GEMM shape to another kernel) only reads as a
swap when the diff can say which op and which input shapes launched the old and the
new kernel.  The link is:

* GPU event → launch runtime call: equal ``correlation`` ids (eager traces); in a
  capture window the launch call itself is the evidence (ROCm names the kernel there);
* launch call → op: the innermost ``cpu_op`` whose ``[ts, ts + dur]`` holds the
  launch's ``ts`` *on the launching thread* (``tid``).  Ops on one thread nest
  properly, so one sweep with a stack finds the innermost op of every launch.

The op is stored as ``{"name", "input_dims"}``: what stays equal run to run (no
timestamps or ids).  A launch outside every op stays unattributed.
"""

from __future__ import annotations

import json
from typing import Any, Iterable, Optional

#: Why kernels from an NVIDIA graph replay carry no op: the replay ran inside one
#: ``cudaGraphLaunch`` and the capture's launch calls name no kernel to match them by.
REPLAY_UNATTRIBUTED = (
    "the graph replay's kernels are not linked to the capture's launch calls (the trace carries no graph "
    "node ids), so they name no launching op"
)


def enclosing_ops(spans: Any, launches: list[tuple[Any, Any]]) -> list[Optional[dict]]:
    """For each ``(ts, tid)`` launch, the innermost op of ``spans`` enclosing ``ts`` on ``tid`` (None if none).

    ``spans`` holds the collected op spans (:class:`~.collect.Collector`: ``span_start``,
    ``span_end``, ``span_tid``, ``span_ref`` and the ``op_refs`` they point to).  A
    launch on a thread that ran no op (live profiles of old torch builds number
    threads differently for ops and runtime calls) is matched against every thread's
    ops together, the best evidence left.
    """
    result: list[Optional[dict]] = [None] * len(launches)
    by_thread: dict[Any, list[int]] = {}
    span_tid = spans.span_tid
    threads: dict[Any, list[int]] = {}
    for index, tid in enumerate(span_tid):
        members = threads.get(tid)
        if members is None:
            threads[tid] = [index]
        else:
            members.append(index)
    for index, (ts, tid) in enumerate(launches):
        if ts is not None:
            by_thread.setdefault(tid if tid in threads else _ANY, []).append(index)
    if not by_thread:
        return result
    order = _span_order(spans)
    for members in threads.values():
        members.sort(key=order)
    starts, ends, refs, ops = spans.span_start, spans.span_end, spans.span_ref, spans.op_refs
    for tid, indices in by_thread.items():
        if tid is _ANY:
            items = sorted((i for members in threads.values() for i in members), key=order)
        else:
            items = threads[tid]
        indices.sort(key=lambda i: launches[i][0])
        stack: list = []
        position = 0
        count = len(items)
        for index in indices:
            ts = launches[index][0]
            while position < count and starts[items[position]] <= ts:
                span = items[position]
                while stack and ends[stack[-1]] < starts[span]:
                    stack.pop()
                stack.append(span)
                position += 1
            while stack and ends[stack[-1]] < ts:
                stack.pop()
            if stack:
                result[index] = ops[refs[stack[-1]]]
    return result


_ANY = object()


def _span_order(spans: Any) -> Any:
    """Sort key of a span index: outer spans first; equal spans in one fixed order (op name, then dims)."""
    ops = spans.op_refs
    ranked = sorted(range(len(ops)), key=lambda r: (ops[r]["name"], json.dumps(ops[r]["input_dims"])))
    rank = [0] * len(ops)
    for position, ref in enumerate(ranked):
        rank[ref] = position
    starts, ends, refs = spans.span_start, spans.span_end, spans.span_ref
    return lambda i: (starts[i], -ends[i], rank[refs[i]])


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
