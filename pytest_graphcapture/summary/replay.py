"""Kernels from a graph replay, and the data-loss check that guards them.

On NVIDIA the capture window names no kernels; the graph's replay does.  A replay
whose node count (or, where the capture named its kernels, whose kernel multiset)
disagrees with the capture means the profiler dropped records: the summary is then
marked incomplete with the reason, never reported as a kernel regression.
"""

from __future__ import annotations

import warnings
from typing import Any, Mapping, Optional, Sequence

from .attribute import REPLAY_NO_CAPTURE, REPLAY_NODES_DIFFER, REPLAY_UNATTRIBUTED
from .model import Summary, count_changes
from .scan import _entries


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


def _by_graph_node(launch_ops: Optional[list], replay_kernels: Sequence[dict]) -> tuple[list, Optional[str]]:
    """The replay's nodes, each with the op of the capture launch that made it when graph node ids tell.

    A graph node gets its id when stream capture creates it, i.e. at its launch call,
    so the nodes in id order are the capture window's launches in call order, across
    streams.  The match is taken only when it is exact: every node has an id, the ids
    are distinct, and the node kinds (kernel / memcpy / memset) equal the launches'
    kinds one by one; otherwise the nodes stay unattributed, with the reason.
    Returns (the replay's node dicts, why they name no op; None when matched: a node
    without op then had no op around its launch call, as in a capture window).
    """
    nodes = [k.get("node") for k in replay_kernels]
    if not replay_kernels or any(node is None for node in nodes):
        return list(replay_kernels), REPLAY_UNATTRIBUTED
    if launch_ops is None:
        return list(replay_kernels), REPLAY_NO_CAPTURE
    ordered = sorted(replay_kernels, key=lambda k: k["node"])
    kinds = [k.get("kind", "kernel") for k in ordered]
    if len(set(nodes)) != len(nodes) or kinds != [kind for kind, _ in launch_ops]:
        return list(replay_kernels), REPLAY_NODES_DIFFER
    return [dict(k, op=op) if op else dict(k) for k, (_, op) in zip(ordered, launch_ops)], None


def with_replay(summary: Summary, replay_kernels: Sequence[dict]) -> Summary:
    """Return a copy of a capture ``summary`` whose kernels come from the graph replay.

    Where the capture window already named every node (ROCm launch events carry
    ``kernel``/``grid``/``block``) and the check below passes, the capture's entries
    are kept: they are the same kernels, plus launch configuration the replay lacks.

    Data-loss check: when the capture window recorded launches, their
    count must equal the replay's node count, and where the capture named its kernels
    (ROCm) the kernel multiset at the summary's level must match too.  Otherwise the
    result is marked incomplete with the reason and a :class:`KernelEvidenceWarning`
    naming the key is emitted — dropped profiler records must never look like a
    kernel regression.
    """
    replay_kernels, unattributed = _by_graph_node(summary.launch_ops, replay_kernels)
    replay_entries = _entries(replay_kernels, summary.level)
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
    # When the capture named every node (ROCm) and agrees with the replay, keep its entries:
    # they are the same kernels, and the launch events also carry grid/block.
    keep_capture = bool(captured and capture_named and not problems and summary.complete)
    kernels = [dict(k) for k in summary.kernels] if keep_capture else replay_entries
    result = Summary(
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
        unattributed=summary.unattributed,
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
