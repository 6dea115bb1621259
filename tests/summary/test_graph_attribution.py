"""Kernels read from the captured graph: attribution by construction, and the replay as a cross-check.

Stream capture adds one graph node per launch call, in call order, so node i of the graph
is the i-th launch call of the capture window.  The graphs here are built to match real
capture traces (H200 captures in tests/data/cuda-sm90, a ROCm sglang decode capture in the
shared real traces) and then broken to show the match is refused, never guessed.
"""

from __future__ import annotations

import gzip
import json
import warnings
from collections import Counter
from pathlib import Path
from typing import Optional

import pytest
from helpers import REPO_ROOT

from pytest_graphcapture.errors import UsageError
from pytest_graphcapture.keys import CaptureKey
from pytest_graphcapture.summary import KernelEvidenceWarning, Summary, summarize_trace_file, with_graph
from pytest_graphcapture.summary.graph import CapturedGraph, GraphNode, Launch
from pytest_graphcapture.summary.replay import graph_node_records
from pytest_graphcapture.summary.scan import GRAPH_NO_CAPTURE, GRAPH_NODES_DIFFER, attributed_share

H200 = [
    REPO_ROOT / "tests" / "data" / "cuda-sm90" / f"{name}_rank0.json.gz"
    for name in ("TinyDecodeRunner_bs_1", "CompiledDecodeRunner_bs_1")
]
ROCM = Path("/work/shared/testdata/real_traces/tracelens_sglang_decode_capture__bs_32_rank0.json.gz")
KEY = CaptureKey("Fake", 1)
SHAPE = Launch((16, 10, 2), (128, 1, 1), 0)


def graph_for(kinds: list[str], names: Optional[list[str]] = None, *, branches: int = 1) -> CapturedGraph:
    """A graph whose work nodes are ``kinds`` in order, split round-robin into ``branches`` chains."""
    nodes = []
    for i, kind in enumerate(kinds):
        if kind == "kernel":
            nodes.append(GraphNode(str(i), "kernel", names[i] if names else f"kernel_{i}", SHAPE))
        else:
            nodes.append(GraphNode(str(i), kind, "DtoD" if kind == "memcpy" else ""))
    edges = [(i, i + branches) for i in range(len(nodes) - branches)]
    return CapturedGraph(nodes, edges)


@pytest.fixture(params=H200, ids=lambda p: p.name)
def h200(request: pytest.FixtureRequest) -> Summary:
    return summarize_trace_file(request.param, key=KEY)


def test_every_kernel_of_an_h200_capture_gets_the_op_of_its_launch_call(h200: Summary) -> None:
    assert not h200.complete  # the capture window alone names no NVIDIA kernel
    kinds = [kind for kind, _ in h200.launch_ops]
    result = with_graph(h200, graph_for(kinds))
    assert result.complete and result.unattributed is None and result.kernel_source == "graph"
    named, total = attributed_share(k for k in result.kernels if k["kind"] == "kernel")
    assert total == kinds.count("kernel") > 0 and named == total
    for entry in result.kernels:
        if entry["kind"] == "kernel":
            index = int(entry["name"].rsplit("_", 1)[1])
            assert entry["op"] == h200.launch_ops[index][1]
            assert entry["launch"] == "<<<{16,10,2},128,0>>>"
    copies = [e for e in result.kernels if e["kind"] == "memcpy"]
    assert copies and {e["name"] for e in copies} == {"Memcpy DtoD (Device -> Device)"}
    assert result.topology == {"nodes": dict(sorted(Counter(kinds).items())), "branches": 1}


def test_attribution_holds_across_branches(h200: Summary) -> None:
    """Node ids follow call order across streams: a two-branch graph is matched the same way."""
    kinds = [kind for kind, _ in h200.launch_ops]
    one, two = with_graph(h200, graph_for(kinds)), with_graph(h200, graph_for(kinds, branches=2))
    assert two.topology["branches"] == 2
    assert two.kernels == one.kernels and two.unattributed is None


