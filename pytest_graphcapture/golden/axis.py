"""The batch-size axis of a failure: a change that holds for several sizes prints once, with its sizes.

Widening a layer changes the same ops at every batch size; listed per size that is
the same ~25 lines eight times.  Here each change line of a key is abstracted over
its batch size (a number equal to the key's batch size becomes ``bs``) and lines
that read the same once abstracted are printed once, prefixed with their sizes::

    bs=1,2,4,8: ~ aten::linear [[bs,64],[256,64]] → [[bs,64],[384,64]]

A template is kept only when it reproduces each size's own line exactly, so a
dimension that merely equals one batch size (``64`` at ``bs=64``) is never taken
for the batch dimension.  The per-size diff stays the full record (diff file).
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Any, Iterable, Optional, Sequence

from ..keys import CaptureKey, key_label
from .diff import SECTIONS, KeyDiff
from .report import LIST_LIMIT

_HOLE = "\x00"  # stands for the batch size inside a template; printed as "bs"


def _abstract(text: str, bs: int) -> str:
    return re.sub(rf"(?<![\w.]){bs}(?![\w.])", _HOLE, text)


def _fill(template: str, bs: int) -> str:
    return template.replace(_HOLE, str(bs))


def _sizes(sizes: Iterable[int]) -> str:
    """``bs=1,2,4,8``; past :data:`~.report.LIST_LIMIT` sizes ``bs=1…256 (256 sizes)``, so a line stays short."""
    ordered = sorted(sizes)
    if len(ordered) > LIST_LIMIT:
        return f"bs={ordered[0]}…{ordered[-1]} ({len(ordered)} sizes)"
    return "bs=" + ",".join(str(bs) for bs in ordered)


def _grouped(items: dict[int, list[str]], by_subject: bool = True) -> list[tuple[list[int], str]]:
    """``[(sizes, template)]`` covering every ``(size, line)`` of ``items`` once."""
    left = {bs: Counter(lines) for bs, lines in items.items()}
    out: list[tuple[list[int], str]] = []
    while any(+lines for lines in left.values()):
        best: Optional[tuple] = None
        for bs, lines in left.items():
            for line in +lines:
                template = _abstract(line, bs)
                covered = [other for other, theirs in left.items() if theirs[_fill(template, other)] > 0]
                # Most sizes first; then the template with the fewest holes (the least guessed).
                score = (len(covered), -template.count(_HOLE))
                if best is None or score > best[0]:
                    best = (score, template, covered)
        assert best is not None
        _, template, covered = best
        for bs in covered:
            left[bs][_fill(template, bs)] -= 1
        if len(covered) == 1 and template.count(_HOLE):
            template = _fill(template, covered[0])  # one size: print it as it is
        out.append((covered, template))

    # By op or kernel name (unless ``by_subject`` is False), then in the order the per-size
    # diffs list them (removed before added; total launches first).
    def position(item: tuple[list[int], str]) -> tuple:
        sizes, template = item
        subject = template.split(" ", 2)[1] if by_subject and template.count(" ") >= 2 else ""
        return (subject, min(items[bs].index(_fill(template, bs)) for bs in sizes), sizes)

    return sorted(out, key=position)


def _render(sizes: list[int], template: str) -> str:
    return f"{_sizes(sizes)}: {template.replace(_HOLE, 'bs')}"


def group_lines(diffs: Sequence[tuple[CaptureKey, KeyDiff]], all_sizes: Sequence[int]) -> list[str]:
    """Failure lines of the diffs of one runner/variant/rank across batch sizes, each change once.

    ``all_sizes`` are every batch size checked for that runner/variant/rank, so the
    heading can say where the kernel set first changes.
    """
    by_bs = {key.batch_size: diff for key, diff in diffs}
    first = diffs[0][0]
    where = key_label(first).split(" ", 1)[1] + " " if " " in key_label(first) else ""
    kernel_sizes = sorted(bs for bs, d in by_bs.items() if any(c.section == "kernels" for c in d.changes))
    heading = f"{where}{_sizes(by_bs)} differ from their goldens"
    if kernel_sizes:
        smaller = [bs for bs in all_sizes if bs < kernel_sizes[0]]
        heading += f"; the kernel set first changes at bs={kernel_sizes[0]}"
        if smaller:
            heading += f" ({_sizes(smaller)} keep theirs)"
    lines = [heading + ":"]
    for section in SECTIONS:
        items = {bs: [c.render() for c in d.changes if c.section == section] for bs, d in by_bs.items()}
        items = {bs: found for bs, found in items.items() if found}
        if not items:
            continue
        lines.append(f"  {section}:")
        grouped = _grouped(items, by_subject=section != "launches")
        lines.extend(f"    {_render(sizes, template)}" for sizes, template in grouped)
    notes = {bs: d.notes for bs, d in by_bs.items() if d.notes}
    lines.extend(f"  note: {_render(sizes, template)}" for sizes, template in _grouped(notes))
    return lines


def failure_body(failed: Sequence[Any], checked: Sequence[Any]) -> list[str]:
    """The failed keys' lines with each runner/variant/rank's diffs grouped across batch sizes.

    ``failed`` and ``checked`` are key outcomes (``.key``, ``.lines``, ``.diff``): the
    failed ones and every checked one.  A key's lines past its diff (a launch budget)
    follow the group; keys without a diff (missing, unreadable) keep their own lines.
    """
    groups: dict[tuple, list] = {}
    for k in failed:
        if k.diff is not None and k.diff.changes:
            groups.setdefault((k.key.runner, k.key.variant, k.key.rank), []).append(k)
    body: list[str] = []
    for k in failed:
        where = (k.key.runner, k.key.variant, k.key.rank)
        group = groups.get(where, [])
        if len(group) < 2 or k not in group:
            body.extend(k.lines)
            continue
        if k is group[0]:
            sizes = [o.key.batch_size for o in checked if (o.key.runner, o.key.variant, o.key.rank) == where]
            body.extend(group_lines([(o.key, o.diff) for o in group], sizes))
        body.extend(k.lines[len(k.diff.render()) :])
    return body
