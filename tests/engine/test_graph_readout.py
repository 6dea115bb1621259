"""The in-process graph readout behind a fake of cuda-bindings: the same model as the DOT reader builds.

The fake implements the calls the readout makes the way cuda-bindings spells them
(each returns its error first; handles convert with ``int``; enums have ``name``),
over graphs described here: the same graphs as two of the DOT fixtures, so the
readout must summarize exactly as the dumps do.
"""

from __future__ import annotations

import enum
import sys
import warnings
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Optional

import pytest

from pytest_graphcapture.engine import graph_readout
from pytest_graphcapture.engine.graph_readout import GraphReadoutError, GraphReadoutWarning, read_captured_graph
from pytest_graphcapture.summary.dot import summarize_dot_file

DUMPS = Path(__file__).resolve().parents[1] / "data" / "graph_dumps"
REDUCE = (
    "_ZN2at6native13reduce_kernelILi128ELi4ENS0_8ReduceOpIfNS0_14func_wrapper_tIfZNS0_11sum_functorIfffEclERNS_14"
    "TensorIteratorEEUlffE_EEjfLi4EEEEEvT1_"
)
DROPOUT = (
    "_ZN2at6native43_GLOBAL__N__50f1b6c4_10_Dropout_cu_0e96ed3824fused_dropout_kernel_vecIffjLi1ELi4EbEEvNS_4cuda6"
    "detail10TensorInfoIKT_T1_EENS5_IS6_S8_EENS5_IT4_S8_EES8_T0_NS_15PhiloxCudaStateE"
)
CUTLASS = "_ZN7cutlass7Kernel2I43cutlass_80_simt_sgemm_256x128_8x4_nt_align1EEvNT_6ParamsE"
FILL = "_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_11FillFunctorIfEESt5arrayIPcLm1EEEEviT0_T1_"


class Error(enum.IntEnum):
    cudaSuccess = 0
    cudaErrorInvalidValue = 1
    cudaErrorInvalidDeviceFunction = 98


class NodeType(enum.IntEnum):
    cudaGraphNodeTypeKernel = 0
    cudaGraphNodeTypeMemcpy = 1
    cudaGraphNodeTypeMemset = 2
    cudaGraphNodeTypeHost = 3
    cudaGraphNodeTypeGraph = 4
    cudaGraphNodeTypeEmpty = 5
    cudaGraphNodeTypeWaitEvent = 6
    cudaGraphNodeTypeEventRecord = 7
    cudaGraphNodeTypeConditional = 13


class MemcpyKind(enum.IntEnum):
    cudaMemcpyHostToDevice = 1
    cudaMemcpyDeviceToHost = 2
    cudaMemcpyDeviceToDevice = 3


class Handle:
    """A cuda-bindings handle: built from an address, converts back with int()."""

    def __init__(self, init_value: int = 0) -> None:
        self.address = init_value

    def __int__(self) -> int:
        return self.address


