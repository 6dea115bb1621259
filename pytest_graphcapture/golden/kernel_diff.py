"""The kernel section of a comparison: kernels per launching op, launch shapes, the graph's topology.

A kernel swapped for another under the same op reads as one line, and a kernel that
only changed its launch shape (``<<<grid, block>>>``) names the kernel once with
old → new shape.  Goldens written before kernels named their op or carried launch
shapes compare the kernels alone, as they always did.
"""

from __future__ import annotations

from typing import Mapping, Optional

from ..summary.model import count_changes, kernel_view
from ..summary.scan import op_label
from .change import MAX_LINE_WIDTH, MAX_NAME_WIDTH, Change, fit_list, shorten

#: Name width of each side of a kernel swap (``old → new``), so the line stays short.
SWAP_WIDTH = 72


def _fit_pair(was: str, now: str, room: int) -> tuple[str, str]:
    """Two kernel names shortened (in the middle) to share ``room`` characters; a short one is kept whole."""
    if len(was) + len(now) <= room:
        return was, now
    half = max(SWAP_WIDTH // 3, room // 2)
    keep = room - max(SWAP_WIDTH // 3, room // 3)  # a name this short stays whole; the other gets the rest
    if len(now) <= keep and len(now) <= len(was):
        return shorten(was, max(SWAP_WIDTH // 3, room - len(now))), now
    if len(was) <= keep:
        return was, shorten(now, max(SWAP_WIDTH // 3, room - len(was)))
    return shorten(was, half), shorten(now, half)


#: Characters a list of kernels may take in a failure line (the diff file lists them all).
LIST_BUDGET = 140


def _has_launch(kernels: list) -> bool:
    return any("launch" in entry for entry in kernels)


def _without_launch(kernels: list) -> list:
    return [{k: v for k, v in entry.items() if k != "launch"} for entry in kernels]


def _split_launch(label: str) -> tuple[str, str]:
    """A kernel label as ``(the rest, launch shape)``; the shape is empty where the label has none."""
    head, sep, shape = label.rpartition(" <<<")
    return (head, "<<<" + shape) if sep and shape.endswith(">>>") else (label, "")


def _launch_swap(was: str, now: str) -> Optional[tuple[str, str, str]]:
    """``(kernel, old shape, new shape)`` when two kernel labels differ only in the graph's launch shape."""
    (head_was, shape_was), (head_now, shape_now) = _split_launch(was), _split_launch(now)
    if shape_was and shape_now and head_was == head_now and shape_was != shape_now:
        return head_was, shape_was, shape_now
    return None


def kernel_changes(expected: list, actual: list) -> list[Change]:
    """Kernel changes, per launching op where both sides name ops (a swap reads as one line).

    Launch shapes are compared only when both sides carry them: a golden written before
    summaries held them (or a run whose kernels came from a profiler replay) compares
    the kernels alone, exactly as it always did.
    """
    if not (_has_launch(expected) and _has_launch(actual)):
        expected, actual = _without_launch(expected), _without_launch(actual)
    if not (_attributed(expected) and _attributed(actual)):
        # A golden written before kernels named their op (or an NVIDIA replay): compare kernels alone.
        return _plain_kernel_changes(expected, actual)
    exp, act = _by_op(expected), _by_op(actual)
    changes = _plain_kernel_changes(exp.pop(None, []), act.pop(None, []))  # launched outside any op
    for op in sorted(set(exp) | set(act)):
        old, new = kernel_view(exp.get(op, [])), kernel_view(act.get(op, []))
        if old == new:
            continue
        if not old or not new:
            kind = "added" if not old else "removed"
            items = new or old
            changes.append(
                Change("kernels", kind, op, None if not old else old, None if not new else new, *_texts(": ", items))
            )
            continue
        removed = {k: c for k, c in old.items() if k not in new}
        added = {k: c for k, c in new.items() if k not in old}
        short, full = [], []
        if removed or added:
            if len(removed) == len(added) == 1 and sum(removed.values()) == sum(added.values()):
                (was, count), (now, _) = next(iter(removed.items())), next(iter(added.items()))
                swap = _launch_swap(was, now)
                if swap:  # the same kernel, launched with another shape: name it once
                    name, old_shape, new_shape = swap
                    short.append(f"{shorten(name, SWAP_WIDTH)} {old_shape} → {new_shape} (×{count})")
                    full.append(f"{name} {old_shape} → {new_shape} (×{count})")
                else:
                    tail = f" (×{count})"
                    room = MAX_LINE_WIDTH - len(op) - len(tail) - 7  # "~ op: " and " → "
                    a, b = _fit_pair(was, now, room)
                    short.append(f"{a} → {b}{tail}")
                    full.append(f"{was} → {now} (×{count})")
            else:
                (rs, rf), (as_, af) = _texts("", removed, LIST_BUDGET // 2), _texts("", added, LIST_BUDGET // 2)
                short.append(f"{rs or '(none)'} → {as_ or '(none)'}")
                full.append(f"{rf or '(none)'} → {af or '(none)'}")
        for name in sorted(k for k in old if k in new and old[k] != new[k]):
            short.append(f"{shorten(name, MAX_NAME_WIDTH)} ×{old[name]} → ×{new[name]}")
            full.append(f"{name} ×{old[name]} → ×{new[name]}")
        changes.append(Change("kernels", "changed", op, old, new, ": " + "; ".join(short), ": " + "; ".join(full)))
    return sorted(changes, key=lambda c: (c.subject, c.kind))


def _attributed(kernels: list) -> bool:
    return any(entry.get("op") for entry in kernels)


def _by_op(kernels: list) -> dict[Optional[str], list]:
    groups: dict[Optional[str], list] = {}
    for entry in kernels:
        groups.setdefault(op_label(entry["op"]) if entry.get("op") else None, []).append(entry)
    return groups


def _texts(prefix: str, counts: Mapping[str, int], budget: int = LIST_BUDGET) -> tuple[str, str]:
    """``(shortened, full)`` text of ``{kernel label: count}``: ``k1 ×2, k2 ×1``; the short one within ``budget``."""
    items = sorted(counts.items())
    short = fit_list([f"{shorten(k, MAX_NAME_WIDTH)} ×{c}" for k, c in items], budget)
    full = ", ".join(f"{k} ×{c}" for k, c in items)
    return (prefix + short if short else ""), (prefix + full if full else "")


def _plain_kernel_changes(expected: list, actual: list) -> list[Change]:
    changes = []
    counted = count_changes(kernel_view(expected), kernel_view(actual))
    # A kernel that is gone at one launch shape and new at another, as often: one changed line.
    gone: dict[str, list] = {}
    new_at: dict[str, list] = {}
    for label, old, new in counted:
        head, shape = _split_launch(label)
        if shape and (not old or not new):
            (new_at if not old else gone).setdefault(head, []).append((label, old or new))
    paired = set()
    for name in sorted(set(gone) & set(new_at)):
        if len(gone[name]) == len(new_at[name]) == 1 and gone[name][0][1] == new_at[name][0][1]:
            (was, count), (now, _) = gone[name][0], new_at[name][0]
            _, old_shape, new_shape = _launch_swap(was, now)  # type: ignore[misc]
            changes.append(Change("kernels", "changed", name, was, now, f" {old_shape} → {new_shape} (×{count})"))
            paired.update((was, now))
    for label, old, new in counted:
        if label in paired:
            continue
        if not old:
            changes.append(Change("kernels", "added", label, None, new, f" ×{new}"))
        elif not new:
            changes.append(Change("kernels", "removed", label, old, None, f" ×{old}"))
        else:
            changes.append(Change("kernels", "changed", label, old, new, f" ×{old} → ×{new}"))
    return sorted(changes, key=lambda c: (c.subject, c.kind))


def topology_changes(expected: Optional[Mapping], actual: Optional[Mapping]) -> list[Change]:
    """The graph's node counts by type and ``branches``, compared where both sides read a graph.

    ``branches`` falling means work that ran side by side now runs one after another
    (a communication kernel no longer overlapping): a regression like a changed kernel.
    """
    if not expected or not actual:
        return []
    changes = []
    old_nodes, new_nodes = expected.get("nodes", {}), actual.get("nodes", {})
    for node_type in sorted(set(old_nodes) | set(new_nodes)):
        old, new = old_nodes.get(node_type, 0), new_nodes.get(node_type, 0)
        if old != new:
            changes.append(Change("kernels", "changed", f"graph nodes ({node_type})", old, new, f" ×{old} → ×{new}"))
    old_branches, new_branches = expected.get("branches"), actual.get("branches")
    if old_branches != new_branches:
        changes.append(
            Change(
                "kernels",
                "changed",
                "graph branches (nodes that can run at once)",
                old_branches,
                new_branches,
                f" {old_branches} → {new_branches}",
            )
        )
    return changes
