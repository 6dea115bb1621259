"""Kernel expectations: what must hold per batch size, independent of the goldens.

An engine PR claims "this fuses four kernels into two" or "no elementwise copy is
left at bs ≥ 16"; an :class:`Expect` writes that claim down as a check::

    Expect.kernel("*fused_moe*", count=2)                  # present, exactly twice, at every size
    Expect.kernel("*elementwise_kernel*", forbid=True, bs=">= 16")
    Expect.kernel("*rmsnorm*", max=2)                      # at most 2 launches
    Expect.op("aten::silu", min=1)                         # on CPU the same over ops

A kernel expectation is a glob (fnmatch) over kernel names normalized at a level
(the check's by default), counting launches in the graph; an op expectation is a
glob over op names (with or without the ``aten::`` namespace), counting calls.
``count`` is exact, ``min`` / ``max`` bound, ``forbid`` means none, and no bound
means present (at least one).  ``bs`` restricts it to sizes: ``">= 16"``,
``"bs < 8"``, ``"4..16"``, ``"1,2,4"`` or a combination with ``and``.

They are given to ``golden.check(result, expect=[...])`` or kept in a golden file's
``expect`` field (a list of the same dicts, carried over by ``--update-golden``).
Kernel expectations are not checked on captures without kernel evidence (CPU, or
an incomplete capture); op expectations are checked everywhere.
"""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping, Optional, Sequence, Union

from ..errors import GoldenError, UsageError
from ..keys import CaptureKey, key_label
from ..summary.normalize import LEVELS, is_coarser_or_equal, normalize_kernel_name

#: Optional golden field: a list of expectation dicts (:meth:`Expect.to_dict`), kept by ``--update-golden``.
EXPECT_FIELD = "expect"

_FIELDS = ("kernel", "op", "count", "min", "max", "forbid", "bs", "level")
_COMPARE = {
    ">=": lambda a, b: a >= b,
    "<=": lambda a, b: a <= b,
    ">": lambda a, b: a > b,
    "<": lambda a, b: a < b,
    "==": lambda a, b: a == b,
    "!=": lambda a, b: a != b,
}
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
    """One line per expectation that does not hold for ``key``: the expectation, the size, what was found.

    ``given`` pairs expectations with where they come from (the option, a golden file).
    Kernel expectations are left out where the capture has no kernel evidence.
    """
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