@pytest.mark.parametrize("break_it", ["missing node", "extra node", "kinds swapped"])
def test_a_graph_that_does_not_match_the_launch_calls_stays_unattributed(h200: Summary, break_it: str) -> None:
    kinds = [kind for kind, _ in h200.launch_ops]
    if break_it == "missing node":
        kinds = kinds[:-1]
    elif break_it == "extra node":
        kinds = kinds + ["kernel"]
    else:
        first_copy = kinds.index("memcpy")
        kinds[first_copy], kinds[first_copy - 1] = kinds[first_copy - 1], kinds[first_copy]
    assert kinds != [kind for kind, _ in h200.launch_ops]
    result = with_graph(h200, graph_for(kinds))
    assert result.unattributed == GRAPH_NODES_DIFFER
    assert all("op" not in entry for entry in result.kernels)
    assert sum(e["count"] for e in result.kernels if e["kind"] == "kernel") == kinds.count("kernel")
    assert result.complete  # the graph's kernels are still right: only the ops are unknown


def test_an_eager_trace_has_no_capture_window_to_match() -> None:
    eager = Summary(key=KEY, platform="cuda-sm90", kernels=[], ops=[])
    result = with_graph(eager, graph_for(["kernel", "memset"]))
    assert result.unattributed == GRAPH_NO_CAPTURE
    assert [(e["kind"], e["name"]) for e in result.kernels] == [("memset", "Memset"), ("kernel", "kernel_0")]


def _rocm_launch_names(path: Path) -> list[str]:
    """The kernel names of the capture window's launch calls, in call order (ROCm records them)."""
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        events = json.load(handle)["traceEvents"]
    begin = min(e["ts"] for e in events if e.get("name") == "hipStreamBeginCapture")
    end = max(e["ts"] for e in events if e.get("name") == "hipStreamEndCapture")
    launches = [
        e
        for e in events
        if e.get("cat") == "cuda_runtime" and "kernel" in (e.get("args") or {}) and begin <= e["ts"] <= end
    ]
    return [e["args"]["kernel"] for e in sorted(launches, key=lambda e: e["ts"])]


@pytest.mark.skipif(not ROCM.exists(), reason=f"the shared real traces are not here ({ROCM}); run on the dev machine")
def test_attribution_by_construction_agrees_with_rocm_launch_events() -> None:
    """ROCm names each kernel at its launch call: the graph's order must give every kernel the same op."""
    capture = summarize_trace_file(ROCM, key=KEY)
    names = _rocm_launch_names(ROCM)
    kinds = [kind for kind, _ in capture.launch_ops]
    assert len(names) == len(kinds) == capture.launches["total"] > 500
    result = with_graph(capture, graph_for(kinds, names))
    assert result.unattributed is None and attributed_share(result.kernels) == (len(names), len(names))
    strip = lambda kernels: Counter(  # noqa: E731
        (k["name"], json.dumps(k.get("op")), k["count"]) for k in kernels
    )
    assert strip(result.kernels) == strip(capture.kernels)


def test_replay_equal_to_the_graph_keeps_the_key_complete(h200: Summary) -> None:
    kinds = [kind for kind, _ in h200.launch_ops]
    graph = graph_for(kinds)
    replay = [{"name": r["name"], "kind": r["kind"]} for r in graph_node_records(graph)]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        result = with_graph(h200, graph, replay_kernels=replay[::-1])
    assert result.complete and result.incomplete_reason is None


def test_replay_that_lost_records_marks_the_key_incomplete_naming_them(h200: Summary) -> None:
    kinds = [kind for kind, _ in h200.launch_ops]
    graph = graph_for(kinds)
    replay = [{"name": r["name"], "kind": r["kind"]} for r in graph_node_records(graph)][3:]
    with pytest.warns(KernelEvidenceWarning, match="kernel evidence incomplete"):
        result = with_graph(h200, graph, replay_kernels=replay)
    assert not result.complete
    assert result.incomplete_reason.startswith(
        "the profiled replay's kernels differ from the graph's (missing from the replay: kernel_0 x1, kernel_1 x1, "
        "kernel_2 x1)"
    )
    assert result.kernels == with_graph(h200, graph).kernels  # the graph's kernels stand


def test_a_graph_comes_from_the_process_or_a_dump_only(h200: Summary) -> None:
    graph = graph_for([kind for kind, _ in h200.launch_ops])
    assert with_graph(h200, graph, source="dot").kernel_source == "dot"
    with pytest.raises(UsageError, match=r"with_graph\(source='replay'\): a graph is read in process"):
        with_graph(h200, graph, source="replay")
