"""The picture: a self-contained HTML page of the kernel × batch-size matrix.

Why: a golden diff lists changes per batch size; the matrix shows at a glance
*which* kernels run at *which* batch sizes, and — against goldens — which ones a
change added (green), removed (red, golden count struck through) or whose count
changed (amber).  The page has no scripts, fonts or images from the network, so it
opens from a CI artifact as is.

* :func:`~.picture_table.build_tables` groups summaries (and their goldens) into
  tables, one per folder / runner / variant / rank / platform;
* :func:`~.picture_html.render_html` renders tables into the page;
* :func:`picture_from_dirs` is what ``graphcapture show DIR --html OUT.html
  [--against GOLDEN_DIR]`` calls: summary JSON and trace files under ``DIR``
  (recursively), goldens matched by folder and capture key;
* :func:`session_picture` is what the golden gate writes next to the Markdown
  report (``--graph-capture-report`` with ``--golden-out``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable, Optional, Sequence

from .matrix import PathLike, collect, collect_tree
from .picture_html import render_html
from .picture_table import ADDED, CHANGED, NO_GOLDEN, REMOVED, SAME, Row, Table, build_tables, why_no_golden

__all__ = [
    "ADDED",
    "CHANGED",
    "NO_GOLDEN",
    "REMOVED",
    "SAME",
    "Row",
    "Table",
    "build_tables",
    "picture_from_dirs",
    "render_html",
    "session_picture",
    "why_no_golden",
]

# --------------------------------------------------------------------------- from directories


def picture_from_dirs(
    directory: PathLike,
    *,
    against: Optional[PathLike] = None,
    level: Optional[str] = None,
    title: Optional[str] = None,
    batch_sizes: Optional[Sequence[int]] = None,
) -> str:
    """HTML of every summary / trace under ``directory``, compared with goldens under ``against``.

    A golden matches an obtained summary when it sits in the same folder relative to
    its root and has the same runner, variant, rank and platform.
    """
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
    tables = build_tables(obtained, goldens, level=level, compared=True)
    return render_html(
        tables,
        title="Graph capture goldens: kernels × batch size",
        source=source or f"obtained summaries in {out_dir} against goldens in {golden_dir}",
        compared=True,
    )
