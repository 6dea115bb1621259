"""A graph dump (DOT, from ``cudaGraphDebugDotPrint``/``debug_dump``/``hipGraphDebugDotPrint``) read as a graph.
The dump is the graph's own account of its nodes and dependencies, with no profiler in between."""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Union

from .._io import require_regular
from ..errors import FileError
from ..keys import CaptureKey
from ..naming import key_from_trace_name
from .graph import CONTAINERS, CapturedGraph, CycleError, GraphNode, Launch, copy_direction, topological_order
from .model import Summary
from .normalize import DEFAULT_LEVEL, check_level
from .replay import graph_summary
from .tracefile import read_trace_bytes

_QUOTED_EXACT = r'"[^"\\]*(?:\\.[^"\\]*)*"'

#: A quoted string without escaped quotes: the common case, scanned faster (see :func:`statements`).
_QUOTED_FAST = r'"[^"]*"'

#: A DOT ID (letters, ``_``, digits, any non-ASCII; no leading digit) or a number.  One negated ASCII class
#: each: a class up to U+10FFFF compiles slowly, an alternation matches one character at a time.
_ID_START = r"[^\x00-\x40\x5b-\x5e\x60\x7b-\x7f]"  # an ASCII letter or ``_``, or any non-ASCII character

_ID_CHAR = r"[^\x00-\x2f\x3a-\x40\x5b-\x5e\x60\x7b-\x7f]"  # the same or an ASCII digit

_ID = rf"(?:{_ID_START}{_ID_CHAR}*|-?(?:\.\d+|\d+(?:\.\d*)?))"


def _statement_pattern(quoted: str, *, runtime: bool = False) -> re.Pattern:
    """One DOT statement after optional white space, for one spelling of a quoted string."""
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

_QUOTED = re.compile(_QUOTED_EXACT, re.DOTALL)

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
    """One ``subgraph cluster_<g>`` (or the top level): where it opens, and its node statements in order."""

    ident: str
    position: int
    nodes: list[tuple[str, str, int]] = field(default_factory=list)


def _unquote(token: str) -> str:
    """A DOT name or value as meant: quotes removed, ``\\"`` and line continuations resolved."""
    if token[:1] != '"':
        return token
    token = token[1:-1]
    if "\\" in token and ('\\"' in token or "\\\n" in token):
        token = token.replace('\\"', '"').replace("\\\n", "")
    return token


def _excerpt(text: str) -> str:
    """The first line of ``text``, at most 40 characters, quoted: how a message shows what it could not read."""
    line = text.strip().split("\n", 1)[0]
    return repr(line[:40] + ("…" if len(line) > 40 else ""))


def _label(text: str, start: int, end: int, fast: bool, continued: bool = True) -> Optional[str]:
    """The ``label`` value of the attribute list ``text[start:end]`` (well formed), unquoted; None without one."""
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
        quoted = _QUOTED.match(text, at)
        if not quoted:
            return _DotError(at, "a quoted string is not closed")
        rest = text[quoted.end() :]
        if rest.lstrip().startswith("["):
            return _DotError(
                quoted.end() + len(rest) - len(rest.lstrip()),
                "cannot read the attribute list (a ']' or a closing quote is missing?)",
            )
    return _DotError(at, f"cannot read {_excerpt(text[at:])} (expected a node, an edge, a subgraph or '}}')")


def statements(text: str) -> tuple[list[_Cluster], list[tuple[str, str, int]]]:
    """Clusters in order of first opening with their node statements, and edges ``(from, to, position)``."""
    clusters: list[_Cluster] = []
    by_name: dict[str, _Cluster] = {}
    declared: set[str] = set()
    edges: list[tuple[str, str, int]] = []
    stack: list[tuple[Optional[_Cluster], int]] = []
    root: Optional[_Cluster] = None
    at = 0
    seen_graph = False
    pattern = _EXACT if '\\"' in text else _FAST
    fast = pattern is _FAST
    match_at = pattern.match
    continued = "\\\n" in text  # line continuations inside quoted strings, to be joined
    while at < len(text):
        match = match_at(text, at)
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
                label: Optional[str] = match["rlabel"]
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
            cluster.nodes.append((ident, label, at))
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
                if not stack:
                    raise _DotError(at, "a subgraph outside the graph's braces")
                name = _unquote(match["sub"])
                cluster_match = _CLUSTER.match(name)
                ident = cluster_match.group(1) if cluster_match else name
                found = by_name.get(ident)
                if found is None:  # a cluster opened again continues the one opened first
                    found = by_name[ident] = _Cluster(ident, at)
                    clusters.append(found)
                stack.append((found, at))
            elif stack:
                stack.append((stack[-1][0], at))  # an anonymous block keeps its graph
            elif root is not None:
                raise _DotError(at, "a second top-level graph: a graph dump holds one 'digraph { … }'")
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
    if root is not None and root.nodes:
        clusters.insert(0, root)
    return clusters, edges


