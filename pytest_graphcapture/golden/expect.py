"""Expectations and budgets a key must meet beside its golden: kernel expectations, launch and memory budgets."""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass
from operator import eq, ge, gt, le, lt, ne
from typing import Any, Callable, Iterable, Mapping, Optional, Sequence, Union

from .._io import format_bytes
from ..errors import GoldenError, UsageError
from ..keys import CaptureKey, is_int, key_label
from ..summary.normalize import LEVELS, is_coarser_or_equal, normalize_kernel_name

#: Optional golden field: the most launches this key's capture may record (see :func:`launch_budget_violations`).
#: It is not part of the summary, so it is never diffed; ``--update-golden`` carries it over.
BUDGET_FIELD = "launch_budget"
#: Optional golden field: the most bytes this key's capture may add to the allocator's reserved memory.
MEMORY_BUDGET_FIELD = "graph_memory_budget"
#: How far over a graph-memory budget a capture may go (0.1: 10 %): allocator rounding varies a little.
DEFAULT_MEMORY_TOLERANCE = 0.1


def budget_from_option(max_launches: Any, key: CaptureKey, *, argument: str = "max_launches") -> Optional[int]:
    """The ``golden.check(max_launches=...)`` budget of ``key``: an int for every key, or ``{bs: int}``."""
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


#: Optional golden field: a list of expectation dicts (:meth:`Expect.to_dict`), kept by ``--update-golden``.
EXPECT_FIELD = "expect"

_FIELDS = ("kernel", "op", "count", "min", "max", "forbid", "bs", "level")
_COMPARE = {">=": ge, "<=": le, ">": gt, "<": lt, "==": eq, "!=": ne}
_TERM = re.compile(r"^(?:bs\s*)?(>=|<=|==|!=|>|<)\s*(\d+)$|^(\d+)\s*\.\.\s*(\d+)$|^(\d+(?:\s*,\s*\d+)*)$")


def _size_test(text: str, where: str) -> Callable[[int], bool]:
    """A predicate over batch sizes from ``">= 16"``, ``"4..16"``, ``"1,2,4"``, ``"all"`` (joined by ``and``)."""
    text = text.strip()
    if text in ("", "all", "*"):
        return lambda bs: True
    tests: list[Callable[[int], bool]] = []
    for part in re.split(r"\s+and\s+", text):
        found = _TERM.match(part.strip())
        if not found:
            raise UsageError(
                f"{where}: bs={text!r} is not a batch-size range (expected e.g. '>= 16', 'bs < 8', '4..16', "
                "'1,2,4' or 'all')"
            )
        op, bound, low, high, listed = found.groups()
        if low and int(low) > int(high):
            raise UsageError(
                f"{where}: bs={text!r}: the range {low}..{high} is reversed and selects no batch size; "
                f"write {high}..{low}"
            )
        if op:
            tests.append(lambda bs, op=op, n=int(bound): _COMPARE[op](bs, n))
        elif low:
            tests.append(lambda bs, lo=int(low), hi=int(high): lo <= bs <= hi)
        else:
            sizes = {int(s) for s in listed.split(",")}
            tests.append(lambda bs, sizes=sizes: bs in sizes)
    selects = lambda bs: all(test(bs) for test in tests)  # noqa: E731
    # Each term changes its answer only at a number written: 1 and each such number and its neighbours show all.
    probes = {1} | {n + d for n in map(int, re.findall(r"\d+", text)) for d in (-1, 0, 1) if n + d >= 1}
    if not any(selects(bs) for bs in probes):
        raise UsageError(f"{where}: bs={text!r} selects no batch size, so it would never be checked")
    return selects


def _bound(value: Any, name: str, where: str) -> Optional[int]:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise UsageError(f"{where}: {name}={value!r} must be a non-negative integer")
    return value


