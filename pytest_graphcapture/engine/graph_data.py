"""Read a captured graph's nodes from torch's own ``CUDAGraph.get_graph_data()``, where that answer is whole.

Why: torch 2.15's ``get_graph_data()`` walks the captured ``cudaGraph_t`` itself and
hands back each node's type, kernel name, grid, block and dynamic shared memory and
the edges between nodes (its docstring in ``torch/cuda/graphs.py`` gives the
structure: top-level ``exec_graph_id``, ``nodes`` — each with ``index``, ``node_type``,
``kernel_name``, ``grid_dim``, ``block_dim``, ``shared_mem_bytes``, ``dependencies``,
``dependents`` among others — and ``edges``, each ``from``/``to`` node indices with
``from_port``, ``to_port`` and ``type``).  It needs the graph instantiated and its
template live: ``keep_graph=True``, or an instantiate hook (torch caches the answer
for the hooks of one ``instantiate()``).

The answer is used only where it says everything the summary needs; otherwise
:func:`graph_from_data` raises :class:`GraphDataUnusable` saying why, and the caller
reads the graph through cuda-bindings (:mod:`.graph_readout`), else the replay:

* the older form (torch 2.13/2.14: no launch shapes, no ``edges``) — probed on the
  payload (:func:`~pytest_graphcapture.summary.platform.graph_data_has_launches`);
* a ``child_graph`` or ``conditional`` node: torch does not descend into its bodies,
  so their kernels would be missing;
* a ``memcpy`` node: the answer does not say the copy's direction, which the summary
  names (``Memcpy DtoD …``);
* a kernel node without a name or a launch shape (torch reads the name only through
  ``cuFuncGetName``: a library kernel's node has none).
"""

from __future__ import annotations

import warnings
from typing import Any

from ..errors import GraphCaptureError
from ..summary.graph import CapturedGraph, GraphNode, Launch
from ..summary.platform import graph_data_has_launches

#: ``get_graph_data()``'s ``node_type`` names (torch/cuda/graphs.py) → the model's node types.
NODE_TYPES = {
    "kernel": "kernel",
    "memset": "memset",
    "host": "host",
    "empty": "empty",
    "wait_event": "event_wait",
    "event_record": "event_record",
    "mem_alloc": "mem_alloc",
    "mem_free": "mem_free",
    "batch_mem_op": "batch_mem_op",
}
#: Node types whose content the answer lacks: torch does not descend into bodies, nor say a copy's direction.
UNREADABLE = {
    "child_graph": "a child-graph node, whose body torch's walk does not descend into",
    "conditional": "a conditional node, whose bodies torch's walk does not descend into",
    "memcpy": "a memcpy node, whose direction the answer does not give",
}


class GraphDataUnusable(GraphCaptureError):
    """``get_graph_data()`` gave no answer, or one that lacks what the summary needs; ``reason`` says which."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(f"CUDAGraph.get_graph_data(): {reason}")


def graph_from_data(payload: Any) -> CapturedGraph:
    """The :class:`CapturedGraph` of a ``get_graph_data()`` answer; :class:`GraphDataUnusable` where it is not whole."""
    if not graph_data_has_launches(payload):
        raise GraphDataUnusable("the answer has no launch shapes or no edges (torch before 2.15)")
    graph = CapturedGraph(ident="graph")
    nodes = payload["nodes"]
    for position, entry in enumerate(nodes):
        kind = entry["node_type"]
        if entry["index"] != position:
            raise GraphDataUnusable(f"node {position} says it is node {entry['index']!r}")
        if kind in UNREADABLE:
            raise GraphDataUnusable(f"node {position} is {UNREADABLE[kind]}")
        node = GraphNode(f"graph.{position}", NODE_TYPES.get(kind, str(kind)))
        if node.type == "kernel":
            name, grid, block, shared = (entry[f] for f in ("kernel_name", "grid_dim", "block_dim", "shared_mem_bytes"))
            if not name or grid is None or block is None or shared is None:
                raise GraphDataUnusable(f"kernel node {position} has no name or no launch shape")
            node.name = str(name)
            node.launch = Launch(_dims(grid), _dims(block), int(shared))
        graph.nodes.append(node)
    for edge in payload["edges"]:
        source, target = edge.get("from"), edge.get("to")
        if not all(isinstance(i, int) and 0 <= i < len(nodes) for i in (source, target)):
            raise GraphDataUnusable(f"an edge names a node that is not listed ({source!r} -> {target!r})")
        graph.edges.append((source, target))
    return graph


def _dims(value: Any) -> tuple[int, int, int]:
    x, y, z = (int(v) for v in value)
    return (x, y, z)


def read_graph_data(cuda_graph: Any) -> CapturedGraph:
    """``cuda_graph.get_graph_data()`` as a :class:`CapturedGraph`; :class:`GraphDataUnusable` saying why not.

    torch raises RuntimeError without cuda-bindings or a driver below 13.1, and warns
    (rather than fails) for child-graph and conditional nodes — both mean the answer
    cannot be used, so both become :class:`GraphDataUnusable`.
    """
    method = getattr(cuda_graph, "get_graph_data", None)
    if not callable(method):
        raise GraphDataUnusable("this torch has no CUDAGraph.get_graph_data")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch's warning on nested graphs: the nodes say it too
        try:
            payload = method()
        except (RuntimeError, AttributeError, TypeError) as exc:
            raise GraphDataUnusable(f"{type(exc).__name__}: {exc}") from None
    return graph_from_data(payload)


__all__ = ["GraphDataUnusable", "graph_from_data", "read_graph_data"]
