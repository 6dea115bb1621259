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

import functools
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Union

from .._io import require_regular
from ..errors import FileError
from .graph import CONTAINERS, CapturedGraph, CycleError, GraphNode, Launch, copy_direction, topological_order
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

_QUOTED_EXACT = r'"[^"\\]*(?:\\.[^"\\]*)*"'
#: A quoted string without escaped quotes: the common case, scanned faster (see :func:`_statements`).
_QUOTED_FAST = r'"[^"]*"'
#: A DOT ID: letters, underscores, digits and any non-ASCII character, not starting with a digit; or a number.
#: Each is spelled as one negated class of the ASCII characters it excludes: a class listing the range up to
#: U+10FFFF takes a sizeable fraction of a second to compile, and an alternation (``\w|[^\x00-\x7f]``) is
#: matched one character at a time by the slow general loop; a single class repeats at C speed.
_ID_START = r"[^\x00-\x40\x5b-\x5e\x60\x7b-\x7f]"  # an ASCII letter or ``_``, or any non-ASCII character
_ID_CHAR = r"[^\x00-\x2f\x3a-\x40\x5b-\x5e\x60\x7b-\x7f]"  # the same or an ASCII digit
_ID = rf"(?:{_ID_START}{_ID_CHAR}*|-?(?:\.\d+|\d+(?:\.\d*)?))"


def _statement_pattern(quoted: str, *, runtime: bool = False) -> re.Pattern:
    """One DOT statement after optional white space, for one spelling of a quoted string.

    Attribute lists are matched strictly (``key = value`` pairs, separated by spaces,
    commas or semicolons), so a statement that matches is well formed.

    With ``runtime``, a node written the way the runtimes write one (a quoted id, then
    quoted values with plain keys, ``label="…"`` last) is matched first as ``rnode``,
    its label in the group ``rlabel``: every ``rnode`` is also a ``node`` with the same
    extent, and the group holds what :func:`_label` finds in it (the first key that is
    exactly ``label``), so the label costs no second scan of the attribute list.
    """
    name = rf"(?:{quoted}|{_ID})"
    attrs = rf"\[\s*(?:(?:{_ID})\s*=\s*{name}\s*[,;]?\s*)*\]"
    runtime_node = (
        rf"""(?P<rnode>(?P<rn>{quoted})\[\s*(?:(?!label\s*=)[A-Za-z_]\w*\s*=\s*{quoted}\s*[,;]?\s*)*
        label="(?P<rlabel>[^"]*)"\s*[,;]?\s*\]\s*;?)
        |"""
        if runtime
        else ""
    )
    return re.compile(
        rf"""\s*(?:{runtime_node}
        (?P<node>(?P<n>{quoted})\s*(?P<nattrs>{attrs})\s*;?)
        |(?P<edge>(?P<a>{name})\s*->\s*(?P<b>{name})\s*(?:{attrs})?\s*;?)
        |(?P<skip>//[^\n]*|/\*.*?\*/|\#[^\n]*)
        |(?P<open>(?:strict\s+)?(?:di)?graph\b\s*(?:{name})?\s*\{{|subgraph\b\s*(?P<sub>{name})?\s*\{{)
        |(?P<close>\}}\s*;?)
        |(?P<defaults>(?:graph|node|edge)\s*{attrs}\s*;?)
        |(?P<assign>{_ID}\s*=\s*{name}\s*;?)
        |(?P<node2>(?P<n2>{name})\s*(?P<nattrs2>{attrs})?\s*;?)
        )""",
        re.VERBOSE | re.DOTALL,
    )