class FakeCuda:
    """Graphs by address: ``graphs[address] = (nodes, edges)``; a node is a dict of what the calls return."""

    def __init__(self) -> None:
        self.graphs: dict[int, tuple[list[int], list[tuple[int, int]]]] = {}
        self.nodes: dict[int, dict] = {}
        self.functions: dict[int, Optional[str]] = {}  # runtime function handle -> name (None: runtime cannot name it)
        self.driver_functions: dict[int, str] = {}
        self.calls: list[str] = []
        self.fail: dict[str, Error] = {}
        self._next = 0x1000

    def address(self) -> int:
        self._next += 0x10
        return self._next

    def graph(self, nodes: list[dict], edges: list[tuple[int, int]]) -> int:
        """A graph of ``nodes`` (in order) with edges between their indices; returns its address."""
        addresses = []
        for node in nodes:
            address = self.address()
            self.nodes[address] = node
            addresses.append(address)
        graph = self.address()
        self.graphs[graph] = (addresses, [(addresses[a], addresses[b]) for a, b in edges])
        return graph

    def kernel(self, name: str, grid: tuple, block: tuple, smem: int, *, runtime_names_it: bool = True) -> dict:
        function = self.address()
        self.functions[function] = name if runtime_names_it else None
        self.driver_functions[function] = name
        return {
            "type": NodeType.cudaGraphNodeTypeKernel,
            "function": function,
            "grid": grid,
            "block": block,
            "smem": smem,
        }

    # ---- what cuda.bindings.runtime offers
    def _result(self, name: str, *values: Any) -> tuple:
        self.calls.append(name)
        if name in self.fail:
            return (self.fail[name], *([None] * len(values)))
        return (Error.cudaSuccess, *values)

    def cudaGraphGetNodes(self, graph: Handle, count: int = 0) -> tuple:
        nodes = self.graphs[int(graph)][0]
        listed = [Handle(a) for a in nodes[:count]] if count else None
        return self._result("cudaGraphGetNodes", listed, len(nodes))

    def cudaGraphGetEdges(self, graph: Handle, count: int = 0) -> tuple:
        edges = self.graphs[int(graph)][1]
        if not count:
            return self._result("cudaGraphGetEdges", None, None, len(edges))
        return self._result(
            "cudaGraphGetEdges",
            [Handle(a) for a, _ in edges[:count]],
            [Handle(b) for _, b in edges[:count]],
            len(edges),
        )

    def cudaGraphNodeGetType(self, node: Handle) -> tuple:
        return self._result("cudaGraphNodeGetType", self.nodes[int(node)]["type"])

    def cudaGraphKernelNodeGetParams(self, node: Handle) -> tuple:
        n = self.nodes[int(node)]
        dim = lambda d: SimpleNamespace(x=d[0], y=d[1], z=d[2])  # noqa: E731
        params = SimpleNamespace(
            func=n["function"], gridDim=dim(n["grid"]), blockDim=dim(n["block"]), sharedMemBytes=n["smem"]
        )
        return self._result("cudaGraphKernelNodeGetParams", params)

    def cudaFuncGetName(self, function: int) -> tuple:
        name = self.functions[function]
        if name is None:
            self.calls.append("cudaFuncGetName")
            return (Error.cudaErrorInvalidDeviceFunction, None)
        return self._result("cudaFuncGetName", name.encode())

    def cudaGraphMemcpyNodeGetParams(self, node: Handle) -> tuple:
        return self._result("cudaGraphMemcpyNodeGetParams", SimpleNamespace(kind=self.nodes[int(node)]["kind"]))

    def cudaGraphChildGraphNodeGetGraph(self, node: Handle) -> tuple:
        return self._result("cudaGraphChildGraphNodeGetGraph", Handle(self.nodes[int(node)]["child"]))

    def cudaGraphNodeGetParams(self, node: Handle) -> tuple:
        bodies = self.nodes[int(node)]["bodies"]
        conditional = SimpleNamespace(phGraph_out=[Handle(b) for b in bodies], size=len(bodies))
        return self._result("cudaGraphNodeGetParams", SimpleNamespace(conditional=conditional))

    cudaGraph_t = Handle


class FakeDriver:
    """What cuda.bindings.driver offers the readout: kernel params and function names through the driver."""

    def __init__(self, cuda: FakeCuda) -> None:
        self.cuda = cuda

    CUgraphNode = Handle

    def cuGraphKernelNodeGetParams(self, node: Handle) -> tuple:
        n = self.cuda.nodes[int(node)]
        (gx, gy, gz), (bx, by, bz) = n["grid"], n["block"]
        params = SimpleNamespace(
            func=n["function"],
            gridDimX=gx,
            gridDimY=gy,
            gridDimZ=gz,
            blockDimX=bx,
            blockDimY=by,
            blockDimZ=bz,
            sharedMemBytes=n["smem"],
        )
        return self.cuda._result("cuGraphKernelNodeGetParams", params)

    def cuFuncGetName(self, function: int) -> tuple:
        return self.cuda._result("cuFuncGetName", self.cuda.driver_functions[function].encode())


def _two_branch(cuda: FakeCuda, *, driver_named: bool = False) -> int:
    """The graph of tests/data/graph_dumps/cuda_verbose_two_branch.dot."""
    return cuda.graph(
        [
            {"type": NodeType.cudaGraphNodeTypeMemset},
            cuda.kernel("ampere_sgemm_128x64_tn", (16, 10, 2), (128, 1, 1), 0),
            cuda.kernel(DROPOUT, (432, 1, 1), (256, 1, 1), 0, runtime_names_it=not driver_named),
            cuda.kernel("ampere_sgemm_128x64_nn", (16, 10, 4), (128, 1, 1), 0),
            cuda.kernel(CUTLASS, (64, 1, 1), (256, 1, 1), 49152),
            cuda.kernel(REDUCE, (8, 1, 1), (32, 4, 1), 2048),
            {"type": NodeType.cudaGraphNodeTypeMemcpy, "kind": MemcpyKind.cudaMemcpyDeviceToDevice},
        ],
        [(0, 1), (1, 2), (0, 3), (3, 4), (2, 5), (4, 5), (5, 6)],
    )


