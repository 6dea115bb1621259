"""Read a graph dump (DOT) written by ``cudaGraphDebugDotPrint``, ``CUDAGraph.debug_dump`` or ``hipGraphDebugDotPrint``.

Why: a dump is the graph's own account of what it launches — every node, its
kernel, grid, block and shared memory, and the dependencies — with no profiler
in between.  This module turns one into a :class:`~.graph.CapturedGraph` and its
summary; no Graphviz or pydot is needed, and a dump someone sends is read as
safely as a trace.  The rule: every node in the file is in the graph, or the file
is refused in one line naming it, the line and what is wrong.

What the dumps look like (the fixtures' README under ``tests/data/graph_dumps``
says which details come from real output):

* one ``subgraph cluster_<g>`` per graph (child graphs and a conditional node's
  bodies get their own cluster), nodes ``"graph_<g>_node_<n>"[style=… shape=…
  label=…];`` then edges ``"graph_<g>_node_<a>" -> "graph_<g>_node_<b>"``;
* CUDA and verbose HIP labels are Graphviz records: ``{KERNEL | {ID | 1 (topoId: 19)
  | name\\<\\<\\<grid,block,smem\\>\\>\\>} | …}``; the first field is the node type;
  CUDA writes a dimension as ``128`` or ``\\{16,10,2\\}``, HIP as ``(16,10,2)``;
* HIP without the verbose flag writes plain lines: ``5\\nMEMCPY\\n(DtoD,4096)``,
  ``5\\n<kernel name>\\n`` (a kernel's label has no type word) or, with the
  kernel-parameter flag, the launch on a third line — and then leaves the
  ``style`` value unclosed (``style="bold\\nshape=…``), which is repaired here;
* a child-graph or conditional node names its graphs (``graph_<g>``) in its label.

:mod:`.dot_syntax` reads the statements and :mod:`.dot_labels` the labels; this
module links the clusters into one graph and checks that it holds every node.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Optional, Union

from .._io import require_regular
from ..errors import FileError
from ..keys import CaptureKey
from ..naming import key_from_trace_name
from .dot_labels import CHILD_REF, node_from_label
from .dot_syntax import Cluster, DotError, statements
from .graph import CONTAINERS, CapturedGraph, CycleError, GraphNode, topological_order
from .model import Summary
from .normalize import DEFAULT_LEVEL, check_level
from .replay import graph_summary
from .tracefile import read_trace_bytes

#: hipGraphDebugDotPrint with the kernel-parameter or kernel-attribute flag leaves a kernel's style unclosed.
_HIP_UNCLOSED_STYLE = re.compile(r'style="(\w*)\n(?=shape=")')
#: File names of graph dumps: Graphviz's ``.dot`` and ``.gv``, each maybe gzip-compressed.
DUMP_SUFFIXES = (".dot", ".gv", ".dot.gz", ".gv.gz")
#: The platform of a dump's summary: a dump does not say which device or architecture wrote it.
DUMP_PLATFORM = "graph-dump"
_GZIP_MAGIC = b"\x1f\x8b"


def is_dump_name(path: Union[str, Path]) -> bool:
    """Whether ``path`` is named as a graph dump (``.dot``/``.gv``, maybe ``.gz``), in any letter case."""
    return str(path).lower().endswith(DUMP_SUFFIXES)


def dump_stem(path: Union[str, Path]) -> str:
    """The file name without its dump suffix: ``Runner_bs_8_rank0.dot.gz`` → ``Runner_bs_8_rank0``."""
    name = Path(path).name
    for suffix in sorted(DUMP_SUFFIXES, key=len, reverse=True):
        if name.lower().endswith(suffix):
            return name[: -len(suffix)]
    return name


def summarize_dot_file(
    path: Union[str, Path],
    *,
    level: str = DEFAULT_LEVEL,
    key: Optional[CaptureKey] = None,
    batch_size: Optional[int] = None,
    platform: str = DUMP_PLATFORM,
) -> Summary:
    """The summary of the graph dump at ``path``: kernels with launch shapes, copies, topology (``kernel_source: dot``).

    It is a :class:`~.model.Summary` like a capture's, so whatever reads summaries
    (``graphcapture diff`` and ``show``, :func:`~.files.load_summary_file`) reads it.
    Without ``key`` the key comes from the file name as a trace's does
    (``{runner}_bs_{bs}_rank{r}.dot``; other names: the stem, ``bs=?`` unless
    ``batch_size`` is given).  A dump has no CPU ops and no launch calls.
    """
    check_level(level)
    graph = read_dot_file(path)
    if key is None:
        key = key_from_trace_name(Path(path).with_name(dump_stem(path)), batch_size=batch_size, unknown_ok=True)
    return graph_summary(graph, key=key, platform=platform, level=level, source="dot")


def read_dot_file(path: Union[str, Path]) -> CapturedGraph:
    """The graph in a DOT dump file (plain or gzip); FileError naming the line when unreadable."""
    require_regular(path)
    try:
        with open(path, "rb") as handle:
            gzipped = handle.read(2) == _GZIP_MAGIC
        data = read_trace_bytes(path) if gzipped else Path(path).read_bytes()
    except OSError as exc:
        raise FileError(path, f"cannot read: {exc.strerror or exc}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        what = "gzip content" if gzipped else "file"
        raise FileError(path, f"is not a text graph dump (byte {exc.start} of the {what} is not UTF-8)") from None
    return parse_dot(text, source=str(path))


def parse_dot(text: str, *, source: str = "<dot>") -> CapturedGraph:
    """The graph in the DOT ``text`` (``source`` names it in errors).

    A UTF-8 byte-order mark before the graph is ignored, and CRLF or CR line ends
    read as LF (a label's lines are its lines, whichever end the writer used).
    """
    if text[:1] == "\ufeff":
        text = text[1:]
    if "\r" in text:
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    if '\nshape="' in text:  # what the repair needs; a plain search is far cheaper than the pattern's scan
        text = _HIP_UNCLOSED_STYLE.sub(r'style="\1"\n', text)
    try:
        return _build(*statements(text))
    except DotError as exc:
        position = exc.position
        while position < len(text) and text[position].isspace():
            position += 1  # a statement's position includes the white space before it
        line = text.count("\n", 0, position) + 1
        problem = exc.problem.replace("\r", "\\r").replace("\n", "\\n")  # a quoted id may hold line breaks
        raise FileError(source, f"line {line}: {problem}") from None


class _Graph:
    """One cluster as a graph: the model graph, where each node was declared, its container nodes."""

    def __init__(self, cluster: Cluster) -> None:
        self.ident = cluster.ident
        self.position = cluster.position
        self.graph = CapturedGraph(ident=f"graph_{cluster.ident}" if cluster.ident else "graph")
        self.positions = [position for _, _, position in cluster.nodes]
        self.containers: list[tuple[GraphNode, str, int]] = []
        for ident, label, position in cluster.nodes:
            node = node_from_label(ident, position, label)
            self.graph.nodes.append(node)
            if node.type in CONTAINERS:
                self.containers.append((node, label, position))


def _build(clusters: list[Cluster], edges: list[tuple[str, str, int]]) -> CapturedGraph:
    """Link clusters into one graph: each child cluster under the container node that names it.

    Refused: a container naming a graph the file lacks or naming none, a graph that
    is two nodes' child or no node's (besides the top one), graphs reachable from no
    node of the top graph, and cycles — so every node of the file is in the result.
    """
    graphs = [_Graph(c) for c in clusters]
    if not graphs:
        if edges:
            a, b, position = edges[0]
            raise DotError(position, f"edge {a} -> {b}: node {a} is never declared")
        return CapturedGraph()
    by_id = {g.ident: g for g in graphs if g.ident}
    index: dict[str, tuple[_Graph, int]] = {}
    for g in graphs:
        for i, node in enumerate(g.graph.nodes):
            index[node.ident] = (g, i)
    claimed: dict[str, GraphNode] = {}
    holds: dict[int, list[str]] = {}  # id(container) → the graphs it holds, in the order it names them

    def claim(container: GraphNode, child: str, position: int) -> None:
        if child in claimed and claimed[child] is not container:
            raise DotError(position, f"graph_{child} is the child of both {claimed[child].ident} and {container.ident}")
        if index[container.ident][0].ident == child:
            raise DotError(position, f"node {container.ident} holds its own graph graph_{child}")
        if child not in claimed:
            claimed[child] = container
            holds.setdefault(id(container), []).append(child)

    for g in graphs:
        for node, label, position in g.containers:
            for ref in dict.fromkeys(CHILD_REF.findall(label)):
                if ref not in by_id:
                    raise DotError(position, f"node {node.ident} holds graph_{ref}, which is not in the file")
                claim(node, ref, position)
    for a, b, position in edges:
        try:
            (graph_a, i), (graph_b, j) = index[a], index[b]
        except KeyError:
            missing = a if a not in index else b
            raise DotError(position, f"edge {a} -> {b}: node {missing} is never declared") from None
        if graph_a is graph_b:
            graph_a.graph.edges.append((i, j))
        elif graph_a.graph.nodes[i].type in CONTAINERS and graph_b.ident:
            claim(graph_a.graph.nodes[i], graph_b.ident, position)  # a link from a container into its graph
        else:
            raise DotError(position, f"edge {a} -> {b} joins two graphs, and {a} holds no child graph")
    for g in graphs:
        for node, _, position in g.containers:
            if id(node) not in holds:
                raise DotError(position, f"node {node.ident} is a {node.type} node that names no graph in the file")
            node.children = [by_id[child].graph for child in holds[id(node)]]
    roots = [g for g in graphs if g.ident not in claimed]
    if len(roots) != 1:
        extra = roots[1] if roots else graphs[0]
        problem = (
            f"{extra.graph.ident} is the child of no node (no child-graph node names it)"
            if roots
            else "every graph is some node's child: the child graphs form a loop"
        )
        raise DotError(extra.position, problem)
    _check_reachable(roots[0], graphs)
    for g in graphs:
        _check_acyclic(g)
    return roots[0].graph


def _check_reachable(root: _Graph, graphs: list[_Graph]) -> None:
    """Every graph is reached from the top one through container nodes (graphs that name each other are not)."""
    seen = {id(root.graph)}
    pending = [root.graph]
    while pending:
        for node in pending.pop().nodes:
            for child in node.children:
                if id(child) not in seen:
                    seen.add(id(child))
                    pending.append(child)
    for g in graphs:
        if id(g.graph) not in seen:
            raise DotError(
                g.position,
                f"{g.graph.ident} is not reachable from the top graph {root.graph.ident}: the nodes that hold it "
                "are in graphs that only hold each other",
            )


def _check_acyclic(g: _Graph) -> None:
    graph = g.graph
    if all(i < j for i, j in graph.edges):
        return  # every edge points to a later node (the order dumps list nodes in): no cycle
    successors: list[list[int]] = [[] for _ in graph.nodes]
    for i, j in graph.edges:
        successors[i].append(j)
    try:
        topological_order(len(graph.nodes), successors)
    except CycleError as exc:
        names = ", ".join(graph.nodes[i].ident for i in exc.nodes[:3])
        raise DotError(g.positions[exc.nodes[0]], f"the edges form a cycle (through {names})") from None
