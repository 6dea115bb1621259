"""A difference as a reviewer reads it: one :class:`Change` per item, one :class:`KeyDiff` per key.

The records the comparison (:mod:`.diff`) produces and how they render as failure
lines: markers, shortened kernel names, the per-key heading and sections, and the
cut of a long failure with a pointer to the full diff file.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Optional, Sequence

from ..keys import CaptureKey, key_label
from .op_classes import DEFAULT_CLASSES, VIEW, OpClasses

SECTIONS: tuple[str, ...] = ("kernels", "ops", "launches")


#: Failure messages are cut after this many lines; the full diff goes to a file.
MAX_DIFF_LINES = 60


#: Kernel names longer than this are shortened (in the middle) in failure messages.
MAX_NAME_WIDTH = 120


#: A failure line longer than this is cut (the diff file keeps it whole).
MAX_LINE_WIDTH = 170

#: Stands for the batch size inside a template; printed as ``bs``.
HOLE = "\x00"


def abstract_bs(text: str, bs: Optional[int]) -> str:
    """``text`` with every number equal to ``bs`` (not part of a longer number or name) as :data:`HOLE`."""
    if not bs:  # no size, or the unknown size 0: nothing stands for it
        return text
    return re.sub(rf"(?<![\w.]){bs}(?![\w.])", HOLE, text)


#: Characters each list of a failure line (the old or the new shapes of an op) may take.
LIST_BUDGET = 64


def slot(index: int) -> str:
    """The marker in a line's text where list ``index`` goes (no digit: the batch-size axis leaves it alone)."""
    return f"\x01{chr(ord('a') + index)}\x01"


def fill_slots(text: str, lists: Sequence[Sequence[str]], budget: Optional[int]) -> str:
    """``text`` with each :func:`slot` replaced by its list, fitted to ``budget`` (whole when None)."""
    for index, items in enumerate(lists):
        text = text.replace(slot(index), fit_list(list(items), budget))
    return text


def fit_list(items: Sequence[str], budget: Optional[int]) -> str:
    """``items`` joined by ", " within about ``budget`` characters, then ``… +N more`` (all when None)."""
    if budget is None or not items:
        return ", ".join(items)
    out = [shorten(items[0], budget)]
    for i, item in enumerate(items[1:], 1):
        rest = len(items) - i - 1
        tail = f", … +{rest} more" if rest else ""
        if len(", ".join(out)) + 2 + len(item) + len(tail) > budget:
            return ", ".join(out) + f", … +{len(items) - i} more"
        out.append(item)
    return ", ".join(out)


def compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def shorten(name: str, width: Optional[int]) -> str:
    if width is None or len(name) <= width:
        return name
    keep = width - 1
    return f"{name[: keep * 2 // 3]}…{name[-(keep - keep * 2 // 3) :]}"


#: What separates the fields of a change line (entries, old → new); a cut never crosses one.
_FIELD_SEPARATORS = re.compile(r"(, |; | → |: )")
#: A field is never cut shorter than this: its start and end still tell which entry it is.
MIN_FIELD_WIDTH = 24


def fit_line(text: str, width: int) -> str:
    """``text`` within about ``width`` characters, its longest fields shortened in their middle.

    Every separator (``, ``, ``; ``, `` → ``, ``: ``) stays, so a cut line still reads
    entry by entry, old → new; a line of many fields may stay longer than ``width``.
    """
    if len(text) <= width:
        return text
    parts = _FIELD_SEPARATORS.split(text)
    fields, fixed = parts[0::2], sum(map(len, parts[1::2]))
    low, high = MIN_FIELD_WIDTH, max(map(len, fields))  # the widest cap on every field that fits
    while low < high:
        mid = (low + high + 1) // 2
        if fixed + sum(min(len(f), mid) for f in fields) <= width:
            low = mid
        else:
            high = mid - 1
    parts[0::2] = [shorten(f, low) for f in fields]
    return "".join(parts)