def _with_child(cuda: FakeCuda) -> int:
    """The graph of tests/data/graph_dumps/cuda_child_graph.dot: a child graph holding a conditional node."""
    body = cuda.graph([cuda.kernel(CUTLASS, (64, 1, 1), (256, 1, 1), 49152)], [])
    child = cuda.graph(
        [
            {"type": NodeType.cudaGraphNodeTypeMemset},
            cuda.kernel("ampere_sgemm_128x64_nn", (16, 10, 4), (128, 1, 1), 0),
            cuda.kernel("ampere_sgemm_128x64_nn", (16, 10, 4), (128, 1, 1), 0),
            {"type": NodeType.cudaGraphNodeTypeConditional, "bodies": [body]},
        ],
        [(0, 1), (0, 2), (1, 3), (2, 3)],
    )
    return cuda.graph(
        [
            cuda.kernel(FILL, (320, 1, 1), (128, 1, 1), 0),
            {"type": NodeType.cudaGraphNodeTypeEventRecord},
            {"type": NodeType.cudaGraphNodeTypeGraph, "child": child},
            {"type": NodeType.cudaGraphNodeTypeHost},
            {"type": NodeType.cudaGraphNodeTypeEmpty},
            cuda.kernel("ampere_sgemm_128x64_tn", (16, 10, 2), (128, 1, 1), 0),
        ],
        [(0, 1), (0, 2), (2, 4), (1, 3), (3, 4), (4, 5)],
    )


@pytest.mark.parametrize(
    "build, dump", [(_two_branch, "cuda_verbose_two_branch.dot"), (_with_child, "cuda_child_graph.dot")]
)
@pytest.mark.parametrize("level", ["exact", "family"])
def test_readout_summarizes_exactly_as_the_dump_of_the_same_graph(build: Any, dump: str, level: str) -> None:
    cuda = FakeCuda()
    graph = read_captured_graph(build(cuda), runtime=cuda, driver=FakeDriver(cuda))  # type: ignore[arg-type]
    assert graph is not None
    assert graph.summary(level, source="graph") == {**summarize_dot_file(DUMPS / dump, level=level), "source": "graph"}


def test_readout_keeps_the_runtimes_node_order_and_edges_and_reads_children_recursively() -> None:
    cuda = FakeCuda()
    graph = read_captured_graph(_with_child(cuda), runtime=cuda, driver=FakeDriver(cuda))  # type: ignore[arg-type]
    assert graph is not None
    assert [n.type for n in graph.nodes] == ["kernel", "event_record", "graph", "host", "empty", "kernel"]
    assert graph.edges == [(0, 1), (0, 2), (2, 4), (1, 3), (3, 4), (4, 5)]
    child = graph.nodes[2].children[0]
    assert [n.type for n in child.nodes] == ["memset", "kernel", "kernel", "conditional"]
    assert [n.name for n in child.nodes[3].children[0].nodes] == [CUTLASS]
    assert graph.topology()["branches"] == 3


def test_a_kernel_the_runtime_cannot_name_is_named_through_the_driver() -> None:
    cuda = FakeCuda()
    graph = read_captured_graph(_two_branch(cuda, driver_named=True), runtime=cuda, driver=FakeDriver(cuda))  # type: ignore[arg-type]
    assert graph is not None and graph.nodes[2].name == DROPOUT
    assert cuda.calls.count("cuFuncGetName") == 1


def test_kernel_params_the_runtime_refuses_come_from_the_driver() -> None:
    cuda = FakeCuda()
    cuda.fail["cudaGraphKernelNodeGetParams"] = Error.cudaErrorInvalidDeviceFunction
    graph = read_captured_graph(_two_branch(cuda), runtime=cuda, driver=FakeDriver(cuda))  # type: ignore[arg-type]
    assert graph is not None
    assert [(n.name, str(n.launch)) for n in graph.nodes if n.type == "kernel"][-1] == (REDUCE, "<<<8,{32,4},2048>>>")


def test_a_failing_call_is_one_error_naming_the_call_and_the_runtimes_error() -> None:
    cuda = FakeCuda()
    cuda.fail["cudaGraphGetEdges"] = Error.cudaErrorInvalidValue
    with pytest.raises(GraphReadoutError) as caught:
        read_captured_graph(_two_branch(cuda), runtime=cuda, driver=FakeDriver(cuda))  # type: ignore[arg-type]
    assert str(caught.value) == "reading the captured graph: cudaGraphGetEdges failed with cudaErrorInvalidValue (1)"


def test_an_address_is_taken_as_the_graph_handle() -> None:
    cuda = FakeCuda()
    address = _two_branch(cuda)
    graph = read_captured_graph(address, runtime=cuda, driver=FakeDriver(cuda))  # type: ignore[arg-type]
    assert graph is not None and len(graph.nodes) == 7


def test_without_cuda_bindings_it_says_so_once_and_returns_none(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("cuda", "cuda.bindings", "cuda.bindings.runtime", "cuda.bindings.driver"):
        monkeypatch.setitem(sys.modules, name, None)  # import of a None entry raises ImportError
    monkeypatch.setattr(graph_readout, "_said_missing", False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert read_captured_graph(0x1234) is None
        assert read_captured_graph(0x1234) is None
    messages = [str(w.message) for w in caught if issubclass(w.category, GraphReadoutWarning)]
    assert messages == [graph_readout.MISSING_BINDINGS]
    assert "pytest-graphcapture[cuda]" in messages[0]
