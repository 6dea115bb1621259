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

from .normalize import normalize_op_name

#: Why kernels from an NVIDIA graph replay carry no op: the replay ran inside one
#: ``cudaGraphLaunch`` and the capture's launch calls name no kernel to match them by.
REPLAY_UNATTRIBUTED = (
    "the graph replay's kernels are not linked to the capture's launch calls (the trace carries no graph "
    "node ids), so they name no launching op"
)


def _number(value: Any) -> Optional[float]:
    return value if value.__class__ in (int, float) else None


def op_spans(cpu_ops: Iterable[dict]) -> dict[Any, list]:
    """``{tid: [(start, end, op), ...]}`` sorted by start, outer ops before inner ones starting together.

    ``op`` is the ``{"name", "input_dims"}`` dict kernels carry; events without a
    number ``ts``/``dur`` or a string name are skipped.
    """
    spans: dict[Any, list] = {}
    for event in cpu_ops:
        name = event.get("name")
        start = _number(event.get("ts"))
        dur = _number(event.get("dur"))
        if name.__class__ is not str or start is None or dur is None:
            continue
        args = event.get("args")
        dims = args.get("Input Dims") if args.__class__ is dict else None
        op = {"name": normalize_op_name(name), "input_dims": dims if isinstance(dims, list) else []}
        spans.setdefault(event.get("tid"), []).append((start, start + dur, op))
    for items in spans.values():
        items.sort(key=_span_order)
    return spans


def enclosing_ops(spans: dict[Any, list], launches: list[tuple[Any, Any]]) -> list[Optional[dict]]:
    """For each ``(ts, tid)`` launch, the innermost op of ``spans`` enclosing ``ts`` on ``tid`` (None if none).

    A launch on a thread that ran no op (live profiles of old torch builds number
    threads differently for ops and runtime calls) is matched against every thread's
    ops together, the best evidence left.
    """
    result: list[Optional[dict]] = [None] * len(launches)
    by_thread: dict[Any, list[int]] = {}
    for index, (ts, tid) in enumerate(launches):
        if ts is not None:
            by_thread.setdefault(tid if tid in spans else _ANY, []).append(index)
    for tid, indices in by_thread.items():
        items = spans[tid] if tid is not _ANY else sorted((s for v in spans.values() for s in v), key=_span_order)
        indices.sort(key=lambda i: launches[i][0])
        stack: list = []
        position = 0
        for index in indices:
            ts = launches[index][0]
            while position < len(items) and items[position][0] <= ts:
                span = items[position]
                while stack and stack[-1][1] < span[0]:
                    stack.pop()
                stack.append(span)
                position += 1
            while stack and stack[-1][1] < ts:
                stack.pop()
            if stack:
                result[index] = stack[-1][2]
    return result


_ANY = object()


def _span_order(span: tuple) -> tuple:
    """Outer spans first; equal spans in one fixed order, so event order never changes the result."""
    return (span[0], -span[1], span[2]["name"], json.dumps(span[2]["input_dims"]))


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
