"""``graphcapture``: summarize, diff, show, accept and check capture traces outside pytest (``--help`` lists them).

Exit codes: 0 equal/pass, 1 a difference, 2 bad input (one stderr line, never a traceback), 141 a reader gone before the answer.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.metadata
import inspect
import os
import shlex
import sys
import warnings
from pathlib import Path
from typing import Any, Iterable, Iterator, Optional, Sequence, TextIO, Union

from .._io import write_atomic
from ..errors import GoldenError, GraphCaptureError, UsageError
from ..golden import store
from ..golden.gate import CheckOptions, check_result
from ..golden.report import KeyRecord, SessionReport, picture_place, write_markdown
from ..golden.store import GoldenLock, ci_environment, reset_harvest
from ..golden.traces import collect_traces, describe
from ..keys import UNKNOWN_BATCH_SIZE, parse_batch_sizes, safe_name
from ..naming import GOLDEN_DIR_DEFAULT, GOLDEN_DIR_ENV, GOLDEN_DIR_OPTION, HARVEST_DIFF_NAME, setting_path
from ..summary.files import batch_sizes_problem, collect_trace_file, is_graph_dump
from ..summary.model import Summary
from ..summary.normalize import LEVELS, check_level
from ..summary.replay import with_replay
from .matrix import (
    at_level,
    coarsest,
    collect_tree,
    describe_differences,
    diff_keys,
    kernel_matrix,
    keyed,
    load_summaries,
    op_matrix,
    path_kind,
    render_matrix_text,
    table_key,
    table_title,
)

_PROG = "graphcapture"
#: The sub-folder of ``<golden-dir>/<platform>/`` a check's goldens live in unless ``--name`` says otherwise.
_DEFAULT_NAME = "engine-traces"


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


def _write(option: str, out: str, text: str) -> None:
    """Write an output file atomically (a failure leaves an existing one as it was); a failure is the option's error."""
    try:
        write_atomic(Path(out), text)
    except GraphCaptureError as exc:
        raise UsageError(f"{option} {out}: {getattr(exc, 'problem', exc)}") from None


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
        _write("--out", args.out, text)
    else:
        sys.stdout.write(text)
    return 0


def _cmd_diff(args: argparse.Namespace) -> int:
    sides = (args.expected, args.actual)
    kinds = [path_kind(p) for p in sides]
    for path, kind in zip(sides, kinds):
        if kind == "missing":
            raise UsageError(f"{path}: no such file or directory")
    if "a directory" in kinds:
        if kinds[0] != kinds[1]:
            raise UsageError(
                f"diff compares two files or two directories; got {kinds[0]} ({args.expected}) "
                f"and {kinds[1]} ({args.actual})"
            )
        a, b = (keyed(collect_tree(d, batch_size=args.batch_size, batch_sizes=args.batch_sizes), d) for d in sides)
        return _print_keyed(diff_keys(a, b, *sides, level=args.level))
    read = [load_summaries(path, batch_size=args.batch_size, batch_sizes=args.batch_sizes) for path in sides]
    if len(read[0]) != 1 or len(read[1]) != 1:  # a trace of several keys: compared key by key
        a, b = (keyed([(".", s) for s in summaries], path) for summaries, path in zip(read, sides))
        return _print_keyed(diff_keys(a, b, *sides, level=args.level))
    (expected,), (actual,) = read
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


def _print_keyed(result) -> int:
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
        _write("--html", args.html, page)
        print(f"wrote {args.html}")
        return 0
    groups: dict[tuple, list[Summary]] = {}  # one table per folder (searched recursively), runner, variant, rank
    pairs = collect_tree(args.directory, batch_size=args.batch_size, batch_sizes=args.batch_sizes)
    for folder, summary in at_level(pairs, args.level):
        groups.setdefault(table_key(folder, summary), []).append(summary)
    blocks = []
    for table, members in sorted(groups.items()):
        (batch_sizes, rows), what = kernel_matrix(members), "kernel"
        if not rows:  # no kernels (a CPU capture): its ops are what its goldens compare
            (batch_sizes, rows), what = op_matrix(members), "op"
        title = table_title(table, members[0].level) + (
            " (no kernels recorded: ops × batch size)" if what == "op" else ""
        )
        blocks.append("\n".join(render_matrix_text(title, batch_sizes, rows, what=what)))
    sys.stdout.write("\n\n".join(blocks) + "\n")
    return 0


