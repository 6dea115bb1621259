"""``graphcapture show --html`` and the gate's picture: a self-contained HTML page of the kernel × batch-size matrix.

Against goldens it marks kernels added (green), removed (red) or changed (amber); no scripts or network, so it opens from a CI artifact.
"""

from __future__ import annotations

import html
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Optional, Sequence

from ..keys import batch_size_text
from .matrix import (
    PathLike,
    at_level,
    coarsest,
    collect,
    collect_tree,
    kernel_matrix,
    op_matrix,
    row_order,
    table_key,
    table_title,
)

#: Cell / row states against the goldens.
_SAME, _ADDED, _REMOVED, _CHANGED, _NO_GOLDEN = "same", "added", "removed", "changed", "no-golden"


@dataclass
class _Row:
    """One kernel (or op) row: obtained and golden counts per batch size, and its state."""

    name: str
    kind: str
    counts: dict[int, int] = field(default_factory=dict)
    golden: dict[int, int] = field(default_factory=dict)
    state: str = _SAME
    #: Ops only: the input shapes and dtypes per batch size (obtained and golden), so a
    #: shape-only change shows even when the count stayed.
    shapes: dict[int, tuple] = field(default_factory=dict)
    golden_shapes: dict[int, tuple] = field(default_factory=dict)

    def shapes_changed(self, bs: int) -> bool:
        return bs in self.shapes and bs in self.golden_shapes and self.shapes[bs] != self.golden_shapes[bs]

    def cell_state(self, bs: int, has_golden: bool) -> str:
        """State of one cell: compared only at batch sizes that have a golden."""
        if not has_golden:
            return _NO_GOLDEN
        now, before = self.counts.get(bs, 0), self.golden.get(bs, 0)
        if now == before:
            return _CHANGED if self.shapes_changed(bs) else _SAME
        if before == 0:
            return _ADDED
        if now == 0:
            return _REMOVED
        return _CHANGED


@dataclass
class _Table:
    """One matrix: a folder (a test's goldens), runner, variant, rank and platform."""

    folder: str
    runner: str
    variant: Optional[str]
    rank: int
    platform: str
    level: str
    batch_sizes: list[int]
    golden_batch_sizes: set[int]
    kernels: list[_Row]
    ops: list[_Row]
    incomplete: dict[int, str] = field(default_factory=dict)
    unmatched: Optional[str] = None  # why no golden matched (compared only)

    @property
    def title(self) -> str:
        return table_title((self.folder, self.runner, self.variant, self.rank, self.platform), self.level)

    def counts(self, rows: Optional[Sequence[_Row]] = None) -> dict[str, int]:
        """How many kernel rows (or ``rows``) are added / removed / changed against the goldens."""
        out = {_ADDED: 0, _REMOVED: 0, _CHANGED: 0}
        for row in self.kernels if rows is None else rows:
            if row.state in out:
                out[row.state] += 1
        return out


def _op_shapes(summaries: Sequence) -> dict[str, dict[int, tuple]]:
    """``{op name: {bs: ((shape text, count), ...)}}``: the shapes that tell a shape-only change."""
    shapes: dict[str, dict[int, list]] = {}
    for summary in summaries:
        for entry in summary.ops:
            signature = (_shape_text(entry), int(entry["count"]))
            shapes.setdefault(entry["name"], {}).setdefault(summary.key.batch_size, []).append(signature)
    return {name: {bs: tuple(sorted(s)) for bs, s in per_bs.items()} for name, per_bs in shapes.items()}


def _shape_text(entry: dict) -> str:
    dims = ",".join("[" + ",".join(map(str, d)) + "]" if isinstance(d, list) else str(d) for d in entry["input_dims"])
    types = ",".join(map(str, entry.get("input_types") or ()))
    return f"[{dims}]" + (f" {types}" if types else "")


def _shapes_title(shapes: tuple) -> str:
    return "; ".join(f"{text} ×{count}" for text, count in shapes)


def _shape_change(row: _Row, bs: int) -> tuple[list[str], list[str]]:
    """``(golden shapes, obtained shapes)`` of an op at ``bs`` that differ; dtypes shown only where dims do not tell them apart."""
    old = dict(row.golden_shapes.get(bs, ()))
    new = dict(row.shapes.get(bs, ()))
    was = [(text, n) for text, n in sorted(old.items()) if new.get(text) != n]
    now = [(text, n) for text, n in sorted(new.items()) if old.get(text) != n]
    dims = lambda items: [(text.split(" ", 1)[0], n) for text, n in items]  # noqa: E731
    if dims(was) != dims(now):
        was, now = dims(was), dims(now)
    return [f"{t} ×{n}" for t, n in was], [f"{t} ×{n}" for t, n in now]