@dataclass(frozen=True)
class Expect:
    """One expectation: ``what`` (kernel/op) matching ``pattern``, its bounds, the sizes it holds for."""

    what: str
    pattern: str
    count: Optional[int] = None
    min: Optional[int] = None
    max: Optional[int] = None
    bs: str = "all"
    level: Optional[str] = None

    @classmethod
    def kernel(
        cls,
        pattern: str,
        *,
        count: Optional[int] = None,
        min: Optional[int] = None,
        max: Optional[int] = None,
        forbid: bool = False,
        bs: Union[str, int] = "all",
        level: Optional[str] = None,
    ) -> "Expect":
        """Kernels whose normalized name matches ``pattern``: ``count`` launches, within ``min``/``max``, or none."""
        return cls.from_dict(
            {"kernel": pattern, "count": count, "min": min, "max": max, "forbid": forbid, "bs": bs, "level": level}
        )

    @classmethod
    def op(
        cls,
        pattern: str,
        *,
        count: Optional[int] = None,
        min: Optional[int] = None,
        max: Optional[int] = None,
        forbid: bool = False,
        bs: Union[str, int] = "all",
    ) -> "Expect":
        """Ops whose name matches ``pattern``: ``count`` calls, within ``min``/``max``, or none (``forbid``)."""
        return cls.from_dict({"op": pattern, "count": count, "min": min, "max": max, "forbid": forbid, "bs": bs})

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], where: str = "golden.check(expect=...)") -> "Expect":
        """An expectation from its dict (the golden-file form); UsageError naming ``where`` and the field."""
        if not isinstance(data, Mapping):
            raise UsageError(f"{where}: an expectation is a dict such as {{'kernel': '*rmsnorm*', 'max': 2}}")
        unknown = sorted(set(data) - set(_FIELDS))
        if unknown:
            raise UsageError(f"{where}: unknown expectation field {unknown[0]!r} (fields: {', '.join(_FIELDS)})")
        kinds = [k for k in ("kernel", "op") if data.get(k) is not None]
        if len(kinds) != 1 or not isinstance(data[kinds[0]], str) or not data[kinds[0]]:
            raise UsageError(f"{where}: an expectation names exactly one 'kernel' or 'op' glob, got {dict(data)!r}")
        count, low, high = (_bound(data.get(n), n, where) for n in ("count", "min", "max"))
        forbid = data.get("forbid", False)
        if not isinstance(forbid, bool):
            raise UsageError(f"{where}: forbid={forbid!r} must be true or false")
        if forbid:
            if (count, low, high) != (None, None, None):
                raise UsageError(f"{where}: forbid cannot be combined with count, min or max")
            high = 0
        if count is not None and (low is not None or high is not None):
            raise UsageError(f"{where}: count is exact; give min/max instead of combining them with it")
        if low is not None and high is not None and low > high:
            raise UsageError(f"{where}: min={low} is above max={high}")
        bs = data.get("bs", "all")
        bs = str(bs) if isinstance(bs, int) and not isinstance(bs, bool) else bs
        if not isinstance(bs, str):
            raise UsageError(f"{where}: bs={bs!r} must be a range such as '>= 16'")
        _size_test(bs, where)
        bs = re.sub(r"\s+", " ", re.sub(r"^bs\s*(?=[<>=!])", "", bs.strip()))  # one spelling: ">= 16"
        level = data.get("level")
        if level is not None and (kinds[0] != "kernel" or level not in LEVELS):
            raise UsageError(f"{where}: level={level!r}: a kernel expectation's level is one of {', '.join(LEVELS)}")
        return cls(kinds[0], data[kinds[0]], count, low, high, bs.strip() or "all", level)

    def to_dict(self) -> dict:
        """The golden-file form (only the fields given)."""
        out: dict[str, Any] = {self.what: self.pattern}
        if self.max == 0 and self.min is None and self.count is None:
            out["forbid"] = True
        else:
            out.update(
                {k: v for k, v in (("count", self.count), ("min", self.min), ("max", self.max)) if v is not None}
            )
        if self.bs != "all":
            out["bs"] = self.bs
        if self.level is not None:
            out["level"] = self.level
        return out

    def applies(self, bs: int) -> bool:
        return _size_test(self.bs, "expectation")(bs)

    def describe(self) -> str:
        """``no kernel '*copy*' at bs >= 16``, ``kernel '*rmsnorm*' at most 2×`` …"""
        subject = f"{self.what} '{self.pattern}'"
        if self.max == 0 and self.min is None and self.count is None:
            text = f"no {subject}"
        elif self.count is not None:
            text = f"{subject} exactly {self.count}×"
        elif self.min is not None and self.max is not None:
            text = f"{subject} {self.min} to {self.max}×"
        elif self.max is not None:
            text = f"{subject} at most {self.max}×"
        else:
            text = f"{subject} at least {1 if self.min is None else self.min}×"
        if self.bs == "all":
            where = "at every size"
        elif re.fullmatch(r"[\d,\s]+", self.bs):
            where = "at bs=" + self.bs.replace(" ", "")
        else:
            where = f"at bs {self.bs}"
        level = f" (level {self.level})" if self.level else ""
        return f"{text} {where}{level}"

    def holds(self, found: int) -> bool:
        if self.count is not None:
            return found == self.count
        low = 1 if self.min is None and self.max is None else (self.min or 0)
        return found >= low and (self.max is None or found <= self.max)


