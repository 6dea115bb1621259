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

from collections import Counter
from typing import Any, Iterable, Optional, Sequence

from ..keys import CaptureKey, key_label
from .change import HOLE as _HOLE
from .change import (
    LIST_BUDGET,
    MAX_LINE_WIDTH,
    SECTIONS,
    KeyDiff,
    abstract_bs,
    fill_slots,
    fit_line,
    folded_line,
)
from .op_classes import VIEW, OpClasses
from .report import LIST_LIMIT

#: A line as ``(text, lists)``: the text with :func:`~.change.slot` markers where its lists go.
Entry = tuple[str, tuple[tuple[str, ...], ...]]


def _abstract(entry: Entry, bs: int) -> Entry:
    text, lists = entry
    return abstract_bs(text, bs), tuple(tuple(abstract_bs(x, bs) for x in items) for items in lists)


def _fill(template: Entry, bs: int) -> Entry:
    text, lists = template
    put = lambda t: t.replace(_HOLE, str(bs))  # noqa: E731
    return put(text), tuple(tuple(put(x) for x in items) for items in lists)


def _content(entry: Entry) -> Entry:
    """What a line says, whatever order its lists are in: two sizes' lines merge by this."""
    text, lists = entry
    return text, tuple(tuple(sorted(items)) for items in lists)


def _holes(template: Entry) -> int:
    text, lists = template
    return text.count(_HOLE) + sum(x.count(_HOLE) for items in lists for x in items)


def _sizes(sizes: Iterable[int]) -> str:
    """``bs=1,2,4,8``; past :data:`~.report.LIST_LIMIT` sizes ``bs=1…256 (256 sizes)``, so a line stays short."""
    ordered = sorted(sizes)
    if len(ordered) > LIST_LIMIT:
        return f"bs={ordered[0]}…{ordered[-1]} ({len(ordered)} sizes)"
    return "bs=" + ",".join(str(bs) for bs in ordered)


def _subject(template: str) -> str:
    """The op or kernel a change line is about: its second word (``~ aten::mm …``)."""
    return template.split(" ", 2)[1] if template.count(" ") >= 2 else ""


def _grouped(
    items: dict[int, list[Entry]], by_subject: bool = True, classes: Optional[OpClasses] = None
) -> list[tuple[list[int], Entry]]:
    """``[(sizes, template)]`` covering every ``(size, line)`` of ``items`` once."""
    left = {bs: Counter(_content(e) for e in entries) for bs, entries in items.items()}
    own = {bs: {_content(e): e for e in entries} for bs, entries in items.items()}
    out: list[tuple[list[int], Entry]] = []
    while any(+lines for lines in left.values()):
        best: Optional[tuple] = None
        for bs, lines in left.items():
            for content in +lines:
                template = _abstract(own[bs][content], bs)
                covered = [other for other, theirs in left.items() if theirs[_content(_fill(template, other))] > 0]
                # Most sizes first; then the template with the fewest holes (the least guessed).
                score = (len(covered), -_holes(template))
                if best is None or score > best[0]:
                    best = (score, template, covered)
        assert best is not None
        _, template, covered = best
        for bs in covered:
            left[bs][_content(_fill(template, bs))] -= 1
        if len(covered) == 1 and _holes(template):
            template = _fill(template, covered[0])  # one size: print it as it is
        out.append((covered, template))

    # By op class (``classes``: compute ops first), then by op or kernel name (unless
    # ``by_subject`` is False), then in the order the per-size diffs list them
    # (removed before added; total launches first).
    def position(item: tuple[list[int], Entry]) -> tuple:
        sizes, template = item
        subject = _subject(template[0]) if by_subject else ""
        rank = classes.rank(subject) if classes is not None else (0, 0)
        where = min([_content(e) for e in items[bs]].index(_content(_fill(template, bs))) for bs in sizes)
        return (rank, subject, where, sizes)

    return sorted(out, key=position)


def _render(sizes: list[int], template: Entry) -> str:
    text, lists = template
    shown = [[x.replace(_HOLE, "bs") for x in items] for items in lists]
    line = fill_slots(text.replace(_HOLE, "bs"), shown, LIST_BUDGET)
    return f"{_sizes(sizes)}: {fit_line(line, MAX_LINE_WIDTH)}"


def group_lines(
    diffs: Sequence[tuple[CaptureKey, KeyDiff]], all_sizes: Sequence[int], full_diff: Optional[str] = None
) -> list[str]:
    """Failure lines of the diffs of one runner/variant/rank across batch sizes, each change once.

    ``all_sizes`` are every batch size checked for that runner/variant/rank, so the
    heading can say where the kernel set first changes.  Op lines come compute ops
    first; view/metadata op lines fold into one line pointing at ``full_diff`` unless
    nothing else changed.
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
    classes = diffs[0][1].classes
    fold = any(not d.is_view(c) for d in by_bs.values() for c in d.changes)
    for section in SECTIONS:
        items = {bs: [(c.head(), c.lists) for c in d.ordered(section)] for bs, d in by_bs.items()}
        items = {bs: found for bs, found in items.items() if found}
        if not items:
            continue
        lines.append(f"  {section}:")
        grouped = _grouped(items, by_subject=section != "launches", classes=classes if section == "ops" else None)
        folded = [t for _, t in grouped if fold and section == "ops" and classes.rank(_subject(t[0]))[0] == VIEW]
        lines.extend(f"    {_render(sizes, t)}" for sizes, t in grouped if t not in folded)
        if folded:
            lines.append(f"    {folded_line([_subject(t[0]) for t in folded], full_diff)}")
    notes = {bs: [(n, ()) for n in d.notes] for bs, d in by_bs.items() if d.notes}
    lines.extend(f"  note: {_render(sizes, template)}" for sizes, template in _grouped(notes))
    return lines


def failure_body(failed: Sequence[Any], checked: Sequence[Any], full_diff: Optional[str] = None) -> list[str]:
    """The failed keys' lines with each runner/variant/rank's diffs grouped across batch sizes.

    ``failed`` and ``checked`` are key outcomes (``.key``, ``.lines``, ``.diff``): the
    failed ones and every checked one.  A key's lines past its diff (a launch budget)
    follow the group; keys without a diff (missing, unreadable) keep their own lines.
    ``full_diff`` is where the per-batch-size diff is written (named by folded lines).
    """
    groups: dict[tuple, list] = {}
    for k in failed:
        if k.diff is not None and k.diff.changes:
            groups.setdefault((k.key.runner, k.key.variant, k.key.rank), []).append(k)
    body: list[str] = []
    for k in failed:
        where = (k.key.runner, k.key.variant, k.key.rank)
        group = groups.get(where, [])
        if k not in group:
            body.extend(k.lines)
            continue
        if len(group) < 2:
            body.extend(k.diff.render(brief=True, full_diff=full_diff) + k.lines[len(k.diff.render()) :])
            continue
        if k is group[0]:
            sizes = [o.key.batch_size for o in checked if (o.key.runner, o.key.variant, o.key.rank) == where]
            body.extend(group_lines([(o.key, o.diff) for o in group], sizes, full_diff))
        body.extend(k.lines[len(k.diff.render()) :])
    return body