def _row_state(row: _Row, golden_sizes: set[int]) -> str:
    states = {row.cell_state(bs, bs in golden_sizes) for bs in set(row.counts) | set(row.golden)}
    states.discard(_SAME)
    states.discard(_NO_GOLDEN)
    if not states:
        return _SAME
    if not any(row.golden.get(bs, 0) for bs in golden_sizes):
        return _ADDED  # a kernel no golden batch size had
    if not any(row.counts.get(bs, 0) for bs in golden_sizes):
        return _REMOVED  # gone from every batch size that has a golden
    return _CHANGED


def _merge_rows(
    obtained: dict[tuple, dict[int, int]],
    golden: dict[tuple, dict[int, int]],
    golden_sizes: set[int],
    shapes: Optional[dict[str, dict[int, tuple]]] = None,
    golden_shapes: Optional[dict[str, dict[int, tuple]]] = None,
) -> list[_Row]:
    rows = []
    for name, kind in sorted(set(obtained) | set(golden)):
        row = _Row(name, kind, dict(obtained.get((name, kind), {})), dict(golden.get((name, kind), {})))
        row.shapes = dict((shapes or {}).get(name, {}))
        row.golden_shapes = dict((golden_shapes or {}).get(name, {}))
        row.state = _row_state(row, golden_sizes)
        rows.append(row)
    return sorted(rows, key=lambda r: row_order(r.name, r.kind, r.state != _SAME))


def build_tables(
    obtained: Iterable[tuple[str, object]],
    goldens: Iterable[tuple[str, object]] = (),
    *,
    level: Optional[str] = None,
    compared: Optional[bool] = None,
) -> list[_Table]:
    """Tables of ``(folder, Summary)`` pairs, one per folder/runner/variant/rank/platform, each against its goldens.

    ``compared`` (default: any golden given): a table no golden matched says why. Levels meet at ``level`` or the coarsest.
    """
    obtained, goldens = list(obtained), list(goldens)
    compared = bool(goldens) if compared is None else compared
    target = level or coarsest(s.level for _, s in obtained + goldens)  # type: ignore[attr-defined]
    obtained, goldens = at_level(obtained, target), at_level(goldens, target)

    groups: dict[tuple, tuple[list, list]] = {}
    for folder, s in obtained:
        groups.setdefault(table_key(folder, s), ([], []))[0].append(s)
    golden_groups = sorted({table_key(folder, s) for folder, s in goldens})
    for folder, s in goldens:
        key = table_key(folder, s)
        if key in groups:  # goldens without an obtained summary in that folder are not pictured
            groups[key][1].append(s)
    tables = []
    for (folder, runner, variant, rank, platform), (now, before) in sorted(groups.items()):
        sizes, kernel_rows = kernel_matrix(now)
        golden_sizes, golden_rows = kernel_matrix(before) if before else ([], [])
        kernels = _merge_rows(_by_row(kernel_rows), _by_row(golden_rows), set(golden_sizes))
        now_ops, old_ops = _by_row(op_matrix(now)[1]), _by_row(op_matrix(before)[1])
        ops = _merge_rows(now_ops, old_ops, set(golden_sizes), _op_shapes(now), _op_shapes(before))
        incomplete = {s.key.batch_size: s.incomplete_reason or "no reason given" for s in now if not s.complete}
        group, sizes = (folder, runner, variant, rank, platform), sorted(set(sizes) | set(golden_sizes))
        unmatched = None if before or not compared else _why_no_golden(group, golden_groups)
        tables.append(
            _Table(
                folder,
                runner,
                variant or None,
                rank,
                platform,
                target,
                sizes,
                set(golden_sizes),
                kernels,
                ops,
                incomplete,
                unmatched,
            )
        )
    return tables


def _by_row(rows: list[dict]) -> dict[tuple, dict[int, int]]:
    return {(r["name"], r["kind"]): r["counts"] for r in rows}


def _why_no_golden(group: tuple, golden_groups: Sequence[tuple]) -> str:
    """Why no golden matched ``group`` ``(folder, runner, variant, rank, platform)``, saying what exists instead."""
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


#: Shapes a cell lists inline on each side of ``→`` (its tooltip lists them all).
_CELL_SHAPES = 3