def _cmd_accept(args: argparse.Namespace) -> int:
    from .accept import accept

    lines = accept(Path(args.harvest), _shown(_golden_dir(args.golden_dir)), only=args.only, dry_run=args.dry_run)
    sys.stdout.write("\n".join(lines) + "\n")
    return 0


def _batch_sizes(text: str) -> list[int]:
    """``8,4,2`` → ``[8, 4, 2]`` (capture order, repeats kept); argparse's error for anything else."""
    try:
        return parse_batch_sizes(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected positive batch sizes in capture order like 8,4,2, got {text!r}"
        ) from None


def _batch_size(text: str) -> int:
    try:
        (size,) = parse_batch_sizes(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text!r}") from None
    return size


def _batch_size_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--batch-size",
        type=_batch_size,
        metavar="N",
        help="batch size of a one-key trace that does not say its size (by default its key says bs=?)",
    )
    parser.add_argument(
        "--batch-sizes",
        type=_batch_sizes,
        metavar="B1,B2,...",
        help="batch sizes of a single-capture trace's windows, in capture order (sglang: largest first), "
        "as for graphcapture check",
    )


def _version() -> str:
    try:
        return importlib.metadata.version("pytest-graphcapture")
    except importlib.metadata.PackageNotFoundError:
        return "unknown (not installed)"


