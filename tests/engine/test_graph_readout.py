"""The in-process graph readout behind a fake of cuda-bindings: the same model as the DOT reader builds.

The fake implements the calls the readout makes the way cuda-bindings spells them
(each returns its error first; handles convert with ``int``; enums have ``name``),
in the two shapes the releases have: 12.x (``cudaGraphGetEdges_v2`` beside an
edge call without edge data; no ``cudaGraphNodeGetParams``) and 13.2 on.  It
reads graphs described here: the same graphs as two of the DOT fixtures, so the
readout must summarize exactly as the dumps do.  Where cuda-bindings is
installed, the last tests check the readout's calls and the fake's signatures
against the real package.
"""

from __future__ import annotations

import enum
import inspect
import re
import sys
import warnings
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from pytest_graphcapture.engine import readout as graph_readout
from pytest_graphcapture.engine.readout import (
    CALLS,
    CONDITIONAL_BODIES_SINCE,
    NODE_TYPES,
    GraphReadoutError,
    GraphReadoutWarning,
    edges_call,
    read_captured_graph,
)
from pytest_graphcapture.keys import CaptureKey
from pytest_graphcapture.summary.dot import DUMP_PLATFORM, summarize_dot_file
from pytest_graphcapture.summary.replay import graph_summary

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
    """cudaError_t, the runtime's errors (the values are the real ones)."""

    cudaSuccess = 0
    cudaErrorInvalidValue = 1
    cudaErrorInvalidDeviceFunction = 98
    cudaErrorLossyQuery = 402


class Result(enum.IntEnum):
    """CUresult, the driver's errors."""

    CUDA_SUCCESS = 0
    CUDA_ERROR_INVALID_VALUE = 1


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
    """What every cuda.bindings.runtime release offers the readout, over graphs by address.

    ``graphs[address] = (nodes, edges)``; a node is a dict of what the calls return; an edge is
    ``(from, to, data)`` with data 0 for a plain dependency, else e.g. a programmatic one.
    """

    def __init__(self) -> None:
        self.graphs: dict[int, tuple[list[int], list[tuple[int, int, int]]]] = {}
        self.nodes: dict[int, dict] = {}
        self.functions: dict[int, str] = {}  # driver function or library kernel handle -> name
        self.calls: list[str] = []
        self.fail: dict[str, Any] = {}
        self._next = 0x1000

    def address(self) -> int:
        self._next += 0x10
        return self._next

    def graph(self, nodes: list[dict], edges: list[tuple]) -> int:
        """A graph of ``nodes`` (in order) with edges ``(a, b[, data])`` between their indices; its address."""
        addresses = []
        for node in nodes:
            address = self.address()
            self.nodes[address] = node
            addresses.append(address)
        graph = self.address()
        self.graphs[graph] = (addresses, [(addresses[e[0]], addresses[e[1]], (*e, 0)[2]) for e in edges])
        return graph

    def kernel(self, name: str, grid: tuple, block: tuple, smem: int, *, library: bool = False) -> dict:
        """A kernel node; ``library``: it holds a library kernel (CUkernel) and no function, as the driver allows."""
        function = self.address()
        self.functions[function] = name
        return {
            "type": NodeType.cudaGraphNodeTypeKernel,
            "function": 0 if library else function,
            "kernel": function if library else 0,
            "grid": grid,
            "block": block,
            "smem": smem,
        }

    def _result(self, name: str, *values: Any) -> tuple:
        self.calls.append(name)
        if name in self.fail:
            return (self.fail[name], *([None] * len(values)))
        return (Error.cudaSuccess, *values)

    def cudaGraphGetNodes(self, graph: Any, numNodes: int = 0) -> tuple:
        nodes = self.graphs[int(graph)][0]
        return self._result("cudaGraphGetNodes", [Handle(a) for a in nodes[:numNodes]], len(nodes))

    def _edges(self, name: str, graph: Any, count: int, *, with_data: bool) -> tuple:
        edges = self.graphs[int(graph)][1]
        if count and not with_data and any(data for _, _, data in edges):
            self.calls.append(name)
            return (Error.cudaErrorLossyQuery, [], [], count)
        sources = [Handle(a) for a, _, _ in edges[:count]]
        targets = [Handle(b) for _, b, _ in edges[:count]]
        data = [SimpleNamespace(type=d) for _, _, d in edges[:count]]
        return self._result(name, sources, targets, *([data] if with_data else []), len(edges))

    def cudaGraphNodeGetType(self, node: Any) -> tuple:
        return self._result("cudaGraphNodeGetType", self.nodes[int(node)]["type"])

    def cudaGraphMemcpyNodeGetParams(self, node: Any) -> tuple:
        return self._result("cudaGraphMemcpyNodeGetParams", SimpleNamespace(kind=self.nodes[int(node)]["kind"]))

    def cudaGraphChildGraphNodeGetGraph(self, node: Any) -> tuple:
        return self._result("cudaGraphChildGraphNodeGetGraph", Handle(self.nodes[int(node)]["child"]))

    cudaGraph_t = Handle


