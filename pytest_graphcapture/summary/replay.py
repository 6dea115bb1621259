"""Kernels from a graph replay or readout, and the data-loss check that guards them."""

from __future__ import annotations

import warnings
from typing import Any, Mapping, Optional, Sequence

from ..errors import UsageError
from ..keys import CaptureKey
from .graph import CapturedGraph, GraphNode
from .model import Summary, count_changes
from .normalize import MEMSET, normalize_kernel_name
from .scan import (
    GRAPH_NO_CAPTURE,
    GRAPH_NODES_DIFFER,
    REPLAY_NO_CAPTURE,
    REPLAY_NODES_DIFFER,
    REPLAY_UNATTRIBUTED,
    kernel_entries,
)


class KernelEvidenceWarning(UserWarning):
    """The kernel evidence of a capture is incomplete (e.g. the profiler dropped records)."""


def _node_counts(entries: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    """``{kernel name or <memcpy>/<memset>: count}``: what capture and replay must agree on (no grid/block)."""
    counts: dict[str, int] = {}
    for entry in entries:
        kind = entry.get("kind", "kernel")
        label = entry["name"] if kind == "kernel" else f"<{kind}>"
        counts[label] = counts.get(label, 0) + int(entry["count"])
    return counts


def _describe(changes: list[tuple[str, int, int]], limit: int = 3) -> str:
    parts = []
    missing = [(label, old - new) for label, old, new in changes if old > new]
    extra = [(label, new - old) for label, old, new in changes if new > old]
    for what, items in (("missing from the replay", missing), ("only in the replay", extra)):
        if items:
            shown = ", ".join(f"{n} x{c}" for n, c in items[:limit])
            more = f" and {len(items) - limit} more" if len(items) > limit else ""
            parts.append(f"{what}: {shown}{more}")
    return "; ".join(parts)


def _by_graph_node(
    launch_ops: Optional[list],
    replay_kernels: Sequence[dict],
    reasons: tuple[str, str] = (REPLAY_NO_CAPTURE, REPLAY_NODES_DIFFER),
) -> tuple[list, Optional[str]]:
    """The replay's nodes, each with the op of the capture launch that made it when graph node ids tell."""
    nodes = [k.get("node") for k in replay_kernels]
    if not replay_kernels or any(node is None for node in nodes):
        return list(replay_kernels), REPLAY_UNATTRIBUTED
    no_capture, nodes_differ = reasons
    if launch_ops is None:
        return list(replay_kernels), no_capture
    ordered = sorted(replay_kernels, key=lambda k: k["node"])
    kinds = [k.get("kind", "kernel") for k in ordered]
    if len(set(nodes)) != len(nodes) or kinds != [kind for kind, _ in launch_ops]:
        return list(replay_kernels), nodes_differ
    return [dict(k, op=op) if op else dict(k) for k, (_, op) in zip(ordered, launch_ops)], None


def with_replay(summary: Summary, replay_kernels: Sequence[dict]) -> Summary:
    """Return a copy of a capture ``summary`` whose kernels come from the graph replay."""
    replay_kernels, unattributed = _by_graph_node(summary.launch_ops, replay_kernels)
    replay_entries = kernel_entries(replay_kernels, summary.level)
    problems = []
    captured = summary.launches["total"]
    if captured and captured != len(replay_kernels):
        problems.append(
            f"the capture window recorded {captured} launches but the replay ran {len(replay_kernels)} graph nodes"
        )
    capture_named = [k for k in summary.kernels if k.get("kind", "kernel") == "kernel"]
    if captured and capture_named:
        changes = count_changes(_node_counts(summary.kernels), _node_counts(replay_entries))
        if changes:
            problems.append("kernel multiset differs: " + _describe(changes))
    # A capture that named every node (ROCm) and agrees with the replay keeps its entries (with grid/block).
    keep_capture = bool(captured and capture_named and not problems and summary.complete)
    kernels = [dict(k) for k in summary.kernels] if keep_capture else replay_entries
    result = _with_kernels(
        summary,
        kernels,
        unattributed=summary.unattributed,
        kernel_source=("capture-window" if keep_capture else "replay") if kernels else None,
        topology=summary.topology,
    )
    if (
        unattributed
        and not keep_capture
        and any(k.get("kind", "kernel") == "kernel" and not k.get("op") for k in kernels)
    ):
        result.unattributed = unattributed
    if problems:
        dropped = len(replay_kernels) < captured
        cause = (
            "the profiler probably dropped records: kernel records at the start of a profiler session are "
            "dropped as out of range, more the longer the GPU idled before it"
            if dropped
            else "the profiler probably dropped records"
        )
        reason = "; ".join(problems) + f" ({cause})"
        result.complete = False
        result.incomplete_reason = reason
        warnings.warn(
            f"graph capture {summary.key}: kernel evidence incomplete: {reason}", KernelEvidenceWarning, stacklevel=2
        )
    return result


#: A copy's ends as the profiler spells them (``Memcpy DtoD (Device -> Device)``); host memory is pinned.
_COPY_ENDS = {"H": "Pinned", "D": "Device", "A": "Array"}


def _copy_name(direction: str) -> str:
    """A memcpy node's name as a profiled replay names the same copy, so both sources compare equal."""
    if len(direction) == 4 and direction[1] == "t" and direction[0] in _COPY_ENDS and direction[3] in _COPY_ENDS:
        return f"Memcpy {direction} ({_COPY_ENDS[direction[0]]} -> {_COPY_ENDS[direction[3]]})"
    return f"Memcpy {direction or '?'}"


def graph_node_records(graph: CapturedGraph) -> list[dict]:
    """The graph's kernel, memcpy and memset nodes as records like a replay's, in the order the graph lists them."""
    records: list[dict] = []
    for node in graph.walk():
        if node.type == "kernel":
            record = {"name": node.name or "?", "kind": "kernel"}
            if node.launch is not None:
                record["launch"] = str(node.launch)
        elif node.type == "memcpy":
            record = {"name": _copy_name(node.name), "kind": "memcpy"}
        elif node.type == "memset":
            record = {"name": MEMSET, "kind": "memset"}
        else:
            continue
        record["node"] = len(records)
        records.append(record)
    return records


def with_graph(
    summary: Summary,
    graph: CapturedGraph,
    *,
    source: str = "graph",
    replay_kernels: Optional[Sequence[dict]] = None,
) -> Summary:
    """Return a copy of a capture ``summary`` whose kernels are the ``graph``'s own, with launch shapes and topology."""
    if source not in ("graph-data", "graph", "dot"):
        raise UsageError(
            f"with_graph(source={source!r}): a graph is read in process (torch's get_graph_data(): 'graph-data'; "
            f"cuda-bindings: 'graph') or from a dump ('dot')"
        )
    records, unattributed = _by_graph_node(summary.launch_ops, graph_node_records(graph), _GRAPH_REASONS)
    kernels = kernel_entries(records, summary.level)
    result = _with_kernels(
        summary,
        kernels,
        unattributed=None,
        kernel_source=source if kernels else None,
        topology={"nodes": graph.node_counts(), "branches": graph.branches()},
    )
    if unattributed and any(k["kind"] == "kernel" and not k.get("op") for k in kernels):
        result.unattributed = unattributed
    if replay_kernels is not None:
        changes = _replay_changes(graph, replay_kernels, summary.level)
        if changes:
            reason = (
                f"the profiled replay's kernels differ from the graph's ({_describe(changes)}): "
                "the profiler probably dropped records"
            )
            result.complete = False
            result.incomplete_reason = reason
            warnings.warn(
                f"graph capture {summary.key}: kernel evidence incomplete: {reason}",
                KernelEvidenceWarning,
                stacklevel=2,
            )
    return result


def _replay_changes(graph: CapturedGraph, replay_kernels: Sequence[dict], level: str) -> list[tuple[str, int, int]]:
    """How a profiled replay's kernels disagree with what one launch of ``graph`` runs: ``(label, bound, seen)``."""
    names: dict[str, str] = {}

    def label(node: GraphNode) -> Optional[str]:
        if node.type == "kernel":
            name = node.name or "?"
            normal = names.get(name)
            if normal is None:
                normal = names[name] = normalize_kernel_name(name, level)
            return normal
        return f"<{node.type}>" if node.type in ("memcpy", "memset") else None

    required, extra = graph.run_bounds(label)
    seen = _node_counts(kernel_entries(replay_kernels, level))
    changes = []
    for key in sorted(set(required) | set(extra) | set(seen)):
        low = required.get(key, 0)
        more = extra.get(key, 0)
        count = seen.get(key, 0)
        if count < low:
            changes.append((key, low, count))
        elif more is not None and count > low + more:
            changes.append((key, low + more, count))
    return changes


#: Why a graph dump's kernels name no op: a dump holds the graph's nodes, not the CPU ops that made them.
_DUMP_UNATTRIBUTED = "a graph dump holds the graph's nodes, not the CPU ops that launched them, so they name no op"


def graph_summary(graph: CapturedGraph, *, key: CaptureKey, platform: str, level: str, source: str) -> Summary:
    """The summary of a graph read on its own (a dump): its kernels, copies and memsets, launch shapes, topology."""
    kernels = kernel_entries(graph_node_records(graph), level)
    return Summary(
        key=key,
        platform=platform,
        kernels=kernels,
        ops=[],
        level=level,
        unattributed=_DUMP_UNATTRIBUTED if any(k["kind"] == "kernel" for k in kernels) else None,
        kernel_source=source if kernels else None,
        topology={"nodes": graph.node_counts(), "branches": graph.branches()},
    )


_GRAPH_REASONS = (GRAPH_NO_CAPTURE, GRAPH_NODES_DIFFER)


def _with_kernels(
    summary: Summary, kernels: list, *, unattributed: Any, kernel_source: Optional[str], topology: Any
) -> Summary:
    """A complete copy of the capture's ``summary`` (ops, launches, header) holding ``kernels`` from elsewhere."""
    return Summary(
        key=summary.key,
        platform=summary.platform,
        kernels=kernels,
        ops=[dict(o) for o in summary.ops],
        launches={"total": summary.launches["total"], "by_api": dict(summary.launches["by_api"])},
        complete=True,
        incomplete_reason=None,
        environment=dict(summary.environment),
        level=summary.level,
        schema_version=summary.schema_version,
        unattributed=unattributed,
        kernel_source=kernel_source,
        topology=topology,
    )