_CSS = """
body{font:14px/1.4 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:16px;color:#1f2328;background:#fff}
h1{font-size:20px;margin:0 0 4px} h2{font-size:16px;margin:24px 0 6px} .meta{color:#59636e;margin:0 0 10px}
.legend span{display:inline-block;padding:1px 8px;margin-right:6px;border-radius:3px;border:1px solid #d1d9e0}
table{border-collapse:collapse;margin:4px 0 8px} th,td{border:1px solid #d1d9e0;padding:2px 8px}
th{background:#f6f8fa;font-weight:600;position:sticky;top:0}
td.n{text-align:right;font-variant-numeric:tabular-nums;min-width:3.5em}
td.name{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;font-size:12px;max-width:70ch;
 overflow:hidden;text-overflow:ellipsis;white-space:nowrap} td.kind{color:#59636e;font-size:12px}
.added{background:#dafbe1} .removed{background:#ffebe9} .changed{background:#fff8c5}
tr.added td.name{border-left:4px solid #1a7f37} tr.removed td.name{border-left:4px solid #cf222e}
tr.changed td.name{border-left:4px solid #9a6700}
td.removed s{color:#cf222e} .zero{color:#8c959f} th.nogolden{background:#eaeef2;color:#59636e}
.counts b{margin-right:10px} .note{color:#59636e;font-size:13px} details{margin:2px 0 12px}
.shapes{font:11px/1.3 ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;text-align:left;white-space:normal;
 overflow-wrap:anywhere;min-width:14ch;max-width:30ch;color:#1f2328} .shapes .was{color:#cf222e} .shapes .now{color:#1a7f37}
.toggle{margin:6px 0 10px} .onlysame{display:none} #only-changed:checked ~ .tables tr.same{display:none}
#only-changed:checked ~ .tables .onlysame{display:block}
"""


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def _listed(items: list[str]) -> str:
    shown = ", ".join(_e(i) for i in items[:_CELL_SHAPES]) or "(none)"
    return shown + (f", … +{len(items) - _CELL_SHAPES} more" if len(items) > _CELL_SHAPES else "")


def _shapes_html(row: _Row, bs: int) -> str:
    """The shapes that changed in this cell, inline: ``golden → obtained`` (only what differs)."""
    was, now = _shape_change(row, bs)
    return (
        f'<div class="shapes"><span class="was">{_listed(was)}</span> → <span class="now">{_listed(now)}</span></div>'
    )


def _cell(row: _Row, bs: int, has_golden: bool) -> str:
    state = row.cell_state(bs, has_golden)
    now, before = row.counts.get(bs), row.golden.get(bs)
    if state == _REMOVED:
        return f'<td class="n removed" title="removed: golden {before}, now 0"><s>{before}</s></td>'
    if state == _ADDED:
        return f'<td class="n added" title="added: golden 0, now {now}">+{now}</td>'
    if state == _CHANGED and row.shapes_changed(bs):
        title = f"shapes changed: golden {_shapes_title(row.golden_shapes[bs])}; now {_shapes_title(row.shapes[bs])}"
        count = f"{now}, other shapes" if now == before else f"{before}→{now}"
        return f'<td class="n changed" title="{_e(title)}">{count}{_shapes_html(row, bs)}</td>'
    if state == _CHANGED:
        return f'<td class="n changed" title="changed: golden {before}, now {now}">{before}→{now}</td>'
    if now is None:
        return '<td class="n zero">·</td>'
    return f'<td class="n">{now}</td>'


def _rows_html(rows: Sequence[_Row], table: _Table) -> list[str]:
    out = []
    for row in rows:
        cls = f' class="{row.state}"'
        marker = {_ADDED: "+ ", _REMOVED: "− ", _CHANGED: "~ "}.get(row.state, "")
        cells = "".join(_cell(row, bs, bs in table.golden_batch_sizes) for bs in table.batch_sizes)
        out.append(
            f'<tr{cls}><td class="name" title="{_e(row.name)}">{_e(marker + row.name)}</td>'
            f'<td class="kind">{_e(row.kind)}</td>{cells}</tr>'
        )
    return out


