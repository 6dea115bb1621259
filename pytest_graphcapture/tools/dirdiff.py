"""``graphcapture diff DIR_A DIR_B``: two capture or summary directories compared key by key.

Both trees are read recursively, as ``show`` reads one (:func:`~.matrix.collect`: summary
JSON files, and every key of every trace; merged multi-rank traces and dot-files are
skipped); a key is matched by its folder below the directory and its capture key.  The output is first a kernel × batch-size matrix of
what changed per runner/variant/rank (kernels and ops), then every differing key's
change lines, as a failing golden check prints them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Sequence

from ..errors import UsageError
from ..golden.diff import compare_dicts
from ..keys import CaptureKey, key_label
from ..summary.model import Summary
from .matrix import coarsest, collect_tree, render_matrix_text

LEGEND = "+n only in B, -n only in A, a→b count changed, ~ same count but op shapes changed, . unchanged"

Ident = tuple[str, CaptureKey]


def describe_differences(expected: Summary, actual: Summary) -> list[str]:
    """Lines saying how ``actual`` differs from ``expected``: identity fields, then the golden diff's changes."""
    lines = [
        f"~ {name}: {getattr(expected, name)} → {getattr(actual, name)}"
        for name in ("schema_version", "platform", "level")
        if getattr(expected, name) != getattr(actual, name)
    ]
    if expected.key != actual.key:
        lines.append(f"~ key: {expected.key} → {actual.key}")
    if (expected.complete, expected.incomplete_reason) != (actual.complete, actual.incomplete_reason):
        lines.append(
            f"~ complete: {expected.complete} ({expected.incomplete_reason}) → "
            f"{actual.complete} ({actual.incomplete_reason})"
        )
    diff = compare_dicts(expected.to_dict(), actual.to_dict(), actual.key)
    lines += [line.strip() for line in diff.render(width=None)[1:]]
    return lines


def keyed(pairs: list[tuple[str, Summary]], where: object) -> dict[Ident, Summary]:
    """``{(folder, key): summary}`` of :func:`~.matrix.collect`'s pairs; a key found twice in a folder is refused."""
    found: dict[Ident, Summary] = {}
    for folder, summary in pairs:
        ident = (folder, summary.key)
        if ident in found:
            place = where if folder in ("", ".") else f"{where}/{folder}"
            raise UsageError(f"{place} holds the key {summary.key} twice (two files, or twice in one trace); keep one")
        found[ident] = summary
    return found


def _counts(summary: Summary) -> dict[tuple[str, str], int]:
    counts: dict[tuple[str, str], int] = {}
    for entry in summary.kernels:
        row = (entry.get("kind", "kernel"), entry["name"])
        counts[row] = counts.get(row, 0) + int(entry["count"])
    for entry in summary.ops:
        row = ("op", entry["name"])
        counts[row] = counts.get(row, 0) + int(entry["count"])
    return counts


def _shapes(summary: Summary, name: str) -> list:
    return sorted((repr(e["input_dims"]), repr(e["input_types"]), e["count"]) for e in summary.ops if e["name"] == name)


def changed_cells(a: Summary, b: Summary) -> dict[tuple[str, str], str]:
    """``{(kind, name): cell}`` of the kernels and ops that differ between two summaries of one key."""
    old, new = _counts(a), _counts(b)
    cells = {}
    for row in sorted(set(old) | set(new)):
        x, y = old.get(row, 0), new.get(row, 0)
        if x == y:
            if row[0] == "op" and _shapes(a, row[1]) != _shapes(b, row[1]):
                cells[row] = "~"
        elif not x:
            cells[row] = f"+{y}"
        elif not y:
            cells[row] = f"-{x}"
        else:
            cells[row] = f"{x}→{y}"
    return cells