def expectations(given: Optional[Iterable[Any]], where: str) -> tuple[Expect, ...]:
    """``given`` (Expect objects or their dicts) as Expect objects; UsageError naming ``where``."""
    if given is None:
        return ()
    if isinstance(given, (Expect, Mapping, str)):
        given = [given]
    out = []
    for i, item in enumerate(given):
        out.append(item if isinstance(item, Expect) else Expect.from_dict(item, f"{where}[{i}]"))
    return tuple(out)


def golden_expectations(data: Optional[Mapping[str, Any]], path: Any) -> tuple[Expect, ...]:
    """The expectations of a golden dict's ``expect`` field; GoldenError naming the file when malformed."""
    if data is None or EXPECT_FIELD not in data:
        return ()
    value = data[EXPECT_FIELD]
    if not isinstance(value, list):
        raise GoldenError(path, f'\'{EXPECT_FIELD}\' must be a list of expectations such as {{"kernel": "*x*"}}')
    try:
        return expectations(value, f"'{EXPECT_FIELD}'")
    except UsageError as exc:
        raise GoldenError(path, str(exc)) from None


def _matches(expect: Expect, summary: Any, level: str, rename: Optional[Callable[[str, str], Optional[str]]]) -> dict:
    """``{name: count}`` of what ``expect`` counts in ``summary``."""
    found: dict[str, int] = {}
    if expect.what == "op":
        for entry in summary.ops:
            name = entry["name"]
            if fnmatch.fnmatchcase(name, expect.pattern) or fnmatch.fnmatchcase(name.split("::")[-1], expect.pattern):
                found[name] = found.get(name, 0) + int(entry["count"])
        return found
    for entry in summary.kernels:
        name = entry["name"]
        if entry.get("kind", "kernel") == "kernel":
            name = (rename(name, level) if rename is not None else None) or normalize_kernel_name(name, level)
        if fnmatch.fnmatchcase(name, expect.pattern):
            found[name] = found.get(name, 0) + int(entry["count"])
    return found


def unevaluated(key: CaptureKey, summary: Any, given: Sequence[tuple[Sequence[Expect], str]]) -> list[str]:
    """The kernel expectations for ``key`` a GPU capture gave no kernel evidence to evaluate (CPU has none by design)."""
    if summary.platform == "cpu" or (summary.kernels and summary.complete):
        return []
    return [
        f"{expect.describe()} ({source})"
        for items, source in given
        for expect in items
        if expect.what == "kernel" and expect.applies(key.batch_size)
    ]


def unmet(
    key: CaptureKey,
    summary: Any,
    given: Sequence[tuple[Sequence[Expect], str]],
    *,
    level: str,
    rename: Optional[Callable[[str, str], Optional[str]]] = None,
) -> list[str]:
    """One line per expectation that does not hold for ``key``: the expectation, the size, what was found."""
    kernels_known = bool(summary.kernels) and summary.complete and summary.platform != "cpu"
    lines = []
    for items, source in given:
        for expect in items:
            if not expect.applies(key.batch_size) or (expect.what == "kernel" and not kernels_known):
                continue
            at = expect.level or level
            if expect.what == "kernel" and not is_coarser_or_equal(at, summary.level):
                raise UsageError(
                    f"{source}: expectation on {expect.pattern!r} at level {at!r} is finer than the capture's "
                    f"{summary.level!r}"
                )
            found = _matches(expect, summary, at, rename)
            total = sum(found.values())
            if expect.holds(total):
                continue
            names = ", ".join(f"{n} ×{c}" for n, c in sorted(found.items(), key=lambda nc: (-nc[1], nc[0]))[:3])
            more = f", … +{len(found) - 3} more" if len(found) > 3 else ""
            what = f"found {total}: {names}{more}" if found else "found none"
            lines.append(f"{key_label(key)}: expected {expect.describe()} ({source}); {what}")
    return lines
