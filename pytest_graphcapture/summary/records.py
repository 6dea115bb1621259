"""The typed records the fast slice parser decodes events into, and how they are handed to a collector.

With `msgspec <https://jcristharif.com/msgspec/>`_ installed, a slice of events is
decoded into records holding only the fields a summary reads (``name``, ``cat``,
``ts``, ``dur``, ``tid``, ``pid`` and eight ``args`` fields, the op shapes left as
JSON text); :func:`feed_records` hands them to a :class:`~.collect.Collector` with
the rules of ``Collector.feed_dicts``, so both parsers give the same summary.
"""

from __future__ import annotations

from typing import Any, Optional

from .collect import _GPU_CATS, _RUNTIME_CATS, GRAPH_NODE_ARG, MISSING, Collector

try:  # the fast parser; the stdlib does the same work more slowly without it
    import msgspec
except ImportError:  # pragma: no cover - exercised by the tests through FAST_PARSER = False
    msgspec = None

if msgspec is not None:

    class _Args(msgspec.Struct):
        correlation: Any = None
        kernel: Any = None
        grid: Any = None
        block: Any = None
        graph_node_id: Any = msgspec.field(default=None, name=GRAPH_NODE_ARG)
        stream: Any = None
        # Kept as JSON text: parsing them into lists costs more than grouping by their text.
        input_dims: msgspec.Raw = msgspec.field(default=msgspec.UNSET, name="Input Dims")
        input_type: msgspec.Raw = msgspec.field(default=msgspec.UNSET, name="Input type")

    class _Event(msgspec.Struct):
        name: Any = None
        cat: Any = None
        ts: Any = None
        dur: Any = None
        tid: Any = None
        pid: Any = None
        args: Optional[_Args] = None

    DECODER = msgspec.json.Decoder(list[_Event])
    _UNSET = msgspec.UNSET


def feed_records(collector: Collector, events: list) -> None:
    """Hand typed records (msgspec) to ``collector`` with the rules of ``Collector.feed_dicts``."""
    runtime_cats = _RUNTIME_CATS
    gpu_cats = _GPU_CATS
    unset = _UNSET
    add_op = collector.add_op
    add_runtime = collector.add_runtime
    add_gpu = collector.add_gpu
    for event in events:
        cat = event.cat
        if cat.__class__ is not str:  # a list or object is no category a summary reads
            continue
        if cat == "cpu_op":
            name = event.name
            if name.__class__ is str:
                args = event.args
                if args is None:
                    add_op(name, event.ts, event.dur, event.tid, MISSING, MISSING, event.pid)
                else:
                    dims = args.input_dims
                    types = args.input_type
                    add_op(
                        name,
                        event.ts,
                        event.dur,
                        event.tid,
                        MISSING if dims is unset else bytes(dims),
                        MISSING if types is unset else bytes(types),
                        event.pid,
                    )
        elif cat in runtime_cats:
            name = event.name
            if name.__class__ is str:
                args = event.args
                if args is None:
                    add_runtime(name, event.ts, event.tid, None, None, None, None, event.pid)
                else:
                    add_runtime(
                        name,
                        event.ts,
                        event.tid,
                        args.correlation,
                        args.kernel,
                        args.grid,
                        args.block,
                        event.pid,
                        args.stream,
                    )
        elif cat in gpu_cats:
            name = event.name
            if name.__class__ is str:
                args = event.args
                if args is None:
                    add_gpu(gpu_cats[cat], name, event.ts, None, None, None)
                else:
                    add_gpu(gpu_cats[cat], name, event.ts, args.correlation, args.grid, args.block, args.graph_node_id)
        elif cat == "user_annotation":
            name = event.name
            if name.__class__ is str:
                collector.add_annotation(name, event.ts, event.dur, event.pid)
