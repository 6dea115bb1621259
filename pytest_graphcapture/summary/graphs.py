"""Keys of several graphs: one capture key whose span holds more than one captured graph.

A piecewise capture (vLLM's PIECEWISE mode) records one graph per piece between the
eagerly run attention ops, and an engine may capture more than one graph for one
batch size.  Such a key keeps each graph, in capture order, as a Summary of its own
(``Summary.graphs``); the key's own kernels, ops and launches are their sum, so
everything that reads a key as a whole (launch budgets, reports, the kernel table)
reads it as before.  A key of one graph has no ``graphs`` and is stored exactly as
it always was.
"""

from __future__ import annotations

import copy
import json
from typing import Sequence

from ..errors import UsageError
from .model import Summary, _merge_kernel


def of_graphs(graphs: Sequence[Summary]) -> Summary:
    """The Summary of one key made of ``graphs`` (in capture order); the one graph itself when there is one.

    The graphs share the key, platform and level.  The sum is complete when every
    graph is; the reason of an incomplete one names the graph (``graph 2 of 3: …``).
    """
    if not graphs:
        raise UsageError("a key needs at least one graph")
    if len(graphs) == 1:
        return graphs[0]
    first = graphs[0]
    for g in graphs[1:]:
        if (g.key, g.platform, g.level) != (first.key, first.platform, first.level):
            raise UsageError(f"the graphs of {first.key} must share its key, platform and level")
    merged: dict = {}
    ops: dict = {}
    by_api: dict = {}
    total = 0
    reasons = []
    for number, g in enumerate(graphs, 1):
        for k in g.kernels:
            _merge_kernel(
                merged,
                k["name"],
                k.get("kind", "kernel"),
                k.get("grid"),
                k.get("block"),
                k["count"],
                k.get("op"),
                k.get("launch"),
            )
        for o in g.ops:
            okey = (o["name"], json.dumps(o["input_dims"]), json.dumps(o["input_types"]))
            entry = ops.get(okey)
            if entry is None:
                entry = ops[okey] = {**o, "count": 0}
            entry["count"] += o["count"]
        total += g.launches["total"]
        for api, n in g.launches["by_api"].items():
            by_api[api] = by_api.get(api, 0) + n
        if not g.complete:
            reasons.append(f"graph {number} of {len(graphs)}: {g.incomplete_reason or 'no reason given'}")
    whole = copy.copy(first)
    whole.kernels = list(merged.values())
    whole.ops = list(ops.values())
    whole.launches = {"total": total, "by_api": by_api}
    whole.complete = not reasons
    whole.incomplete_reason = "; ".join(reasons) or None
    whole.kernel_source = next((g.kernel_source for g in graphs if g.kernel_source), None)
    whole.unattributed = next((g.unattributed for g in graphs if g.unattributed), None)
    whole.topology = None
    whole.launch_ops = None
    whole.graphs = list(graphs)
    whole.__post_init__()  # canonical order of the sums
    return whole


def graph_count(summary: Summary) -> int:
    """How many graphs a key holds (1 for a key stored without ``graphs``)."""
    return len(summary.graphs) if summary.graphs else 1
