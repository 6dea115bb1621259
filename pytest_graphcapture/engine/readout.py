"""Read a captured CUDA graph's nodes in process, through NVIDIA's cuda-bindings."""

from __future__ import annotations

import importlib.metadata
import re
import warnings
from types import ModuleType
from typing import Any, Callable, Optional

from ..errors import GraphCaptureError
from ..summary.graph import CapturedGraph, GraphNode, Launch, copy_direction
from ..summary.platform import graph_data_has_launches

#: The runtime's node type names (``cudaGraphNodeType<Name>``) → the model's node types.
NODE_TYPES = {
    "Kernel": "kernel",
    "Memcpy": "memcpy",
    "Memset": "memset",
    "Host": "host",
    "Graph": "graph",
    "Empty": "empty",
    "WaitEvent": "event_wait",
    "EventRecord": "event_record",
    "ExtSemaphoreSignal": "ext_semas_signal",
    "ExtSemaphoreWait": "ext_semas_wait",
    "MemAlloc": "mem_alloc",
    "MemFree": "mem_free",
    "Conditional": "conditional",
    "MemcpyBatch": "memcpy_batch",
    "ExternalEngine": "external_engine",
}
#: Every call the readout makes: its module, its parameters and the results after the error.
CALLS: dict[str, tuple[str, tuple[str, ...], tuple[str, ...]]] = {
    "cudaGraphGetNodes": ("runtime", ("graph", "numNodes"), ("nodes", "numNodes")),
    "cudaGraphGetEdges_v2": ("runtime", ("graph", "numEdges"), ("from", "to", "edgeData", "numEdges")),
    "cudaGraphGetEdges": ("runtime", ("graph", "numEdges"), ("from", "to", "edgeData", "numEdges")),
    "cudaGraphNodeGetType": ("runtime", ("node",), ("pType",)),
    "cudaGraphMemcpyNodeGetParams": ("runtime", ("node",), ("pNodeParams",)),
    "cudaGraphChildGraphNodeGetGraph": ("runtime", ("node",), ("pGraph",)),
    "cudaGraphNodeGetParams": ("runtime", ("node",), ("nodeParams",)),
    "cuGraphKernelNodeGetParams": ("driver", ("hNode",), ("nodeParams",)),
    "cuFuncGetName": ("driver", ("hfunc",), ("name",)),
    "cuKernelGetName": ("driver", ("hfunc",), ("name",)),
}
#: The cuda-bindings release that first has ``cudaGraphNodeGetParams`` (a conditional node's bodies).
CONDITIONAL_BODIES_SINCE = "13.2"
MISSING_BINDINGS = (
    "cuda-bindings is not installed, so kernels are not read from the captured graph itself; "
    "pip install 'pytest-graphcapture[cuda]' to read them"
)


class GraphReadoutWarning(UserWarning):
    """The in-process graph readout is unavailable; the kernels come from where they came from before."""


class GraphReadoutError(GraphCaptureError):
    """A call of the readout failed: ``call`` names it and ``error`` is the error the runtime returned."""

    def __init__(self, call: str, error: object, problem: Optional[str] = None) -> None:
        self.call = call
        self.error = error
        super().__init__(f"reading the captured graph: {call} {problem or f'failed with {_error_name(error)}'}")


#: What :func:`say_once` has said in this process.
_said: set[str] = set()


def say_once(message: str) -> None:
    """``message`` as a :class:`GraphReadoutWarning`, once per process: it holds for every graph read after."""
    if message not in _said:
        _said.add(message)
        warnings.warn(message, GraphReadoutWarning, stacklevel=3)


def load_bindings() -> Optional[tuple[ModuleType, ModuleType]]:
    """``(cuda.bindings.runtime, cuda.bindings.driver)``, or None — said once per process — when not installed."""
    try:
        from cuda.bindings import driver, runtime
    except ImportError:
        say_once(MISSING_BINDINGS)
        return None
    return runtime, driver


def read_captured_graph(
    graph: Any, *, runtime: Optional[ModuleType] = None, driver: Optional[ModuleType] = None
) -> Optional[CapturedGraph]:
    """The nodes and edges of the raw CUDA graph ``graph`` (a ``cudaGraph_t`` or its address as an int)."""
    if runtime is None or driver is None:
        loaded = load_bindings()
        if loaded is None:
            return None
        runtime, driver = loaded
    if isinstance(graph, int):
        graph = runtime.cudaGraph_t(init_value=graph)
    return _Reader(runtime, driver).graph(graph, "graph")


