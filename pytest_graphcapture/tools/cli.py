"""``graphcapture`` command line: summarize traces, diff summaries, show a kernel table.

Exit codes: 0 success / equal, 1 ``diff`` found differences, 2 bad input (one line
on stderr naming the file and the problem, never a traceback).  When the reader of
the output goes away before all of it is written (``graphcapture diff … | head -1``)
the exit code is still the command's answer — 1 for a difference — and 141 (as for
a tool killed by SIGPIPE) when the command had none yet, so ``set -o pipefail``
scripts never see a success that was not one.  An output file that is one of the
inputs (the same file under any name) is refused: writing it would replace what
the command reads.  ``graphcapture --version`` prints the version.

* ``graphcapture summarize TRACE... [--level L] [--replay REPLAY] [--batch-size N] [--batch-sizes B1,...] [--out FILE]``
  — summary JSON (the golden layout: one line per entry); a list for several traces or keys.
  Every command reads a trace into the keys ``check`` finds (:func:`.matrix.load_summaries`, in slices).
  A trace that does not say its batch size (eager, replay-only, sent by someone) gets
  a key saying ``bs=?`` (0 in the JSON) and a note on stderr; ``--batch-size`` sets it.
  A graph dump (``.dot``, ``.gv``, maybe gzipped; ``CUDAGraph.debug_dump``, ``cudaGraphDebugDotPrint``,
  ``hipGraphDebugDotPrint``) gives a summary too: its kernels with launch shapes, copies and topology
  (:mod:`..summary.dot`), which ``diff`` and ``show`` read like any summary.
* ``graphcapture diff EXPECTED ACTUAL [--level L] [--batch-size N]`` — each side a summary
  JSON file or a trace; both are compared at the coarser of their levels (and ``--level``).
  Two directories (capture or summary trees) are compared key by key (:mod:`.dirdiff`):
  a kernel × batch-size matrix of what changed, then the per-key diffs.
* ``graphcapture show DIR [--level L] [--html OUT.html [--against GOLDEN_DIR]]`` — kernels ×
  batch sizes, one table per runner/variant/rank, from the summary JSON files and traces
  in ``DIR``; ``--html`` writes the self-contained picture (:mod:`.picture`) instead.
  :func:`kernel_matrix` builds the table data so other renderers can reuse it.
* ``graphcapture accept HARVEST_DIR [--golden-dir DIR] [--only PATTERN] [--dry-run]`` —
  bring goldens written by ``--golden-out`` into the golden tree, key by key (:mod:`.accept`).
* ``graphcapture check TRACE_OR_DIR... [--golden-dir DIR]`` — the golden gate over the capture traces an
  engine wrote (sglang's, vLLM's, the plugin's), exit 0/1/2 (:mod:`.check`).
* ``graphcapture merge DIR [--out-dir OUT]`` — merge the per-rank traces of a
  multi-rank capture (``*_rank<r>.json.gz``, ``*-TP-<r>.json.gz``) into one Chrome
  trace per batch size, every event's process labelled by its rank (:mod:`.merge`).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.metadata
import os
import sys
import warnings
from pathlib import Path
from typing import Iterable, Optional, Sequence, Union

from .._io import write_atomic
from ..errors import GraphCaptureError, UsageError
from ..keys import UNKNOWN_BATCH_SIZE
from ..summary.files import collect_trace_file, is_graph_dump
from ..summary.model import Summary
from ..summary.normalize import LEVELS, check_level
from ..summary.replay import with_replay
from .dirdiff import DirDiff, describe_differences, diff_dirs, diff_keys, keyed
from .matrix import (
    at_level,
    coarsest,
    collect_tree,
    kernel_matrix,
    load_summaries,
    op_matrix,
    path_kind,
    render_matrix_text,
)
from .terminal import escaped_output

PROG = "graphcapture"


# --------------------------------------------------------------------------- loading


# --------------------------------------------------------------------------- diff


# --------------------------------------------------------------------------- show


# --------------------------------------------------------------------------- commands


def _refuse_input_as_output(option: str, out: str, inputs: Iterable[Union[str, Path]]) -> None:
    """An output that is one of the command's inputs (the same file, however it is named) is refused: it would replace it."""
    if not os.path.exists(out):
        return
    for path in inputs:
        with contextlib.suppress(OSError):
            if os.path.samefile(out, path):
                raise UsageError(
                    f"{option} {out}: is the input {path}; writing there would replace it, name another file"
                )


