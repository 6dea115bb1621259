"""The picture's page: a self-contained HTML rendering of :mod:`.picture_table`'s tables.

No scripts, fonts or images from the network, so it opens from a CI artifact as is;
the toggle that hides unchanged rows is a checkbox and a CSS rule.
"""

from __future__ import annotations

import html
from typing import Sequence

from ..keys import batch_size_text
from .picture_table import ADDED, CHANGED, REMOVED, SAME, Row, Table, _shapes_title, shape_change

#: Shapes a cell lists inline on each side of ``→`` (its tooltip lists them all).
CELL_SHAPES = 3

_CSS = """
body{font:14px/1.4 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:16px;color:#1f2328;background:#fff}
h1{font-size:20px;margin:0 0 4px} h2{font-size:16px;margin:24px 0 6px}
.meta{color:#59636e;margin:0 0 10px}
.legend span{display:inline-block;padding:1px 8px;margin-right:6px;border-radius:3px;border:1px solid #d1d9e0}
table{border-collapse:collapse;margin:4px 0 8px}
th,td{border:1px solid #d1d9e0;padding:2px 8px}
th{background:#f6f8fa;font-weight:600;position:sticky;top:0}
td.n{text-align:right;font-variant-numeric:tabular-nums;min-width:3.5em}
td.name{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;font-size:12px;max-width:70ch;
 overflow:hidden;text-overflow:ellipsis;white-space:nowrap}
td.kind{color:#59636e;font-size:12px}
.added{background:#dafbe1} .removed{background:#ffebe9} .changed{background:#fff8c5}
tr.added td.name{border-left:4px solid #1a7f37} tr.removed td.name{border-left:4px solid #cf222e}
tr.changed td.name{border-left:4px solid #9a6700}
td.removed s{color:#cf222e} .zero{color:#8c959f} th.nogolden{background:#eaeef2;color:#59636e}
.counts b{margin-right:10px} .note{color:#59636e;font-size:13px}
details{margin:2px 0 12px}
.shapes{font:11px/1.3 ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;text-align:left;white-space:normal;
 min-width:14ch;max-width:30ch;color:#1f2328} .shapes .was{color:#cf222e} .shapes .now{color:#1a7f37}
.toggle{margin:6px 0 10px} .onlysame{display:none}
#only-changed:checked ~ .tables tr.same{display:none}
#only-changed:checked ~ .tables .onlysame{display:block}
"""


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def _listed(items: list[str]) -> str:
    shown = ", ".join(_e(i) for i in items[:CELL_SHAPES]) or "(none)"
    return shown + (f", … +{len(items) - CELL_SHAPES} more" if len(items) > CELL_SHAPES else "")


def _shapes_html(row: Row, bs: int) -> str:
    """The shapes that changed in this cell, inline: ``golden → obtained`` (only what differs)."""
    was, now = shape_change(row, bs)
    return (
        f'<div class="shapes"><span class="was">{_listed(was)}</span> → <span class="now">{_listed(now)}</span></div>'
    )


def _cell(row: Row, bs: int, has_golden: bool) -> str:
    state = row.cell_state(bs, has_golden)
    now, before = row.counts.get(bs), row.golden.get(bs)
    if state == REMOVED:
        return f'<td class="n removed" title="removed: golden {before}, now 0"><s>{before}</s></td>'
    if state == ADDED:
        return f'<td class="n added" title="added: golden 0, now {now}">+{now}</td>'
    if state == CHANGED and row.shapes_changed(bs):
        title = f"shapes changed: golden {_shapes_title(row.golden_shapes[bs])}; now {_shapes_title(row.shapes[bs])}"
        count = f"{now}, other shapes" if now == before else f"{before}→{now}"
        return f'<td class="n changed" title="{_e(title)}">{count}{_shapes_html(row, bs)}</td>'
    if state == CHANGED:
        return f'<td class="n changed" title="changed: golden {before}, now {now}">{before}→{now}</td>'
    if now is None:
        return '<td class="n zero">·</td>'
    return f'<td class="n">{now}</td>'


def _rows_html(rows: Sequence[Row], table: Table) -> list[str]:
    out = []
    for row in rows:
        cls = f' class="{row.state}"'
        marker = {ADDED: "+ ", REMOVED: "− ", CHANGED: "~ "}.get(row.state, "")
        cells = "".join(_cell(row, bs, bs in table.golden_batch_sizes) for bs in table.batch_sizes)
        out.append(
            f'<tr{cls}><td class="name" title="{_e(row.name)}">{_e(marker + row.name)}</td>'
            f'<td class="kind">{_e(row.kind)}</td>{cells}</tr>'
        )
    return out


def _table_html(table: Table, compared: bool) -> list[str]:
    heads = []
    for bs in table.batch_sizes:
        if compared and bs not in table.golden_batch_sizes:
            heads.append(f'<th class="nogolden" title="no golden for this batch size">bs={batch_size_text(bs)}*</th>')
        else:
            heads.append(f"<th>bs={batch_size_text(bs)}</th>")
    head = f"<tr><th>kernel</th><th>kind</th>{''.join(heads)}</tr>"
    out = [f"<h2>{_e(table.title)}</h2>"]
    if compared and all(r.state == SAME for r in [*table.kernels, *table.ops]):
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
                f'<p class="counts"><b>{len(rows)} {what}</b><span class="added">{c[ADDED]} added'
                f'</span> <span class="removed">{c[REMOVED]} removed</span> '
                f'<span class="changed">{c[CHANGED]} changed</span></p>'
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
    tables: Sequence[Table],
    *,
    title: str = "Graph capture: kernels × batch size",
    source: str = "",
    compared: bool = False,
) -> str:
    """The self-contained HTML page of ``tables`` (inline CSS, no scripts, no network).

    Where no table has kernels (CPU captures) the title says ``ops × batch size``.
    Compared with goldens, a checkbox hides the unchanged rows; it is on when
    something changed, so the page opens on the change.
    """
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
        changed = any(r.state != SAME for t in tables for r in [*t.kernels, *t.ops])
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
