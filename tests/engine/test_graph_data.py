"""torch's ``CUDAGraph.get_graph_data()`` read into the graph model, on payloads shaped as torch 2.15 builds them.

The payload's structure is torch 2.15's (``torch/cuda/graphs.py``, ``CUDAGraph.get_graph_data``:
its docstring and the dict it appends per node and per edge): top level ``exec_graph_id``,
``nodes`` and ``edges``; per node ``index``, ``node_type``, ``tools_id``, ``graph_id``,
``node_id``, ``kernel_name``, ``grid_dim``, ``block_dim``, ``shared_mem_bytes``, ``event_ptr``,
``host_fn_addr``, ``host_fn_name``, ``dependencies``, ``dependents``; per edge ``from``, ``to``,
``from_port``, ``to_port``, ``type``.  torch 2.13's answer lacks the launch shapes and ``edges``.
"""

from __future__ import annotations

import copy
import warnings
from typing import Any, Optional

import pytest
import torch

from pytest_graphcapture.engine import backend as backend_module
from pytest_graphcapture.engine import capture as capture_module
from pytest_graphcapture.engine import readout
from pytest_graphcapture.engine.backend import CudaGraphBackend, read_any
from pytest_graphcapture.engine.readout import GraphDataUnusable, GraphReadoutWarning, graph_from_data, read_graph_data
from pytest_graphcapture.keys import CaptureKey
from pytest_graphcapture.result import CaptureResult, KeyResult
from pytest_graphcapture.summary import Summary
from pytest_graphcapture.summary.platform import graph_data_has_launches

EXEC_ID = 7
GEMM = "_Z13ampere_sgemmILi128ELi64EEvPKfS1_Pf"


def _node(index: int, node_type: str, **fields: Any) -> dict:
    """One node as torch 2.15 appends it (ids remapped to the exec graph, as its last loop does)."""
    node = {
        "index": index,
        "node_type": node_type,
        "tools_id": (EXEC_ID << 32) | index,
        "graph_id": EXEC_ID,
        "node_id": index,
        "kernel_name": None,
        "grid_dim": None,
        "block_dim": None,
        "shared_mem_bytes": None,
        "event_ptr": 0,
        "host_fn_addr": 0,
        "host_fn_name": None,
        "dependencies": [],
        "dependents": [],
    }
    node.update(fields)
    return node


def _kernel(index: int, name: str, grid: tuple, block: tuple, shared: int) -> dict:
    return _node(index, "kernel", kernel_name=name, grid_dim=grid, block_dim=block, shared_mem_bytes=shared)


def two_branch_payload() -> dict:
    """memset → (gemm ‖ softmax) → empty join → gemm: two branches, three kernels."""
    nodes = [
        _node(0, "memset"),
        _kernel(1, GEMM, (16, 10, 2), (128, 1, 1), 0),
        _kernel(2, "softmax_warp_forward", (64, 1, 1), (256, 1, 1), 49152),
        _node(3, "empty"),
        _kernel(4, GEMM, (16, 10, 2), (128, 1, 1), 0),
        _node(5, "event_record", event_ptr=0x1234),
    ]
    edges = [(0, 1), (0, 2), (1, 3), (2, 3), (3, 4), (4, 5)]
    for source, target in edges:
        nodes[source]["dependents"].append(target)
        nodes[target]["dependencies"].append(source)
    return {
        "exec_graph_id": EXEC_ID,
        "nodes": nodes,
        "edges": [{"from": s, "to": t, "from_port": 0, "to_port": 0, "type": 0} for s, t in edges],
    }


def test_a_whole_answer_gives_every_node_its_launch_shape_and_the_edges() -> None:
    graph = graph_from_data(two_branch_payload())
    assert [n.type for n in graph.nodes] == ["memset", "kernel", "kernel", "empty", "kernel", "event_record"]
    assert graph.edges == [(0, 1), (0, 2), (1, 3), (2, 3), (3, 4), (4, 5)]
    assert graph.branches() == 2
    assert graph.kernels(level="exact") == [
        {"name": GEMM, "launch": "<<<{16,10,2},128,0>>>", "count": 2},
        {"name": "softmax_warp_forward", "launch": "<<<64,256,49152>>>", "count": 1},
    ]


def _older(payload: dict) -> dict:
    """torch 2.13's answer: no launch shapes per node and no ``edges`` list."""
    older = copy.deepcopy(payload)
    del older["edges"]
    for node in older["nodes"]:
        for field in ("grid_dim", "block_dim", "shared_mem_bytes", "event_ptr", "host_fn_addr", "host_fn_name"):
            del node[field]
    return older


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        (_older, "no launch shapes or no edges"),
        (lambda p: _with_node(p, 3, "child_graph"), "child-graph node"),
        (lambda p: _with_node(p, 3, "conditional"), "conditional node"),
        (lambda p: _with_node(p, 0, "memcpy"), "direction"),
        (lambda p: _with_field(p, 2, kernel_name=None), "kernel node 2 has no name"),
        (lambda p: _with_field(p, 1, grid_dim=None), "kernel node 1 has no name or no launch shape"),
        (lambda p: {**p, "edges": p["edges"] + [{"from": 0, "to": 9}]}, "not listed"),
    ],
    ids=["torch 2.13 form", "child graph", "conditional", "memcpy", "unnamed kernel", "no grid", "bad edge"],
)
def test_an_answer_that_lacks_what_the_summary_needs_is_refused_saying_why(change: Any, reason: str) -> None:
    with pytest.raises(GraphDataUnusable, match=reason):
        graph_from_data(change(two_branch_payload()))