_FAST = _statement_pattern(_QUOTED_FAST, runtime=True)
_EXACT = _statement_pattern(_QUOTED_EXACT)
_PAIR = re.compile(rf"({_ID})\s*=\s*({_QUOTED_EXACT}|{_ID})", re.DOTALL)
_LABEL_VALUE = re.compile(rf"\s*=\s*({_QUOTED_FAST}|{_ID})")
#: hipGraphDebugDotPrint with the kernel-parameter or kernel-attribute flag leaves a kernel's style unclosed.
_HIP_UNCLOSED_STYLE = re.compile(r'style="(\w*)\n(?=shape=")')
_ESCAPE = re.compile(r"\\.")
_ESCAPED = re.compile(r"\\(.)")
_TYPE_WORD = re.compile(r"\s*\{\s*([A-Z][A-Z0-9_]*)\b")
_RECORD_ID_NAME = re.compile(r"\{\s*ID\s*\|[^|{}]*\|\s*((?:[^|{}\\]|\\.)+?)\s*\}")
_RECORD_KIND = re.compile(r"\{\s*kind\s*\|\s*((?:[^|{}\\]|\\.)*?)\s*\}")
_DIM = r"\s*(?:\d+|\{\s*\d+(?:\s*,\s*\d+){0,2}\s*\}|\(\s*\d+(?:\s*,\s*\d+){0,2}\s*\))\s*"
_SHAPE = re.compile(rf"(?P<grid>{_DIM}),(?P<block>{_DIM}),\s*(?P<smem>\d+)\s*$")
_LAUNCH = re.compile(r"^(?P<name>.*?)\s*<<<(?P<shape>.*)>>>\s*$", re.DOTALL)
_DIGITS = re.compile(r"\d+")
_CHILD_REF = re.compile(r"\bgraph_(\d+)\b")
_CLUSTER = re.compile(r"^cluster_?(.*)$")
#: An edge as the runtimes write one: quoted ids without escapes, no attributes, not part of a chain.
_PLAIN_EDGE = re.compile(r'\s*"([^"\\\n]*)"\s*->\s*"([^"\\\n]*)"(?!\s*(?:\[|->))[ \t]*;?')


class _DotError(Exception):
    """A problem at a position of the text; the reader turns it into a one-line FileError."""

    def __init__(self, position: int, problem: str) -> None:
        self.position = position
        self.problem = problem
        super().__init__(problem)