def _cmd_summarize(args: argparse.Namespace) -> int:
    if args.replay is not None and len(args.traces) != 1:
        raise UsageError("--replay belongs to one capture trace; pass exactly one TRACE with it")
    if args.replay is not None and is_graph_dump(args.traces[0]):
        raise UsageError(f"--replay belongs to a capture trace; {args.traces[0]} is a graph dump, which needs none")
    if args.out:
        _refuse_input_as_output("--out", args.out, [*args.traces, *([args.replay] if args.replay else [])])
    texts = []
    for trace in args.traces:
        summaries = load_summaries(trace, level=args.level, batch_size=args.batch_size, batch_sizes=args.batch_sizes)
        if args.replay is not None:
            if len(summaries) != 1:
                raise UsageError(
                    f"--replay belongs to one graph's capture; {trace} holds {len(summaries)} keys: "
                    "give the replay with a trace of one key"
                )
            summaries = [with_replay(summaries[0], collect_trace_file(args.replay)[0].replay_kernels())]
        for summary in summaries:
            if summary.key.batch_size == UNKNOWN_BATCH_SIZE:
                print(
                    f"note: {trace}: the {'dump' if is_graph_dump(trace) else 'trace'} does not say its batch size "
                    "(key bs=?, written as 0); --batch-size N sets it",
                    file=sys.stderr,
                )
            texts.append(summary.to_json())
    text = texts[0] if len(texts) == 1 else "[\n" + ",\n".join(t.rstrip("\n") for t in texts) + "\n]\n"
    if args.out:
        try:
            write_atomic(Path(args.out), text)  # a failure leaves an existing file as it was
        except GraphCaptureError as exc:
            raise UsageError(f"--out {args.out}: {getattr(exc, 'problem', exc)}") from None
    else:
        sys.stdout.write(text)
    return 0


def _cmd_diff(args: argparse.Namespace) -> int:
    kinds = [path_kind(p) for p in (args.expected, args.actual)]
    for path, kind in zip((args.expected, args.actual), kinds):
        if kind == "missing":
            raise UsageError(f"{path}: no such file or directory")
    if "a directory" in kinds:
        if kinds[0] != kinds[1]:
            raise UsageError(
                f"diff compares two files or two directories; got {kinds[0]} ({args.expected}) "
                f"and {kinds[1]} ({args.actual})"
            )
        result = diff_dirs(
            Path(args.expected),
            Path(args.actual),
            level=args.level,
            batch_size=args.batch_size,
            batch_sizes=args.batch_sizes,
        )
        return _print_keyed(result)
    sides = [
        load_summaries(path, batch_size=args.batch_size, batch_sizes=args.batch_sizes)
        for path in (args.expected, args.actual)
    ]
    if len(sides[0]) != 1 or len(sides[1]) != 1:  # a trace of several keys: compared key by key
        a, b = (keyed([(".", s) for s in side], path) for side, path in zip(sides, (args.expected, args.actual)))
        return _print_keyed(diff_keys(a, b, args.expected, args.actual, level=args.level))
    (expected,), (actual,) = sides
    target = coarsest([expected.level, actual.level] + ([args.level] if args.level else []))
    expected, actual = expected.normalized(target), actual.normalized(target)
    if expected == actual:
        print(f"equal (level {target})")
        return 0
    args.status = 1  # decided before printing: a reader that stops early does not change the answer
    print(f"{args.expected} -> {args.actual} (level {target}):")
    for line in describe_differences(expected, actual):
        print(f"  {line}")
    return 1


def _print_keyed(result: DirDiff) -> int:
    sys.stdout.write("\n".join(result.lines) + "\n")
    return 0 if result.equal else 1