def _with_node(payload: dict, index: int, node_type: str) -> dict:
    payload["nodes"][index]["node_type"] = node_type
    return payload


def _with_field(payload: dict, index: int, **fields: Any) -> dict:
    payload["nodes"][index].update(fields)
    return payload


def test_the_probe_tells_the_two_forms_apart() -> None:
    assert graph_data_has_launches(two_branch_payload())
    assert not graph_data_has_launches(_older(two_branch_payload()))
    assert not graph_data_has_launches(None) and not graph_data_has_launches({"nodes": []})


class DataGraph:
    """A torch 2.15 CUDAGraph as far as the readout goes: get_graph_data() answers, or raises as torch does."""

    def __init__(self, payload: Optional[dict] = None, error: Optional[str] = None) -> None:
        self.payload, self.error, self.events = payload, error, []

    def get_graph_data(self) -> dict:
        self.events.append("get_graph_data")
        if self.error:
            raise RuntimeError(self.error)
        if any(n["node_type"] in ("child_graph", "conditional") for n in self.payload["nodes"]):  # type: ignore[index]
            warnings.warn("get_graph_data: this graph contains ['child_graph'] nodes", stacklevel=2)
        return self.payload  # type: ignore[return-value]

    def raw_cuda_graph(self) -> int:
        self.events.append("raw_cuda_graph")
        raise AssertionError("not read through cuda-bindings in this test")

    def instantiate(self) -> None:
        self.events.append("instantiate")


def test_torch_raising_for_an_old_driver_is_a_refusal_naming_torchs_reason() -> None:
    message = "get_graph_data requires cudaGraphNodeGetToolsId which needs cuda.bindings >= 13.1"
    with pytest.raises(GraphDataUnusable, match="RuntimeError: get_graph_data requires cudaGraphNodeGetToolsId"):
        read_graph_data(DataGraph(error=message))


def test_torchs_warning_on_nested_graphs_is_not_shown_the_refusal_says_it() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(GraphDataUnusable, match="child-graph node"):
            read_graph_data(DataGraph(_with_node(two_branch_payload(), 3, "child_graph")))


def test_the_readout_prefers_get_graph_data_and_falls_back_to_the_walk_then_nothing() -> None:
    graph, source = read_any(DataGraph(two_branch_payload()), bindings=None)  # type: ignore[misc]
    assert source == "graph-data" and graph.branches() == 2
    # No whole answer and no cuda-bindings: nothing is read (kernels come from the replay).
    assert read_any(DataGraph(error="get_graph_data requires the cuda.bindings package"), bindings=None) is None


@pytest.mark.parametrize(
    "version, trusted",
    [("13.1.0", False), ("13.2.1", False), ("13.0.2", False), ("12.9.6", False)]
    + [("13.3.0", True), ("13.10.0", True), ("12.9.7", True), ("14.0.0rc1", True)],
)
def test_get_graph_data_is_asked_only_where_cuda_bindings_owns_the_edge_ports(
    monkeypatch: pytest.MonkeyPatch, version: str, trusted: bool
) -> None:
    """Before cuda-bindings 13.3.0 (12.9.7) torch reads edge ports from freed memory: not asked, said once."""
    monkeypatch.setattr(readout, "bindings_version", lambda: version)
    monkeypatch.setattr(readout, "_said", set())
    payload = two_branch_payload()
    for edge in payload["edges"]:
        edge.update(from_port=0x7F3A, to_port=0x5E11, type=0x2B)  # what a freed buffer may hold
    graphs = [DataGraph(copy.deepcopy(payload)) for _ in range(2)]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        found = [read_any(graph, bindings=None) for graph in graphs]  # type: ignore[arg-type]
    said = [str(w.message) for w in caught if w.category is GraphReadoutWarning]
    if trusted:
        assert [source for _, source in found] == ["graph-data"] * 2 and not said  # type: ignore[misc]
        assert found[0][0].edges == [(0, 1), (0, 2), (1, 3), (2, 3), (3, 4), (4, 5)]  # type: ignore[index]
    else:
        assert found == [None, None] and [g.events for g in graphs] == [[], []]
        assert len(said) == 1 and f"cuda-bindings {version} returns edge ports from freed memory" in said[0]
        assert "cuda-bindings>=13.3" in said[0]


KEY = CaptureKey("Fake", 8)


def test_a_summary_read_through_get_graph_data_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    """The CUDA backend reads an instantiated graph with get_graph_data(); the summary's kernel_source says it."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "graph_pool_handle", lambda: "pool")
    monkeypatch.setattr(torch.cuda, "Stream", lambda device=None: "stream")
    monkeypatch.setattr(backend_module, "readout_bindings", lambda: None)
    backend = CudaGraphBackend("cuda")
    graph = DataGraph(two_branch_payload())
    backend.read_graph(KEY, graph)
    assert graph.events == ["instantiate", "get_graph_data"]
    assert backend.readout_sources[KEY] == "graph-data"
    summary = Summary(key=KEY, platform="cuda-sm90", kernels=[], ops=[], launches={"total": 3, "by_api": {}})
    result = CaptureResult(runner_name="Fake", platform="cuda-sm90")
    result.keys[KEY] = KeyResult(KEY, summary=summary, graph=graph)
    capture_module._attach_graph_readouts(result, backend)
    read = result.keys[KEY].summary
    assert read.kernel_source == "graph-data" and read.topology == {
        "nodes": {"empty": 1, "event_record": 1, "kernel": 3, "memset": 1},
        "branches": 2,
    }
    assert sum(k["count"] for k in read.kernels if k["kind"] == "kernel") == 3
