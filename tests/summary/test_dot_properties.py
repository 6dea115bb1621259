"""Property checks of the DOT reader: a graph written as a dump reads back as the same graph, in any order.

Random graphs — kernels with launch shapes, copies, memsets, host and empty nodes, child
graphs and conditional nodes nested in each other, random forward edges — are written
the way CUDA's verbose printer and HIP's plain printer write them, with their clusters
and statements in a shuffled order, and must read back node for node.
"""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_graphcapture.summary.dot import parse_dot
from pytest_graphcapture.summary.graph import CapturedGraph, GraphNode, Launch

KERNELS = ("k_gemm", "_ZN2at6native6kernelEv", "void f<{lambda()#1}>", "reduce|sum")


def _random_graph(rng: random.Random, depth: int, counter: list[int]) -> CapturedGraph:
    graph = CapturedGraph()
    for _ in range(rng.randint(1, 5)):
        counter[0] += 1
        kind = rng.choice(["kernel", "kernel", "memcpy", "memset", "host", "empty", "graph", "conditional"])
        if kind in ("graph", "conditional") and depth >= 3:
            kind = "kernel"
        node = GraphNode(str(counter[0]), kind)
        if kind == "kernel":
            node.name = rng.choice(KERNELS)
            node.launch = Launch((rng.randint(1, 9), rng.randint(1, 3), 1), (rng.choice([32, 128, 256]), 1, 1), 0)
        elif kind == "memcpy":
            node.name = rng.choice(["DtoD", "HtoD", "DtoH"])
        elif kind == "graph":
            node.children = [_random_graph(rng, depth + 1, counter)]
        elif kind == "conditional":
            node.name = rng.choice(["if", "while", "switch"])
            node.children = [_random_graph(rng, depth + 1, counter) for _ in range(rng.randint(1, 3))]
        graph.nodes.append(node)
    n = len(graph.nodes)
    graph.edges = sorted({(a, b) for a in range(n) for b in range(a + 1, n) if rng.random() < 0.4})
    return graph


def _dims(dims: tuple[int, int, int]) -> str:
    return f"{dims[0]}" if dims[1:] == (1, 1) else "\\{" + ",".join(map(str, dims)) + "\\}"


def _write(graph: CapturedGraph, rng: random.Random, style: str) -> tuple[str, dict[int, int]]:
    """The dump of ``graph`` (``cuda`` records or ``hip`` plain lines), clusters and statements shuffled."""
    clusters: list[str] = []
    ids: dict[int, int] = {}  # id(graph) → its cluster number
    pending = [graph]
    while pending:
        g = pending.pop()
        ids[id(g)] = len(ids) + 1
        for node in g.nodes:
            pending.extend(node.children)
    for g_id, g in [(ids[id(g)], g) for g in _graphs(graph)]:
        statements = []
        for node in g.nodes:
            statements.append(f'"n{node.ident}"[style="solid" shape="record" label="{_label(node, ids, style)}"];\n')
        for a, b in g.edges:
            statements.append(f'"n{g.nodes[a].ident}" -> "n{g.nodes[b].ident}"\n')
        rng.shuffle(statements)
        clusters.append(f"subgraph cluster_{g_id} {{\n" + "".join(statements) + "}\n")
    rng.shuffle(clusters)
    return "digraph dot {\n" + "".join(clusters) + "}\n", ids


def _graphs(graph: CapturedGraph) -> list[CapturedGraph]:
    return list(graph.graphs())


def _label(node: GraphNode, ids: dict[int, int], style: str) -> str:
    refs = " | ".join(f"graph_{ids[id(c)]}" for c in node.children)
    if style == "hip" and node.type != "conditional":
        if node.type == "kernel":
            assert node.launch is not None
            grid, block = node.launch.grid, node.launch.block
            launch = f"\\<\\<\\<({grid[0]},{grid[1]},{grid[2]}),({block[0]},{block[1]},{block[2]}),0\\>\\>\\>"
            return f"{node.ident}\n{node.name}\n{launch}"
        if node.type == "graph":
            return f"{node.ident}\n{refs}"
        word = {"memcpy": f"MEMCPY\n({node.name},64)", "memset": "MEMSET\n(0,64)"}.get(node.type, node.type.upper())
        return f"{node.ident}\n{word}"
    if node.type == "kernel":
        assert node.launch is not None
        shape = f"{_dims(node.launch.grid)},{_dims(node.launch.block)},0"
        name = node.name.replace("{", "\\{").replace("}", "\\}").replace("|", "\\|")  # as a record escapes them
        return f"{{KERNEL\n| {{ID | {node.ident} (topoId: 0) | {name}\\<\\<\\<{shape}\\>\\>\\>}}\n}}"
    if node.type == "memcpy":
        return f"{{MEMCPY\n| {{ID | {node.ident}}}\n| {{kind | {node.name}}}\n}}"
    if node.type in ("graph", "conditional"):
        kind = f"\n| {{type | {node.name.upper()}}}" if node.type == "conditional" else ""
        return f"{{{node.type.upper()}\n| {{ID | {node.ident} | {refs}}}{kind}\n}}"
    return f"{{{node.type.upper()}\n| {{ID | {node.ident} (topoId: 0)}}\n}}"


def _shape(graph: CapturedGraph) -> tuple:
    """The graph as comparable data: each node (type, name, launch, its graphs) by id, and the edges by id."""
    nodes = {n.ident.lstrip("n"): (n.type, n.name, n.launch, tuple(_shape(c) for c in n.children)) for n in graph.nodes}
    edges = sorted((graph.nodes[a].ident.lstrip("n"), graph.nodes[b].ident.lstrip("n")) for a, b in graph.edges)
    return tuple(sorted(nodes.items(), key=lambda item: item[0])), tuple(edges)


@settings(max_examples=120, deadline=None)
@given(st.randoms(use_true_random=False), st.sampled_from(["cuda", "hip"]))
def test_a_written_graph_reads_back_node_for_node_in_any_order(rng: random.Random, style: str) -> None:
    graph = _random_graph(rng, 0, [0])
    text, _ = _write(graph, rng, style)
    read = parse_dot(text)
    assert _shape(read) == _shape(graph)
    assert read.node_counts() == graph.node_counts()
    assert read.branches() == graph.branches()
    assert read.kernels() == graph.kernels()
