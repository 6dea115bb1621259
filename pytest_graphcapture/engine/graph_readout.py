"""Read a captured CUDA graph's nodes in process, through NVIDIA's cuda-bindings.

Why: after capture the graph object knows exactly what it launches — each node's
type, each kernel's function, grid, block and dynamic shared memory, memsets,
copies, child graphs and the dependencies — so the kernel set need not come
second-hand from a profiled replay.  This module walks a raw ``cudaGraph_t`` into
the same :class:`~pytest_graphcapture.summary.graph.CapturedGraph` the DOT reader
(:mod:`pytest_graphcapture.summary.dot`) builds from a dump, so everything after
the readout is shared.

The calls (``cuda.bindings.runtime`` unless named): ``cudaGraphGetNodes``,
``cudaGraphNodeGetType``, ``cudaGraphKernelNodeGetParams`` with
``cudaFuncGetName`` — and for a kernel the runtime cannot name (one launched
through the driver API, as Triton's are) the driver's
``cuGraphKernelNodeGetParams`` with ``cuFuncGetName`` —,
``cudaGraphMemcpyNodeGetParams`` (the copy's kind), ``cudaGraphChildGraphNodeGetGraph``
(child graphs, read recursively), ``cudaGraphNodeGetParams`` (a conditional node's
body graphs) and ``cudaGraphGetEdges``.  Each returns its error first, as
cuda-bindings functions do.

cuda-bindings is an optional extra (``pip install pytest-graphcapture[cuda]``).
Without it :func:`read_captured_graph` says so once (a :class:`GraphReadoutWarning`)
and returns None: the caller falls back to what it had (the profiler replay).
"""

from __future__ import annotations

import warnings
from types import ModuleType
from typing import Any, Callable, Optional

from ..errors import GraphCaptureError
from ..summary.graph import CapturedGraph, GraphNode, Launch, copy_direction

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
}
MISSING_BINDINGS = (
    "cuda-bindings is not installed, so kernels are not read from the captured graph itself; "
    "pip install 'pytest-graphcapture[cuda]' to read them"
)


class GraphReadoutWarning(UserWarning):
    """The in-process graph readout is unavailable; the kernels come from where they came from before."""


class GraphReadoutError(GraphCaptureError):
    """A call of the readout failed: ``call`` names it and ``error`` is the error the runtime returned."""

    def __init__(self, call: str, error: object) -> None:
        self.call = call
        self.error = error
        super().__init__(f"reading the captured graph: {call} failed with {_error_name(error)}")


_said_missing = False


def load_bindings() -> Optional[tuple[ModuleType, ModuleType]]:
    """``(cuda.bindings.runtime, cuda.bindings.driver)``, or None — said once per process — when not installed."""
    global _said_missing
    try:
        from cuda.bindings import driver, runtime
    except ImportError:
        if not _said_missing:
            _said_missing = True
            warnings.warn(MISSING_BINDINGS, GraphReadoutWarning, stacklevel=2)
        return None
    return runtime, driver


def read_captured_graph(
    graph: Any, *, runtime: Optional[ModuleType] = None, driver: Optional[ModuleType] = None
) -> Optional[CapturedGraph]:
    """The nodes and edges of the raw CUDA graph ``graph`` (a ``cudaGraph_t`` or its address as an int).

    ``runtime`` and ``driver`` are the cuda-bindings modules (loaded when not given);
    None when they are not installed.  Raises :class:`GraphReadoutError` when a call fails.
    """
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


class _Reader:
    """One readout: the bindings and the calls, each checked."""

    def __init__(self, runtime: ModuleType, driver: ModuleType) -> None:
        self.runtime = runtime
        self.driver = driver

    def call(self, name: str, *args: Any) -> tuple:
        """``runtime.<name>(*args)`` (``cu…`` names: the driver's), its error checked; the results after it."""
        module = self.driver if name.startswith("cu") and not name.startswith("cuda") else self.runtime
        function: Callable = getattr(module, name)
        result = function(*args)
        if not _ok(result[0]):
            raise GraphReadoutError(name, result[0])
        return tuple(result[1:])

    def graph(self, graph: Any, ident: str) -> CapturedGraph:
        """Nodes in the runtime's order, then the edges between them."""
        count = self.call("cudaGraphGetNodes", graph, 0)[-1]
        handles = list(self.call("cudaGraphGetNodes", graph, count)[0] or []) if count else []
        model = CapturedGraph(ident=ident)
        position = {}
        for i, handle in enumerate(handles):
            position[int(handle)] = i
            model.nodes.append(self.node(handle, f"{ident}.{i}"))
        edge_count = self.call("cudaGraphGetEdges", graph, 0)[-1]
        if edge_count:
            result = self.call("cudaGraphGetEdges", graph, edge_count)
            for source, target in zip(result[0], result[1]):
                model.edges.append((position[int(source)], position[int(target)]))
        return model

    def node(self, handle: Any, ident: str) -> GraphNode:
        kind = self.call("cudaGraphNodeGetType", handle)[0]
        name = getattr(kind, "name", str(kind)).removeprefix("cudaGraphNodeType")
        node = GraphNode(ident, NODE_TYPES.get(name, name.lower()))
        if node.type == "kernel":
            node.name, node.launch = self.kernel(handle)
        elif node.type == "memcpy":
            params = self.call("cudaGraphMemcpyNodeGetParams", handle)[0]
            kind_name = getattr(params.kind, "name", str(params.kind))
            node.name = copy_direction(kind_name)
        elif node.type == "graph":
            child = self.call("cudaGraphChildGraphNodeGetGraph", handle)[0]
            node.children.append(self.graph(child, f"{ident}/graph"))
        elif node.type == "conditional":
            params = self.call("cudaGraphNodeGetParams", handle)[0].conditional
            bodies = list(params.phGraph_out)[: int(params.size)]
            node.children += [self.graph(body, f"{ident}/body{b}") for b, body in enumerate(bodies)]
        return node

    def kernel(self, handle: Any) -> tuple[str, Launch]:
        """The kernel's name and launch shape: through the runtime, else through the driver."""
        result = self.runtime.cudaGraphKernelNodeGetParams(handle)
        if _ok(result[0]):
            params = result[1]
            launch = Launch(_dim3(params.gridDim), _dim3(params.blockDim), int(params.sharedMemBytes))
            named = self.runtime.cudaFuncGetName(params.func)
            if _ok(named[0]) and named[1]:
                return _text(named[1]), launch
        else:
            launch = None
        params = self.call("cuGraphKernelNodeGetParams", self.driver.CUgraphNode(init_value=int(handle)))[0]
        if launch is None:
            launch = Launch(
                (int(params.gridDimX), int(params.gridDimY), int(params.gridDimZ)),
                (int(params.blockDimX), int(params.blockDimY), int(params.blockDimZ)),
                int(params.sharedMemBytes),
            )
        return _text(self.call("cuFuncGetName", params.func)[0]), launch


def _dim3(dims: Any) -> tuple[int, int, int]:
    return int(dims.x), int(dims.y), int(dims.z)


def _text(name: Any) -> str:
    return name.decode("utf-8", "replace") if isinstance(name, (bytes, bytearray)) else str(name)
