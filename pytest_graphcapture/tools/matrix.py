"""The kernel × batch-size matrix, and loading summaries from whatever a user points at.

:func:`load_any` reads a summary JSON file, a trace or a graph dump; :func:`kernel_matrix` turns
the summaries of one runner/variant/rank into the table that ``graphcapture show``
prints (:func:`render_matrix_text`) and the HTML picture draws; :func:`collect`
finds every summary and trace under a folder, recursively, for both.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Iterable, Optional, Sequence, Union

from .._io import JSONProblem, is_scratch, loads_strict
from ..errors import TraceFormatError, UsageError
from ..golden.store import migrate
from ..keys import UNKNOWN_BATCH_SIZE, batch_size_text
from ..naming import is_merged_trace
from ..summary.dot import summarize_dot_file
from ..summary.files import is_graph_dump, summarize_trace_file
from ..summary.model import Summary
from ..summary.normalize import LEVELS, is_coarser_or_equal
from ..summary.tracefile import parse_trace_bytes, read_trace_bytes
from ..summary.validate import summary_from_dict

PathLike = Union[str, Path]


def load_any(path: Union[str, Path], *, level: Optional[str] = None, batch_size: Optional[int] = None) -> Summary:
    """A Summary from a summary JSON file, a trace file (``.json``/``.json.gz``) or a graph dump (DOT).

    A trace or dump that does not say its batch size gets the unknown one (``bs=?``),
    or ``batch_size`` when given (which also sets it on a summary whose key says unknown).
    """
    path = Path(path)
    if not path.exists():
        raise TraceFormatError(path, "no such file")
    if path.is_dir():
        raise TraceFormatError(path, "is a directory, expected a summary JSON file, a trace or a graph dump")
    if is_graph_dump(path):
        return summarize_dot_file(path, level=level or "name", batch_size=batch_size)
    data = read_trace_bytes(path)
    if data[:2] != b"\x1f\x8b":
        try:
            obj = loads_strict(data.decode("utf-8"))
        except (UnicodeDecodeError, JSONProblem):
            obj = None  # let the trace parser produce the precise error
        if _is_summary(obj):
            return _summary_from(obj, path, level=level, batch_size=batch_size)
        if isinstance(obj, list) and obj and all(_is_summary(item) for item in obj):
            if len(obj) == 1:
                return _summary_from(obj[0], path, level=level, batch_size=batch_size)
            raise TraceFormatError(
                path,
                f"holds {len(obj)} summaries (what graphcapture summarize writes for several files); diff compares "
                "one summary with one: summarize each file on its own, or put the files in a folder (show DIR, "
                "diff DIR_A DIR_B)",
            )
        if obj is not None:
            parse_trace_bytes(data, path)  # validates the trace shape with a clear error
    return summarize_trace_file(path, level=level or "name", batch_size=batch_size, unknown_batch_size_ok=True)


def load_all(path: Union[str, Path], *, batch_size: Optional[int] = None) -> list[Summary]:
    """Every summary in ``path``: the summaries of a list file (``graphcapture summarize A B``), else :func:`load_any`'s."""
    path = Path(path)
    if path.is_file() and path.name.endswith(".json"):
        try:
            obj = loads_strict(path.read_bytes().decode("utf-8"))
        except (OSError, UnicodeDecodeError, JSONProblem):
            obj = None  # load_any names the problem
        if isinstance(obj, list) and len(obj) > 1 and all(_is_summary(item) for item in obj):
            return [_summary_from(item, path, level=None, batch_size=batch_size) for item in obj]
    return [load_any(path, batch_size=batch_size)]


def _is_summary(obj: object) -> bool:
    return isinstance(obj, dict) and "schema_version" in obj and "traceEvents" not in obj


def _summary_from(obj: dict, path: Path, *, level: Optional[str], batch_size: Optional[int]) -> Summary:
    """A summary dict as read from ``path``: migrated like a golden, the batch size and level applied."""
    summary = summary_from_dict(migrate(obj, path), str(path))
    if batch_size is not None and summary.key.batch_size == UNKNOWN_BATCH_SIZE:
        summary.key = replace(summary.key, batch_size=batch_size)
    if level is not None and summary.level != level:
        summary = summary.normalized(level)
    return summary


def path_kind(path: PathLike) -> str:
    """What ``path`` is, as a message names it: a directory, a file, a special file (a FIFO, a device) or missing."""
    path = Path(path)
    if path.is_dir():
        return "a directory"
    if path.is_file():
        return "a file"
    return "a special file" if path.exists() else "missing"


def require_directory(path: PathLike) -> Path:
    """``path`` when it is a directory; otherwise a TraceFormatError saying what it is instead."""
    path = Path(path)
    kind = path_kind(path)
    if kind == "missing":
        raise TraceFormatError(path, "no such file or directory")
    if kind != "a directory":
        raise TraceFormatError(path, f"is not a directory (it is {kind})")
    return path


