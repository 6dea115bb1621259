"""Conditional nodes: a body *may* run — one ``if``/``else`` or ``switch`` body, a ``while`` body k times.

What always runs is compared with a replay exactly; what a replay shows of the bodies is
allowed, not required.  ``branches`` counts each body on its own (the most over the
bodies), never bodies that exclude each other as running at once.
"""

from __future__ import annotations

import warnings

import pytest

from pytest_graphcapture.keys import CaptureKey
from pytest_graphcapture.summary import KernelEvidenceWarning, Summary, with_graph
from pytest_graphcapture.summary.dot import parse_dot
from pytest_graphcapture.summary.graph import CapturedGraph, GraphNode, Launch

KEY = CaptureKey("Cond", 1)
SHAPE = Launch((8, 1, 1), (128, 1, 1), 0)


def kernel(name: str) -> GraphNode:
    return GraphNode(name, "kernel", name, SHAPE)


def body(*names: str, parallel: bool = False) -> CapturedGraph:
    nodes = [kernel(n) for n in names]
    edges = [] if parallel else [(i, i + 1) for i in range(len(nodes) - 1)]
    return CapturedGraph(nodes, edges)


def conditional_graph(kind: str, *bodies: CapturedGraph) -> CapturedGraph:
    """before -> conditional(kind, bodies) -> after."""
    cond = GraphNode("cond", "conditional", kind, children=list(bodies))
    return CapturedGraph([kernel("before"), cond, kernel("after")], [(0, 1), (1, 2)])


def replay(*names: str) -> list[dict]:
    return [{"name": n, "kind": "kernel"} for n in names]


def empty_capture() -> Summary:
    return Summary(key=KEY, platform="cuda-sm90", kernels=[], ops=[])


def cross_check(graph: CapturedGraph, kernels: list[dict]) -> Summary:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", KernelEvidenceWarning)
        return with_graph(empty_capture(), graph, replay_kernels=kernels)


IF_ELSE = conditional_graph("if", body("then_kernel"), body("else_kernel"))


@pytest.mark.parametrize(
    "graph, ran",
    [
        (IF_ELSE, ["then_kernel"]),
        (IF_ELSE, ["else_kernel"]),
        (conditional_graph("if", body("then_kernel")), []),  # the condition was false
        (conditional_graph("switch", body("a"), body("b"), body("c")), ["b"]),
        (conditional_graph("switch", body("a"), body("b"), body("c")), []),
        (conditional_graph("while", body("step", "step2")), ["step", "step2"] * 5),
        (conditional_graph("while", body("step")), []),
        (conditional_graph("", body("x"), body("y")), ["x", "x", "y"]),  # a kind the source did not say: no bound
    ],
    ids=["if-then", "if-else", "if-false", "switch-one", "switch-none", "while-5", "while-0", "unknown-kind"],
)
def test_an_honest_replay_of_one_body_is_complete(graph: CapturedGraph, ran: list[str]) -> None:
    result = cross_check(graph, replay("before", *ran, "after"))
    assert result.complete, result.incomplete_reason
    # the summary still lists every body: what the graph may launch
    assert {k["name"] for k in result.kernels} >= {n.name for n in graph.walk() if n.type == "kernel"}


def test_a_replay_missing_what_always_runs_is_incomplete_and_says_what() -> None:
    result = cross_check(IF_ELSE, replay("then_kernel", "after"))
    assert not result.complete
    assert "missing from the replay: before x1" in result.incomplete_reason
    assert "else_kernel" not in result.incomplete_reason


def test_a_replay_running_a_body_more_often_than_one_launch_can_is_incomplete() -> None:
    result = cross_check(IF_ELSE, replay("before", "then_kernel", "then_kernel", "after"))
    assert not result.complete and "only in the replay: then_kernel x1" in result.incomplete_reason
    nested = conditional_graph("if", CapturedGraph([GraphNode("inner", "conditional", "switch", children=[body("a")])]))
    assert cross_check(nested, replay("before", "a", "after")).complete
    assert not cross_check(nested, replay("before", "a", "a", "after")).complete


def test_a_child_graph_always_runs_inside_a_body_and_outside() -> None:
    child = GraphNode("child", "graph", children=[body("in_child")])
    graph = CapturedGraph([kernel("before"), child], [(0, 1)])
    assert not cross_check(graph, replay("before")).complete
    assert cross_check(graph, replay("before", "in_child")).complete


@pytest.mark.parametrize(
    "graph, branches",
    [
        (IF_ELSE, 1),
        (conditional_graph("switch", body("a"), body("b"), body("c")), 1),
        (conditional_graph("switch", body("a", "b", parallel=True), body("c", "d", "e", parallel=True)), 3),
        (conditional_graph("while", body("a", "b", parallel=True)), 2),
    ],
    ids=["if-else", "switch-3", "switch-widest-body", "while"],
)
def test_branches_counts_each_body_on_its_own(graph: CapturedGraph, branches: int) -> None:
    assert graph.branches() == branches


def test_a_body_still_runs_beside_what_the_graph_runs_beside_the_conditional() -> None:
    # side runs beside the conditional: with either body it makes two at once, never three
    cond = GraphNode("cond", "conditional", "if", children=[body("then"), body("else")])
    graph = CapturedGraph([kernel("start"), cond, kernel("side"), kernel("end")], [(0, 1), (0, 2), (1, 3), (2, 3)])
    assert graph.branches() == 2


def test_a_dumps_if_else_node_reads_as_one_branch_with_its_kind() -> None:
    def k(g: int, n: int, name: str) -> str:
        return f'"graph_{g}_node_{n}"[label="{{KERNEL | {{ID | {n} | {name}\\<\\<\\<8,128,0\\>\\>\\>}}}}"];\n'

    text = (
        "digraph dot {\nsubgraph cluster_1 {\n"
        + k(1, 0, "before")
        + '"graph_1_node_1"[label="{CONDITIONAL | {ID | 1 (topoId: 1)} | {type | IF} | {bodies | graph_2 | graph_3}}"];\n'
        + '"graph_1_node_0" -> "graph_1_node_1"\n}\n'
        + "subgraph cluster_2 {\n"
        + k(2, 2, "then_kernel")
        + "}\nsubgraph cluster_3 {\n"
        + k(3, 3, "else_kernel")
        + "}\n}\n"
    )
    graph = parse_dot(text)
    cond = graph.nodes[1]
    assert (cond.type, cond.name, len(cond.children)) == ("conditional", "if", 2)
    assert graph.branches() == 1
    assert cross_check(graph, replay("before", "else_kernel")).complete
