"""What a graph dump's node label says: the node's type, its kernel and launch shape, a copy's direction.

Why a module of its own: the runtimes write a node's meaning into its DOT label, in
two styles (Graphviz records and HIP's plain lines), and this is where those styles
are read (:mod:`.dot_syntax` reads the statements, :mod:`.dot` links the graph).

The type words are the full tables the runtimes print:

* CUDA's ``cudaGraphDebugDotPrint`` (the driver's strings, 550 series): ``KERNEL``,
  ``MEMCPY``, ``MEMSET``, ``HOST``, ``GRAPH``, ``EMPTY``, ``EVENT_WAIT``,
  ``EVENT_RECORD``, ``EXT_SEMAS_SIGNAL``, ``EXT_SEMAS_WAIT``, ``MEM_ALLOC``,
  ``MEM_FREE``, ``BATCH_MEM_OP``, ``CONDITIONAL`` (a conditional node's kind:
  ``IF``, ``WHILE``, ``SWITCH``);
* ROCm/clr's ``hipGraphDebugDotPrint`` (``hip_graph_internal.hpp``): ``KERNEL``,
  ``MEMCPY``, ``MEMSET``, ``HOST``, ``EMPTY``, ``EVENT_RECORD``, ``EVENT_WAIT``,
  ``MEM_ALLOC``, ``MEM_FREE``, ``EXTERNAL_SEMAPHORE_SIGNAL``,
  ``EXTERNAL_SEMAPHORE_WAIT``, ``BATCH_MEM_OP_NODE``; a child-graph node's label is
  ``id`` and ``graph_<g>``; a kernel's plain label has no type word, only its name.

A plain label's second line that is none of these is a kernel name.  HIP's debug
variable ``DEBUG_HIP_GRAPH_DOT_PRINT`` appends ``StreamId:…`` lines, which are not
part of the node and are dropped.  Kernel names stay as the dump spells them
(mangled); the summary demangles and normalizes them.
"""

from __future__ import annotations

import functools
import re
from typing import Optional

from .dot_syntax import DotError, excerpt
from .graph import GraphNode, Launch, copy_direction

#: Type words of the dumps → the model's node types (both runtimes' full tables, and older spellings).
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
    "EXTERNAL_SEMAPHORE_SIGNAL": "ext_semas_signal",
    "EXT_SEMAS_WAIT": "ext_semas_wait",
    "EXTERNAL_SEMAPHORE_WAIT": "ext_semas_wait",
    "MEM_ALLOC": "mem_alloc",
    "MEM_FREE": "mem_free",
    "BATCH_MEM_OP": "batch_mem_op",
    "BATCH_MEM_OP_NODE": "batch_mem_op",
    "CONDITIONAL": "conditional",
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


def node_from_label(ident: str, position: int, label: str) -> GraphNode:
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
            raise DotError(position, f"node {ident}: the label's braces do not balance")
    word = _TYPE_WORD.match(label)
    if not word:
        raise DotError(position, f"node {ident}: the label does not start with a node type ({excerpt(label)})")
    node_type = type_of(word[1])
    if node_type == "kernel":
        opening = label.find("\\<\\<\\<")
        if opening >= 0:
            start = max(label.rfind("|", 0, opening), label.rfind("{", 0, opening)) + 1
            if start > 1 and label[start - 2] == "\\":  # an escaped separator is part of the name
                start = _field_start(label, start - 1)
            closing = label.find("\\>\\>\\>", opening)
            if closing < 0:
                raise DotError(position, f"node {ident}: the launch shape has no closing >>>")
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
    if lines and lines[0] in TYPE_WORDS:
        lines = ["", *lines]  # a type word first, without an id
    if len(lines) < 2:
        raise DotError(position, f"node {ident}: cannot read the label {excerpt(label)}")
    second = lines[1]
    if second in TYPE_WORDS:
        node = GraphNode(ident, TYPE_WORDS[second])
        if node.type == "memcpy" and len(lines) > 2:
            node.name = copy_direction(lines[2].strip("()").split(",")[0])
        elif node.type == "kernel" and len(lines) > 2:
            node.name, node.launch = _kernel_lines(lines[2:], ident, position)
        elif node.type == "conditional":
            node.name = _condition(" ".join(lines[2:]))
        return node
    if CHILD_REF.fullmatch(second):
        return GraphNode(ident, "graph")
    node = GraphNode(ident, "kernel", name=second)
    if len(lines) > 2:
        node.name, node.launch = _kernel_lines(lines[1:], ident, position)
    return node


def _kernel_lines(lines: list[str], ident: str, position: int) -> tuple[str, Optional[Launch]]:
    """A kernel's name and launch from its label's lines: the name, then ``<<<…>>>`` on its line or the next.

    Lines after the launch (handles a flag adds) are not the kernel's; without a launch the
    first line is the name and the launch stays unknown.
    """
    for i, line in enumerate(lines):
        if "<<<" in line.replace("\\", ""):
            return _launch(" ".join(lines[: i + 1]), ident, position)
    return lines[0], None


#: A graph named in a child-graph or conditional node's label (``graph_<g>``, CUDA may add ``:<n>``).
CHILD_REF = re.compile(r"\bgraph_(\d+)\b")


def type_of(word: str) -> str:
    """The model's type for a dump's type word; a word this reader does not know counts under its own name."""
    return TYPE_WORDS.get(word) or word.lower()


def _launch(text: str, ident: str, position: int) -> tuple[str, Launch]:
    """``name<<<grid,block,smem>>>`` (escapes removed) → (name, Launch)."""
    plain = text.replace("\\", "")
    match = _LAUNCH.match(plain.strip())
    if not match:
        raise DotError(position, f"node {ident}: cannot read the launch shape in {excerpt(plain)}")
    return match["name"].strip(), _launch_shape(match["shape"], ident, position)


def _launch_shape(text: str, ident: str, position: int) -> Launch:
    """``grid,block,smem`` (CUDA ``128`` / ``{16,10,2}``, HIP ``(16,10,2)``) → Launch."""
    launch = _parse_shape(text)
    if launch is None:
        raise DotError(
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