def coarsest(levels: Iterable[str]) -> str:
    result = LEVELS[0]
    for level in levels:
        if is_coarser_or_equal(level, result):
            result = level
    return result


def kernel_matrix(summaries: Sequence[Summary]) -> tuple[list[int], list[dict]]:
    """Kernel × batch-size table data for summaries of one runner/variant/rank.

    Returns ``(batch_sizes, rows)``: batch sizes ascending, and one row per kernel
    ``{"name", "kind", "counts": {batch_size: count}}`` (grid/block variants summed),
    sorted by name then kind.  Two summaries for one batch size are a usage error.
    """
    by_bs: dict[int, Summary] = {}
    for summary in summaries:
        bs = summary.key.batch_size
        if bs in by_bs:
            raise UsageError(f"two summaries for batch size {bs}: {by_bs[bs].key} and {summary.key}")
        by_bs[bs] = summary
    batch_sizes = sorted(by_bs)
    rows: dict[tuple, dict] = {}
    for bs in batch_sizes:
        for entry in by_bs[bs].kernels:
            kind = entry.get("kind", "kernel")
            row = rows.setdefault((entry["name"], kind), {"name": entry["name"], "kind": kind, "counts": {}})
            row["counts"][bs] = row["counts"].get(bs, 0) + entry["count"]
    return batch_sizes, [rows[k] for k in sorted(rows)]


def op_matrix(summaries: Sequence[Summary]) -> tuple[list[int], list[dict]]:
    """Op × batch-size table data (every shape of an op summed), shaped like :func:`kernel_matrix`'s.

    What a CPU capture's goldens compare: it launches no kernels, so its table is its ops.
    """
    batch_sizes = sorted({s.key.batch_size for s in summaries})
    rows: dict[str, dict] = {}
    for summary in summaries:
        for entry in summary.ops:
            row = rows.setdefault(entry["name"], {"name": entry["name"], "kind": "op", "counts": {}})
            bs = summary.key.batch_size
            row["counts"][bs] = row["counts"].get(bs, 0) + int(entry["count"])
    return batch_sizes, [rows[k] for k in sorted(rows)]


def render_matrix_text(
    title: str, batch_sizes: Sequence[int], rows: Sequence[dict], *, what: str = "kernel"
) -> list[str]:
    """Plain-text rendering of :func:`kernel_matrix` (or :func:`op_matrix`, ``what="op"``) output."""
    headers = [f"bs={batch_size_text(bs)}" for bs in batch_sizes]
    widths = [
        max(len(h), *(len(str(r["counts"].get(bs, "-"))) for r in rows)) if rows else len(h)
        for h, bs in zip(headers, batch_sizes)
    ]
    lines = [title, "  ".join(h.rjust(w) for h, w in zip(headers, widths)) + f"  kind    {what}"]
    for row in rows:
        cells = [str(row["counts"].get(bs, "-")).rjust(w) for bs, w in zip(batch_sizes, widths)]
        lines.append("  ".join(cells) + f"  {row['kind']:<6}  {row['name']}")
    return lines


def _summary_files(root: Path, *, recursive: bool) -> list[Path]:
    """Summary and trace files under ``root``: no temp file of an atomic write, no merged multi-rank trace."""
    files = root.rglob("*") if recursive else root.iterdir()
    return sorted(
        p
        for p in files
        if p.is_file() and p.name.endswith((".json", ".json.gz")) and not is_scratch(p.name) and not is_merged_trace(p)
    )


def collect(root: PathLike, *, recursive: bool = True, batch_size: Optional[int] = None) -> list[tuple[str, object]]:
    """``(folder relative to root, Summary)`` for each summary JSON / trace file under ``root``."""
    root = require_directory(root)
    pairs = []
    for path in _summary_files(root, recursive=recursive):
        folder = path.parent.relative_to(root).as_posix()
        pairs.extend((folder, summary) for summary in load_all(path, batch_size=batch_size))
    return pairs


def at_level(pairs: Sequence[tuple[str, object]], level: Optional[str] = None) -> list[tuple[str, object]]:
    """``pairs`` with every summary normalized to ``level`` (default: the coarsest level among them)."""
    target = level or coarsest(s.level for _, s in pairs)  # type: ignore[attr-defined]
    return [(f, s if s.level == target else s.normalized(target)) for f, s in pairs]  # type: ignore[attr-defined]


def collect_tree(directory: PathLike, *, batch_size: Optional[int] = None) -> list[tuple[str, object]]:
    """:func:`collect` of ``directory``; TraceFormatError when it holds no summary or trace file at all."""
    found = collect(directory, batch_size=batch_size)
    if not found:
        raise TraceFormatError(Path(directory), "contains no summary JSON or trace files (*.json, *.json.gz)")
    return found
