"""The picture: a self-contained HTML page of the kernel × batch-size matrix.

Why: a golden diff lists changes per batch size; the matrix shows at a glance
*which* kernels run at *which* batch sizes, and — against goldens — which ones a
change added (green), removed (red, golden count struck through) or whose count
changed (amber).  The page has no scripts, fonts or images from the network, so it
opens from a CI artifact as is.

* :func:`build_tables` groups summaries (and their goldens) into tables, one per
  folder / runner / variant / rank / platform, reusing :func:`.matrix.kernel_matrix`;
* :func:`render_html` renders tables into the page;
* :func:`picture_from_dirs` is what ``graphcapture show DIR --html OUT.html
  [--against GOLDEN_DIR]`` calls: summary JSON and trace files under ``DIR``
  (recursively), goldens matched by folder and capture key;
* :func:`session_picture` is what the golden gate writes next to the Markdown
  report (``--graph-capture-report`` with ``--golden-out``).
"""

from __future__ import annotations

import html
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Optional, Sequence, Union

from .._io import is_scratch
from ..errors import TraceFormatError
from .matrix import coarsest, kernel_matrix, load_any

PathLike = Union[str, Path]

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

    def cell_state(self, bs: int, has_golden: bool) -> str:
        """State of one cell: compared only at batch sizes that have a golden."""
        if not has_golden:
            return NO_GOLDEN
        now, before = self.counts.get(bs, 0), self.golden.get(bs, 0)
        if now == before:
            return SAME
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


def _op_matrix(summaries: Sequence) -> dict[str, dict[int, int]]:
    """``{op name: {batch size: count}}`` (all shapes of an op summed)."""
    rows: dict[str, dict[int, int]] = {}
    for summary in summaries:
        for entry in summary.ops:
            counts = rows.setdefault(entry["name"], {})
            bs = summary.key.batch_size
            counts[bs] = counts.get(bs, 0) + int(entry["count"])
    return rows


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
    obtained: dict[tuple, dict[int, int]], golden: dict[tuple, dict[int, int]], golden_sizes: set[int]
) -> list[Row]:
    rows = []
    for name, kind in sorted(set(obtained) | set(golden)):
        row = Row(name, kind, dict(obtained.get((name, kind), {})), dict(golden.get((name, kind), {})))
        row.state = _row_state(row, golden_sizes)
        rows.append(row)
    # Changed rows first (read at a glance), then the rest; by name within each group.
    return sorted(rows, key=lambda r: (r.state == SAME, r.name, r.kind))


def build_tables(
    obtained: Iterable[tuple[str, object]], goldens: Iterable[tuple[str, object]] = (), *, level: Optional[str] = None
) -> list[Table]:
    """Tables of ``(folder, Summary)`` pairs, each compared with the golden of the same folder and key.

    All summaries are normalized to ``level`` (default: the coarsest level among
    them, so traces at ``exact`` and goldens at ``name`` meet at ``name``).
    """
    obtained, goldens = list(obtained), list(goldens)
    target = level or coarsest(s.level for _, s in obtained + goldens)
    obtained = [(f, s if s.level == target else s.normalized(target)) for f, s in obtained]
    goldens = [(f, s if s.level == target else s.normalized(target)) for f, s in goldens]

    def group_key(folder: str, s: object) -> tuple:
        k = s.key  # type: ignore[attr-defined]
        return (folder, k.runner, k.variant or "", k.rank, s.platform)  # type: ignore[attr-defined]

    groups: dict[tuple, tuple[list, list]] = {}
    for folder, s in obtained:
        groups.setdefault(group_key(folder, s), ([], []))[0].append(s)
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
        ops = _merge_rows(
            {(n, "op"): c for n, c in _op_matrix(now).items()},
            {(n, "op"): c for n, c in _op_matrix(before).items()},
            set(golden_sizes),
        )
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
            )
        )
    return tables