@dataclass
class DirDiff:
    """The comparison of two directories: equal when :attr:`lines` hold no change."""

    level: str
    compared: int = 0
    differing: list[Ident] = field(default_factory=list)
    only_a: list[Ident] = field(default_factory=list)
    only_b: list[Ident] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)

    @property
    def equal(self) -> bool:
        return not (self.differing or self.only_a or self.only_b)


def _group_title(folder: str, key: CaptureKey) -> str:
    where = f"{folder}: " if folder != "." else ""
    variant = f" [{key.variant}]" if key.variant is not None else ""
    return f"{where}{key.runner}{variant} rank {key.rank}"


def diff_dirs(
    dir_a: Path,
    dir_b: Path,
    *,
    level: Optional[str] = None,
    batch_size: Optional[int] = None,
    batch_sizes: Optional[Sequence[int]] = None,
) -> DirDiff:
    """Compare every key of ``dir_a`` with the same key of ``dir_b`` (see the module docstring)."""
    a, b = (keyed(collect_tree(d, batch_size=batch_size, batch_sizes=batch_sizes), d) for d in (dir_a, dir_b))
    return diff_keys(a, b, dir_a, dir_b, level=level)


def diff_keys(
    a: dict[Ident, Summary], b: dict[Ident, Summary], name_a: object, name_b: object, *, level: Optional[str] = None
) -> DirDiff:
    """Compare the summaries of ``a`` and ``b`` key by key: two trees, or two traces of several keys."""
    target = coarsest([s.level for s in list(a.values()) + list(b.values())] + ([level] if level else []))
    result = DirDiff(target)
    groups: dict[tuple, dict[int, dict]] = {}
    per_key: list[str] = []
    for ident in sorted(
        set(a) | set(b), key=lambda i: (i[0], i[1].runner, i[1].variant or "", i[1].rank, i[1].batch_size)
    ):
        folder, key = ident
        group = groups.setdefault((folder, key.runner, key.variant or "", key.rank), {})
        if ident not in b:
            result.only_a.append(ident)
            continue
        if ident not in a:
            result.only_b.append(ident)
            continue
        result.compared += 1
        old, new = a[ident].normalized(target), b[ident].normalized(target)
        if old == new:
            continue
        result.differing.append(ident)
        group[key.batch_size] = changed_cells(old, new)
        per_key.append(f"{_group_title(folder, key)} {key_label(key)}:")
        per_key += [f"  {line}" for line in describe_differences(old, new)]
    lines = [f"A: {name_a}", f"B: {name_b}", f"level {target}; {LEGEND}"]
    for (folder, runner, variant, rank), changed in groups.items():
        key = CaptureKey(runner, 1, variant or None, rank)
        only = [
            f"only in {side}: "
            + ", ".join(key_label(i[1]) for i in idents if i[0] == folder and _same_group(i[1], key))
            for side, idents in (("A", result.only_a), ("B", result.only_b))
            if any(i[0] == folder and _same_group(i[1], key) for i in idents)
        ]
        if not changed and not only:
            continue
        lines.append("")
        if changed:
            batch_sizes = sorted(changed)
            rows = sorted({row for cells in changed.values() for row in cells})
            table = [
                {"name": name, "kind": kind, "counts": {bs: changed[bs].get((kind, name), ".") for bs in batch_sizes}}
                for kind, name in rows
            ]
            lines += render_matrix_text(_group_title(folder, key), batch_sizes, table)
        else:
            lines.append(_group_title(folder, key))
        lines += [f"  {text}" for text in only]
    if per_key:
        lines += ["", "per key:"] + per_key
    lines += [
        "",
        f"{result.compared} keys in both, {len(result.differing)} differ, "
        f"{len(result.only_a)} only in A, {len(result.only_b)} only in B (level {target})",
    ]
    result.lines = lines
    return result


def _same_group(key: CaptureKey, other: CaptureKey) -> bool:
    return (key.runner, key.variant, key.rank) == (other.runner, other.variant, other.rank)


__all__ = ["DirDiff", "changed_cells", "describe_differences", "diff_dirs", "diff_keys", "keyed"]