class FakeRuntime12(FakeCuda):
    """cuda.bindings.runtime 12.x: the plain edge call has no edge data; ``_v2`` has it."""

    def cudaGraphGetEdges(self, graph: Any, numEdges: int = 0) -> tuple:
        return self._edges("cudaGraphGetEdges", graph, numEdges, with_data=False)

    def cudaGraphGetEdges_v2(self, graph: Any, numEdges: int = 0) -> tuple:
        return self._edges("cudaGraphGetEdges_v2", graph, numEdges, with_data=True)


class FakeRuntime13(FakeCuda):
    """cuda.bindings.runtime 13.2 on: the edge call returns edge data; node parameters of any type."""

    def cudaGraphGetEdges(self, graph: Any, numEdges: int = 0) -> tuple:
        return self._edges("cudaGraphGetEdges", graph, numEdges, with_data=True)

    def cudaGraphNodeGetParams(self, node: Any) -> tuple:
        spec = self.nodes[int(node)]
        bodies = spec["bodies"]
        kind = SimpleNamespace(name=f"cudaGraphCondType{spec.get('condition', 'If')}")
        conditional = SimpleNamespace(phGraph_out=[Handle(b) for b in bodies], size=len(bodies), type=kind)
        return self._result("cudaGraphNodeGetParams", SimpleNamespace(conditional=conditional))


RUNTIMES = [FakeRuntime12, FakeRuntime13]


class FakeDriver:
    """What cuda.bindings.driver offers the readout: a kernel node's parameters and its function's name."""

    def __init__(self, cuda: FakeCuda) -> None:
        self.cuda = cuda

    def _result(self, name: str, *values: Any) -> tuple:
        self.cuda.calls.append(name)
        if name in self.cuda.fail:
            return (self.cuda.fail[name], *([None] * len(values)))
        return (Result.CUDA_SUCCESS, *values)

    def cuGraphKernelNodeGetParams(self, hNode: Any) -> tuple:
        n = self.cuda.nodes[int(hNode)]
        (gx, gy, gz), (bx, by, bz) = n["grid"], n["block"]
        params = SimpleNamespace(
            func=Handle(n["function"]),
            kern=Handle(n["kernel"]),
            gridDimX=gx,
            gridDimY=gy,
            gridDimZ=gz,
            blockDimX=bx,
            blockDimY=by,
            blockDimZ=bz,
            sharedMemBytes=n["smem"],
        )
        return self._result("cuGraphKernelNodeGetParams", params)

    def _name(self, call: str, handle: Any) -> tuple:
        if not int(handle):
            self.cuda.calls.append(call)
            return (Result.CUDA_ERROR_INVALID_VALUE, None)
        return self._result(call, self.cuda.functions[int(handle)].encode())

    def cuFuncGetName(self, hfunc: Any) -> tuple:
        return self._name("cuFuncGetName", hfunc)

    def cuKernelGetName(self, hfunc: Any) -> tuple:
        return self._name("cuKernelGetName", hfunc)


def _read(cuda: FakeCuda, graph: Any) -> Any:
    return read_captured_graph(graph, runtime=cuda, driver=FakeDriver(cuda))  # type: ignore[arg-type]


PROGRAMMATIC = 1  # cudaGraphDependencyTypeProgrammatic: the edge data of a programmatic dependent launch


