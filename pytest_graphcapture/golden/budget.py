"""Budgets: the most kernel launches, and the most graph-pool memory, a key's capture may take.

A launch budget comes from a golden's ``launch_budget`` field (kept by
``--update-golden``) or from ``golden.check(max_launches=...)``; it catches
performance regressions (more launches) without timing anything.  A graph-memory
budget (``graph_memory_budget``, or ``golden.check(max_graph_memory=...)``, bytes)
bounds what the capture added to the allocator's reserved memory, with a relative
tolerance: capture OOMs in production come from pools that grew unnoticed.  Neither
is part of the summary, so neither is diffed; neither is checked unless set.
"""

from __future__ import annotations

from typing import Any, Mapping, Optional, Sequence

from .._io import format_bytes
from ..errors import GoldenError, UsageError
from ..keys import CaptureKey, is_int, key_label

#: Optional golden field: the most launches this key's capture may record (see :func:`launch_budget_violations`).
#: It is not part of the summary, so it is never diffed; ``--update-golden`` carries it over.
BUDGET_FIELD = "launch_budget"
#: Optional golden field: the most bytes this key's capture may add to the allocator's reserved memory.
MEMORY_BUDGET_FIELD = "graph_memory_budget"
#: How far over a graph-memory budget a capture may go (0.1: 10 %): allocator rounding varies a little.
DEFAULT_MEMORY_TOLERANCE = 0.1


def budget_from_option(max_launches: Any, key: CaptureKey, *, argument: str = "max_launches") -> Optional[int]:
    """The ``golden.check(max_launches=...)`` budget of ``key``: an int for every key, or ``{bs: int}``.

    A mapping without the key's batch size sets no budget for it.  Bad values are a
    UsageError naming the argument (``argument``: the same rules hold for ``max_graph_memory``).
    """
    if max_launches is None:
        return None
    if isinstance(max_launches, Mapping):
        for bs, limit in max_launches.items():
            if not is_int(bs) or bs < 1:
                raise UsageError(f"golden.check({argument}=...): key {bs!r} is not a batch size (positive int)")
            if not is_int(limit) or limit < 0:
                raise UsageError(
                    f"golden.check({argument}=...): budget of bs={bs} must be a non-negative integer, got {limit!r}"
                )
        return max_launches.get(key.batch_size)
    if not is_int(max_launches) or max_launches < 0:
        raise UsageError(
            f"golden.check({argument}={max_launches!r}): expected a non-negative integer or "
            f"a {{batch_size: integer}} mapping"
        )
    return int(max_launches)


def launch_budget_of(
    data: Optional[Mapping[str, Any]], path: Any = "<golden>", *, field: str = BUDGET_FIELD
) -> Optional[int]:
    """The ``launch_budget`` (or another budget ``field``) of a golden dict, or None; GoldenError if malformed."""
    if data is None or field not in data:
        return None
    budget = data[field]
    if not is_int(budget) or budget < 0:
        what = "maximum launches" if field == BUDGET_FIELD else "maximum bytes of graph memory"
        raise GoldenError(path, f"'{field}' must be a non-negative integer ({what} of this batch size), got {budget!r}")
    return int(budget)


def check_tolerance(tolerance: Any) -> float:
    """The ``golden.check(memory_tolerance=...)`` fraction, or a UsageError naming the argument."""
    if isinstance(tolerance, bool) or not isinstance(tolerance, (int, float)) or not 0 <= tolerance < 10:
        raise UsageError(
            f"golden.check(memory_tolerance={tolerance!r}): expected a fraction such as 0.1 (10 %), from 0 up to 10"
        )
    return float(tolerance)


def memory_budget_violations(
    key: CaptureKey, reserved: Optional[int], budgets: Sequence[tuple[Optional[int], str]], tolerance: float
) -> list[str]:
    """One line per exceeded graph-memory budget; nothing when the capture measured no memory (CPU)."""
    if reserved is None:
        return []
    return [
        f"{key_label(key)}: the capture reserved {format_bytes(reserved)} of graph memory > budget "
        f"{format_bytes(limit)} + {tolerance:.0%} ({source})"
        for limit, source in budgets
        if limit is not None and reserved > limit * (1 + tolerance)
    ]


def launch_budget_violations(key: CaptureKey, launches: int, budgets: Sequence[tuple[Optional[int], str]]) -> list[str]:
    """One line per exceeded budget: ``bs=8: 212 kernel launches > budget 200 (source)``."""
    return [
        f"{key_label(key)}: {launches} kernel launches > budget {limit} ({source})"
        for limit, source in budgets
        if limit is not None and launches > limit
    ]


def over_budget_tag(launch: bool, memory: bool) -> str:
    """How a failure's head line tags a key over budget."""
    if launch and memory:
        return "over launch and graph-memory budgets"
    return "over graph-memory budget" if memory else "over launch budget"


def budget_hints(over_launch: Sequence[str], over_memory: Sequence[str]) -> list[str]:
    """The lines that tell how to fix a key over budget (``--update-golden`` cannot)."""
    hints = []
    if over_launch:
        hints.append(
            f"launch budget exceeded for {', '.join(over_launch)}: cut the launches, or raise the budget "
            f"({BUDGET_FIELD} in the golden file, kept by --update-golden, or golden.check(max_launches=...))"
        )
    if over_memory:
        hints.append(
            f"graph-memory budget exceeded for {', '.join(over_memory)}: shrink the graph pool, or raise the "
            f"budget ({MEMORY_BUDGET_FIELD} in the golden file, kept by --update-golden, or "
            f"golden.check(max_graph_memory=...))"
        )
    return hints