#: Type words of the dumps → the model's node types (both runtimes' full tables, and older spellings).
_SAME_WORDS = (
    "KERNEL MEMCPY MEMSET HOST EMPTY GRAPH EVENT_RECORD EVENT_WAIT EXT_SEMAS_SIGNAL EXT_SEMAS_WAIT MEM_ALLOC MEM_FREE"
)
_SAME_WORDS += " BATCH_MEM_OP CONDITIONAL"
_TYPE_WORDS = {
    **{word: word.lower() for word in _SAME_WORDS.split()},
    **{"CHILD_GRAPH": "graph", "RECORD_EVENT": "event_record", "WAIT_EVENT": "event_wait"},
    **{"EXTERNAL_SEMAPHORE_SIGNAL": "ext_semas_signal", "EXTERNAL_SEMAPHORE_WAIT": "ext_semas_wait"},
    "BATCH_MEM_OP_NODE": "batch_mem_op",
}

_ESCAPE = re.compile(r"\\.")

_ESCAPED = re.compile(r"\\(.)")

_TYPE_WORD = re.compile(r"\s*\{\s*([A-Z][A-Z0-9_]*)\b")

_RECORD_ID_NAME = re.compile(r"\{\s*ID\s*\|[^|{}]*\|\s*((?:[^|{}\\]|\\.)+?)\s*\}")

_RECORD_KIND = re.compile(r"\{\s*kind\s*\|\s*((?:[^|{}\\]|\\.)*?)\s*\}")

_CONDITION = re.compile(r"(?<![\w\\])(IF|WHILE|SWITCH)(?!\w)")

_DIM = r"\s*(?:\d+|\{\s*\d+(?:\s*,\s*\d+){0,2}\s*\}|\(\s*\d+(?:\s*,\s*\d+){0,2}\s*\))\s*"

#: grid, block, shared memory; HIP 7 writes the work-size remainder (x,y,z) before the shared memory.
_SHAPE = re.compile(
    rf"(?P<grid>{_DIM}),(?P<block>{_DIM}),(?:\s*\(\s*\d+\s*,\s*\d+\s*,\s*\d+\s*\)\s*,)?\s*(?P<smem>\d+)\s*$"
)

_LAUNCH = re.compile(r"^(?P<name>.*?)\s*<<<(?P<shape>.*)>>>\s*$", re.DOTALL)

_DIGITS = re.compile(r"\d+")

#: What ``DEBUG_HIP_GRAPH_DOT_PRINT`` appends to a label (after a line break, or glued to a kernel's).
_HIP_DEBUG_TAIL = re.compile(
    r"\n?StreamId:-?\d+(?:\nSegmentId:-?\d+)?(?:\nSignalIsRequired: (?:true|false))?(?:\nDeviceId:-?\d+)?\s*$"
)


def _node_from_label(ident: str, position: int, label: str) -> GraphNode:
    """The model node that the label of node ``ident`` (declared at ``position``) describes."""
    if "StreamId:" in label:
        label = _HIP_DEBUG_TAIL.sub("", label)
    if label[:1] == "{" or label.lstrip()[:1] == "{":
        return _record_node(ident, position, label)
    return _plain_node(ident, position, label)