def _two_branch(cuda: FakeCuda, *, library: bool = False, programmatic: bool = False) -> int:
    """The graph of tests/data/graph_dumps/cuda_verbose_two_branch.dot.

    ``library``: the dropout kernel is held as a library kernel; ``programmatic``: its edge into the
    reduction is a programmatic one (edge data the plain 12.x edge call cannot return).
    """
    return cuda.graph(
        [
            {"type": NodeType.cudaGraphNodeTypeMemset},
            cuda.kernel("ampere_sgemm_128x64_tn", (16, 10, 2), (128, 1, 1), 0),
            cuda.kernel(DROPOUT, (432, 1, 1), (256, 1, 1), 0, library=library),
            cuda.kernel("ampere_sgemm_128x64_nn", (16, 10, 4), (128, 1, 1), 0),
            cuda.kernel(CUTLASS, (64, 1, 1), (256, 1, 1), 49152),
            cuda.kernel(REDUCE, (8, 1, 1), (32, 4, 1), 2048),
            {"type": NodeType.cudaGraphNodeTypeMemcpy, "kind": MemcpyKind.cudaMemcpyDeviceToDevice},
        ],
        [(0, 1), (1, 2), (0, 3), (3, 4), (2, 5, PROGRAMMATIC if programmatic else 0), (4, 5), (5, 6)],
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
    "runtime, build, dump",
    [
        (FakeRuntime12, _two_branch, "cuda_verbose_two_branch.dot"),
        (FakeRuntime13, _two_branch, "cuda_verbose_two_branch.dot"),
        (FakeRuntime13, _with_child, "cuda_child_graph.dot"),
    ],
)
@pytest.mark.parametrize("level", ["exact", "family"])
def test_readout_summarizes_exactly_as_the_dump_of_the_same_graph(
    runtime: type, build: Any, dump: str, level: str
) -> None:
    cuda = runtime()
    graph = _read(cuda, build(cuda))
    assert graph is not None
    key = CaptureKey("Runner", 8)
    read = graph_summary(graph, key=key, platform=DUMP_PLATFORM, level=level, source="graph")
    assert read.to_dict() == {
        **summarize_dot_file(DUMPS / dump, level=level, key=key).to_dict(),
        "kernel_source": "graph",
    }


def test_readout_keeps_the_runtimes_node_order_and_edges_and_reads_children_recursively() -> None:
    cuda = FakeRuntime13()
    graph = _read(cuda, _with_child(cuda))
    assert graph is not None
    assert [n.type for n in graph.nodes] == ["kernel", "event_record", "graph", "host", "empty", "kernel"]
    assert graph.edges == [(0, 1), (0, 2), (2, 4), (1, 3), (3, 4), (4, 5)]
    child = graph.nodes[2].children[0]
    assert [n.type for n in child.nodes] == ["memset", "kernel", "kernel", "conditional"]
    assert [n.name for n in child.nodes[3].children[0].nodes] == [CUTLASS]
    assert graph.topology()["branches"] == 3


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_kernels_are_named_and_shaped_through_the_driver(runtime: type) -> None:
    cuda = runtime()
    graph = _read(cuda, _two_branch(cuda))
    assert graph is not None
    kernels = [(n.name, str(n.launch)) for n in graph.nodes if n.type == "kernel"]
    assert kernels[-1] == (REDUCE, "<<<8,{32,4},2048>>>")
    assert cuda.calls.count("cuGraphKernelNodeGetParams") == cuda.calls.count("cuFuncGetName") == 5


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_a_node_holding_a_library_kernel_is_named_through_the_kernel(runtime: type) -> None:
    cuda = runtime()
    graph = _read(cuda, _two_branch(cuda, library=True))
    assert graph is not None and graph.nodes[2].name == DROPOUT
    assert cuda.calls.count("cuKernelGetName") == 1 and cuda.calls.count("cuFuncGetName") == 4


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_a_graph_with_programmatic_edges_is_read_with_its_edge_data(runtime: type) -> None:
    cuda = runtime()
    graph = _read(cuda, _two_branch(cuda, programmatic=True))
    assert graph is not None
    assert graph.edges == [(0, 1), (1, 2), (0, 3), (3, 4), (2, 5), (4, 5), (5, 6)]
    expected = "cudaGraphGetEdges_v2" if runtime is FakeRuntime12 else "cudaGraphGetEdges"
    assert {call for call in cuda.calls if call.startswith("cudaGraphGetEdges")} == {expected}


def test_with_12x_bindings_a_conditional_node_is_one_error_naming_the_release_that_reads_it() -> None:
    cuda = FakeRuntime12()
    with pytest.raises(GraphReadoutError) as caught:
        _read(cuda, _with_child(cuda))
    assert str(caught.value) == (
        "reading the captured graph: cudaGraphNodeGetParams is missing from the installed cuda-bindings, so a "
        "conditional node's body graphs cannot be read; pip install 'cuda-bindings>=13.2' (with a driver for "
        "CUDA 13.2 or newer)"
    )


