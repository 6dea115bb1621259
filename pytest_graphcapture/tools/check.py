"""``graphcapture check``: the golden gate over the capture traces an engine wrote, without pytest.

``graphcapture check TRACE_OR_DIR... --golden-dir DIR`` reads every trace (folders are
searched), splits each into its capture keys (:mod:`~..golden.traces`) and compares
them with the goldens in ``<golden-dir>/<platform>/<name>/`` (``--name``, default
``engine-traces``; the platform comes from the traces) through the same gate as
``golden.check``: same golden files, diff and failure text.

Exit codes: 0 every key matches its golden; 1 a key differs, has no golden, or a
golden's key is missing from the traces; 2 bad input, an incomplete capture, or
nothing to check (one line on stderr).  ``--update`` (``--update-new``: only missing ones) writes goldens with the
safety of ``--update-golden`` (the golden tree's write lock, atomic writes, refused
when ``CI`` is set unless ``--update-on-ci``); ``--golden-out DIR`` writes every
obtained summary in the golden layout (and the full diff) for ``graphcapture accept``;
``--report-md FILE`` adds the Markdown report to FILE (for ``$GITHUB_STEP_SUMMARY``).
"""

from __future__ import annotations

import argparse
import shlex
from pathlib import Path
from typing import Optional

from .._io import write_atomic
from ..errors import GoldenError, GraphCaptureError, UsageError
from ..golden import store
from ..golden.gate import CheckOptions, check_result
from ..golden.report import KeyRecord, SessionReport, picture_place, write_markdown
from ..golden.store import GoldenLock, ci_environment, reset_harvest
from ..golden.traces import collect_traces, describe
from ..keys import safe_name
from ..naming import HARVEST_DIFF_NAME
from ..summary.files import batch_sizes_problem
from ..summary.normalize import LEVELS
from .project import golden_dir as resolve_golden_dir
from .project import shown

#: The sub-folder of ``<golden-dir>/<platform>/`` a check's goldens live in unless ``--name`` says otherwise.
DEFAULT_NAME = "engine-traces"


def batch_sizes(text: str) -> list[int]:
    """``8,4,2`` → ``[8, 4, 2]`` (capture order); argparse's error for anything else."""
    try:
        sizes = [int(part) for part in text.replace(" ", "").split(",") if part]
    except ValueError:
        sizes = []
    if not sizes or any(bs < 1 for bs in sizes):
        raise argparse.ArgumentTypeError(f"expected positive batch sizes in capture order like 8,4,2, got {text!r}")
    return sizes


def add_parser(sub: "argparse._SubParsersAction") -> None:
    """Register ``check`` with the ``graphcapture`` parser."""
    p = sub.add_parser("check", help="gate the capture traces an engine wrote against goldens (exit 0/1/2)")
    p.add_argument("traces", nargs="+", metavar="TRACE_OR_DIR", help="trace files, or folders searched for them")
    p.add_argument("--golden-dir", metavar="DIR", help="the golden tree (default: the one a pytest run here uses)")
    p.add_argument(
        "--name", default=DEFAULT_NAME, help=f"goldens sub-folder below the platform (default {DEFAULT_NAME})"
    )
    p.add_argument(
        "--batch-sizes",
        type=batch_sizes,
        metavar="B1,B2,...",
        help="batch sizes of a single-capture trace's windows, in capture order (sglang: largest first); "
        "a size repeated in a row is one key of that many graphs",
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
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """The ``check`` command: 0 pass, 1 a difference, 2 (raised as GraphCaptureError) bad input."""
    problem = batch_sizes_problem(args.batch_sizes) if args.batch_sizes else None
    if problem is not None:
        raise UsageError(f"--batch-sizes {','.join(map(str, args.batch_sizes))}: {problem}")
    golden_dir = resolve_golden_dir(args.golden_dir)
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
            display=lambda p: str(shown(Path(p))),
        )
        if args.update == "all":
            kept = {k.golden for k in outcome.keys} | {path for path, _ in outcome.unchecked}
            _unused(folder, kept, root=golden_dir)
    finally:
        if lock is not None:
            lock.release()
    return _report(args, outcome, golden_dir, out_folder)


def _unused(folder: Path, kept: set, *, root: Path) -> None:
    """Under ``--update``, remove the goldens in ``folder`` of keys the traces should hold and do not, naming each.

    Goldens of keys the named traces do not cover (``kept``) are another trace's: never removed.
    """
    for path in store.golden_files(folder):
        if path not in kept:
            store.remove_golden(path, root)
            print(f"removed {shown(path)}: its key is not in the traces")


def _report(args: argparse.Namespace, outcome, golden_dir: Path, out_folder: Optional[Path]) -> int:
    rerun = _rerun_command(args, golden_dir)
    obtained = str(shown(out_folder)) if out_folder else None
    report = SessionReport(golden_dir=str(shown(golden_dir)), update_mode=args.update, obtained_dir=obtained)
    node = f"graphcapture check {args.name}"
    for key in outcome.keys:
        rel = key.golden.relative_to(golden_dir).as_posix()
        state = "failed" if key.outcome == "passed" and key.failed else key.outcome
        report.add_record(KeyRecord(node, outcome.platform, key.label, rel, state, key.incomplete))
    lines: list[str] = []
    failed = bool(outcome.failed)
    if outcome.failed:
        full_diff = str(shown(out_folder / HARVEST_DIFF_NAME)) if out_folder else None  # written below
        head, body, tail = outcome.failure_parts(
            rerun=rerun, display=lambda p: str(shown(Path(p))), ci_var=ci_environment(), full_diff=full_diff
        )
        tail = [t.replace("--update-golden", "--update") for t in tail]
        lines = [head, *body, *tail]
        if out_folder is not None:
            write_atomic(out_folder / HARVEST_DIFF_NAME, "\n".join([head, *outcome.per_key_lines(), *tail]) + "\n")
    incomplete = [k for k in outcome.keys if k.incomplete is not None]
    lines += [f"incomplete: {k.label}: {k.incomplete}" for k in incomplete]
    for why in dict.fromkeys(why for _, why in outcome.unchecked):
        names = [path.name for path, w in outcome.unchecked if w == why]
        lines.append(f"not checked: {len(names)} golden(s) in {shown(outcome.folder)}/, {why}: {', '.join(names)}")
        report.notes.append(lines[-1][len("not checked: ") :])
    if failed:
        report.add_failure(node, outcome.platform, "\n".join(lines) + "\n")
    else:
        written = [k for k in outcome.keys if k.outcome in ("created", "updated")]
        notes = [f"{len(written)} written"] if written else []
        notes += [f"{len(incomplete)} incomplete"] if incomplete else []
        notes += [f"{len(outcome.unchecked)} golden(s) not checked"] if outcome.unchecked else []
        lines.append(
            f"{len(outcome.keys)} key(s) match their goldens in {shown(outcome.folder)}/"
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
    words = ["graphcapture", "check", *args.traces, "--golden-dir", str(shown(golden_dir))]
    if args.name != DEFAULT_NAME:
        words += ["--name", args.name]
    if args.batch_sizes:
        words += ["--batch-sizes", ",".join(map(str, args.batch_sizes))]
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
        source=f"obtained summaries in {shown(harvest)} against goldens in {shown(golden_dir)}",
    )
    target, report.picture = picture_place(report_md, harvest)
    write_atomic(target, page)
    report.picture_file = None if report.picture else str(shown(target))
