"""The kernel × batch-size matrix, and loading summaries from whatever a user points at.

:func:`load_summaries` reads a summary JSON file, a trace (one summary per key) or a graph dump, for
every command; :func:`kernel_matrix` turns
the summaries of one runner/variant/rank into the table that ``graphcapture show``
prints (:func:`render_matrix_text`) and the HTML picture draws; :func:`collect`
finds every summary and trace under a folder, recursively, for both.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Iterable, Optional, Sequence, Union

from .._io import JSONProblem, is_scratch, loads_strict, require_regular
from ..errors import GraphCaptureError, TraceFormatError, UsageError
from ..golden.store import migrate
from ..keys import UNKNOWN_BATCH_SIZE, batch_size_text
from ..naming import is_merged_trace
from ..summary.dot import summarize_dot_file
from ..summary.files import is_graph_dump, summarize_trace_keys
from ..summary.model import Summary, summary_from_dict
from ..summary.normalize import LEVELS, is_coarser_or_equal
from ..summary.tracefile import read_trace_bytes, resolve_max_bytes, trace_blocks

PathLike = Union[str, Path]


def load_summaries(
    path: PathLike,
    *,
    level: Optional[str] = None,
    batch_size: Optional[int] = None,
    batch_sizes: Optional[Sequence[int]] = None,
) -> list[Summary]:
    """The summaries in a summary JSON file (one, or a list), a graph dump, or a trace: one per capture key.

    A trace is split into its keys as ``graphcapture check`` splits it
    (:func:`~..summary.split.summarize_trace_keys`, read in slices); ``batch_sizes``
    maps a single-capture trace's windows to sizes.  ``batch_size`` names the size of
    a one-key trace or dump (whatever its name says) and of a summary whose key says ``bs=?``.
    """
    path = Path(path)
    if path.is_dir():
        raise TraceFormatError(path, "is a directory, expected a summary JSON file, a trace or a graph dump")
    require_regular(path, error=TraceFormatError)
    if is_graph_dump(path):
        return [summarize_dot_file(path, level=level or "name", batch_size=batch_size)]
    if _looks_like_summary(path):
        try:
            obj = loads_strict(read_trace_bytes(path).decode("utf-8"))
        except (UnicodeDecodeError, JSONProblem):
            obj = None  # the trace reader names the problem
        items = obj if isinstance(obj, list) and obj else [obj]
        if all(_is_summary(item) for item in items):
            return [_summary_from(item, path, level=level, batch_size=batch_size) for item in items]
    read = summarize_trace_keys(path, batch_sizes=batch_sizes, level=level or "name")
    if batch_size is None:
        return read.summaries
    if len(read.summaries) != 1:
        raise UsageError(
            f"--batch-size {batch_size}: {path} holds {len(read.summaries)} keys split by {read.split_by}, "
            "each with its own batch size; --batch-size names the size of a trace of one key"
        )
    summary = read.summaries[0]
    summary.key = replace(summary.key, batch_size=batch_size)
    return [summary]


def _looks_like_summary(path: Path) -> bool:
    """Whether the file's first bytes are a summary's (``schema_version`` and no ``traceEvents``): read it whole.

    A trace is read in slices instead; its whole text is never parsed into objects here.
    """
    try:
        head = next(trace_blocks(path, resolve_max_bytes(None), _HEAD_BYTES), b"")
    except GraphCaptureError:
        return False  # the trace reader names the problem
    return b'"schema_version"' in head and b'"traceEvents"' not in head


#: Bytes looked at to tell a summary JSON file from a trace: a summary's identity fields come first.
_HEAD_BYTES = 64 * 1024


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


def collect(
    root: PathLike,
    *,
    recursive: bool = True,
    batch_size: Optional[int] = None,
    batch_sizes: Optional[Sequence[int]] = None,
) -> list[tuple[str, Summary]]:
    """``(folder relative to root, Summary)`` for each summary, and each key of each trace, under ``root``."""
    root = require_directory(root)
    pairs = []
    for path in _summary_files(root, recursive=recursive):
        folder = path.parent.relative_to(root).as_posix()
        read = load_summaries(path, batch_size=batch_size, batch_sizes=batch_sizes)
        pairs.extend((folder, summary) for summary in read)
    return pairs


def at_level(pairs: Sequence[tuple[str, object]], level: Optional[str] = None) -> list[tuple[str, object]]:
    """``pairs`` with every summary normalized to ``level`` (default: the coarsest level among them)."""
    target = level or coarsest(s.level for _, s in pairs)  # type: ignore[attr-defined]
    return [(f, s if s.level == target else s.normalized(target)) for f, s in pairs]  # type: ignore[attr-defined]


def collect_tree(
    directory: PathLike, *, batch_size: Optional[int] = None, batch_sizes: Optional[Sequence[int]] = None
) -> list[tuple[str, Summary]]:
    """:func:`collect` of ``directory``; TraceFormatError when it holds no summary or trace file at all."""
    found = collect(directory, batch_size=batch_size, batch_sizes=batch_sizes)
    if not found:
        raise TraceFormatError(Path(directory), "contains no summary JSON or trace files (*.json, *.json.gz)")
    return found
