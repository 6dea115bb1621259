"""Launch budgets: the most kernel launches a key's capture may record.

A budget comes from a golden's ``launch_budget`` field (kept by ``--update-golden``)
or from ``golden.check(max_launches=...)``; it catches performance regressions
(more launches) without timing anything.  It is not part of the summary, so it
is never diffed.
"""

from __future__ import annotations

from typing import Any, Mapping, Optional, Sequence

from ..errors import GoldenError, UsageError
from ..keys import CaptureKey, key_label
from ..summary.model import is_int

#: Optional golden field: the most launches this key's capture may record (see :func:`launch_budget_violations`).
#: It is not part of the summary, so it is never diffed; ``--update-golden`` carries it over.
BUDGET_FIELD = "launch_budget"


def budget_from_option(max_launches: Any, key: CaptureKey) -> Optional[int]:
    """The ``golden.check(max_launches=...)`` budget of ``key``: an int for every key, or ``{bs: int}``.

    A mapping without the key's batch size sets no budget for it.  Bad values are a
    UsageError naming the argument.
    """
    if max_launches is None:
        return None
    if isinstance(max_launches, Mapping):
        for bs, limit in max_launches.items():
            if not is_int(bs) or bs < 1:
                raise UsageError(f"golden.check(max_launches=...): key {bs!r} is not a batch size (positive int)")
            if not is_int(limit) or limit < 0:
                raise UsageError(
                    f"golden.check(max_launches=...): budget of bs={bs} must be a non-negative integer, got {limit!r}"
                )
        return max_launches.get(key.batch_size)
    if not is_int(max_launches) or max_launches < 0:
        raise UsageError(
            f"golden.check(max_launches={max_launches!r}): expected a non-negative integer or "
            f"a {{batch_size: integer}} mapping"
        )
    return int(max_launches)


def launch_budget_of(data: Optional[Mapping[str, Any]], path: Any = "<golden>") -> Optional[int]:
    """The ``launch_budget`` of a golden dict, or None (no golden, or no budget in it); GoldenError if malformed."""
    if data is None or BUDGET_FIELD not in data:
        return None
    budget = data[BUDGET_FIELD]
    if not is_int(budget) or budget < 0:
        raise GoldenError(
            path,
            f"'{BUDGET_FIELD}' must be a non-negative integer (maximum launches of this batch size), got {budget!r}",
        )
    return int(budget)


def launch_budget_violations(key: CaptureKey, launches: int, budgets: Sequence[tuple[Optional[int], str]]) -> list[str]:
    """One line per exceeded budget: ``bs=8: 212 kernel launches > budget 200 (source)``."""
    return [
        f"{key_label(key)}: {launches} kernel launches > budget {limit} ({source})"
        for limit, source in budgets
        if limit is not None and launches > limit
    ]
