"""Read a graph dump (DOT) written by ``cudaGraphDebugDotPrint``, ``CUDAGraph.debug_dump`` or ``hipGraphDebugDotPrint``.

Why: a dump is the graph's own account of what it launches — every node, its
kernel, grid, block and shared memory, and the dependencies — with no profiler
in between.  This module turns one into a :class:`~.graph.CapturedGraph`; no
Graphviz or pydot is needed, and a dump someone sends is read as safely as a
trace: anything wrong ends in one line naming the file, the line and the problem.

What the dumps look like (the fixtures' README under ``tests/data/graph_dumps``
says which details come from real output):

* one ``subgraph cluster_<g>`` per graph (child graphs get their own cluster),
  nodes ``"graph_<g>_node_<n>"[style=… shape=… label=…];`` then edges
  ``"graph_<g>_node_<a>" -> "graph_<g>_node_<b>"``;
* CUDA and verbose HIP labels are Graphviz records: ``{KERNEL | {ID | 1 (topoId: 19)
  | name\\<\\<\\<grid,block,smem\\>\\>\\>} | …}``; the first field is the node type;
  CUDA writes a dimension as ``128`` or ``\\{16,10,2\\}``, HIP as ``(16,10,2)``;
* HIP without the verbose flag writes plain lines: ``5\\nMEMCPY\\n(DtoD,4096)``,
  ``5\\n<kernel name>\\n`` (a kernel's label has no type word) or, with the
  kernel-parameter flag, the launch on a third line — and then leaves the
  ``style`` value unclosed (``style="bold\\nshape=…``), which is repaired here;
* a child-graph node names its graph (``graph_<g>``) in its label.

Kernel names stay as the dump spells them (mangled); the summary demangles and
normalizes them like every other kernel name.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Union

from .._io import require_regular
from ..errors import FileError
from .graph import CONTAINERS, CapturedGraph, CycleError, GraphNode, Launch, topological_order
from .normalize import DEFAULT_LEVEL

#: Type words of the dumps → the model's node types.
TYPE_WORDS = {
    "KERNEL": "kernel",
    "MEMCPY": "memcpy",
    "MEMSET": "memset",
    "HOST": "host",
    "EMPTY": "empty",
    "GRAPH": "graph",
    "CHILD_GRAPH": "graph",
    "EVENT_RECORD": "event_record",
    "RECORD_EVENT": "event_record",
    "EVENT_WAIT": "event_wait",
    "WAIT_EVENT": "event_wait",
    "EXT_SEMAS_SIGNAL": "ext_semas_signal",
    "EXT_SEMAS_WAIT": "ext_semas_wait",
    "MEM_ALLOC": "mem_alloc",
    "MEM_FREE": "mem_free",
    "BATCH_MEM_OP": "batch_mem_op",
    "CONDITIONAL": "conditional",
}

_QUOTED = r'"[^"\\]*(?:\\.[^"\\]*)*"'
_ID = r"[A-Za-z_\x80-\U0010ffff][\w\x80-\U0010ffff]*|-?(?:\.\d+|\d+(?:\.\d*)?)"
_NAME = rf"(?:{_QUOTED}|{_ID})"
_ATTRS = rf'\[[^\]"]*(?:{_QUOTED}[^\]"]*)*\]'
_STATEMENT = re.compile(
    rf"""
    (?P<skip>\s+|//[^\n]*|/\*.*?\*/|\#[^\n]*)
    |(?P<open>(?:strict\s+)?(?:di)?graph\b\s*(?:{_NAME})?\s*\{{|subgraph\b\s*(?P<sub>{_NAME})?\s*\{{)
    |(?P<close>\}}\s*;?)
    |(?P<defaults>(?:graph|node|edge)\s*(?P<dattrs>{_ATTRS})\s*;?)
    |(?P<edge>(?P<a>{_NAME})\s*->\s*(?P<b>{_NAME})\s*(?P<eattrs>{_ATTRS})?\s*;?)
    |(?P<assign>(?P<key>{_ID})\s*=\s*(?P<value>{_NAME})\s*;?)
    |(?P<node>(?P<n>{_NAME})\s*(?P<nattrs>{_ATTRS})?\s*;?)
    """,
    re.VERBOSE | re.DOTALL,
)
_ATTR = re.compile(rf"\s*(?P<key>{_ID})\s*=\s*(?P<value>{_NAME})\s*[,;]?\s*", re.DOTALL)
#: hipGraphDebugDotPrint with the kernel-parameter or kernel-attribute flag leaves a kernel's style unclosed.
_HIP_UNCLOSED_STYLE = re.compile(r'style="(\w*)\n(?=shape=")')
_ESCAPE = re.compile(r"\\.")
_ESCAPED = re.compile(r"\\(.)")
_TYPE_WORD = re.compile(r"\s*\{\s*([A-Z][A-Z0-9_]*)\b")
#: The field holding ``name\<\<\<…\>\>\>``: from the structural character before it to the closing ``>>>``.
_RECORD_LAUNCH = re.compile(r"[{|][^|{}\\]*(?:\\.[^|{}\\]*)*?\\<\\<\\<.*?\\>\\>\\>", re.DOTALL)
_RECORD_ID_NAME = re.compile(r"\{\s*ID\s*\|[^|{}]*\|\s*((?:[^|{}\\]|\\.)+?)\s*\}")
_RECORD_KIND = re.compile(r"\{\s*kind\s*\|\s*((?:[^|{}\\]|\\.)*?)\s*\}")
_LAUNCH = re.compile(r"^(?P<name>.*?)\s*<<<(?P<shape>.*)>>>\s*$", re.DOTALL)
_CHILD_REF = re.compile(r"\bgraph_(\d+)\b")
_CLUSTER = re.compile(r"^cluster_?(.*)$")
_COPY_KIND = re.compile(
    r"(?:cuda|hip)?Memcpy(Host|Device|Array|Default)To(Host|Device|Array)|^(Host|Device|Array)To(Host|Device|Array)$"
)


class _DotError(Exception):
    """A problem at a position of the text; the reader turns it into a one-line FileError."""

    def __init__(self, position: int, problem: str) -> None:
        self.position = position
        self.problem = problem
        super().__init__(problem)


@dataclass
class _Cluster:
    ident: str
    position: int
    nodes: list[str] = field(default_factory=list)


@dataclass
class _Node:
    ident: str
    cluster: str
    position: int
    attrs: dict


def summarize_dot_file(path: Union[str, Path], *, level: str = DEFAULT_LEVEL) -> dict:
    """Kernels with launch shapes, copies and topology of the graph dump at ``path`` (``source: dot``)."""
    return read_dot_file(path).summary(level, source="dot")


def read_dot_file(path: Union[str, Path]) -> CapturedGraph:
    """The graph in a DOT dump file; :class:`~pytest_graphcapture.errors.FileError` naming the line when unreadable."""
    require_regular(path)
    try:
        text = Path(path).read_bytes().decode("utf-8")
    except OSError as exc:
        raise FileError(path, f"cannot read: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise FileError(path, f"is not a text graph dump (byte {exc.start} is not UTF-8)") from None
    return parse_dot(text, source=str(path))


def parse_dot(text: str, *, source: str = "<dot>") -> CapturedGraph:
    """The graph in the DOT ``text`` (``source`` names it in errors)."""
    text = _HIP_UNCLOSED_STYLE.sub(r'style="\1"\n', text)
    try:
        return _build(*_statements(text))
    except _DotError as exc:
        line = text.count("\n", 0, exc.position) + 1
        raise FileError(source, f"line {line}: {exc.problem}") from None


def _unquote(token: str) -> str:
    if token.startswith('"'):
        return token[1:-1].replace('\\"', '"').replace("\\\n", "")
    return token


def _attrs(text: Optional[str], position: int) -> dict:
    if not text:
        return {}
    body = text[1:-1]
    found = {}
    at = 0
    while at < len(body):
        match = _ATTR.match(body, at)
        if not match or match.end() == at:
            if not body[at:].strip():
                break
            raise _DotError(position, f"cannot read the attribute list at {_excerpt(body[at:])}")
        found[match["key"]] = _unquote(match["value"])
        at = match.end()
    return found


def _excerpt(text: str) -> str:
    line = text.strip().split("\n", 1)[0]
    return repr(line[:40] + ("…" if len(line) > 40 else ""))


def _statements(text: str) -> tuple[list[_Cluster], dict[str, _Node], list[tuple[str, str, int]]]:
    """Clusters in order, nodes by id, edges ``(from, to, position)``; checks the nesting of braces."""
    clusters: list[_Cluster] = []
    nodes: dict[str, _Node] = {}
    edges: list[tuple[str, str, int]] = []
    stack: list[tuple[Optional[_Cluster], int]] = []
    root: Optional[_Cluster] = None
    at = 0
    seen_graph = False
    while at < len(text):
        match = _STATEMENT.match(text, at)
        if match is None or match.end() == at:
            if not seen_graph:
                raise _DotError(at, f"not a graph dump: expected 'digraph … {{', found {_excerpt(text[at:])}")
            if text[at] == '"':
                raise _DotError(at, "a quoted string is not closed")
            if text[at] == "[":
                raise _DotError(at, "an attribute list is not closed (a ']' or a closing quote is missing)")
            raise _DotError(at, f"cannot read {_excerpt(text[at:])} (expected a node, an edge, a subgraph or '}}')")
        kind = match.lastgroup
        if kind != "skip" and not seen_graph and kind != "open":
            raise _DotError(at, f"not a graph dump: expected 'digraph … {{', found {_excerpt(text[at:])}")
        if kind == "open":
            seen_graph = True
            if match["sub"] is not None:
                name = _unquote(match["sub"])
                cluster_match = _CLUSTER.match(name)
                cluster = _Cluster(cluster_match.group(1) if cluster_match else name, at)
                clusters.append(cluster)
                stack.append((cluster, at))
            else:
                if stack:
                    stack.append((stack[-1][0], at))  # an anonymous block keeps its graph
                else:
                    root = _Cluster("", at)
                    stack.append((root, at))
        elif kind == "close":
            if not stack:
                raise _DotError(at, "'}' closes nothing")
            stack.pop()
        elif kind == "node":
            if not stack:
                raise _DotError(at, "a node outside the graph's braces")
            ident = _unquote(match["n"])
            if ident in nodes:
                raise _DotError(at, f"node {ident} is declared twice")
            cluster = stack[-1][0] or root
            assert cluster is not None
            nodes[ident] = _Node(ident, cluster.ident, at, _attrs(match["nattrs"], at))
            cluster.nodes.append(ident)
        elif kind == "edge":
            if not stack:
                raise _DotError(at, "an edge outside the graph's braces")
            _attrs(match["eattrs"], at)
            edges.append((_unquote(match["a"]), _unquote(match["b"]), at))
        elif kind in ("assign", "defaults"):
            if not stack:
                raise _DotError(at, "an attribute outside the graph's braces")
            if kind == "defaults":
                _attrs(match["dattrs"], at)
        at = match.end()
    if not seen_graph:
        raise _DotError(0, "is empty: no 'digraph' in it")
    if stack:
        raise _DotError(stack[-1][1], "this block is never closed with '}'")
    if root is not None and root.nodes:
        clusters.insert(0, root)
    return clusters, nodes, edges


def _build(clusters: list[_Cluster], nodes: dict[str, _Node], edges: list[tuple[str, str, int]]) -> CapturedGraph:
    """Link clusters into one graph: child clusters under the node that names them."""
    if not clusters:
        if edges:
            a, b, position = edges[0]
            raise _DotError(position, f"edge {a} -> {b}: node {a} is never declared")
        return CapturedGraph()
    by_id = {c.ident: c for c in clusters}
    graphs = {c.ident: CapturedGraph(ident=f"graph_{c.ident}" if c.ident else "graph") for c in clusters}
    index: dict[str, tuple[str, int]] = {}
    model: dict[str, GraphNode] = {}
    for cluster in clusters:
        for i, ident in enumerate(cluster.nodes):
            node = _node(nodes[ident])
            graphs[cluster.ident].nodes.append(node)
            index[ident] = (cluster.ident, i)
            model[ident] = node
    claimed: dict[str, str] = {}

    def claim(container: str, child: str, position: int) -> None:
        if child in claimed and claimed[child] != container:
            raise _DotError(position, f"graph_{child} is the child of both {claimed[child]} and {container}")
        if child == nodes[container].cluster:
            raise _DotError(position, f"node {container} holds its own graph graph_{child}")
        claimed[child] = container

    for ident, node in model.items():
        if node.type in CONTAINERS:
            label = nodes[ident].attrs.get("label", "")
            for ref in _CHILD_REF.findall(label.replace(ident, "")):
                if ref in by_id:
                    claim(ident, ref, nodes[ident].position)
    for a, b, position in edges:
        for end in (a, b):
            if end not in index:
                raise _DotError(position, f"edge {a} -> {b}: node {end} is never declared")
        (graph_a, i), (graph_b, j) = index[a], index[b]
        if graph_a == graph_b:
            graphs[graph_a].edges.append((i, j))
        elif model[a].type in CONTAINERS:
            claim(a, graph_b, position)  # a link from a child-graph node into its graph
        else:
            raise _DotError(position, f"edge {a} -> {b} joins two graphs, and {a} holds no child graph")
    for child, container in claimed.items():
        model[container].children.append(graphs[child])
    roots = [c for c in clusters if c.ident not in claimed]
    if len(roots) != 1:
        extra = roots[1] if roots else clusters[0]
        problem = (
            f"graph_{extra.ident} is the child of no node (no child-graph node names it)"
            if roots
            else "every graph is some node's child: the child graphs form a loop"
        )
        raise _DotError(extra.position, problem)
    top = graphs[roots[0].ident]
    for graph in top.graphs():
        successors: list[list[int]] = [[] for _ in graph.nodes]
        for i, j in graph.edges:
            successors[i].append(j)
        try:
            topological_order(len(graph.nodes), successors)
        except CycleError as exc:
            names = ", ".join(graph.nodes[i].ident for i in exc.nodes[:3])
            raise _DotError(
                nodes[graph.nodes[exc.nodes[0]].ident].position, f"the edges form a cycle (through {names})"
            ) from None
    return top


def _node(raw: _Node) -> GraphNode:
    """A model node from a declared DOT node: its type, kernel name and launch, or copy kind."""
    label = raw.attrs.get("label")
    if label is None:
        raise _DotError(raw.position, f"node {raw.ident} has no label (not a CUDA or HIP graph dump?)")
    if label.lstrip().startswith("{"):
        return _record_node(raw, label)
    return _plain_node(raw, label)


def _record_node(raw: _Node, label: str) -> GraphNode:
    """A record label: the first field is the type; the kernel is the field with ``<<<…>>>``."""
    unescaped = _ESCAPE.sub("", label)
    if unescaped.count("{") != unescaped.count("}"):
        raise _DotError(raw.position, f"node {raw.ident}: the label's braces do not balance")
    word = _TYPE_WORD.match(label)
    if not word:
        raise _DotError(
            raw.position, f"node {raw.ident}: the label does not start with a node type ({_excerpt(label)})"
        )
    node = GraphNode(raw.ident, _type_of(word[1]))
    if node.type == "kernel":
        launch = _RECORD_LAUNCH.search(label)
        if launch:
            node.name, node.launch = _launch(launch[0].lstrip("{|"), raw)
        else:
            named = _RECORD_ID_NAME.search(label)
            node.name = _ESCAPED.sub(r"\1", named[1]) if named else ""
    elif node.type == "memcpy":
        kind = _RECORD_KIND.search(label)
        node.name = _copy_kind(_ESCAPED.sub(r"\1", kind[1])) if kind else ""
    return node


def _plain_node(raw: _Node, label: str) -> GraphNode:
    """Plain labels: HIP's ``id``, then the type word (none for a kernel: its name), then details."""
    lines = [line.strip() for line in label.split("\n")]
    while lines and not lines[-1]:
        lines.pop()
    if lines and lines[0] in TYPE_WORDS:
        lines = ["", *lines]  # a type word first, without an id
    if len(lines) < 2:
        raise _DotError(raw.position, f"node {raw.ident}: cannot read the label {_excerpt(label)}")
    second = lines[1]
    if second in TYPE_WORDS:
        node = GraphNode(raw.ident, TYPE_WORDS[second])
        if node.type == "memcpy" and len(lines) > 2:
            node.name = _copy_kind(lines[2].strip("()").split(",")[0])
        elif node.type == "kernel" and len(lines) > 2:
            node.name, node.launch = _launch(" ".join(lines[2:]), raw)
        return node
    if _CHILD_REF.fullmatch(second):
        return GraphNode(raw.ident, "graph")
    node = GraphNode(raw.ident, "kernel", name=second)
    if len(lines) > 2:
        node.name, node.launch = _launch(second + lines[2], raw)
    return node


def _type_of(word: str) -> str:
    """The model's type for a dump's type word; a word this reader does not know counts under its own name."""
    return TYPE_WORDS.get(word, word.lower())


def _launch(text: str, raw: _Node) -> tuple[str, Launch]:
    """``name<<<grid,block,smem>>>`` (escapes removed) → (name, Launch)."""
    plain = text.replace("\\", "")
    match = _LAUNCH.match(plain.strip())
    if not match:
        raise _DotError(raw.position, f"node {raw.ident}: cannot read the launch shape in {_excerpt(plain)}")
    parts = _split_top(match["shape"])
    try:
        if len(parts) != 3:
            raise ValueError
        grid, block = _dim3(parts[0]), _dim3(parts[1])
        shared = int(parts[2])
        if shared < 0:
            raise ValueError
    except ValueError:
        raise _DotError(
            raw.position,
            f"node {raw.ident}: cannot read the launch shape <<<{match['shape']}>>> (grid, block, shared memory)",
        ) from None
    return match["name"].strip(), Launch(grid, block, shared)


def _split_top(text: str) -> list[str]:
    parts, depth, current = [], 0, []
    for ch in text:
        if ch == "," and depth == 0:
            parts.append("".join(current).strip())
            current = []
            continue
        depth += ch in "{("
        depth -= ch in "})"
        current.append(ch)
    parts.append("".join(current).strip())
    return parts


def _dim3(text: str) -> tuple[int, int, int]:
    """``128`` / ``{16,10}`` / ``{16,10,2}`` / ``(16,10,2)`` → a positive (x, y, z)."""
    inner = text.strip()
    if inner[:1] in "{(" and inner[-1:] in "})":
        inner = inner[1:-1]
    values = [int(v) for v in inner.split(",")]
    if not 1 <= len(values) <= 3 or min(values) < 1:
        raise ValueError(text)
    values += [1] * (3 - len(values))
    return values[0], values[1], values[2]


def _copy_kind(text: str) -> str:
    """A copy direction as ``HtoD``/``DtoD``/``DtoH``/``HtoH`` (``A`` for arrays); other spellings kept."""
    match = _COPY_KIND.search(text)
    if not match:
        return text
    src, dst = (g for g in match.groups() if g)
    if src == "Default":
        return "default"
    return f"{src[0]}to{dst[0]}"
