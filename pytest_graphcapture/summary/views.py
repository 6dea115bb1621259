"""Views shared by every comparison of kernels: how a kernel entry is labelled, counted and compared."""

from __future__ import annotations

import json
from typing import Any, Iterable, Mapping


def kernel_label(entry: Mapping[str, Any]) -> str:
    """How a kernel entry is named wherever kernels are compared: name, then ``(kind)``, grid/block and the
    graph's launch shape (``<<<grid,block,shared memory>>>``) where set."""
    extras = []
    kind = entry.get("kind")
    if kind not in (None, "kernel"):
        extras.append(f"({kind})")
    for dim in ("grid", "block"):
        if dim in entry:
            extras.append(f"{dim}={json.dumps(entry[dim], separators=(',', ':'))}")
    if "launch" in entry:
        extras.append(entry["launch"])
    return " ".join([entry["name"], *extras])


def kernel_view(kernels: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    """``{kernel label: count}`` of kernel entries."""
    view: dict[str, int] = {}
    for item in kernels:
        label = kernel_label(item)
        view[label] = view.get(label, 0) + int(item["count"])
    return view


def count_changes(expected: Mapping[str, int], actual: Mapping[str, int]) -> list[tuple[str, int, int]]:
    """``(label, expected count, actual count)`` for every label whose count differs (0 = absent), sorted.

    The one multiset comparison: the golden diff's kernel section and the replay's
    data-loss check are both built on it.
    """
    return [
        (label, expected.get(label, 0), actual.get(label, 0))
        for label in sorted(set(expected) | set(actual))
        if expected.get(label, 0) != actual.get(label, 0)
    ]
