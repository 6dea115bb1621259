"""A captured CUDA/HIP graph as its nodes and dependencies, and what a reader wants from it.

Why a model of its own: the graph object knows exactly which kernels it launches,
with which grid, block and shared memory, and which nodes may run at the same
time.  Two readers fill this one model — a graph dump written by
``cudaGraphDebugDotPrint`` / ``CUDAGraph.debug_dump`` / ``hipGraphDebugDotPrint``
(:mod:`.dot`) and the in-process readout of a live graph
(:mod:`pytest_graphcapture.engine.readout`) — so everything after them
(kernel list, node counts, ``branches``) is computed once, here.

``branches`` is the size of a maximum antichain of the dependency DAG: the most
nodes no dependency path orders, i.e. the most that can run at once.  Counting
the widest level of a topological layering is not that number (nodes of different
depths can be mutually unordered), so it is computed exactly, by Dilworth's
theorem: the width equals the node count minus a maximum matching of the
bipartite graph of the transitive closure.  Child graphs are expanded into their
parent (a child runs its nodes where the child node stands); a conditional node's
bodies exclude each other (one ``if``/``switch`` body runs, ``while`` iterations run
in turn), so they are spliced one after another and each counts on its own; empty
nodes and containers are structure, not work: they order nodes but are not counted
themselves.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable, Iterable, Iterator, Optional, Sequence

from .normalize import DEFAULT_LEVEL, check_level, normalize_kernel_name

#: Types that only structure the graph: they order other nodes but do no work themselves.
STRUCTURAL = frozenset({"empty", "graph", "conditional"})
#: Types whose node holds other graphs (a child graph; a conditional node's bodies).
CONTAINERS = frozenset({"graph", "conditional"})


_COPY_KIND = re.compile(
    r"(?:cuda|hip)?Memcpy(Host|Device|Array)To(Host|Device|Array)|^(Host|Device|Array)To(Host|Device|Array)$"
)
# cudaMemcpyDefault / hipMemcpyDefault: the runtime infers the direction from the pointers.
_COPY_DEFAULT = re.compile(r"^(?:(?:cuda|hip)?Memcpy)?Default$")


def copy_direction(kind: str) -> str:
    """A copy's direction as ``HtoD``/``DtoD``/``DtoH``/``HtoH`` (``A`` for arrays), ``default`` when the
    runtime infers it; a spelling this does not know (HIP's ``DtoD`` already is one) is kept."""
    if _COPY_DEFAULT.search(kind):
        return "default"
    match = _COPY_KIND.search(kind)
    if not match:
        return kind
    src, dst = (g for g in match.groups() if g)
    return f"{src[0]}to{dst[0]}"


@dataclass(frozen=True)
class Launch:
    """A kernel node's launch shape: grid and block (x, y, z) and dynamic shared memory in bytes."""

    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared_mem: int

    def __str__(self) -> str:
        return f"<<<{_dims(self.grid)},{_dims(self.block)},{self.shared_mem}>>>"


def _dims(dims: tuple[int, int, int]) -> str:
    """``(128, 1, 1)`` → ``128``, ``(16, 10, 2)`` → ``{16,10,2}``, ``(32, 4, 1)`` → ``{32,4}``: CUDA's spelling."""
    kept = list(dims)
    while len(kept) > 1 and kept[-1] == 1:
        kept.pop()
    return str(kept[0]) if len(kept) == 1 else "{" + ",".join(str(d) for d in kept) + "}"


@dataclass(slots=True)
class GraphNode:
    """One node: its type, the kernel name or copy kind, the launch shape, and the graphs it holds.

    ``name`` is the kernel's symbol as the graph spells it (mangled or not) for
    kernel nodes, the direction (``DtoD``, ``HtoD``…) for memcpy nodes, the kind
    (``if``, ``while``, ``switch``; empty when the source does not say) for
    conditional nodes, empty otherwise.  ``ident`` names the node where it came from
    (the DOT node id, the readout's index path) for messages.
    """

    ident: str
    type: str
    name: str = ""
    launch: Optional[Launch] = None
    children: list["CapturedGraph"] = field(default_factory=list)


@dataclass
class CapturedGraph:
    """Nodes in the order the graph lists them and edges ``(from, to)`` as indices into ``nodes``.

    A child graph runs where its node stands, every time; a conditional node's
    bodies *may* run: one body of an ``if``/``switch`` (or none), a ``while`` body any
    number of times.  Every traversal here is iterative, so a graph nested
    thousands of levels deep is read like a flat one.
    """

    nodes: list[GraphNode] = field(default_factory=list)
    edges: list[tuple[int, int]] = field(default_factory=list)
    ident: str = ""

    def walk(self) -> Iterator[GraphNode]:
        """Every node, child graphs' nodes right after the node that holds them."""
        for node, _ in self.walk_conditional():
            yield node

    def walk_conditional(self) -> Iterator[tuple[GraphNode, bool]]:
        """Every node (in :meth:`walk` order) with whether it lies in a conditional node's body (it may not run)."""
        stack: list[tuple[Iterator[GraphNode], bool]] = [(iter(self.nodes), False)]
        while stack:
            nodes, conditional = stack[-1]
            node = next(nodes, None)
            if node is None:
                stack.pop()
                continue
            yield node, conditional
            inner = conditional or node.type == "conditional"
            for child in reversed(node.children):
                stack.append((iter(child.nodes), inner))

    def node_counts(self) -> dict[str, int]:
        """Nodes by type over the whole graph, child graphs and conditional bodies included."""
        return dict(sorted(Counter(node.type for node in self.walk()).items()))

    def kernels(self, level: str = DEFAULT_LEVEL) -> list[dict]:
        """Each distinct (kernel name at ``level``, launch shape) with its count, sorted by name then shape.

        Kernels of conditional bodies are listed too: they are what the graph may launch.
        """
        check_level(level)
        raw = Counter((node.name, node.launch) for node in self.walk() if node.type == "kernel")
        names = {name: normalize_kernel_name(name, level) if name else "?" for name, _ in raw}
        counts: Counter = Counter()
        for (name, launch), count in raw.items():
            counts[(names[name], str(launch) if launch else "")] += count
        return [
            {"name": name, **({"launch": launch} if launch else {}), "count": count}
            for (name, launch), count in sorted(counts.items())
        ]

    def branches(self) -> int:
        """The most work nodes that can run at once (maximum antichain of the expanded dependency DAG).

        A conditional node's bodies never run at once (one ``if``/``switch`` body runs,
        ``while`` iterations run one after another), so each body counts on its own:
        the answer is the most over the bodies, never their sum.
        """
        work, successors = self.expanded()
        return max_antichain(len(work), successors, counted=[i for i, n in enumerate(work) if n.type not in STRUCTURAL])

    def expanded(self) -> tuple[list[GraphNode], list[list[int]]]:
        """The graph with every child graph spliced in where its node stands: nodes and successor lists.

        A container node stays as an entry point that precedes its child graphs' roots,
        and a join node (empty, added here) follows their leaves and precedes the
        container's successors, so the order the child imposes is kept.  A conditional
        node's bodies are spliced one after another (the first body's leaves precede the
        next body's roots): bodies that exclude each other are never counted as
        running at once, and a node outside still orders against them as before.
        """
        nodes: list[GraphNode] = []
        successors: list[list[int]] = []

        def add(node: GraphNode) -> int:
            nodes.append(node)
            successors.append([])
            return len(nodes) - 1

        # First every node of every graph occurrence, then the edges: no recursion, however deep.
        spliced: list[tuple[CapturedGraph, list[int], list[int]]] = []
        held: list[tuple[int, int, GraphNode, list[int]]] = []  # (entry, exit, container, child occurrences)
        pending = [(self, -1, -1, None)]
        while pending:
            graph, first, last, container = pending.pop()
            entry: list[int] = []
            exit_: list[int] = []
            for node in graph.nodes:
                start = add(node)
                end = add(GraphNode(f"{node.ident} (end)", "empty")) if node.children else start
                entry.append(start)
                exit_.append(end)
            spliced.append((graph, entry, exit_))
            if container is not None:
                container[3].append(len(spliced) - 1)
            for node, start, end in zip(graph.nodes, entry, exit_):
                if node.children:
                    record = (start, end, node, [])
                    held.append(record)
                    for child in reversed(node.children):
                        pending.append((child, start, end, record))
        for graph, entry, exit_ in spliced:
            for a, b in graph.edges:
                successors[exit_[a]].append(entry[b])
        for start, end, node, occurrences in held:
            # ``pending`` is a stack: the children came off it in their own order
            chained = node.type == "conditional"
            previous_exits = [start]
            for occurrence in occurrences:
                child, entry, exit_ = spliced[occurrence]
                has_pred = _has_predecessor(child)
                has_succ = _has_successor(child)
                roots = [entry[i] for i in range(len(child.nodes)) if not has_pred[i]]
                leaves = [exit_[i] for i in range(len(child.nodes)) if not has_succ[i]]
                for before in previous_exits if chained else [start]:
                    successors[before].extend(roots or [end])
                if chained:
                    previous_exits = leaves or previous_exits
                else:
                    for leaf in leaves:
                        successors[leaf].append(end)
            if chained:
                for leaf in previous_exits:
                    if leaf != start or not occurrences:
                        successors[leaf].append(end)
        return nodes, successors

    def topology(self) -> dict:
        """Node count by type, edge count (child graphs included) and ``branches``."""
        return {
            "nodes": self.node_counts(),
            "edges": sum(len(g.edges) for g in self.graphs()),
            "branches": self.branches(),
        }

    def graphs(self) -> Iterator["CapturedGraph"]:
        """This graph and every child graph in it."""
        pending = [self]
        while pending:
            graph = pending.pop()
            yield graph
            for node in reversed(graph.nodes):
                pending.extend(reversed(node.children))

    def run_bounds(self, label: Callable[[GraphNode], Optional[str]]) -> tuple[Counter, dict[str, Optional[int]]]:
        """How often the nodes of each ``label`` run in one launch of the graph: (at least, extra at most).

        ``label`` names a node's group (None: not counted).  Nodes outside conditional
        bodies always run: they are the first count.  A conditional node adds, for each
        label, the most any one of its bodies runs (an ``if``/``switch`` runs one body or
        none), or no bound at all (None) for a ``while`` body or a conditional of unknown
        kind; nested bodies count the same way.
        """
        order: list[CapturedGraph] = []
        pending = [self]
        while pending:  # every graph before the graphs it holds; handled below in reverse: children first
            graph = pending.pop()
            order.append(graph)
            for node in graph.nodes:
                pending.extend(node.children)
        done: dict[int, tuple[Counter, dict[str, Optional[int]]]] = {}
        for graph in reversed(order):
            required: Counter = Counter()
            extra: dict[str, Optional[int]] = {}
            for node in graph.nodes:
                name = label(node)
                if name is not None:
                    required[name] += 1
                bodies = [done[id(child)] for child in node.children]
                if node.type != "conditional":  # a child graph runs with its node
                    for body_required, body_extra in bodies:
                        required.update(body_required)
                        _add_extra(extra, body_extra)
                    continue
                most: dict[str, Optional[int]] = {}
                for body_required, body_extra in bodies:
                    for key in set(body_required) | set(body_extra):
                        more = body_extra.get(key, 0)
                        total = None if more is None else body_required.get(key, 0) + more
                        if node.name not in ("if", "switch") or total is None:
                            most[key] = None
                        elif most.get(key, 0) is not None:
                            most[key] = max(most.get(key) or 0, total)
                _add_extra(extra, most)
            done[id(graph)] = (required, extra)
        return done[id(self)]


def _add_extra(extra: dict[str, Optional[int]], more: dict[str, Optional[int]]) -> None:
    for key, count in more.items():
        current = extra.get(key, 0)
        extra[key] = None if current is None or count is None else current + count


def _has_predecessor(graph: CapturedGraph) -> list[bool]:
    flags = [False] * len(graph.nodes)
    for _, b in graph.edges:
        flags[b] = True
    return flags


def _has_successor(graph: CapturedGraph) -> list[bool]:
    flags = [False] * len(graph.nodes)
    for a, _ in graph.edges:
        flags[a] = True
    return flags


class CycleError(ValueError):
    """The dependencies form a cycle (``nodes`` names some of the nodes on it)."""

    def __init__(self, nodes: Sequence[int]) -> None:
        self.nodes = list(nodes)
        super().__init__(f"dependency cycle through nodes {self.nodes[:5]}")


def topological_order(count: int, successors: Sequence[Iterable[int]]) -> list[int]:
    """Kahn's order of nodes ``0..count-1``; raises :class:`CycleError` when there is none."""
    indegree = [0] * count
    for targets in successors:
        for v in targets:
            indegree[v] += 1
    ready = [u for u in range(count) if indegree[u] == 0]
    order: list[int] = []
    while ready:
        u = ready.pop()
        order.append(u)
        for v in successors[u]:
            indegree[v] -= 1
            if indegree[v] == 0:
                ready.append(v)
    if len(order) != count:
        raise CycleError([u for u in range(count) if indegree[u] > 0])
    return order


def max_antichain(count: int, successors: Sequence[Iterable[int]], *, counted: Optional[Sequence[int]] = None) -> int:
    """Width of the DAG on nodes ``0..count-1``: the largest set of ``counted`` nodes no path orders.

    ``counted`` (default: all) are the nodes that may be in the antichain; the others
    still carry order (a path through them orders its ends).  Dilworth: the width of
    the order restricted to ``counted`` is their number minus a maximum matching
    ``u → v`` over pairs where ``u`` reaches ``v``.  Reachability sets are Python
    integers used as bitsets; the matching starts greedy (each node to its nearest
    free successor) and is completed with augmenting paths (Kuhn), each search
    visiting a node at most once.
    """
    if count == 0:
        return 0
    order = topological_order(count, successors)
    members = list(range(count)) if counted is None else sorted(set(counted))
    if not members:
        return 0
    # Renumber nodes in topological order: bit i is the i-th node of the order.
    rank = [0] * count
    for i, u in enumerate(order):
        rank[u] = i
    mask = 0
    for u in members:
        mask |= 1 << rank[u]
    reach = [0] * count  # reach[i]: the nodes strictly after the i-th (by rank)
    near = [0] * count  # near[i]: the counted nodes after the i-th with no counted node between
    for u in reversed(order):
        i = rank[u]
        bits = 0
        first = 0
        for v in successors[u]:
            j = rank[v]
            bits |= reach[j] | (1 << j)
            first |= 1 << j if mask >> j & 1 else near[j]
        reach[i] = bits
        near[i] = first
    ranks = sorted(rank[u] for u in members)
    return len(ranks) - _max_matching([reach[i] & mask for i in ranks], [near[i] for i in ranks], mask)


def _max_matching(reach: list[int], near: list[int], free_right: int) -> int:
    """Size of a maximum matching ``u → v`` with ``v`` in the bitset ``reach[u]``.

    ``near[u]`` (within ``reach[u]``) are the nodes tried first: pairing each node with
    a direct successor covers a chain at once, where pairing it with any later node
    would push its neighbours down the chain and leave long augmenting paths to find.
    Left nodes are list positions, right nodes bit positions; ``free_right`` holds the
    bits that may be matched.
    """
    n = len(reach)
    match_left = [-1] * n
    match_right: dict[int, int] = {}
    size = 0
    unmatched = []
    for u in range(n):  # greedy start
        free = near[u] & free_right
        if free:
            v = (free & -free).bit_length() - 1
            match_left[u], match_right[v] = v, u
            free_right ^= 1 << v
            size += 1
        else:
            unmatched.append(u)
    for root in unmatched:  # augmenting paths, breadth first over alternating paths
        if not reach[root]:
            continue
        parent: dict[int, int] = {}
        seen = 0
        frontier = [root]
        found = -1
        while frontier and found < 0:
            following = []
            for u in frontier:
                new = reach[u] & ~seen
                if not new:
                    continue
                free = new & free_right
                if free:
                    found = (free & -free).bit_length() - 1
                    parent[found] = u
                    break
                seen |= new
                while new:
                    low = new & -new
                    v = low.bit_length() - 1
                    parent[v] = u
                    following.append(match_right[v])
                    new ^= low
            frontier = following
        if found < 0:
            continue
        v = found
        free_right ^= 1 << v
        while True:
            u = parent[v]
            previous = match_left[u]
            match_left[u], match_right[v] = v, u
            if u == root:
                break
            v = previous
        size += 1
    return size