def _field_start(text: str, end: int) -> int:
    """Where the record field holding position ``end`` starts: after the last ``|`` or ``{`` before it that no
    backslash escapes (``\\|`` and ``\\{`` are text, as in a kernel name ``operator|``)."""
    while True:
        i = max(text.rfind("|", 0, end), text.rfind("{", 0, end))
        if i <= 0 or text[i - 1] != "\\":
            return i + 1
        before = text[:i]
        if (len(before) - len(before.rstrip("\\"))) % 2 == 0:  # an escaped backslash, then the separator
            return i + 1
        end = i


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
    node_type = _type_of(word[1])
    if node_type == "kernel":
        opening = label.find("\\<\\<\\<")
        if opening >= 0:
            start = max(label.rfind("|", 0, opening), label.rfind("{", 0, opening)) + 1
            if start > 1 and label[start - 2] == "\\":  # an escaped separator is part of the name
                start = _field_start(label, start - 1)
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
    elif node_type == "conditional":
        node.name = _condition(label[word.end() :])
    return node


def _condition(text: str) -> str:
    """A conditional node's kind (``if``, ``while``, ``switch``) as its label names it; empty when it does not."""
    found = _CONDITION.search(text)
    return found[1].lower() if found else ""


def _unescape(text: str) -> str:
    return _ESCAPED.sub(r"\1", text) if "\\" in text else text


def _plain_node(ident: str, position: int, label: str) -> GraphNode:
    """Plain labels: HIP's ``id``, then the type word (none for a kernel: its name), then details."""
    lines = [line.strip() for line in label.split("\n")]
    while lines and not lines[-1]:
        lines.pop()
    if lines and lines[0] in _TYPE_WORDS:
        lines = ["", *lines]  # a type word first, without an id
    if len(lines) < 2:
        raise _DotError(position, f"node {ident}: cannot read the label {_excerpt(label)}")
    second = lines[1]
    if second in _TYPE_WORDS:
        node = GraphNode(ident, _TYPE_WORDS[second])
        if node.type == "memcpy" and len(lines) > 2:
            node.name = copy_direction(lines[2].strip("()").split(",")[0])
        elif node.type == "kernel" and len(lines) > 2:
            node.name, node.launch = _kernel_lines(lines[2:], ident, position)
        elif node.type == "conditional":
            node.name = _condition(" ".join(lines[2:]))
        return node
    if _CHILD_REF.fullmatch(second):
        return GraphNode(ident, "graph")
    node = GraphNode(ident, "kernel", name=second)
    if len(lines) > 2:
        node.name, node.launch = _kernel_lines(lines[1:], ident, position)
    return node


def _kernel_lines(lines: list[str], ident: str, position: int) -> tuple[str, Optional[Launch]]:
    """A kernel's name and launch from its label's lines: the name, then ``<<<…>>>`` on its line or the next."""
    for i, line in enumerate(lines):
        if "<<<" in line.replace("\\", ""):
            return _launch(" ".join(lines[: i + 1]), ident, position)
    return lines[0], None


#: A graph named in a child-graph or conditional node's label (``graph_<g>``, CUDA may add ``:<n>``).
_CHILD_REF = re.compile(r"\bgraph_(\d+)\b")


def _type_of(word: str) -> str:
    """The model's type for a dump's type word; a word this reader does not know counts under its own name."""
    return _TYPE_WORDS.get(word) or word.lower()


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
    """``128`` / ``{16,10}`` / ``(16,10,2)`` → a positive (x, y, z); None when a dimension is 0."""
    values = [int(v) for v in _DIGITS.findall(text)]
    if min(values) < 1:
        return None
    values += [1] * (3 - len(values))
    return values[0], values[1], values[2]


#: hipGraphDebugDotPrint with the kernel-parameter or kernel-attribute flag leaves a kernel's style unclosed.
_HIP_UNCLOSED_STYLE = re.compile(r'style="(\w*)\n(?=shape=")')

#: File names of graph dumps: Graphviz's ``.dot`` and ``.gv``, each maybe gzip-compressed.
_DUMP_SUFFIXES = (".dot", ".gv", ".dot.gz", ".gv.gz")

#: The platform of a dump's summary: a dump does not say which device or architecture wrote it.
DUMP_PLATFORM = "graph-dump"

_GZIP_MAGIC = b"\x1f\x8b"


def is_dump_name(path: Union[str, Path]) -> bool:
    """Whether ``path`` is named as a graph dump (``.dot``/``.gv``, maybe ``.gz``), in any letter case."""
    return str(path).lower().endswith(_DUMP_SUFFIXES)