def build_parser() -> argparse.ArgumentParser:
    """The argparse parser of ``graphcapture``."""
    parser = argparse.ArgumentParser(prog=_PROG, description="Summarize and compare CUDA-graph capture traces.")
    parser.add_argument("--version", action="version", version=f"{_PROG} (pytest-graphcapture) {_version()}")
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

    what = (
        "table of a directory's kernels (GPU) or ops (CPU, which records no kernels) by batch size: text, "
        "or an HTML picture with --html; rows changed first (--against), compute ops before view ops, then by name"
    )
    p = sub.add_parser("show", help=what, description=what)
    p.add_argument(
        "directory",
        metavar="DIR",
        help="folder of summary JSON and trace files (*.json, *.json.gz), searched recursively: "
        "one table per folder/runner/variant/rank/platform",
    )
    p.add_argument("--level", choices=LEVELS, default=None, help="normalize kernel names to this level")
    _batch_size_option(p)
    p.add_argument("--html", metavar="OUT.html", help="write a self-contained HTML picture of the tables instead")
    p.add_argument(
        "--against",
        metavar="GOLDEN_DIR",
        help="with --html: highlight kernels and ops added, removed or "
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

    p = sub.add_parser("check", help="gate the capture traces an engine wrote against goldens (exit 0/1/2)")
    p.add_argument("traces", nargs="+", metavar="TRACE_OR_DIR", help="trace files, or folders searched for them")
    p.add_argument("--golden-dir", metavar="DIR", help="the golden tree (default: the one a pytest run here uses)")
    p.add_argument(
        "--name", default=_DEFAULT_NAME, help=f"goldens sub-folder below the platform (default {_DEFAULT_NAME})"
    )
    p.add_argument(
        "--batch-sizes",
        type=_batch_sizes,
        metavar="B1,B2,...",
        help="batch sizes of a single-capture trace's windows, in capture order (sglang: largest first); "
        "a size repeated in a row is one key of that many graphs",
    )
    p.add_argument(
        "--variants",
        type=lambda text: [v for v in text.split(",") if v],
        metavar="V1,V2,...",
        help="with --batch-sizes: each size captured one graph per variant, in this order (sglang: e.g. lora,nolora)",
    )
    p.add_argument("--runner", help="runner name of every key (default: from each trace)")
    p.add_argument(
        "--ignore-unkeyed-windows",
        action="store_true",
        help="check a trace whose capture windows lie in no capture_{bs}_{mode} range without them "
        "(they are still reported); by default such a trace is refused",
    )
    p.add_argument("--level", choices=LEVELS, default="name", help="kernel-name level compared (default name)")
    p.add_argument(
        "--update",
        action="store_const",
        const="all",
        help="write goldens: create missing ones, rewrite changed ones; with a folder named, also remove those of "
        "keys not in its traces (a trace file named updates its own keys only)",
    )
    p.add_argument(
        "--update-new", dest="update", action="store_const", const="new", help="write only the missing goldens"
    )
    p.add_argument("--update-on-ci", action="store_true", help="allow --update where a CI variable is set")
    p.add_argument("--golden-out", metavar="DIR", help="write every obtained summary here, in the golden layout")
    p.add_argument("--report-md", metavar="FILE", help="add the Markdown report to FILE (e.g. $GITHUB_STEP_SUMMARY)")
    p.set_defaults(func=_cmd_check)

    return parser


def _run_with_clean_warnings(args: argparse.Namespace) -> int:
    """Run the command; each warning it raises becomes one ``graphcapture: warning: …`` line on stderr (no Python text)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            return int(args.func(args))
        finally:
            for message in dict.fromkeys(str(seen.message) for seen in caught):  # each once, in order
                print(f"{_PROG}: warning: {message}", file=sys.stderr)


def _silence_stdout() -> None:
    """The reader is gone: point stdout at the null device so the interpreter's final flush stays quiet."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):  # no real file descriptor (captured in-process)
        pass


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point of the ``graphcapture`` console script; returns the exit code (control characters printed as escapes)."""
    with _escaped_output():
        return _main(argv)


def _main(argv: Optional[Sequence[str]]) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        if getattr(args, "level", None):
            check_level(args.level)
        return _run_with_clean_warnings(args)
    except GraphCaptureError as exc:
        print(f"{_PROG} {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as exc:  # its text, when a command gives one, says what the interruption left
        print(f"{_PROG}: interrupted" + (f" {exc}" if str(exc) else ""), file=sys.stderr)
        return 130
    except BrokenPipeError:
        _silence_stdout()
        return getattr(args, "status", None) or 141
    except Exception as exc:  # a bug in our code: still one line, never a traceback
        print(f"{_PROG} {args.command}: internal error (please report): {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2


# --------------------------------------------------------------------------- check


def _cmd_check(args: argparse.Namespace) -> int:
    """The ``check`` command: 0 pass, 1 a difference, 2 (raised as GraphCaptureError) bad input."""
    problem = batch_sizes_problem(args.batch_sizes) if args.batch_sizes else None
    if problem is not None:
        raise UsageError(f"--batch-sizes {','.join(map(str, args.batch_sizes))}: {problem}")
    golden_dir = _golden_dir(args.golden_dir)
    if args.update:
        ci_var = ci_environment()
        if ci_var is not None and not args.update_on_ci:
            raise UsageError(
                f"--update is refused on CI (environment variable {ci_var} is set): goldens are reviewed changes; "
                f"harvest the obtained summaries with --golden-out DIR and commit them, or pass --update-on-ci"
            )
    out_dir = Path(args.golden_out).resolve() if args.golden_out else None
    if out_dir is not None and (out_dir == golden_dir.resolve() or out_dir in golden_dir.resolve().parents):
        raise UsageError(
            f"--golden-out {args.golden_out}: holds the golden dir; the harvest goes to a folder of its own"
        )
    result = collect_traces(
        args.traces,
        batch_sizes=args.batch_sizes,
        runner=args.runner,
        level=args.level,
        ignore_unkeyed_windows=args.ignore_unkeyed_windows,
        variants=args.variants,
    )
    if out_dir is not None:
        reset_harvest(out_dir, f"--golden-out {args.golden_out}")
    for line in describe(result):
        print(line)
    name = safe_name(args.name)
    folder = golden_dir / result.platform / name
    out_folder = out_dir / result.platform / name if out_dir is not None else None
    lock = GoldenLock(golden_dir, writer="check") if args.update else None
    try:
        if lock is not None:
            try:
                lock.acquire()
            except GoldenError as exc:
                raise UsageError(f"--update: {exc}") from None
        outcome = check_result(
            result,
            golden_dir=golden_dir,
            folder=folder,
            out_folder=out_folder,
            update=args.update,
            options=CheckOptions(level=args.level),
            display=lambda p: str(_shown(Path(p))),
        )
        if args.update == "all":
            kept = {k.golden for k in outcome.keys} | {path for path, _ in outcome.unchecked}
            _unused(folder, kept, root=golden_dir)
    finally:
        if lock is not None:
            lock.release()
    return _report(args, outcome, golden_dir, out_folder, result.passed_over)


def _unused(folder: Path, kept: set, *, root: Path) -> None:
    """Under ``--update``, remove the goldens in ``folder`` outside ``kept`` (keys the traces should hold), naming each."""
    for path in store.golden_files(folder):
        if path not in kept:
            store.remove_golden(path, root)
            print(f"removed {_shown(path)}: its key is not in the traces")


def _report(
    args: argparse.Namespace, outcome, golden_dir: Path, out_folder: Optional[Path], passed_over: Optional[str]
) -> int:
    rerun = _rerun_command(args, golden_dir)
    obtained = str(_shown(out_folder)) if out_folder else None
    report = SessionReport(golden_dir=str(_shown(golden_dir)), update_mode=args.update, obtained_dir=obtained)
    node = f"graphcapture check {args.name}"
    for key in outcome.keys:
        rel = key.golden.relative_to(golden_dir).as_posix()
        state = "failed" if key.outcome == "passed" and key.failed else key.outcome
        report.add_record(KeyRecord(node, outcome.platform, key.label, rel, state, key.incomplete))
    lines: list[str] = []
    failed = bool(outcome.failed)
    if outcome.failed:
        full_diff = str(_shown(out_folder / HARVEST_DIFF_NAME)) if out_folder else None  # written below
        head, body, tail = outcome.failure_parts(
            rerun=rerun, display=lambda p: str(_shown(Path(p))), ci_var=ci_environment(), full_diff=full_diff
        )
        tail = [t.replace("--update-golden", "--update") for t in tail]
        lines = [head, *body, *tail]
        if out_folder is not None:
            write_atomic(out_folder / HARVEST_DIFF_NAME, "\n".join([head, *outcome.per_key_lines(), *tail]) + "\n")
    incomplete = [k for k in outcome.keys if k.incomplete is not None]
    lines += [f"incomplete: {k.label}: {k.incomplete}" for k in incomplete]
    for why in dict.fromkeys(why for _, why in outcome.unchecked):
        names = [path.name for path, w in outcome.unchecked if w == why]
        lines.append(f"not checked: {len(names)} golden(s) in {_shown(outcome.folder)}/, {why}: {', '.join(names)}")
        report.notes.append(lines[-1][len("not checked: ") :])
    if failed:
        lines += [passed_over] if passed_over else []
        report.add_failure(node, outcome.platform, "\n".join(lines) + "\n")
    else:
        written = [k for k in outcome.keys if k.outcome in ("created", "updated")]
        notes = [f"{len(written)} written"] if written else []
        notes += [f"{len(incomplete)} incomplete"] if incomplete else []
        notes += [f"{len(outcome.unchecked)} golden(s) not checked"] if outcome.unchecked else []
        notes += [passed_over] if passed_over else []
        lines.append(
            f"{len(outcome.keys)} key(s) match their goldens in {_shown(outcome.folder)}/"
            + (f" ({', '.join(notes)})" if notes else "")
        )
    for message in outcome.warnings:
        lines.append(f"warning: {message}")
    print("\n".join(lines))
    if args.report_md:
        target = Path(args.report_md)
        try:
            if out_folder is not None:  # the picture, as the pytest gate writes it
                _write_picture(target, out_folder, golden_dir, outcome, report, args.level)
            write_markdown(target, report.markdown())
        except GraphCaptureError as exc:
            raise UsageError(f"--report-md {args.report_md}: {getattr(exc, 'problem', exc)}") from None
    return 1 if failed else 0


def _rerun_command(args: argparse.Namespace, golden_dir: Path) -> str:
    """The ``graphcapture check`` command that checks the same traces against the same goldens."""
    words = ["graphcapture", "check", *args.traces, "--golden-dir", str(_shown(golden_dir))]
    if args.name != _DEFAULT_NAME:
        words += ["--name", args.name]
    if args.batch_sizes:
        words += ["--batch-sizes", ",".join(map(str, args.batch_sizes))]
    if args.variants:
        words += ["--variants", ",".join(args.variants)]
    if args.runner:
        words += ["--runner", args.runner]
    if args.ignore_unkeyed_windows:
        words.append("--ignore-unkeyed-windows")
    if args.level != "name":
        words += ["--level", args.level]
    return " ".join(shlex.quote(str(w)) for w in words)


def _write_picture(report_md: Path, out_folder: Path, golden_dir: Path, outcome, report, level: str) -> None:
    """The kernel × batch-size picture of the obtained summaries against the goldens (see :func:`picture_place`)."""
    from .picture import session_picture

    folder = out_folder.relative_to(out_folder.parents[1]).as_posix()  # <platform>/<name>
    harvest = out_folder.parents[1]
    page = session_picture(
        harvest,
        golden_dir,
        [folder],
        level=level,
        source=f"obtained summaries in {_shown(harvest)} against goldens in {_shown(golden_dir)}",
    )
    target, report.picture = picture_place(report_md, harvest)
    write_atomic(target, page)
    report.picture_file = None if report.picture else str(_shown(target))


# --------------------------------------------------------------------------- terminal output
# Names come from files anyone writes: control characters print escaped (JSON's spelling, so JSON stays valid);
# stdout is written whole, so a reader that leaves ends in BrokenPipeError (exit 141), never in cut output.

# Characters that steer a terminal: C0 controls but newline and tab, DEL, C1 controls (CSI among them), bidi controls.
_STEERING = [*(c for c in range(0x20) if chr(c) not in "\n\t"), *range(0x7F, 0xA0), *range(0x202A, 0x202F)]
_STEERING += [*range(0x2066, 0x206A), 0x200E, 0x200F, 0x061C]
_ESCAPES = {code: f"\\u{code:04x}" for code in _STEERING}


def printable(text: str) -> str:
    """``text`` with every terminal-steering character written as a visible ``\\uXXXX`` escape."""
    return text.translate(_ESCAPES)


class _Printable:
    """A text stream that writes :func:`printable` text to the stream it wraps (anything else: delegated)."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        self._stream.write(printable(text))
        return len(text)

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


class _WholeWrites:
    """A text stream writing straight to ``stream``'s file descriptor until every byte is out (a short write: again)."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self._fd = stream.fileno()

    def write(self, text: str) -> int:
        data = memoryview(text.encode(self._stream.encoding or "utf-8", self._stream.errors or "strict"))
        while data:
            data = data[os.write(self._fd, data) :]
        return len(text)

    def flush(self) -> None:
        """Nothing is held back: every write went out whole."""

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def _whole_writes(stream: TextIO) -> Any:
    """``stream`` as :class:`_WholeWrites` where it is a real file on POSIX; as it is otherwise (captured in-process)."""
    if os.name != "posix":  # text-mode newline translation is the stream's own there
        return stream
    try:
        stream.flush()
        stream.fileno()
    except (AttributeError, OSError, ValueError):
        return stream
    return _WholeWrites(stream)


@contextlib.contextmanager
def _escaped_output() -> Iterator[None]:
    """While inside: ``sys.stdout`` and ``sys.stderr`` print control characters as escapes, stdout in whole writes."""
    saved = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = _Printable(_whole_writes(sys.stdout)), _Printable(sys.stderr)  # type: ignore[assignment]
    try:
        yield
    finally:
        sys.stdout, sys.stderr = saved


# --------------------------------------------------------------------------- the golden tree a pytest run here uses
# Found by pytest's own rootdir and ini discovery and the plugin's relative-path rule (naming.setting_path).

_GOLDEN_DIR_INI = GOLDEN_DIR_OPTION.lstrip("-").replace("-", "_")


def _pytest_setup(invocation_dir: Path) -> tuple[Path, Optional[Path], dict[str, Any]]:
    """``(rootdir, ini file or None, ini values)`` as pytest started in ``invocation_dir`` with no arguments finds them."""
    import pytest
    from _pytest.config import findpaths

    # The discovery function's keywords changed between pytest 7.4 and 9; pass those it takes.
    offered: dict[str, Any] = {
        "inifile": None,
        "override_ini": None,
        "args": [],
        "rootdir_cmd_arg": None,
        "invocation_dir": invocation_dir,
        "config": None,
    }
    accepted = inspect.signature(findpaths.determine_setup).parameters
    try:
        found = findpaths.determine_setup(**{k: v for k, v in offered.items() if k in accepted})
    except pytest.UsageError as exc:
        raise UsageError(f"cannot read the pytest configuration found from {invocation_dir}: {exc}") from None
    rootdir, inipath, inicfg = found[0], found[1], found[2]
    # pytest 9 wraps each ini value in an object with ``.value``.
    values = {key: getattr(value, "value", value) for key, value in (inicfg or {}).items()}
    return Path(rootdir), (Path(inipath) if inipath else None), values


def _golden_dir(option: Optional[str]) -> Path:
    """The golden tree as the plugin finds it: ``--golden-dir`` > environment > ini ``golden_dir`` > rootdir's ``goldens``."""
    here = Path.cwd()
    if option:
        return _folder(setting_path(option, "option", invocation_dir=here, inipath=None, rootdir=here), "--golden-dir")
    env = os.environ.get(GOLDEN_DIR_ENV, "").strip()
    if env:
        where = f"environment variable {GOLDEN_DIR_ENV}"
        return _folder(setting_path(env, where, invocation_dir=here, inipath=None, rootdir=here), where)
    rootdir, inipath, values = _pytest_setup(here)
    ini = values.get(_GOLDEN_DIR_INI)
    if isinstance(ini, str) and ini.strip():
        where = f"ini key {_GOLDEN_DIR_INI}"
        return _folder(setting_path(ini.strip(), where, invocation_dir=here, inipath=inipath, rootdir=rootdir), where)
    if ini not in (None, "", []):
        raise UsageError(f"{inipath}: ini key {_GOLDEN_DIR_INI} must be one directory, not {ini!r}")
    path = setting_path(GOLDEN_DIR_DEFAULT, "default", invocation_dir=here, inipath=inipath, rootdir=rootdir)
    return _folder(path, "the default golden dir")


def _folder(path: Path, where: str) -> Path:
    """``path`` unless something other than a folder is there: goldens are files inside a folder, never one file."""
    if (path.exists() or path.is_symlink()) and not path.is_dir():
        kind = "a file" if path.is_file() else "not a folder (a special file or a broken link)"
        raise UsageError(f"{where} {path}: is {kind}; the golden tree must be a folder (name a folder, or a new path)")
    return path


def _shown(path: Path) -> Path:
    """``path`` relative to the invocation directory when it lies below it (shorter to read), else as is."""
    try:
        return path.relative_to(Path.cwd())
    except ValueError:
        return path
