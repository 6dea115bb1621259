"""The DOT statement reader of graph dumps: statements, quoted strings and labels, no meaning yet.

Why a module of its own: what a dump *says* (nodes with their labels, edges, which
``subgraph cluster_<g>`` holds which node) is DOT syntax, the same for CUDA and HIP;
what the labels *mean* is :mod:`.dot_labels`, and the graph they make is
:mod:`.dot`.  Anything that does not read ends in a :class:`DotError` at a position
of the text, which the reader turns into one line naming the file and the line.

The rule this module keeps: every node statement in the text is handed on, in a
cluster; a statement that cannot be placed (a node outside the braces, a second
top-level graph) is refused, never dropped.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Optional

_QUOTED_EXACT = r'"[^"\\]*(?:\\.[^"\\]*)*"'
#: A quoted string without escaped quotes: the common case, scanned faster (see :func:`statements`).
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
_QUOTED = re.compile(_QUOTED_EXACT, re.DOTALL)
_CLUSTER = re.compile(r"^cluster_?(.*)$")
#: An edge as the runtimes write one: quoted ids without escapes, no attributes, not part of a chain.
_PLAIN_EDGE = re.compile(r'\s*"([^"\\\n]*)"\s*->\s*"([^"\\\n]*)"(?!\s*(?:\[|->))[ \t]*;?')


class DotError(Exception):
    """A problem at a position of the text; the reader turns it into a one-line FileError."""

    def __init__(self, position: int, problem: str) -> None:
        self.position = position
        self.problem = problem
        super().__init__(problem)


@dataclass
class Cluster:
    """One ``subgraph cluster_<g>`` (or the top level): where it opens, and its node statements in order.

    ``nodes`` holds ``(node id, label, position)`` for each node declared in it; a
    cluster opened again later in the file continues the same list.
    """

    ident: str
    position: int
    nodes: list[tuple[str, str, int]] = field(default_factory=list)


def unquote(token: str) -> str:
    """A DOT name or value as meant: quotes removed, ``\\"`` and line continuations resolved."""
    if token[:1] != '"':
        return token
    token = token[1:-1]
    if "\\" in token and ('\\"' in token or "\\\n" in token):
        token = token.replace('\\"', '"').replace("\\\n", "")
    return token


def excerpt(text: str) -> str:
    """The first line of ``text``, at most 40 characters, quoted: how a message shows what it could not read."""
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
                return unquote(value)
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


def _not_read(text: str, at: int, seen_graph: bool) -> DotError:
    """Why no statement can be read at ``at``."""
    if not seen_graph:
        return DotError(at, f"not a graph dump: expected 'digraph … {{', found {excerpt(text[at:])}")
    if text[at] == '"':  # a node or an edge that does not read: say which part
        quoted = _QUOTED.match(text, at)
        if not quoted:
            return DotError(at, "a quoted string is not closed")
        rest = text[quoted.end() :]
        if rest.lstrip().startswith("["):
            return DotError(
                quoted.end() + len(rest) - len(rest.lstrip()),
                "cannot read the attribute list (a ']' or a closing quote is missing?)",
            )
    return DotError(at, f"cannot read {excerpt(text[at:])} (expected a node, an edge, a subgraph or '}}')")


def statements(text: str) -> tuple[list[Cluster], list[tuple[str, str, int]]]:
    """Clusters in order of first opening with their node statements, and edges ``(from, to, position)``.

    Checks the braces, that each node is declared once and inside the graph, and that
    the file holds one top-level graph.  The top level's own nodes, when it has any,
    are the first cluster (ident ``""``).  A text with an escaped quote anywhere is read
    with the exact pattern throughout: the fast one ends a quoted string at ``\\"``, and a
    statement cut short there may still match something else.
    """
    clusters: list[Cluster] = []
    by_name: dict[str, Cluster] = {}
    declared: set[str] = set()
    edges: list[tuple[str, str, int]] = []
    stack: list[tuple[Optional[Cluster], int]] = []
    root: Optional[Cluster] = None
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
                raise DotError(at, "a node outside the graph's braces")
            ident = unquote(match["rn"] if kind == "rnode" else match["n"] or match["n2"])
            if ident in declared:
                raise DotError(at, f"node {ident} is declared twice")
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
                    raise DotError(match.end(), "cannot read the attribute list (a ']' or a closing quote is missing?)")
                raise DotError(at, f"node {ident} has no label (not a CUDA or HIP graph dump?)")
            cluster = stack[-1][0] or root
            assert cluster is not None
            cluster.nodes.append((ident, label, at))
        elif kind == "edge":
            if not stack:
                raise DotError(at, "an edge outside the graph's braces")
            edges.append((unquote(match["a"]), unquote(match["b"]), at))
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
                    raise DotError(at, "a subgraph outside the graph's braces")
                name = unquote(match["sub"])
                cluster_match = _CLUSTER.match(name)
                ident = cluster_match.group(1) if cluster_match else name
                found = by_name.get(ident)
                if found is None:  # a cluster opened again continues the one opened first
                    found = by_name[ident] = Cluster(ident, at)
                    clusters.append(found)
                stack.append((found, at))
            elif stack:
                stack.append((stack[-1][0], at))  # an anonymous block keeps its graph
            elif root is not None:
                raise DotError(at, "a second top-level graph: a graph dump holds one 'digraph { … }'")
            else:
                root = Cluster("", at)
                stack.append((root, at))
        elif kind == "close":
            if not stack:
                raise DotError(at, "'}' closes nothing")
            stack.pop()
        elif kind != "skip" and not stack:
            raise DotError(at, "an attribute outside the graph's braces")
        if not seen_graph and kind != "skip":
            raise DotError(at, f"not a graph dump: expected 'digraph … {{', found {excerpt(text[at:])}")
        at = match.end()
    if not seen_graph:
        raise DotError(0, "is empty: no 'digraph' in it")
    if stack:
        raise DotError(stack[-1][1], "this block is never closed with '}'")
    if root is not None and root.nodes:
        clusters.insert(0, root)
    return clusters, edges