def test_a_failing_call_is_one_error_naming_the_call_and_the_runtimes_error() -> None:
    cuda = FakeRuntime13()
    cuda.fail["cudaGraphGetEdges"] = Error.cudaErrorInvalidValue
    with pytest.raises(GraphReadoutError) as caught:
        _read(cuda, _two_branch(cuda))
    assert str(caught.value) == "reading the captured graph: cudaGraphGetEdges failed with cudaErrorInvalidValue (1)"


def test_a_failing_driver_call_names_the_drivers_error() -> None:
    cuda = FakeRuntime12()
    cuda.fail["cuGraphKernelNodeGetParams"] = Result.CUDA_ERROR_INVALID_VALUE
    with pytest.raises(GraphReadoutError) as caught:
        _read(cuda, _two_branch(cuda))
    assert str(caught.value) == (
        "reading the captured graph: cuGraphKernelNodeGetParams failed with CUDA_ERROR_INVALID_VALUE (1)"
    )


def test_a_call_returning_another_shape_than_the_readout_knows_is_one_error_not_a_misread() -> None:
    cuda = FakeRuntime13()
    real = cuda.cudaGraphNodeGetType
    cuda.cudaGraphNodeGetType = lambda node: (*real(node), "extra")  # type: ignore[method-assign]
    with pytest.raises(GraphReadoutError) as caught:
        _read(cuda, _two_branch(cuda))
    assert str(caught.value) == (
        "reading the captured graph: cudaGraphNodeGetType returned 3 values where the readout expects 2 (error, pType)"
    )


def test_an_address_is_taken_as_the_graph_handle() -> None:
    cuda = FakeRuntime13()
    address = _two_branch(cuda)
    graph = _read(cuda, address)
    assert graph is not None and len(graph.nodes) == 7


def test_without_cuda_bindings_it_says_so_once_and_returns_none(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("cuda", "cuda.bindings", "cuda.bindings.runtime", "cuda.bindings.driver"):
        monkeypatch.setitem(sys.modules, name, None)  # import of a None entry raises ImportError
    monkeypatch.setattr(graph_readout, "_said", set())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert read_captured_graph(0x1234) is None
        assert read_captured_graph(0x1234) is None
    messages = [str(w.message) for w in caught if issubclass(w.category, GraphReadoutWarning)]
    assert messages == [graph_readout.MISSING_BINDINGS]
    assert "pytest-graphcapture[cuda]" in messages[0]


# ---- against the real cuda-bindings, where it is installed (no GPU needed: nothing here reaches the driver)

NOT_INSTALLED = "cuda-bindings not installed: pip install pytest-graphcapture[cuda]"


@pytest.fixture
def real() -> tuple[Any, Any, tuple[int, ...]]:
    """``(runtime, driver, version)`` of the installed cuda-bindings."""
    try:
        import cuda.bindings
        from cuda.bindings import driver, runtime
    except ImportError:
        pytest.skip(NOT_INSTALLED)
    version = tuple(int(part) for part in re.findall(r"\d+", cuda.bindings.__version__)[:2])
    return runtime, driver, version


def _returns(function: Any) -> list[str]:
    """The results a cuda-bindings function's docstring lists: its error type, then each result's name."""
    lines = (function.__doc__ or "").splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip() == "Returns") + 2
    indent = len(lines[start]) - len(lines[start].lstrip())
    results = []
    for line in lines[start:]:
        if line.strip() in ("See Also", "Notes", "Examples"):
            break
        if line.strip() and len(line) - len(line.lstrip()) == indent:
            results.append(line.strip().split(" : ")[0])
    return results


def _needed(name: str, runtime: Any, version: tuple[int, ...]) -> bool:
    """Whether the readout calls ``name`` with this release: one of the two edge calls; node params from 13.2."""
    if name.startswith("cudaGraphGetEdges"):
        return name == edges_call(runtime)
    if name == "cudaGraphNodeGetParams":
        return version >= tuple(int(part) for part in CONDITIONAL_BODIES_SINCE.split("."))
    return True