def _table_html(table: _Table, compared: bool) -> list[str]:
    heads = []
    for bs in table.batch_sizes:
        if compared and bs not in table.golden_batch_sizes:
            heads.append(f'<th class="nogolden" title="no golden for this batch size">bs={batch_size_text(bs)}*</th>')
        else:
            heads.append(f"<th>bs={batch_size_text(bs)}</th>")
    head = f"<tr><th>kernel</th><th>kind</th>{''.join(heads)}</tr>"
    out = [f"<h2>{_e(table.title)}</h2>"]
    if compared and all(r.state == _SAME for r in [*table.kernels, *table.ops]):
        out.append('<p class="note onlysame">Nothing changed here (unchanged rows are hidden).</p>')
    if table.unmatched:
        out.append(f'<p class="note">No golden matched: {_e(table.unmatched)}.</p>')
    elif compared:
        # Kernels (when recorded) and ops each get their line: a shape-only change lives in the ops.
        for rows, what in ((table.kernels, "kernels"), (table.ops, "ops")):
            if not rows and what == "kernels":
                continue
            c = table.counts(rows)
            out.append(
                f'<p class="counts"><b>{len(rows)} {what}</b><span class="added">{c[_ADDED]} added'
                f'</span> <span class="removed">{c[_REMOVED]} removed</span> '
                f'<span class="changed">{c[_CHANGED]} changed</span></p>'
            )
    for bs, reason in sorted(table.incomplete.items()):
        out.append(f'<p class="note">bs={batch_size_text(bs)}: incomplete kernel evidence — {_e(reason)}</p>')
    if table.kernels:
        out += ["<table>", head, *_rows_html(table.kernels, table), "</table>"]
    else:
        out.append(
            '<p class="note">No kernels recorded: a CPU capture runs the eager stand-in, which '
            "launches no GPU kernels; the ops below are what its goldens compare.</p>"
        )
    if table.ops:
        open_attr = "" if table.kernels else " open"
        op_head = head.replace("<th>kernel</th>", "<th>op (all shapes)</th>")
        out += [
            f"<details{open_attr}><summary>ops × batch size ({len(table.ops)} ops)</summary>",
            "<table>",
            op_head,
            *_rows_html(table.ops, table),
            "</table></details>",
        ]
    if compared and set(table.batch_sizes) - table.golden_batch_sizes:
        out.append('<p class="note">* no golden for this batch size: its cells are not compared.</p>')
    return out


def render_html(
    tables: Sequence[_Table],
    *,
    title: str = "Graph capture: kernels × batch size",
    source: str = "",
    compared: bool = False,
) -> str:
    """The HTML page of ``tables``; compared, a checkbox (on when something changed) hides the unchanged rows."""
    if not any(t.kernels for t in tables):
        title = title.replace("kernels × batch size", "ops × batch size")
    body = [f"<h1>{_e(title)}</h1>"]
    if source:
        body.append(f'<p class="meta">{_e(source)}</p>')
    if compared:
        body.append(
            '<p class="legend"><span class="added">+n added</span><span class="removed"><s>n</s> removed'
            '</span><span class="changed">a→b count changed; "n, other shapes": same count, the shapes that '
            "changed shown golden → now</span>against the goldens</p>"
        )
        changed = any(r.state != _SAME for t in tables for r in [*t.kernels, *t.ops])
        checked = " checked" if changed else ""
        body.append(
            f'<input type="checkbox" id="only-changed" class="toggle"{checked}>'
            '<label for="only-changed"> hide unchanged rows</label>'
        )
    if not tables:
        body.append('<p class="note">Nothing to show.</p>')
    body.append('<div class="tables">')
    for table in tables:
        body += _table_html(table, compared)
    body.append("</div>")
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{_e(title)}</title><style>{_CSS}</style></head>\n<body>\n" + "\n".join(body) + "\n</body></html>\n"
    )


def picture_from_dirs(
    directory: PathLike,
    *,
    against: Optional[PathLike] = None,
    level: Optional[str] = None,
    title: Optional[str] = None,
    batch_sizes: Optional[Sequence[int]] = None,
) -> str:
    """HTML of every summary and trace under ``directory``, against the goldens of the same folder and key under ``against``."""
    obtained = collect_tree(directory, batch_sizes=batch_sizes)
    goldens = collect(against) if against is not None else []
    tables = build_tables(obtained, goldens, level=level, compared=against is not None)
    source = f"{directory}" + (f" against goldens in {against}" if against is not None else "")
    return render_html(
        tables, title=title or "Graph capture: kernels × batch size", source=source, compared=against is not None
    )


def session_picture(
    out_dir: PathLike,
    golden_dir: PathLike,
    folders: Iterable[str],
    *,
    level: Optional[str] = None,
    source: Optional[str] = None,
) -> str:
    """The gate's picture: summaries in ``out_dir/<folder>`` against goldens in ``golden_dir/<folder>`` (``<platform>/<test path>``)."""
    obtained: list[tuple[str, object]] = []
    goldens: list[tuple[str, object]] = []
    for folder in sorted(set(folders)):
        for root, into in ((Path(out_dir), obtained), (Path(golden_dir), goldens)):
            if (root / folder).is_dir():
                into += [(folder, s) for _, s in collect(root / folder, recursive=False)]
    tables = build_tables(obtained, goldens, level=level, compared=True)
    return render_html(
        tables,
        title="Graph capture goldens: kernels × batch size",
        source=source or f"obtained summaries in {out_dir} against goldens in {golden_dir}",
        compared=True,
    )