@dataclass
class _Cluster:
    """One ``subgraph cluster_<g>`` (or the top level): its graph, node positions and container nodes."""

    ident: str
    position: int
    graph: CapturedGraph = field(default_factory=CapturedGraph)
    positions: list[int] = field(default_factory=list)
    containers: list[tuple[GraphNode, str, int]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.graph.ident = f"graph_{self.ident}" if self.ident else "graph"


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
    if '\nshape="' in text:  # what the repair needs; a plain search is far cheaper than the pattern's scan
        text = _HIP_UNCLOSED_STYLE.sub(r'style="\1"\n', text)
    try:
        return _build(*_statements(text))
    except _DotError as exc:
        position = exc.position
        while position < len(text) and text[position].isspace():
            position += 1  # a statement's position includes the white space before it
        line = text.count("\n", 0, position) + 1
        problem = exc.problem.replace("\r", "\\r").replace("\n", "\\n")  # a quoted id may hold line breaks
        raise FileError(source, f"line {line}: {problem}") from None


def _unquote(token: str) -> str:
    """A DOT name or value as meant: quotes removed, ``\\"`` and line continuations resolved."""
    if token[:1] != '"':
        return token
    token = token[1:-1]
    if "\\" in token and ('\\"' in token or "\\\n" in token):
        token = token.replace('\\"', '"').replace("\\\n", "")
    return token


def _excerpt(text: str) -> str:
    line = text.strip().split("\n", 1)[0]
    return repr(line[:40] + ("…" if len(line) > 40 else ""))


def _label(text: str, start: int, end: int, fast: bool, continued: bool = True) -> Optional[str]:
    """The ``label`` value of the attribute list ``text[start:end]`` (well formed), unquoted; None without one.

    With ``fast`` (no escaped quote in the list) the key is found by string search: a
    ``label`` outside quotes, not the end of a longer key (``xlabel``).  ``continued``
    says the text has line continuations somewhere, to be joined.
    """
    if not fast:
        for key, value in _PAIR.findall(text, start, end):
            if key == "label":
                return _unquote(value)
        return None
    i = text.find("label", start, end)
    while i >= 0:
        before = text[i - 1]
        if text.count('"', start, i) % 2 == 0 and not (before.isalnum() or before == "_"):
            if text.startswith('="', i + 5):  # as the runtimes write it: no space, a quoted string
                label = text[i + 7 : text.find('"', i + 7, end)]
            else:
                value = _LABEL_VALUE.match(text, i + 5, end)
                if not value:
                    i = text.find("label", i + 5, end)
                    continue
                label = value[1][1:-1] if value[1][:1] == '"' else value[1]
            if continued and "\\\n" in label:  # no escaped quote here (fast), only line continuations
                label = label.replace("\\\n", "")
            return label
        i = text.find("label", i + 5, end)
    return None


def _not_read(text: str, at: int, seen_graph: bool) -> _DotError:
    """Why no statement can be read at ``at``."""
    if not seen_graph:
        return _DotError(at, f"not a graph dump: expected 'digraph … {{', found {_excerpt(text[at:])}")
    if text[at] == '"':  # a node or an edge that does not read: say which part
        quoted = re.compile(_QUOTED_EXACT, re.DOTALL).match(text, at)
        if not quoted:
            return _DotError(at, "a quoted string is not closed")
        rest = text[quoted.end() :]
        if rest.lstrip().startswith("["):
            return _DotError(
                quoted.end() + len(rest) - len(rest.lstrip()),
                "cannot read the attribute list (a ']' or a closing quote is missing?)",
            )
    return _DotError(at, f"cannot read {_excerpt(text[at:])} (expected a node, an edge, a subgraph or '}}')")


def _statements(text: str) -> tuple[list[_Cluster], list[tuple[str, str, int]]]:
    """Clusters in order with their nodes read, and edges ``(from, to, position)``; checks the braces."""
    clusters: list[_Cluster] = []
    declared: set[str] = set()
    edges: list[tuple[str, str, int]] = []
    stack: list[tuple[Optional[_Cluster], int]] = []
    root: Optional[_Cluster] = None
    at = 0
    seen_graph = False
    fast_match = _FAST.match
    escaped = -1  # the next escaped quote at or after ``at`` (len(text): none)
    continued = "\\\n" in text  # line continuations inside quoted strings, to be joined
    while at < len(text):
        if escaped < at:
            escaped = text.find('\\"', at)
            escaped = len(text) if escaped < 0 else escaped
        match = fast_match(text, at)
        fast = match is not None
        if fast and escaped < len(text):
            # An escaped quote in the statement, or on the rest of its line, may have cut a fast string short.
            line_end = text.find("\n", match.end())
            fast = escaped >= (line_end if line_end >= 0 else len(text))
        if not fast:
            fast = False
            match = _EXACT.match(text, at)
        if match is None or match.end() == at:
            rest = text[at:]
            if not rest.strip():
                break
            raise _not_read(text, at + len(rest) - len(rest.lstrip()), seen_graph)
        kind = match.lastgroup
        if kind == "rnode" or kind == "node" or kind == "node2":
            if not stack:
                raise _DotError(at, "a node outside the graph's braces")
            ident = _unquote(match["rn"] if kind == "rnode" else match["n"] or match["n2"])
            if ident in declared:
                raise _DotError(at, f"node {ident} is declared twice")
            declared.add(ident)
            if kind == "rnode":
                label = match["rlabel"]
                if continued and "\\\n" in label:  # no escaped quote here (fast), only line continuations
                    label = label.replace("\\\n", "")
            else:
                start, end = match.span("nattrs" if kind == "node" else "nattrs2")
                label = _label(text, start, end, fast, continued) if start >= 0 else None
            if label is None:
                if text.startswith("[", match.end()):
                    raise _DotError(
                        match.end(), "cannot read the attribute list (a ']' or a closing quote is missing?)"
                    )
                raise _DotError(at, f"node {ident} has no label (not a CUDA or HIP graph dump?)")
            cluster = stack[-1][0] or root
            assert cluster is not None
            if label[:1] == "{" or label.lstrip()[:1] == "{":
                node = _record_node(ident, at, label)
            else:
                node = _plain_node(ident, at, label)
            cluster.graph.nodes.append(node)
            cluster.positions.append(at)
            if node.type in CONTAINERS:
                cluster.containers.append((node, label, at))
        elif kind == "edge":
            if not stack:
                raise _DotError(at, "an edge outside the graph's braces")
            edges.append((_unquote(match["a"]), _unquote(match["b"]), at))
            at = match.end()
            run = _PLAIN_EDGE.match(text, at)
            while run:  # the edges that follow, as dumps write them (plain quoted ids, no attributes)
                edges.append((run[1], run[2], at))
                at = run.end()
                run = _PLAIN_EDGE.match(text, at)
            continue
        elif kind == "open":
            seen_graph = True
            if match["sub"] is not None:
                name = _unquote(match["sub"])
                cluster_match = _CLUSTER.match(name)
                cluster = _Cluster(cluster_match.group(1) if cluster_match else name, at)
                clusters.append(cluster)
                stack.append((cluster, at))
            elif stack:
                stack.append((stack[-1][0], at))  # an anonymous block keeps its graph
            else:
                root = _Cluster("", at)
                stack.append((root, at))
        elif kind == "close":
            if not stack:
                raise _DotError(at, "'}' closes nothing")
            stack.pop()
        elif kind != "skip" and not stack:
            raise _DotError(at, "an attribute outside the graph's braces")
        if not seen_graph and kind != "skip":
            raise _DotError(at, f"not a graph dump: expected 'digraph … {{', found {_excerpt(text[at:])}")
        at = match.end()
    if not seen_graph:
        raise _DotError(0, "is empty: no 'digraph' in it")
    if stack:
        raise _DotError(stack[-1][1], "this block is never closed with '}'")
    if root is not None and root.graph.nodes:
        clusters.insert(0, root)
    return clusters, edges


def _build(clusters: list[_Cluster], edges: list[tuple[str, str, int]]) -> CapturedGraph:
    """Link clusters into one graph: child clusters under the node that names them."""
    if not clusters:
        if edges:
            a, b, position = edges[0]
            raise _DotError(position, f"edge {a} -> {b}: node {a} is never declared")
        return CapturedGraph()
    by_id = {c.ident: c for c in clusters}
    index: dict[str, tuple[_Cluster, int]] = {}
    for cluster in clusters:
        for i, node in enumerate(cluster.graph.nodes):
            index[node.ident] = (cluster, i)
    claimed: dict[str, GraphNode] = {}

    def claim(container: GraphNode, child: str, position: int) -> None:
        if child in claimed and claimed[child] is not container:
            raise _DotError(
                position, f"graph_{child} is the child of both {claimed[child].ident} and {container.ident}"
            )
        if index[container.ident][0].ident == child:
            raise _DotError(position, f"node {container.ident} holds its own graph graph_{child}")
        claimed[child] = container

    for cluster in clusters:
        for node, label, position in cluster.containers:
            for ref in _CHILD_REF.findall(label):
                if ref in by_id:
                    claim(node, ref, position)
    for a, b, position in edges:
        try:
            (cluster_a, i), (cluster_b, j) = index[a], index[b]
        except KeyError:
            missing = a if a not in index else b
            raise _DotError(position, f"edge {a} -> {b}: node {missing} is never declared") from None
        if cluster_a is cluster_b:
            cluster_a.graph.edges.append((i, j))
        elif cluster_a.graph.nodes[i].type in CONTAINERS:
            claim(cluster_a.graph.nodes[i], cluster_b.ident, position)  # a link from a child-graph node into its graph
        else:
            raise _DotError(position, f"edge {a} -> {b} joins two graphs, and {a} holds no child graph")
    for child, container in claimed.items():
        container.children.append(by_id[child].graph)
    roots = [c for c in clusters if c.ident not in claimed]
    if len(roots) != 1:
        extra = roots[1] if roots else clusters[0]
        problem = (
            f"graph_{extra.ident} is the child of no node (no child-graph node names it)"
            if roots
            else "every graph is some node's child: the child graphs form a loop"
        )
        raise _DotError(extra.position, problem)
    for cluster in clusters:
        graph = cluster.graph
        if all(i < j for i, j in graph.edges):
            continue  # every edge points to a later node (the order dumps list nodes in): no cycle
        successors: list[list[int]] = [[] for _ in graph.nodes]
        for i, j in graph.edges:
            successors[i].append(j)
        try:
            topological_order(len(graph.nodes), successors)
        except CycleError as exc:
            names = ", ".join(graph.nodes[i].ident for i in exc.nodes[:3])
            raise _DotError(cluster.positions[exc.nodes[0]], f"the edges form a cycle (through {names})") from None
    return roots[0].graph


def _record_node(ident: str, position: int, label: str) -> GraphNode:
    """A model node from a record label (declared at ``position``): the first field is the type; the
    kernel is the field with ``<<<…>>>``; a copy's ``kind`` field is its direction."""
    if label.count("{") != label.count("}"):
        unescaped = _ESCAPE.sub("", label)  # escaped braces come in pairs; count exactly when they do not
        if unescaped.count("{") != unescaped.count("}"):
            raise _DotError(position, f"node {ident}: the label's braces do not balance")
    word = _TYPE_WORD.match(label)
    if not word:
        raise _DotError(position, f"node {ident}: the label does not start with a node type ({_excerpt(label)})")
    word = word[1]
    node_type = TYPE_WORDS.get(word) or _type_of(word)
    if node_type == "kernel":
        opening = label.find("\\<\\<\\<")
        if opening >= 0:
            start = max(label.rfind("|", 0, opening), label.rfind("{", 0, opening)) + 1
            closing = label.find("\\>\\>\\>", opening)
            if closing < 0:
                raise _DotError(position, f"node {ident}: the launch shape has no closing >>>")
            shape = label[opening + 6 : closing].replace("\\", "")
            launch = _parse_shape(shape) or _launch_shape(shape, ident, position)  # the latter raises
            return GraphNode(ident, node_type, _unescape(label[start:opening].strip()), launch)
        named = _RECORD_ID_NAME.search(label)
        return GraphNode(ident, node_type, _unescape(named[1]) if named else "")
    node = GraphNode(ident, node_type)
    if node_type == "memcpy":
        kind = _RECORD_KIND.search(label)
        node.name = copy_direction(_unescape(kind[1])) if kind else ""
    return node


def _unescape(text: str) -> str:
    return _ESCAPED.sub(r"\1", text) if "\\" in text else text


def _plain_node(ident: str, position: int, label: str) -> GraphNode:
    """Plain labels: HIP's ``id``, then the type word (none for a kernel: its name), then details."""
    lines = [line.strip() for line in label.split("\n")]
    while lines and not lines[-1]:
        lines.pop()
    if lines and lines[0] in TYPE_WORDS:
        lines = ["", *lines]  # a type word first, without an id
    if len(lines) < 2:
        raise _DotError(position, f"node {ident}: cannot read the label {_excerpt(label)}")
    second = lines[1]
    if second in TYPE_WORDS:
        node = GraphNode(ident, TYPE_WORDS[second])
        if node.type == "memcpy" and len(lines) > 2:
            node.name = copy_direction(lines[2].strip("()").split(",")[0])
        elif node.type == "kernel" and len(lines) > 2:
            node.name, node.launch = _launch(" ".join(lines[2:]), ident, position)
        return node
    if _CHILD_REF.fullmatch(second):
        return GraphNode(ident, "graph")
    node = GraphNode(ident, "kernel", name=second)
    if len(lines) > 2:
        node.name, node.launch = _launch(second + lines[2], ident, position)
    return node


def _type_of(word: str) -> str:
    """The model's type for a dump's type word; a word this reader does not know counts under its own name."""
    return TYPE_WORDS.get(word, word.lower())


def _launch(text: str, ident: str, position: int) -> tuple[str, Launch]:
    """``name<<<grid,block,smem>>>`` (escapes removed) → (name, Launch)."""
    plain = text.replace("\\", "")
    match = _LAUNCH.match(plain.strip())
    if not match:
        raise _DotError(position, f"node {ident}: cannot read the launch shape in {_excerpt(plain)}")
    return match["name"].strip(), _launch_shape(match["shape"], ident, position)


def _launch_shape(text: str, ident: str, position: int) -> Launch:
    """``grid,block,smem`` (CUDA ``128`` / ``{16,10,2}``, HIP ``(16,10,2)``) → Launch."""
    launch = _parse_shape(text)
    if launch is None:
        raise _DotError(
            position,
            f"node {ident}: cannot read the launch shape <<<{text}>>> (grid, block, shared memory)",
        )
    return launch


@functools.lru_cache(maxsize=4096)
def _parse_shape(text: str) -> Optional[Launch]:
    """The launch of a shape text, None when it is not one; a graph repeats few shapes, so this is cached."""
    match = _SHAPE.match(text)
    if not match:
        return None
    grid, block = _dim3(match["grid"]), _dim3(match["block"])
    if grid is None or block is None:
        return None
    return Launch(grid, block, int(match["smem"]))


def _dim3(text: str) -> Optional[tuple[int, int, int]]:
    """``128`` / ``{16,10}`` / ``(16,10,2)`` → a positive (x, y, z); None when a dimension is 0.

    ``text`` matched ``_DIM``: its numbers are its runs of digits, whatever white space is around them.
    """
    values = [int(v) for v in _DIGITS.findall(text)]
    if min(values) < 1:
        return None
    values += [1] * (3 - len(values))
    return values[0], values[1], values[2]