def _cmd_show(args: argparse.Namespace) -> int:
    if args.against and not args.html:
        raise UsageError("--against compares in the HTML picture; give --html OUT.html with it")
    if args.html:
        from .picture import picture_from_dirs

        roots = [Path(args.directory), *([Path(args.against)] if args.against else [])]
        _refuse_input_as_output("--html", args.html, (p for root in roots if root.is_dir() for p in root.rglob("*")))

        page = picture_from_dirs(args.directory, against=args.against, level=args.level, batch_sizes=args.batch_sizes)
        try:
            write_atomic(Path(args.html), page)
        except GraphCaptureError as exc:
            raise UsageError(f"--html {args.html}: {getattr(exc, 'problem', exc)}") from None
        print(f"wrote {args.html}")
        return 0
    # One table per folder (searched recursively, as the HTML picture does) / runner / variant / rank / platform.
    groups: dict[tuple, list[Summary]] = {}
    for folder, s in at_level(
        collect_tree(args.directory, batch_size=args.batch_size, batch_sizes=args.batch_sizes), args.level
    ):
        k = s.key  # type: ignore[attr-defined]
        groups.setdefault((folder, k.runner, k.variant_name or "", k.rank, s.platform), []).append(s)  # type: ignore[attr-defined]
    blocks = []
    for (folder, runner, variant, rank, platform), members in sorted(groups.items()):
        batch_sizes, rows = kernel_matrix(members)
        what = "kernel"
        if not rows:  # no kernels (a CPU capture): its ops are what its goldens compare
            (batch_sizes, rows), what = op_matrix(members), "op"
        where = f"{folder} — " if folder not in ("", ".") else ""
        title = (
            f"{where}{runner}"
            + (f" [{variant}]" if variant else "")
            + f" rank {rank}, {platform}, level {members[0].level}"
            + (" (no kernels recorded: ops × batch size)" if what == "op" else "")
        )
        blocks.append("\n".join(render_matrix_text(title, batch_sizes, rows, what=what)))
    sys.stdout.write("\n\n".join(blocks) + "\n")
    return 0


def _cmd_accept(args: argparse.Namespace) -> int:
    from .accept import accept
    from .project import golden_dir, shown

    lines = accept(Path(args.harvest), shown(golden_dir(args.golden_dir)), only=args.only, dry_run=args.dry_run)
    sys.stdout.write("\n".join(lines) + "\n")
    return 0


def _cmd_merge(args: argparse.Namespace) -> int:
    from .merge import merge_rank_traces

    def warn(message: str) -> None:
        print(f"{PROG} merge: warning: {message}", file=sys.stderr)

    written = merge_rank_traces(Path(args.directory), out_dir=Path(args.out_dir) if args.out_dir else None, warn=warn)
    if not written:
        raise UsageError(
            f"{args.directory}: no group of per-rank traces with two or more ranks "
            f"(*_rank<r>.json.gz or *-TP-<r>.json.gz) to merge"
        )
    for path in written:
        print(path)
    return 0


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text!r}")
    return value


def _batch_size_option(parser: argparse.ArgumentParser) -> None:
    from .check import batch_sizes

    parser.add_argument(
        "--batch-size",
        type=_positive_int,
        metavar="N",
        help="batch size of a one-key trace that does not say its size (by default its key says bs=?)",
    )
    parser.add_argument(
        "--batch-sizes",
        type=batch_sizes,
        metavar="B1,B2,...",
        help="batch sizes of a single-capture trace's windows, in capture order (sglang: largest first), "
        "as for graphcapture check",
    )


def _version() -> str:
    """The installed distribution's version (what ``pip`` reports)."""
    try:
        return importlib.metadata.version("pytest-graphcapture")
    except importlib.metadata.PackageNotFoundError:
        return "unknown (not installed)"