def _error_name(error: object) -> str:
    name = getattr(error, "name", None)
    return f"{name} ({int(error)})" if name is not None else repr(error)  # type: ignore[call-overload]


def _ok(error: object) -> bool:
    return int(error) == 0  # type: ignore[call-overload]


def edges_call(runtime: Any) -> str:
    """The runtime's call for a graph's edges with their data: ``cudaGraphGetEdges_v2`` (12.x), else 13.x's name."""
    return "cudaGraphGetEdges_v2" if hasattr(runtime, "cudaGraphGetEdges_v2") else "cudaGraphGetEdges"


class _Reader:
    """One readout: the bindings and the calls, each checked."""

    def __init__(self, runtime: ModuleType, driver: ModuleType) -> None:
        self.runtime = runtime
        self.driver = driver

    def call(self, name: str, *args: Any) -> tuple:
        """``<module>.<name>(*args)`` as :data:`CALLS` places it, its error checked; the results after it."""
        where, _, results = CALLS[name]
        function: Optional[Callable] = getattr(self.driver if where == "driver" else self.runtime, name, None)
        if function is None:
            raise GraphReadoutError(
                name, None, "is missing from the installed cuda-bindings; pip install -U 'pytest-graphcapture[cuda]'"
            )
        result = function(*args)
        if not _ok(result[0]):
            raise GraphReadoutError(name, result[0])
        if len(result) != 1 + len(results):
            shape = ", ".join(("error", *results))
            raise GraphReadoutError(
                name, None, f"returned {len(result)} values where the readout expects {1 + len(results)} ({shape})"
            )
        return tuple(result[1:])

    def graph(self, graph: Any, ident: str) -> CapturedGraph:
        """Nodes in the runtime's order, then the edges between them; child graphs and bodies likewise."""
        root = CapturedGraph(ident=ident)
        pending: list[tuple[Any, CapturedGraph, Any]] = [(graph, root, None)]
        while pending:
            handle, model, _keep = pending.pop()  # ``_keep``: the parameters a body handle is a view into
            self.fill(handle, model, pending)
        return root

    def fill(self, graph: Any, model: CapturedGraph, pending: list) -> None:
        """Read ``graph``'s nodes and edges into ``model``; the graphs its nodes hold go on ``pending``."""
        count = self.call("cudaGraphGetNodes", graph, 0)[-1]
        handles, count = self.call("cudaGraphGetNodes", graph, count) if count else ([], 0)
        ident = model.ident
        position = {}
        for i, handle in enumerate(handles[:count]):
            position[int(handle)] = i
            node, children, keep = self.node(handle, f"{ident}.{i}")
            model.nodes.append(node)
            for child_handle, child_ident in children:
                child = CapturedGraph(ident=child_ident)
                node.children.append(child)
                pending.append((child_handle, child, keep))
        # Edge data (ports, programmatic edges) is never read: before 13.3.0 the bindings hand it back as
        # views into a buffer they have already freed, and a summary must be the same with every release.
        edges = edges_call(self.runtime)
        edge_count = self.call(edges, graph, 0)[-1]
        if edge_count:
            sources, targets, _, edge_count = self.call(edges, graph, edge_count)
            for source, target in zip(sources[:edge_count], targets[:edge_count]):
                model.edges.append((position[int(source)], position[int(target)]))

    def node(self, handle: Any, ident: str) -> tuple[GraphNode, list[tuple[Any, str]], Any]:
        """The node, the graphs it holds (handle, ident) still to read, and what their handles need kept alive."""
        kind = self.call("cudaGraphNodeGetType", handle)[0]
        name = getattr(kind, "name", str(kind)).removeprefix("cudaGraphNodeType")
        node = GraphNode(ident, NODE_TYPES.get(name, name.lower()))
        children: list[tuple[Any, str]] = []
        keep = None
        if node.type == "kernel":
            node.name, node.launch = self.kernel(handle)
        elif node.type == "memcpy":
            params = self.call("cudaGraphMemcpyNodeGetParams", handle)[0]
            kind_name = getattr(params.kind, "name", str(params.kind))
            node.name = copy_direction(kind_name)
        elif node.type == "graph":
            children.append((self.call("cudaGraphChildGraphNodeGetGraph", handle)[0], f"{ident}/graph"))
        elif node.type == "conditional":
            if not hasattr(self.runtime, "cudaGraphNodeGetParams"):
                raise GraphReadoutError(
                    "cudaGraphNodeGetParams",
                    None,
                    "is missing from the installed cuda-bindings, so a conditional node's body graphs cannot be "
                    f"read; pip install 'cuda-bindings>={CONDITIONAL_BODIES_SINCE}' (with a driver for CUDA "
                    f"{CONDITIONAL_BODIES_SINCE} or newer)",
                )
            # The conditional parameters are a view into this struct: it must outlive their use.
            keep = params = self.call("cudaGraphNodeGetParams", handle)[0]
            conditional = params.conditional
            bodies = list(conditional.phGraph_out)[: int(conditional.size)]
            node.name = _condition_kind(getattr(conditional, "type", None))
            children += [(body, f"{ident}/body{b}") for b, body in enumerate(bodies)]
        return node, children, keep

    def kernel(self, handle: Any) -> tuple[str, Launch]:
        """The kernel's name and launch shape, through the driver: its function, else its library kernel."""
        params = self.call("cuGraphKernelNodeGetParams", handle)[0]
        launch = Launch(
            (int(params.gridDimX), int(params.gridDimY), int(params.gridDimZ)),
            (int(params.blockDimX), int(params.blockDimY), int(params.blockDimZ)),
            int(params.sharedMemBytes),
        )
        if int(params.func):
            return _text(self.call("cuFuncGetName", params.func)[0]), launch
        return _text(self.call("cuKernelGetName", params.kern)[0]), launch


