"""A difference as a reviewer reads it: one :class:`Change` per item, one :class:`KeyDiff` per key.

The records the comparison (:mod:`.diff`) produces and how they render as failure
lines: markers, shortened kernel names, the per-key heading and sections, and the
cut of a long failure with a pointer to the full diff file.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Optional

from ..keys import CaptureKey, key_label

SECTIONS: tuple[str, ...] = ("kernels", "ops", "launches")


#: Failure messages are cut after this many lines; the full diff goes to a file.
MAX_DIFF_LINES = 60


#: Kernel names longer than this are shortened (in the middle) in failure messages.
MAX_NAME_WIDTH = 120


def compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def shorten(name: str, width: Optional[int]) -> str:
    if width is None or len(name) <= width:
        return name
    keep = width - 1
    return f"{name[: keep * 2 // 3]}…{name[-(keep - keep * 2 // 3) :]}"


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

    def render(self, width: Optional[int] = MAX_NAME_WIDTH) -> str:
        marker = {"added": "+", "removed": "-", "changed": "~"}[self.kind]
        detail = self.full_detail if width is None and self.full_detail is not None else self.detail
        return f"{marker} {shorten(self.subject, width)}{detail}"

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

    @property
    def ok(self) -> bool:
        return not self.changes

    def render(self, width: Optional[int] = MAX_NAME_WIDTH) -> list[str]:
        """Human-readable lines: a heading per key, then per section, then notes."""
        where = f" ({self.golden})" if self.golden else ""
        lines = [f"{key_label(self.key)}{where}:"]
        for section in SECTIONS:
            items = [c for c in self.changes if c.section == section]
            if not items:
                continue
            counts = {k: sum(1 for c in items if c.kind == k) for k in ("added", "removed", "changed")}
            summary = ", ".join(f"{n} {k}" for k, n in counts.items() if n)
            lines.append(f"  {section}: {summary}")
            lines.extend(f"    {c.render(width)}" for c in items)
        lines.extend(f"  note: {n}" for n in self.notes)
        return lines

    def to_dict(self) -> dict:
        return {
            "key": self.key.to_dict(),
            "golden": self.golden,
            "incomplete": self.incomplete,
            "notes": list(self.notes),
            "changes": [c.to_dict() for c in self.changes],
        }


def cut_lines(lines: list[str], full_path: Optional[Any], *, max_lines: int = MAX_DIFF_LINES) -> list[str]:
    """``lines`` cut to ``max_lines``, ending with where the full diff is when cut."""
    if len(lines) <= max_lines:
        return list(lines)
    hidden = len(lines) - (max_lines - 1)
    where = f"; full diff in {full_path}" if full_path else ""
    return lines[: max_lines - 1] + [f"… {hidden} more lines{where}"]