def build_parser() -> argparse.ArgumentParser:
    """The argparse parser of ``graphcapture``."""
    parser = argparse.ArgumentParser(prog=PROG, description="Summarize and compare CUDA-graph capture traces.")
    parser.add_argument("--version", action="version", version=f"{PROG} (pytest-graphcapture) {_version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    p = sub.add_parser("summarize", help="print or write the summary JSON of trace files or graph dumps")
    p.add_argument(
        "traces",
        nargs="+",
        metavar="TRACE",
        help="capture trace (.json or .json.gz) or graph dump (.dot, .gv, .dot.gz)",
    )
    p.add_argument("--level", choices=LEVELS, default="name", help="kernel-name normalization level (default name)")
    p.add_argument("--replay", metavar="REPLAY_TRACE", help="trace of the graph's replay (kernel source on NVIDIA)")
    p.add_argument("--out", metavar="FILE", help="write the JSON here instead of stdout")
    _batch_size_option(p)
    p.set_defaults(func=_cmd_summarize)

    p = sub.add_parser(
        "diff", help="compare two summaries (summary JSON or trace files), or two capture/summary directories"
    )
    p.add_argument("expected", metavar="EXPECTED", help="summary JSON, trace, or directory (A)")
    p.add_argument("actual", metavar="ACTUAL", help="summary JSON, trace, or directory (B)")
    p.add_argument("--level", choices=LEVELS, default=None, help="compare at least at this level")
    _batch_size_option(p)
    p.set_defaults(func=_cmd_diff)

    p = sub.add_parser("show", help="text table of kernels x batch sizes for a directory")
    p.add_argument("directory", metavar="DIR")
    p.add_argument("--level", choices=LEVELS, default=None, help="normalize kernel names to this level")
    _batch_size_option(p)
    p.add_argument(
        "--html",
        metavar="OUT.html",
        help="write a self-contained HTML picture of the matrix instead "
        "(DIR is then searched recursively, one table per folder/runner/variant/rank)",
    )
    p.add_argument(
        "--against",
        metavar="GOLDEN_DIR",
        help="with --html: highlight kernels added, removed or "
        "changed against the goldens in the same folders under GOLDEN_DIR",
    )
    p.set_defaults(func=_cmd_show)

    p = sub.add_parser("accept", help="bring goldens harvested with --golden-out into the golden tree")
    p.add_argument("harvest", metavar="HARVEST_DIR", help="the folder --golden-out wrote (e.g. a CI artifact)")
    p.add_argument(
        "--golden-dir",
        metavar="DIR",
        help="the golden tree (default: the one a pytest run started here uses)",
    )
    p.add_argument("--only", metavar="PATTERN", help="accept only files whose path below HARVEST_DIR matches (fnmatch)")
    p.add_argument("--dry-run", action="store_true", help="report what would change; write nothing")
    p.set_defaults(func=_cmd_accept)

    from .check import add_parser as add_check

    add_check(sub)

    p = sub.add_parser("merge", help="merge per-rank traces into one Chrome trace per batch size")
    p.add_argument(
        "directory",
        metavar="DIR",
        help="folder with the per-rank traces (a test's folder under graph_capture_profile/)",
    )
    p.add_argument("--out-dir", metavar="OUT", help="write the merged traces here instead of DIR")
    p.set_defaults(func=_cmd_merge)
    return parser


def _run_with_clean_warnings(args: argparse.Namespace) -> int:
    """Run the command; each warning it raises becomes one ``graphcapture: warning: …`` line on stderr.

    A command-line user gets no Python warning text (category, source file and line).
    """
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            return int(args.func(args))
        finally:
            for message in dict.fromkeys(str(seen.message) for seen in caught):  # each once, in order
                print(f"{PROG}: warning: {message}", file=sys.stderr)


def _silence_stdout() -> None:
    """The reader is gone: point stdout at the null device so the interpreter's final flush stays quiet."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):  # no real file descriptor (captured in-process)
        pass


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point of the ``graphcapture`` console script; returns the exit code.

    Everything it prints shows control characters as escapes (:mod:`.terminal`).
    """
    with escaped_output():
        return _main(argv)


def _main(argv: Optional[Sequence[str]]) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        if getattr(args, "level", None):
            check_level(args.level)
        return _run_with_clean_warnings(args)
    except GraphCaptureError as exc:
        print(f"{PROG} {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as exc:  # its text, when a command gives one, says what the interruption left
        print(f"{PROG}: interrupted" + (f" {exc}" if str(exc) else ""), file=sys.stderr)
        return 130
    except BrokenPipeError:
        _silence_stdout()
        return getattr(args, "status", None) or 141
    except Exception as exc:  # a bug in our code: still one line, never a traceback
        print(f"{PROG} {args.command}: internal error (please report): {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
