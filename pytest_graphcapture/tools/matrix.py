"""Summaries from whatever a user points at, and the kernel × batch-size matrix and key-by-key diff of them.

:func:`load_summaries` reads a summary JSON, a trace (one summary per key) or a graph dump; :func:`diff_keys` compares two trees key by key.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Iterable, Optional, Sequence, Union

from .._io import JSONProblem, is_scratch, loads_strict, require_regular
from ..errors import GraphCaptureError, TraceFormatError, UsageError
from ..golden.change import DEFAULT_CLASSES
from ..golden.diff import compare_dicts
from ..golden.store import migrate
from ..keys import UNKNOWN_BATCH_SIZE, CaptureKey, batch_size_text, key_label
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
    """The summaries in a summary JSON file (one, or a list), a graph dump, or a trace (one per key, as ``check`` splits it).

    ``batch_sizes`` maps a single-capture trace's windows; ``batch_size`` names a one-key trace's or a ``bs=?`` summary's size.
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
    """Whether the file's first bytes are a summary's (``schema_version``, no ``traceEvents``): then it is read whole."""
    try:
        head = next(trace_blocks(path, resolve_max_bytes(None), _HEAD_BYTES), b"")
    except GraphCaptureError:
        return False  # the trace reader names the problem
    return b'"schema_version"' in head and b'"traceEvents"' not in head


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


def _require_directory(path: PathLike) -> Path:
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
    """``(batch sizes ascending, rows {"name", "kind", "counts": {bs: count}})`` of one runner/variant/rank's summaries.

    Launch shapes are summed; two summaries for one batch size are a usage error.
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
    return batch_sizes, sorted(rows.values(), key=lambda r: row_order(r["name"], r["kind"]))


def op_matrix(summaries: Sequence[Summary]) -> tuple[list[int], list[dict]]:
    """Op × batch-size table data (an op's shapes summed), like :func:`kernel_matrix`'s: a CPU capture's table."""
    batch_sizes = sorted({s.key.batch_size for s in summaries})
    rows: dict[str, dict] = {}
    for summary in summaries:
        for entry in summary.ops:
            row = rows.setdefault(entry["name"], {"name": entry["name"], "kind": "op", "counts": {}})
            bs = summary.key.batch_size
            row["counts"][bs] = row["counts"].get(bs, 0) + int(entry["count"])
    return batch_sizes, sorted(rows.values(), key=lambda r: row_order(r["name"], r["kind"]))


def row_order(name: str, kind: str, changed: bool = False) -> tuple:
    """Where a row shows in ``show``'s text and the picture alike: changed first, ops as a failure lists them
    (compute first, view/metadata last), then by name."""
    return (not changed, DEFAULT_CLASSES.rank(name) if kind == "op" else (0, 0), name, kind)


def table_key(folder: str, summary: Summary) -> tuple:
    """The table a summary shows in: ``(folder, runner, variant, rank, platform)``."""
    key = summary.key
    return (folder, key.runner, key.variant_name or "", key.rank, summary.platform)


def table_title(table: tuple, level: str) -> str:
    folder, runner, variant, rank, platform = table
    where = f"{folder} — " if folder not in ("", ".") else ""
    return f"{where}{runner}{f' [{variant}]' if variant else ''} rank {rank}, {platform}, level {level}"


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
    root = _require_directory(root)
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


# --------------------------------------------------------------------------- two trees, key by key

_LEGEND = "+n only in B, -n only in A, a→b count changed, ~ same count but op shapes changed, . unchanged"

_Ident = tuple[str, CaptureKey]


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


def keyed(pairs: list[tuple[str, Summary]], where: object) -> dict[_Ident, Summary]:
    """``{(folder, key): summary}`` of :func:`collect`'s pairs; a key found twice in a folder is refused."""
    found: dict[_Ident, Summary] = {}
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


def _changed_cells(a: Summary, b: Summary) -> dict[tuple[str, str], str]:
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
class _DirDiff:
    """The comparison of two directories: equal when :attr:`lines` hold no change."""

    level: str
    compared: int = 0
    differing: list[_Ident] = field(default_factory=list)
    only_a: list[_Ident] = field(default_factory=list)
    only_b: list[_Ident] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)

    @property
    def equal(self) -> bool:
        return not (self.differing or self.only_a or self.only_b)


def _group_title(folder: str, key: CaptureKey) -> str:
    where = f"{folder}: " if folder != "." else ""
    variant = f" [{key.variant}]" if key.variant is not None else ""
    return f"{where}{key.runner}{variant} rank {key.rank}"


def diff_keys(
    a: dict[_Ident, Summary], b: dict[_Ident, Summary], name_a: object, name_b: object, *, level: Optional[str] = None
) -> _DirDiff:
    """Compare the summaries of ``a`` and ``b`` key by key: two trees, or two traces of several keys."""
    target = coarsest([s.level for s in list(a.values()) + list(b.values())] + ([level] if level else []))
    result = _DirDiff(target)
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
        group[key.batch_size] = _changed_cells(old, new)
        per_key.append(f"{_group_title(folder, key)} {key_label(key)}:")
        per_key += [f"  {line}" for line in describe_differences(old, new)]
    lines = [f"A: {name_a}", f"B: {name_b}", f"level {target}; {_LEGEND}"]
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
