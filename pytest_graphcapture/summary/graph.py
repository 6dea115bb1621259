"""A captured CUDA/HIP graph as its nodes and dependencies, and what a reader wants from it.

Why a model of its own: the graph object knows exactly which kernels it launches,
with which grid, block and shared memory, and which nodes may run at the same
time.  Two readers fill this one model — a graph dump written by
``cudaGraphDebugDotPrint`` / ``CUDAGraph.debug_dump`` / ``hipGraphDebugDotPrint``
(:mod:`.dot`) and the in-process readout of a live graph
(:mod:`pytest_graphcapture.engine.graph_readout`) — so everything after them
(kernel list, node counts, ``branches``) is computed once, here.

``branches`` is the size of a maximum antichain of the dependency DAG: the most
nodes no dependency path orders, i.e. the most that can run at once.  Counting
the widest level of a topological layering is not that number (nodes of different
depths can be mutually unordered), so it is computed exactly, by Dilworth's
theorem: the width equals the node count minus a maximum matching of the
bipartite graph of the transitive closure.  Child graphs are expanded into their
parent (a child runs its nodes where the child node stands); empty nodes and
child-graph containers are structure, not work: they order nodes but are not
counted themselves.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Iterable, Iterator, Optional, Sequence

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
    kernel nodes, the direction (``DtoD``, ``HtoD``…) for memcpy nodes, empty
    otherwise.  ``ident`` names the node where it came from (the DOT node id, the
    readout's index path) for messages.
    """

    ident: str
    type: str
    name: str = ""
    launch: Optional[Launch] = None
    children: list["CapturedGraph"] = field(default_factory=list)


@dataclass
class CapturedGraph:
    """Nodes in the order the graph lists them and edges ``(from, to)`` as indices into ``nodes``."""

    nodes: list[GraphNode] = field(default_factory=list)
    edges: list[tuple[int, int]] = field(default_factory=list)
    ident: str = ""

    def walk(self) -> Iterator[GraphNode]:
        """Every node, child graphs' nodes right after the node that holds them."""
        for node in self.nodes:
            yield node
            for child in node.children:
                yield from child.walk()

    def node_counts(self) -> dict[str, int]:
        """Nodes by type over the whole graph, child graphs included."""
        return dict(sorted(Counter(node.type for node in self.walk()).items()))

    def kernels(self, level: str = DEFAULT_LEVEL) -> list[dict]:
        """Each distinct (kernel name at ``level``, launch shape) with its count, sorted by name then shape."""
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

    def copies(self) -> list[dict]:
        """Memcpy nodes by direction (``DtoD``…; ``?`` where the graph does not say), with counts."""
        counts = Counter(node.name or "?" for node in self.walk() if node.type == "memcpy")
        return [{"name": kind, "count": count} for kind, count in sorted(counts.items())]

    def branches(self) -> int:
        """The most work nodes that can run at once (maximum antichain of the expanded dependency DAG)."""
        work, successors = self.expanded()
        return max_antichain(len(work), successors, counted=[i for i, n in enumerate(work) if n.type not in STRUCTURAL])

    def expanded(self) -> tuple[list[GraphNode], list[list[int]]]:
        """The graph with every child graph spliced in where its node stands: nodes and successor lists.

        A container node stays as an entry point that precedes its child graphs' roots,
        and a join node (empty, added here) follows their leaves and precedes the
        container's successors, so the order the child imposes is kept.
        """
        nodes: list[GraphNode] = []
        successors: list[list[int]] = []

        def add(node: GraphNode) -> int:
            nodes.append(node)
            successors.append([])
            return len(nodes) - 1

        def splice(graph: CapturedGraph) -> tuple[list[int], list[int]]:
            """Add ``graph``; return (entry index, exit index) per original node."""
            entry: list[int] = []
            exit_: list[int] = []
            for node in graph.nodes:
                first = add(node)
                last = first
                if node.children:
                    last = add(GraphNode(f"{node.ident} (end)", "empty"))
                    for child in node.children:
                        child_entry, child_exit = splice(child)
                        has_pred = _has_predecessor(child)
                        has_succ = _has_successor(child)
                        for i in range(len(child.nodes)):
                            if not has_pred[i]:
                                successors[first].append(child_entry[i])
                            if not has_succ[i]:
                                successors[child_exit[i]].append(last)
                        if not child.nodes:
                            successors[first].append(last)
                entry.append(first)
                exit_.append(last)
            for a, b in graph.edges:
                successors[exit_[a]].append(entry[b])
            return entry, exit_

        splice(self)
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
        yield self
        for node in self.nodes:
            for child in node.children:
                yield from child.graphs()

    def summary(self, level: str = DEFAULT_LEVEL, *, source: str) -> dict:
        """The graph as a reader wants it: kernels with launch shapes, copies, topology; ``source`` says whence."""
        return {
            "source": source,
            "level": check_level(level),
            "topology": self.topology(),
            "kernels": self.kernels(level),
            "copies": self.copies(),
        }


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