#: A conditional node's kinds (``cudaGraphCondType<Kind>``): ``if``/``switch`` run one body or none, ``while`` any.
_CONDITION_KINDS = {"If": "if", "While": "while", "Switch": "switch"}


def _condition_kind(kind: Any) -> str:
    """A conditional node's kind (``if``, ``while``, ``switch``) from the runtime's enum; empty when unknown."""
    name = str(getattr(kind, "name", "") or "").removeprefix("cudaGraphCondType")
    return _CONDITION_KINDS.get(name, "")


def _text(name: Any) -> str:
    return name.decode("utf-8", "replace") if isinstance(name, (bytes, bytearray)) else str(name)


#: ``get_graph_data()``'s ``node_type`` names (torch/cuda/graphs.py) → the model's node types.
_DATA_NODE_TYPES = {
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
        node = GraphNode(f"graph.{position}", _DATA_NODE_TYPES.get(kind, str(kind)))
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
        graph.edges.append((source, target))  # ports and types are left out, as in _Reader.fill
    return graph


def _dims(value: Any) -> tuple[int, int, int]:
    x, y, z = (int(v) for v in value)
    return (x, y, z)


def bindings_version() -> Optional[str]:
    """The installed cuda-bindings release, or None."""
    try:
        return importlib.metadata.version("cuda-bindings")
    except importlib.metadata.PackageNotFoundError:
        return None


def edge_data_trusted(version: str) -> bool:
    """Whether cuda-bindings ``version`` owns the edge data (ports, types) it returns: 13.3.0 on, or 12.9.7 to 12.x
    (before, ``cudaGraphGetEdges`` hands it back from a freed buffer: cuda-python #1804)."""
    release = tuple(int(part) for part in re.findall(r"\d+", version)[:3])
    return release >= (13, 3, 0) or (12, 9, 7) <= release < (13,)


def read_graph_data(cuda_graph: Any) -> CapturedGraph:
    """``cuda_graph.get_graph_data()`` as a :class:`CapturedGraph`; :class:`GraphDataUnusable` saying why not."""
    method = getattr(cuda_graph, "get_graph_data", None)
    if not callable(method):
        raise GraphDataUnusable("this torch has no CUDAGraph.get_graph_data")
    version = bindings_version()
    if version is not None and not edge_data_trusted(version):
        reason = f"cuda-bindings {version} returns edge ports from freed memory (fixed in 13.3.0 and 12.9.7)"
        say_once(
            f"{reason}, so torch's get_graph_data() is not asked and no port is read: graphs are read by the "
            "cuda-bindings walk (kernel_source 'graph'); pip install -U 'cuda-bindings>=13.3' to use it"
        )
        raise GraphDataUnusable(reason)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch's warning on nested graphs: the nodes say it too
        try:
            payload = method()
        except (RuntimeError, AttributeError, TypeError) as exc:
            raise GraphDataUnusable(f"{type(exc).__name__}: {exc}") from None
    return graph_from_data(payload)
