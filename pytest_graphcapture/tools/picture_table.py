"""The picture's data: tables of kernel (and op) rows per batch size, compared with the goldens.

:func:`build_tables` groups summaries (and their goldens) into tables, one per
folder / runner / variant / rank / platform, reusing :func:`.matrix.kernel_matrix`;
each :class:`Row` knows its counts and, for ops, its shapes per batch size, so a
cell can say what changed (:mod:`.picture_html` draws them).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Optional, Sequence

from ..golden.change import DEFAULT_CLASSES
from .matrix import at_level, coarsest, kernel_matrix

#: Cell / row states against the goldens.
SAME, ADDED, REMOVED, CHANGED, NO_GOLDEN = "same", "added", "removed", "changed", "no-golden"


@dataclass
class Row:
    """One kernel (or op) row: obtained and golden counts per batch size, and its state."""

    name: str
    kind: str
    counts: dict[int, int] = field(default_factory=dict)
    golden: dict[int, int] = field(default_factory=dict)
    state: str = SAME
    #: Ops only: the input shapes and dtypes per batch size (obtained and golden), so a
    #: shape-only change shows even when the count stayed.
    shapes: dict[int, tuple] = field(default_factory=dict)
    golden_shapes: dict[int, tuple] = field(default_factory=dict)

    def shapes_changed(self, bs: int) -> bool:
        return bs in self.shapes and bs in self.golden_shapes and self.shapes[bs] != self.golden_shapes[bs]

    def cell_state(self, bs: int, has_golden: bool) -> str:
        """State of one cell: compared only at batch sizes that have a golden."""
        if not has_golden:
            return NO_GOLDEN
        now, before = self.counts.get(bs, 0), self.golden.get(bs, 0)
        if now == before:
            return CHANGED if self.shapes_changed(bs) else SAME
        if before == 0:
            return ADDED
        if now == 0:
            return REMOVED
        return CHANGED


@dataclass
class Table:
    """One matrix: a folder (a test's goldens), runner, variant, rank and platform."""

    folder: str
    runner: str
    variant: Optional[str]
    rank: int
    platform: str
    level: str
    batch_sizes: list[int]
    golden_batch_sizes: set[int]
    kernels: list[Row]
    ops: list[Row]
    incomplete: dict[int, str] = field(default_factory=dict)
    #: Why no golden matched this table (set only when compared and none did).
    unmatched: Optional[str] = None

    @property
    def title(self) -> str:
        variant = f" [{self.variant}]" if self.variant else ""
        folder = f"{self.folder} — " if self.folder not in ("", ".") else ""
        return f"{folder}{self.runner}{variant} rank {self.rank}, {self.platform}, level {self.level}"

    def counts(self, rows: Optional[Sequence[Row]] = None) -> dict[str, int]:
        """How many kernel rows (or ``rows``) are added / removed / changed against the goldens."""
        out = {ADDED: 0, REMOVED: 0, CHANGED: 0}
        for row in self.kernels if rows is None else rows:
            if row.state in out:
                out[row.state] += 1
        return out


def _matrix(summaries: Sequence) -> tuple[list[int], list[dict]]:
    return kernel_matrix(summaries)


def _op_matrix(summaries: Sequence) -> tuple[dict[tuple, dict[int, int]], dict[str, dict[int, tuple]]]:
    """``({(op name, "op"): {batch size: count}}, {op name: {batch size: shapes}})``.

    Counts sum every shape of an op; ``shapes`` keeps each shape with its count, so
    a change of shape at an unchanged count is still told apart.
    """
    counts: dict[tuple, dict[int, int]] = {}
    shapes: dict[str, dict[int, list]] = {}
    for summary in summaries:
        bs = summary.key.batch_size
        for entry in summary.ops:
            row = counts.setdefault((entry["name"], "op"), {})
            row[bs] = row.get(bs, 0) + int(entry["count"])
            signature = (_shape_text(entry), int(entry["count"]))
            shapes.setdefault(entry["name"], {}).setdefault(bs, []).append(signature)
    return counts, {name: {bs: tuple(sorted(s)) for bs, s in per_bs.items()} for name, per_bs in shapes.items()}


def _shape_text(entry: dict) -> str:
    dims = ",".join("[" + ",".join(map(str, d)) + "]" if isinstance(d, list) else str(d) for d in entry["input_dims"])
    types = ",".join(map(str, entry.get("input_types") or ()))
    return f"[{dims}]" + (f" {types}" if types else "")


def _shapes_title(shapes: tuple) -> str:
    return "; ".join(f"{text} ×{count}" for text, count in shapes)


def shape_change(row: Row, bs: int) -> tuple[list[str], list[str]]:
    """``(golden shapes, obtained shapes)`` of an op at ``bs``: only those that differ, with their counts.

    Shapes read as their input dims; the dtypes are added only where the dims alone do not tell
    the two sides apart (a dtype-only change).
    """
    old = dict(row.golden_shapes.get(bs, ()))
    new = dict(row.shapes.get(bs, ()))
    was = [(text, n) for text, n in sorted(old.items()) if new.get(text) != n]
    now = [(text, n) for text, n in sorted(new.items()) if old.get(text) != n]
    dims = lambda items: [(text.split(" ", 1)[0], n) for text, n in items]  # noqa: E731
    if dims(was) != dims(now):
        was, now = dims(was), dims(now)
    return [f"{t} ×{n}" for t, n in was], [f"{t} ×{n}" for t, n in now]


def _row_state(row: Row, golden_sizes: set[int]) -> str:
    states = {row.cell_state(bs, bs in golden_sizes) for bs in set(row.counts) | set(row.golden)}
    states.discard(SAME)
    states.discard(NO_GOLDEN)
    if not states:
        return SAME
    if not any(row.golden.get(bs, 0) for bs in golden_sizes):
        return ADDED  # a kernel no golden batch size had
    if not any(row.counts.get(bs, 0) for bs in golden_sizes):
        return REMOVED  # gone from every batch size that has a golden
    return CHANGED


def _merge_rows(
    obtained: dict[tuple, dict[int, int]],
    golden: dict[tuple, dict[int, int]],
    golden_sizes: set[int],
    shapes: Optional[dict[str, dict[int, tuple]]] = None,
    golden_shapes: Optional[dict[str, dict[int, tuple]]] = None,
) -> list[Row]:
    rows = []
    for name, kind in sorted(set(obtained) | set(golden)):
        row = Row(name, kind, dict(obtained.get((name, kind), {})), dict(golden.get((name, kind), {})))
        row.shapes = dict((shapes or {}).get(name, {}))
        row.golden_shapes = dict((golden_shapes or {}).get(name, {}))
        row.state = _row_state(row, golden_sizes)
        rows.append(row)
    # Changed rows first (read at a glance), then the rest; ops by class as a failure lists
    # them (compute first, view/metadata last), then by name.
    rank = (lambda r: DEFAULT_CLASSES.rank(r.name)) if shapes is not None else (lambda r: (0, 0))
    return sorted(rows, key=lambda r: (r.state == SAME, rank(r), r.name, r.kind))


def build_tables(
    obtained: Iterable[tuple[str, object]],
    goldens: Iterable[tuple[str, object]] = (),
    *,
    level: Optional[str] = None,
    compared: Optional[bool] = None,
) -> list[Table]:
    """Tables of ``(folder, Summary)`` pairs, each compared with the golden of the same folder and key.

    ``compared`` (default: whether any golden is given) says that goldens were
    asked for: a table no golden matched then says why (:func:`why_no_golden`).
    All summaries are normalized to ``level`` (default: the coarsest level among
    them, so traces at ``exact`` and goldens at ``name`` meet at ``name``).
    """
    obtained, goldens = list(obtained), list(goldens)
    compared = bool(goldens) if compared is None else compared
    target = level or coarsest(s.level for _, s in obtained + goldens)  # type: ignore[attr-defined]
    obtained, goldens = at_level(obtained, target), at_level(goldens, target)

    def group_key(folder: str, s: object) -> tuple:
        k = s.key  # type: ignore[attr-defined]
        return (folder, k.runner, k.variant or "", k.rank, s.platform)  # type: ignore[attr-defined]

    groups: dict[tuple, tuple[list, list]] = {}
    for folder, s in obtained:
        groups.setdefault(group_key(folder, s), ([], []))[0].append(s)
    golden_groups = sorted({group_key(folder, s) for folder, s in goldens})
    for folder, s in goldens:
        key = group_key(folder, s)
        if key in groups:  # goldens without an obtained summary in that folder are not pictured
            groups[key][1].append(s)
    tables = []
    for (folder, runner, variant, rank, platform), (now, before) in sorted(groups.items()):
        sizes, kernel_rows = _matrix(now)
        golden_sizes, golden_rows = _matrix(before) if before else ([], [])
        kernels = _merge_rows(
            {(r["name"], r["kind"]): r["counts"] for r in kernel_rows},
            {(r["name"], r["kind"]): r["counts"] for r in golden_rows},
            set(golden_sizes),
        )
        (now_ops, now_shapes), (old_ops, old_shapes) = _op_matrix(now), _op_matrix(before)
        ops = _merge_rows(now_ops, old_ops, set(golden_sizes), now_shapes, old_shapes)
        incomplete = {s.key.batch_size: s.incomplete_reason or "no reason given" for s in now if not s.complete}
        tables.append(
            Table(
                folder,
                runner,
                variant or None,
                rank,
                platform,
                target,
                sorted(set(sizes) | set(golden_sizes)),
                set(golden_sizes),
                kernels,
                ops,
                incomplete,
                None
                if before or not compared
                else why_no_golden((folder, runner, variant, rank, platform), golden_groups),
            )
        )
    return tables


def why_no_golden(group: tuple, golden_groups: Sequence[tuple]) -> str:
    """Why no golden matched ``group`` ``(folder, runner, variant, rank, platform)``, saying what exists instead.

    Goldens match by folder relative to their root, runner, variant, rank and platform.
    """
    folder, rest = group[0], group[1:]
    elsewhere = sorted({g[0] or "." for g in golden_groups if g[1:] == rest})
    if elsewhere:
        shown = ", ".join(elsewhere[:3]) + (f" and {len(elsewhere) - 3} more" if len(elsewhere) > 3 else "")
        return (
            f"no golden in folder {folder or '.'!r} of the golden dir: goldens of this runner, variant, rank and "
            f"platform are in {shown}; goldens are matched by their folder relative to the golden dir, so point "
            f"--against at the folder that mirrors this one"
        )
    here = [g for g in golden_groups if g[0] == folder]
    if here:
        have = "; ".join(f"{g[1]}{f' [{g[2]}]' if g[2] else ''} rank {g[3]} on {g[4]}" for g in here[:3])
        return (
            f"the goldens in folder {folder or '.'!r} are for {have}, not {rest[0]}"
            f"{f' [{rest[1]}]' if rest[1] else ''} rank {rest[2]} on {rest[3]}: goldens are matched by runner, "
            f"variant, rank and platform"
        )
    return f"no golden files in folder {folder or '.'!r} of the golden dir"