# --------------------------------------------------------------------------- rendering

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
"""


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def _cell(row: Row, bs: int, has_golden: bool) -> str:
    state = row.cell_state(bs, has_golden)
    now, before = row.counts.get(bs), row.golden.get(bs)
    if state == REMOVED:
        return f'<td class="n removed" title="removed: golden {before}, now 0"><s>{before}</s></td>'
    if state == ADDED:
        return f'<td class="n added" title="added: golden 0, now {now}">+{now}</td>'
    if state == CHANGED:
        return f'<td class="n changed" title="changed: golden {before}, now {now}">{before}→{now}</td>'
    if now is None:
        return '<td class="n zero">·</td>'
    return f'<td class="n">{now}</td>'


def _rows_html(rows: Sequence[Row], table: Table) -> list[str]:
    out = []
    for row in rows:
        cls = f' class="{row.state}"' if row.state != SAME else ""
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
            heads.append(f'<th class="nogolden" title="no golden for this batch size">bs={bs}*</th>')
        else:
            heads.append(f"<th>bs={bs}</th>")
    head = f"<tr><th>kernel</th><th>kind</th>{''.join(heads)}</tr>"
    out = [f"<h2>{_e(table.title)}</h2>"]
    if compared:
        rows, what = (table.kernels, "kernels") if table.kernels else (table.ops, "ops")
        c = table.counts(rows)
        out.append(
            f'<p class="counts"><b>{len(rows)} {what}</b><span class="added">{c[ADDED]} added'
            f'</span> <span class="removed">{c[REMOVED]} removed</span> '
            f'<span class="changed">{c[CHANGED]} changed</span></p>'
        )
    for bs, reason in sorted(table.incomplete.items()):
        out.append(f'<p class="note">bs={bs}: incomplete kernel evidence — {_e(reason)}</p>')
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
    """The self-contained HTML page of ``tables`` (inline CSS, no scripts, no network)."""
    body = [f"<h1>{_e(title)}</h1>"]
    if source:
        body.append(f'<p class="meta">{_e(source)}</p>')
    if compared:
        body.append(
            '<p class="legend"><span class="added">+n added</span><span class="removed"><s>n</s> removed'
            '</span><span class="changed">a→b count changed</span>against the goldens</p>'
        )
    if not tables:
        body.append('<p class="note">Nothing to show.</p>')
    for table in tables:
        body += _table_html(table, compared)
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{_e(title)}</title><style>{_CSS}</style></head>\n<body>\n" + "\n".join(body) + "\n</body></html>\n"
    )


# --------------------------------------------------------------------------- collecting


def _summary_files(root: Path, *, recursive: bool) -> list[Path]:
    files = root.rglob("*") if recursive else root.iterdir()
    return sorted(p for p in files if p.is_file() and p.name.endswith((".json", ".json.gz")) and not is_scratch(p.name))


def collect(root: PathLike, *, recursive: bool = True) -> list[tuple[str, object]]:
    """``(folder relative to root, Summary)`` for each summary JSON / trace file under ``root``."""
    root = Path(root)
    if not root.is_dir():
        raise TraceFormatError(root, "is not a directory")
    pairs = []
    for path in _summary_files(root, recursive=recursive):
        pairs.append((path.parent.relative_to(root).as_posix(), load_any(path)))
    return pairs


def picture_from_dirs(
    directory: PathLike, *, against: Optional[PathLike] = None, level: Optional[str] = None, title: Optional[str] = None
) -> str:
    """HTML of every summary / trace under ``directory``, compared with goldens under ``against``.

    A golden matches an obtained summary when it sits in the same folder relative to
    its root and has the same runner, variant, rank and platform.
    """
    obtained = collect(directory)
    if not obtained:
        raise TraceFormatError(Path(directory), "contains no summary JSON or trace files (*.json, *.json.gz)")
    goldens = collect(against) if against is not None else []
    tables = build_tables(obtained, goldens, level=level)
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
    """The golden gate's picture: obtained summaries in ``out_dir/<folder>`` vs goldens in ``golden_dir/<folder>``.

    ``folders`` are the checked tests' golden folders relative to the golden dir
    (``<platform>/<test path>/<test name>``).
    """
    obtained: list[tuple[str, object]] = []
    goldens: list[tuple[str, object]] = []
    for folder in sorted(set(folders)):
        for root, into in ((Path(out_dir), obtained), (Path(golden_dir), goldens)):
            if (root / folder).is_dir():
                into += [(folder, s) for _, s in collect(root / folder, recursive=False)]
    tables = build_tables(obtained, goldens, level=level)
    return render_html(
        tables,
        title="Graph capture goldens: kernels × batch size",
        source=source or f"obtained summaries in {out_dir} against goldens in {golden_dir}",
        compared=True,
    )
