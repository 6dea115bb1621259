"""``graphcapture`` command line: summarize traces, diff summaries, show a kernel table.

Exit codes: 0 success / equal, 1 ``diff`` found differences, 2 bad input (one line
on stderr naming the file and the problem, never a traceback).

* ``graphcapture summarize TRACE... [--level L] [--replay REPLAY] [--out FILE]`` —
  summary JSON (sorted keys, indent 2, trailing newline); a list for several traces.
* ``graphcapture diff EXPECTED ACTUAL [--level L]`` — each side a summary JSON file or
  a trace; both are compared at the coarser of their levels (and ``--level``).
* ``graphcapture show DIR [--level L] [--html OUT.html [--against GOLDEN_DIR]]`` — kernels ×
  batch sizes, one table per runner/variant/rank, from the summary JSON files and traces
  in ``DIR``; ``--html`` writes the self-contained picture (:mod:`.picture`) instead.
  :func:`kernel_matrix` builds the table data so other renderers can reuse it.
* ``graphcapture merge DIR [--out-dir OUT]`` — merge the per-rank traces of a
  multi-rank capture (``*_rank<r>.json.gz``, ``*-TP-<r>.json.gz``) into one Chrome
  trace per batch size, every event's process labelled by its rank (:mod:`.merge`).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any, Iterable, Optional, Sequence, Union

from .errors import GraphCaptureError, TraceFormatError, UsageError
from .normalize import LEVELS, check_level, is_coarser_or_equal
from .summary import Summary, summarize_trace_file
from .tracefile import parse_trace_bytes, read_trace_bytes

PROG = "graphcapture"


# --------------------------------------------------------------------------- loading


def load_any(path: Union[str, Path], *, level: Optional[str] = None) -> Summary:
    """A Summary from a summary JSON file or a trace file (``.json``/``.json.gz``)."""
    path = Path(path)
    if not path.exists():
        raise TraceFormatError(path, "no such file")
    if path.is_dir():
        raise TraceFormatError(path, "is a directory, expected a summary JSON or trace file")
    data = read_trace_bytes(path)
    if data[:2] != b"\x1f\x8b":
        try:
            obj = json.loads(data.decode("utf-8"))
        except (UnicodeDecodeError, ValueError):
            obj = None  # let the trace parser produce the precise error
        if isinstance(obj, dict) and "schema_version" in obj and "traceEvents" not in obj:
            summary = Summary.from_dict(obj, source=str(path))
            if level is not None and summary.level != level:
                summary = summary.normalized(level)
            return summary
        if obj is not None:
            parse_trace_bytes(data, path)  # validates the trace shape with a clear error
    return summarize_trace_file(path, level=level or "name")


def _coarsest(levels: Iterable[str]) -> str:
    result = LEVELS[0]
    for level in levels:
        if is_coarser_or_equal(level, result):
            result = level
    return result


# --------------------------------------------------------------------------- diff


def _kernel_label(entry: dict) -> str:
    parts = [entry["name"]]
    if entry.get("kind", "kernel") != "kernel":
        parts.append(f"[{entry['kind']}]")
    if "grid" in entry or "block" in entry:
        parts.append(f"grid={entry.get('grid')} block={entry.get('block')}")
    return " ".join(parts)


def _op_label(entry: dict) -> str:
    return f"{entry['name']} dims={json.dumps(entry['input_dims'])} types={json.dumps(entry['input_types'])}"


def _count_diff(what: str, expected: Counter, actual: Counter) -> list[str]:
    lines = []
    for label in sorted(set(expected) | set(actual)):
        e, a = expected.get(label, 0), actual.get(label, 0)
        if e == a:
            continue
        if e == 0:
            lines.append(f"+ {what} {label} (x{a}, not expected)")
        elif a == 0:
            lines.append(f"- {what} {label} (x{e} expected, missing)")
        else:
            lines.append(f"~ {what} {label}: count {e} -> {a}")
    return lines


def _describe_differences(expected: Summary, actual: Summary) -> list[str]:
    """Readable lines describing how ``actual`` differs from ``expected`` (empty when equal)."""
    lines: list[str] = []
    for name in ("schema_version", "platform", "level"):
        e, a = getattr(expected, name), getattr(actual, name)
        if e != a:
            lines.append(f"~ {name}: {e} -> {a}")
    if expected.key != actual.key:
        lines.append(f"~ key: {expected.key} -> {actual.key}")
    if (expected.complete, expected.incomplete_reason) != (actual.complete, actual.incomplete_reason):
        lines.append(f"~ complete: {expected.complete} ({expected.incomplete_reason}) -> "
                     f"{actual.complete} ({actual.incomplete_reason})")
    if expected.launches["total"] != actual.launches["total"]:
        lines.append(f"~ launches total: {expected.launches['total']} -> {actual.launches['total']}")
    lines += _count_diff("launch API", Counter(expected.launches["by_api"]), Counter(actual.launches["by_api"]))
    lines += _count_diff("kernel", Counter({_kernel_label(k): k["count"] for k in expected.kernels}),
                         Counter({_kernel_label(k): k["count"] for k in actual.kernels}))
    lines += _count_diff("op", Counter({_op_label(o): o["count"] for o in expected.ops}),
                         Counter({_op_label(o): o["count"] for o in actual.ops}))
    if not lines and expected != actual:  # safety net: never report "equal" for unequal summaries
        lines.append("~ summaries differ (see their JSON)")
    return lines


# --------------------------------------------------------------------------- show


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


def render_matrix_text(title: str, batch_sizes: Sequence[int], rows: Sequence[dict]) -> list[str]:
    """Plain-text rendering of :func:`kernel_matrix` output (counts first, names last)."""
    headers = [f"bs={bs}" for bs in batch_sizes]
    widths = [max(len(h), *(len(str(r["counts"].get(bs, "-"))) for r in rows)) if rows else len(h)
              for h, bs in zip(headers, batch_sizes)]
    lines = [title, "  ".join(h.rjust(w) for h, w in zip(headers, widths)) + "  kind    kernel"]
    for row in rows:
        cells = [str(row["counts"].get(bs, "-")).rjust(w) for bs, w in zip(batch_sizes, widths)]
        lines.append("  ".join(cells) + f"  {row['kind']:<6}  {row['name']}")
    return lines


def _collect_dir(directory: Path, level: Optional[str]) -> list[Summary]:
    if not directory.is_dir():
        raise TraceFormatError(directory, "is not a directory")
    files = sorted(p for p in directory.iterdir() if p.is_file() and p.name.endswith((".json", ".json.gz")))
    if not files:
        raise TraceFormatError(directory, "contains no summary JSON or trace files (*.json, *.json.gz)")
    summaries = [load_any(p, level=None) for p in files]
    target = level or _coarsest(s.level for s in summaries)
    return [s if s.level == target else s.normalized(target) for s in summaries]


# --------------------------------------------------------------------------- commands


def _cmd_summarize(args: argparse.Namespace) -> int:
    if args.replay is not None and len(args.traces) != 1:
        raise UsageError("--replay belongs to one capture trace; pass exactly one TRACE with it")
    summaries = [summarize_trace_file(t, level=args.level, replay_path=args.replay) for t in args.traces]
    data: Any = summaries[0].to_dict() if len(summaries) == 1 else [s.to_dict() for s in summaries]
    text = json.dumps(data, sort_keys=True, indent=2) + "\n"
    if args.out:
        try:
            Path(args.out).write_text(text, encoding="utf-8")
        except OSError as exc:
            raise UsageError(f"--out {args.out}: cannot write: {exc.strerror or exc}") from None
    else:
        sys.stdout.write(text)
    return 0


def _cmd_diff(args: argparse.Namespace) -> int:
    expected = load_any(args.expected)
    actual = load_any(args.actual)
    target = _coarsest([expected.level, actual.level] + ([args.level] if args.level else []))
    expected, actual = expected.normalized(target), actual.normalized(target)
    if expected == actual:
        print(f"equal (level {target})")
        return 0
    print(f"{args.expected} -> {args.actual} (level {target}):")
    for line in _describe_differences(expected, actual):
        print(f"  {line}")
    return 1


def _cmd_show(args: argparse.Namespace) -> int:
    if args.against and not args.html:
        raise UsageError("--against compares in the HTML picture; give --html OUT.html with it")
    if args.html:
        from .golden import write_atomic
        from .picture import picture_from_dirs

        page = picture_from_dirs(args.directory, against=args.against, level=args.level)
        try:
            write_atomic(Path(args.html), page)
        except GraphCaptureError as exc:
            raise UsageError(f"--html {args.html}: {getattr(exc, 'problem', exc)}") from None
        print(f"wrote {args.html}")
        return 0
    summaries = _collect_dir(Path(args.directory), args.level)
    groups: dict[tuple, list[Summary]] = {}
    for s in summaries:
        groups.setdefault((s.key.runner, s.key.variant or "", s.key.rank, s.platform), []).append(s)
    blocks = []
    for (runner, variant, rank, platform), members in sorted(groups.items()):
        batch_sizes, rows = kernel_matrix(members)
        title = f"{runner}" + (f" [{variant}]" if variant else "") + f" rank {rank}, {platform}, level {members[0].level}"
        blocks.append("\n".join(render_matrix_text(title, batch_sizes, rows)))
    sys.stdout.write("\n\n".join(blocks) + "\n")
    return 0


def _cmd_merge(args: argparse.Namespace) -> int:
    from .merge import merge_rank_traces

    written = merge_rank_traces(Path(args.directory), out_dir=Path(args.out_dir) if args.out_dir else None)
    if not written:
        raise UsageError(f"{args.directory}: no group of per-rank traces with two or more ranks "
                         f"(*_rank<r>.json.gz or *-TP-<r>.json.gz) to merge")
    for path in written:
        print(path)
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The argparse parser of ``graphcapture``."""
    parser = argparse.ArgumentParser(prog=PROG, description="Summarize and compare CUDA-graph capture traces.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    p = sub.add_parser("summarize", help="print or write the summary JSON of trace files")
    p.add_argument("traces", nargs="+", metavar="TRACE", help="capture trace (.json or .json.gz)")
    p.add_argument("--level", choices=LEVELS, default="name", help="kernel-name normalization level (default name)")
    p.add_argument("--replay", metavar="REPLAY_TRACE", help="trace of the graph's replay (kernel source on NVIDIA)")
    p.add_argument("--out", metavar="FILE", help="write the JSON here instead of stdout")
    p.set_defaults(func=_cmd_summarize)

    p = sub.add_parser("diff", help="compare two summaries (summary JSON or trace files)")
    p.add_argument("expected", metavar="EXPECTED")
    p.add_argument("actual", metavar="ACTUAL")
    p.add_argument("--level", choices=LEVELS, default=None, help="compare at least at this level")
    p.set_defaults(func=_cmd_diff)

    p = sub.add_parser("show", help="text table of kernels x batch sizes for a directory")
    p.add_argument("directory", metavar="DIR")
    p.add_argument("--level", choices=LEVELS, default=None, help="normalize kernel names to this level")
    p.add_argument("--html", metavar="OUT.html", help="write a self-contained HTML picture of the matrix instead "
                   "(DIR is then searched recursively, one table per folder/runner/variant/rank)")
    p.add_argument("--against", metavar="GOLDEN_DIR", help="with --html: highlight kernels added, removed or "
                   "changed against the goldens in the same folders under GOLDEN_DIR")
    p.set_defaults(func=_cmd_show)

    p = sub.add_parser("merge", help="merge per-rank traces into one Chrome trace per batch size")
    p.add_argument("directory", metavar="DIR", help="folder with the per-rank traces (graph_capture_profile/)")
    p.add_argument("--out-dir", metavar="OUT", help="write the merged traces here instead of DIR")
    p.set_defaults(func=_cmd_merge)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point of the ``graphcapture`` console script; returns the exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        if getattr(args, "level", None):
            check_level(args.level)
        return int(args.func(args))
    except GraphCaptureError as exc:
        print(f"{PROG} {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0
    except Exception as exc:  # a bug in our code: still one line, never a traceback
        print(f"{PROG} {args.command}: internal error (please report): {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