def _dump_stem(path: Union[str, Path]) -> str:
    """The file name without its dump suffix: ``Runner_bs_8_rank0.dot.gz`` → ``Runner_bs_8_rank0``."""
    name = Path(path).name
    for suffix in sorted(_DUMP_SUFFIXES, key=len, reverse=True):
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
    """The summary of the graph dump at ``path``: kernels with launch shapes, copies, topology (``kernel_source: dot``)."""
    check_level(level)
    graph = read_dot_file(path)
    if key is None:
        key = key_from_trace_name(Path(path).with_name(_dump_stem(path)), batch_size=batch_size, unknown_ok=True)
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
    """The graph in the DOT ``text`` (``source`` names it in errors)."""
    if text[:1] == "\ufeff":
        text = text[1:]
    if "\r" in text:
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    if '\nshape="' in text:  # what the repair needs; a plain search is far cheaper than the pattern's scan
        text = _HIP_UNCLOSED_STYLE.sub(r'style="\1"\n', text)
    try:
        return _build(*statements(text))
    except _DotError as exc:
        position = exc.position
        while position < len(text) and text[position].isspace():
            position += 1  # a statement's position includes the white space before it
        line = text.count("\n", 0, position) + 1
        problem = exc.problem.replace("\r", "\\r").replace("\n", "\\n")  # a quoted id may hold line breaks
        raise FileError(source, f"line {line}: {problem}") from None


class _Graph:
    """One cluster as a graph: the model graph, where each node was declared, its container nodes."""

    def __init__(self, cluster: _Cluster) -> None:
        self.ident = cluster.ident
        self.position = cluster.position
        self.graph = CapturedGraph(ident=f"graph_{cluster.ident}" if cluster.ident else "graph")
        self.positions = [position for _, _, position in cluster.nodes]
        self.containers: list[tuple[GraphNode, str, int]] = []
        for ident, label, position in cluster.nodes:
            node = _node_from_label(ident, position, label)
            self.graph.nodes.append(node)
            if node.type in CONTAINERS:
                self.containers.append((node, label, position))


def _build(clusters: list[_Cluster], edges: list[tuple[str, str, int]]) -> CapturedGraph:
    """Link clusters into one graph: each child cluster under the container node that names it."""
    graphs = [_Graph(c) for c in clusters]
    if not graphs:
        if edges:
            a, b, position = edges[0]
            raise _DotError(position, f"edge {a} -> {b}: node {a} is never declared")
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
            raise _DotError(
                position, f"graph_{child} is the child of both {claimed[child].ident} and {container.ident}"
            )
        if index[container.ident][0].ident == child:
            raise _DotError(position, f"node {container.ident} holds its own graph graph_{child}")
        if child not in claimed:
            claimed[child] = container
            holds.setdefault(id(container), []).append(child)

    for g in graphs:
        for node, label, position in g.containers:
            for ref in dict.fromkeys(_CHILD_REF.findall(label)):
                if ref not in by_id:
                    raise _DotError(position, f"node {node.ident} holds graph_{ref}, which is not in the file")
                claim(node, ref, position)
    for a, b, position in edges:
        try:
            (graph_a, i), (graph_b, j) = index[a], index[b]
        except KeyError:
            missing = a if a not in index else b
            raise _DotError(position, f"edge {a} -> {b}: node {missing} is never declared") from None
        if graph_a is graph_b:
            graph_a.graph.edges.append((i, j))
        elif graph_a.graph.nodes[i].type in CONTAINERS and graph_b.ident:
            claim(graph_a.graph.nodes[i], graph_b.ident, position)  # a link from a container into its graph
        else:
            raise _DotError(position, f"edge {a} -> {b} joins two graphs, and {a} holds no child graph")
    for g in graphs:
        for node, _, position in g.containers:
            if id(node) not in holds:
                raise _DotError(position, f"node {node.ident} is a {node.type} node that names no graph in the file")
            node.children = [by_id[child].graph for child in holds[id(node)]]
    roots = [g for g in graphs if g.ident not in claimed]
    if len(roots) != 1:
        extra = roots[1] if roots else graphs[0]
        problem = (
            f"{extra.graph.ident} is the child of no node (no child-graph node names it)"
            if roots
            else "every graph is some node's child: the child graphs form a loop"
        )
        raise _DotError(extra.position, problem)
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
            raise _DotError(
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
        raise _DotError(g.positions[exc.nodes[0]], f"the edges form a cycle (through {names})") from None