@dataclass
class Change:
    """One difference: ``section`` (kernels/ops/launches), ``kind`` (added/removed/changed)."""

    section: str
    kind: str
    subject: str
    old: Any = None
    new: Any = None
    detail: str = ""
    #: ``detail`` with every kernel name at full length (``detail`` shortens long ones).
    full_detail: Optional[str] = None
    #: Lists shown in ``detail`` where it holds :func:`slot` markers: shapes, for example.  A
    #: failure line shows each within :data:`LIST_BUDGET`; the diff file shows them whole.
    lists: tuple[tuple[str, ...], ...] = ()

    def head(self, width: Optional[int] = MAX_NAME_WIDTH) -> str:
        """The line with :func:`slot` markers where ``lists`` go (the whole line when it has none)."""
        marker = {"added": "+", "removed": "-", "changed": "~"}[self.kind]
        detail = self.full_detail if width is None and self.full_detail is not None else self.detail
        return f"{marker} {shorten(self.subject, width)}{detail}"

    def render(self, width: Optional[int] = MAX_NAME_WIDTH) -> str:
        text = fill_slots(self.head(width), self.lists, None if width is None else LIST_BUDGET)
        return text if width is None else fit_line(text, MAX_LINE_WIDTH)

    def to_dict(self) -> dict:
        return {
            "section": self.section,
            "kind": self.kind,
            "subject": self.subject,
            "old": self.old,
            "new": self.new,
            "text": self.render(None),
        }


@dataclass
class KeyDiff:
    """The differences of one capture key against its golden, plus explanatory notes."""

    key: CaptureKey
    changes: list[Change] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    incomplete: Optional[str] = None
    golden: Optional[str] = None
    #: How the golden's torch / CUDA-HIP runtime / driver / device differ from the capture's.
    toolchain: list[str] = field(default_factory=list)
    #: The golden was written under another torch release (not just another build of it).
    torch_release_changed: bool = False
    #: Which ops lead the failure and which are view/metadata ops (the project's settings).
    classes: OpClasses = DEFAULT_CLASSES

    @property
    def ok(self) -> bool:
        return not self.changes

    def ordered(self, section: str) -> list[Change]:
        """The changes of ``section`` in reading order: op lines by class (compute first), else as computed."""
        items = [c for c in self.changes if c.section == section]
        if section != "ops":
            return items
        return sorted(items, key=lambda c: self.classes.rank(c.subject))  # stable: by name within a class

    def render(
        self, width: Optional[int] = MAX_NAME_WIDTH, *, brief: bool = False, full_diff: Optional[str] = None
    ) -> list[str]:
        """Human-readable lines: a heading per key, then per section, then notes.

        ``brief`` (the failure message): view/metadata op lines become one line saying how many
        there are and where ``full_diff`` (the diff file) has them, unless nothing else changed.
        """
        where = f" ({self.golden})" if self.golden else ""
        lines = [f"{key_label(self.key)}{where}:"]
        fold = brief and any(not self.is_view(c) for c in self.changes)
        for section in SECTIONS:
            items = self.ordered(section)
            if not items:
                continue
            counts = {k: sum(1 for c in items if c.kind == k) for k in ("added", "removed", "changed")}
            summary = ", ".join(f"{n} {k}" for k, n in counts.items() if n)
            lines.append(f"  {section}: {summary}")
            shown = [c for c in items if not (fold and self.is_view(c))]
            lines.extend(f"    {c.render(width)}" for c in shown)
            if len(shown) < len(items):
                lines.append(f"    {folded_line([c.subject for c in items if self.is_view(c)], full_diff)}")
        lines.extend(f"  note: {n}" for n in self.notes)
        return lines

    def is_view(self, change: Change) -> bool:
        """A change of a view/metadata op (never a kernel or launch line)."""
        return change.section == "ops" and self.classes.rank(change.subject)[0] == VIEW

    def to_dict(self) -> dict:
        return {
            "key": self.key.to_dict(),
            "golden": self.golden,
            "incomplete": self.incomplete,
            "notes": list(self.notes),
            "changes": [c.to_dict() for c in self.changes],
        }


def folded_line(subjects: Sequence[str], full_diff: Optional[str]) -> str:
    """The one line standing for view/metadata op lines: how many, of which ops, and the file that has them.

    Without ``full_diff`` (no diff file was written) it names no place: a pointer must lead to a file.
    """
    names = list(dict.fromkeys(s.split("::", 1)[1] if s.startswith("aten::") else s for s in subjects))
    which = fit_list(names, 48)
    where = f"; full diff in {full_diff}" if full_diff else ""
    n = len(subjects)
    return f"+ {n} view/metadata op line{'s' if n != 1 else ''} ({which}){where}"


def cut_lines(lines: list[str], full_path: Optional[Any], *, max_lines: int = MAX_DIFF_LINES) -> list[str]:
    """``lines`` cut to ``max_lines``, ending with where the full diff is when cut."""
    if len(lines) <= max_lines:
        return list(lines)
    hidden = len(lines) - (max_lines - 1)
    where = f"; full diff in {full_path}" if full_path else ""
    return lines[: max_lines - 1] + [f"… {hidden} more lines{where}"]
