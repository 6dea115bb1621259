"""Comparing keys of several graphs: each graph with the golden's graph of the same place in capture order.

A key of one graph on both sides is compared as it always was (:func:`~.diff.compare`).
Where either side holds several graphs (:mod:`~..summary.graphs`):

* the same number of graphs: graph *i* is compared with the golden's graph *i*, and each
  change is named by its graph (``bs=4 variant=PIECEWISE graph 2 of 3 (…):`` then the
  diff lines), so a regression in one piece points at that piece;
* another number: its own line (``bs=64: 2 graphs, goldens have 1``), then what changed
  in the key's kernels, ops and launches summed over its graphs.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Sequence

from ..keys import CaptureKey, key_label
from ..summary.model import graph_count
from .change import MAX_NAME_WIDTH, SECTIONS, KeyDiff
from .diff import compare
from .op_classes import DEFAULT_CLASSES, OpClasses


@dataclass
class GraphsDiff:
    """The differences of a key of several graphs: a :class:`~.diff.KeyDiff` per differing graph, or the count.

    ``changes`` stays empty, so the failure text never folds these keys into a table
    across batch sizes (which would lose the graph); :attr:`ok` says whether they match.
    """

    key: CaptureKey
    graphs: int
    golden_graphs: int
    #: ``(graph number from 1, its diff)`` of each graph that differs (same graph count).
    parts: list = field(default_factory=list)
    #: The diff of the sums, when the graph counts differ.
    whole: Optional[KeyDiff] = None
    golden: Optional[str] = None
    changes: list = field(default_factory=list)
    notes: list = field(default_factory=list)
    incomplete: Optional[str] = None
    toolchain: list = field(default_factory=list)
    torch_release_changed: bool = False

    @property
    def ok(self) -> bool:
        return self.graphs == self.golden_graphs and not self.parts

    def render(
        self, width: Optional[int] = MAX_NAME_WIDTH, *, brief: bool = False, full_diff: Optional[str] = None
    ) -> list[str]:
        """Lines like :meth:`~.change.KeyDiff.render`'s, each graph's diff under a heading naming the graph."""
        options = {"brief": brief, "full_diff": full_diff}
        label = key_label(self.key)
        where = f" ({self.golden})" if self.golden else ""
        lines: list[str] = []
        if self.graphs != self.golden_graphs:
            lines.append(f"{label}: {_graphs(self.graphs)}, goldens have {self.golden_graphs}{where}")
            if self.whole is not None and self.whole.changes:
                lines.append(f"  summed over the graphs, {label}:")
                lines += ["  " + line for line in self.whole.render(width, **options)[1:]]
            return lines + [f"  note: {n}" for n in self.notes]
        for number, diff in self.parts:
            body = diff.render(width, **options)
            lines.append(f"{label} graph {number} of {self.graphs}{where}:")
            lines += [line for line in body[1:] if not line.startswith("  note: ")]
        return lines + [f"  note: {n}" for n in self.notes]


def _graphs(n: int) -> str:
    return f"{n} graph{'s' if n != 1 else ''}"


def compare_keys(
    expected: Any,
    actual: Any,
    *,
    level: str = "name",
    ignore_kernels: Sequence[str] = (),
    ignore_ops: Sequence[str] = (),
    sections: Sequence[str] = SECTIONS,
    golden: Optional[str] = None,
    rename: Optional[Callable[[str, str], Optional[str]]] = None,
    classes: OpClasses = DEFAULT_CLASSES,
) -> Any:
    """:func:`~.diff.compare` for keys of one graph; a :class:`GraphsDiff` where either side has several."""
    options = dict(
        level=level,
        ignore_kernels=ignore_kernels,
        ignore_ops=ignore_ops,
        sections=sections,
        rename=rename,
        classes=classes,
    )
    n, m = graph_count(actual), graph_count(expected)
    if n == 1 and m == 1:
        return compare(expected, actual, golden=golden, **options)
    result = GraphsDiff(actual.key, n, m, golden=golden)
    if n != m:
        result.whole = compare(_alone(expected), _alone(actual), golden=golden, **options)
        result.notes = list(result.whole.notes)
        result.toolchain, result.torch_release_changed = result.whole.toolchain, result.whole.torch_release_changed
        return result
    notes: list = []
    for number, (old, new) in enumerate(zip(expected.graphs, actual.graphs), 1):
        old.environment, new.environment = expected.environment, actual.environment
        diff = compare(old, new, golden=golden, **options)
        notes += [n for n in diff.notes if n not in notes]
        if diff.changes:
            result.parts.append((number, diff))
            result.toolchain = result.toolchain or diff.toolchain
            result.torch_release_changed = result.torch_release_changed or diff.torch_release_changed
    result.notes = notes if result.parts else []
    result.incomplete = actual.incomplete_reason if not actual.complete else None
    return result


def _alone(summary: Any) -> Any:
    """The key's sums without its graphs: what a count mismatch compares."""
    if not getattr(summary, "graphs", None):
        return summary
    whole = copy.copy(summary)
    whole.graphs = None
    return whole