def test_every_call_the_readout_makes_exists_in_cuda_bindings_with_its_parameters_and_results(real: Any) -> None:
    runtime, driver, version = real
    for name, (where, parameters, results) in CALLS.items():
        function = getattr(driver if where == "driver" else runtime, name, None)
        if not _needed(name, runtime, version):
            if name == "cudaGraphNodeGetParams":
                assert function is None, f"{name} exists before {CONDITIONAL_BODIES_SINCE}: lower the release named"
            continue
        assert function is not None, f"{where}.{name} is missing from cuda-bindings {version}"
        assert tuple(inspect.signature(function).parameters) == parameters, name
        assert _returns(function) == ["CUresult" if where == "driver" else "cudaError_t", *results], name


def test_the_structs_enums_and_handles_the_readout_reads_are_the_real_ones(real: Any) -> None:
    runtime, driver, _ = real
    kernel = driver.CUDA_KERNEL_NODE_PARAMS()
    for field in ("gridDimX", "gridDimY", "gridDimZ", "blockDimX", "blockDimY", "blockDimZ", "sharedMemBytes"):
        assert int(getattr(kernel, field)) == 0
    assert int(kernel.func) == 0 and int(kernel.kern) == 0
    assert runtime.cudaMemcpy3DParms().kind.name.startswith("cudaMemcpy")
    conditional = runtime.cudaGraphNodeParams().conditional
    assert list(conditional.phGraph_out) == [] and int(conditional.size) == 0
    real_types = {
        m.removeprefix("cudaGraphNodeType") for m in dir(runtime.cudaGraphNodeType) if m.startswith("cudaGraphNodeType")
    }
    assert real_types - {"Count", "Reserved16"} <= set(NODE_TYPES), "a node type the readout does not name"
    assert {"Kernel", "Memcpy", "Graph", "Conditional"} <= real_types
    assert int(runtime.cudaGraph_t(init_value=0x1230)) == 0x1230
    assert int(driver.CUgraphNode(runtime.cudaGraphNode_t(init_value=0x40))) == 0x40
    error = GraphReadoutError("cudaGraphGetNodes", runtime.cudaError_t.cudaErrorInvalidValue)
    assert str(error) == "reading the captured graph: cudaGraphGetNodes failed with cudaErrorInvalidValue (1)"
    error = GraphReadoutError("cuFuncGetName", driver.CUresult.CUDA_ERROR_INVALID_VALUE)
    assert str(error) == "reading the captured graph: cuFuncGetName failed with CUDA_ERROR_INVALID_VALUE (1)"


def test_the_fake_has_the_real_signatures(real: Any) -> None:
    runtime, driver, version = real
    fake_runtime = {**vars(FakeCuda), **vars(FakeRuntime12 if version < (13, 0) else FakeRuntime13)}
    for methods, module in ((fake_runtime, runtime), (vars(FakeDriver), driver)):
        for name, method in methods.items():
            if not re.fullmatch(r"cu(da)?[A-Z]\w*", name) or not inspect.isfunction(method):
                continue
            if not hasattr(module, name) and not _needed(name, runtime, version):
                continue  # a call of another release, which the readout does not make with this one
            real_parameters = tuple(inspect.signature(getattr(module, name)).parameters)
            assert tuple(inspect.signature(method).parameters)[1:] == real_parameters, name


@pytest.mark.parametrize("condition, kind", [("If", "if"), ("While", "while"), ("Switch", "switch"), ("Odd", "")])
def test_a_conditional_nodes_kind_and_bodies_are_read(condition: str, kind: str) -> None:
    cuda = FakeRuntime13()
    then, other = (cuda.graph([cuda.kernel(name, (1, 1, 1), (32, 1, 1), 0)], []) for name in ("then_k", "else_k"))
    root = cuda.graph(
        [{"type": NodeType.cudaGraphNodeTypeConditional, "bodies": [then, other], "condition": condition}], []
    )
    graph = _read(cuda, root)
    assert graph is not None
    (node,) = graph.nodes
    assert (node.type, node.name) == ("conditional", kind)
    assert [[n.name for n in body.nodes] for body in node.children] == [["then_k"], ["else_k"]]
    assert graph.branches() == 1  # the two bodies never run at once


def test_child_graphs_nested_thousands_deep_are_read_without_recursion() -> None:
    cuda = FakeRuntime13()
    inner = cuda.graph([cuda.kernel("leaf", (1, 1, 1), (32, 1, 1), 0)], [])
    for _ in range(3000):
        inner = cuda.graph([{"type": NodeType.cudaGraphNodeTypeGraph, "child": inner}], [])
    graph = _read(cuda, inner)
    assert graph is not None
    assert graph.node_counts() == {"graph": 3000, "kernel": 1}
    assert graph.branches() == 1
