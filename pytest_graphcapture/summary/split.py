"""Splitting one trace into its capture keys, from the markers the engine that wrote it left.

Engines profile their own CUDA-graph capture, each in its own layout, and a trace
holds as many keys as its markers say:

* **annotations** — vLLM (``ProfilerConfig.capture_torch_profiler``) records one
  ``capture_{bs}_{mode}`` range per captured shape (``record_function``), mode ``FULL``
  or ``PIECEWISE``: each range is a key (batch size, variant = mode), and the capture
  windows that begin inside it are its graphs, in capture order (a PIECEWISE shape is
  one graph per piece).  A window belongs to the innermost range it begins in (ranges
  that overlap without nesting are refused); a window in no range is kept in ``unkeyed``;
* **file name** — sglang's per-size traces (``{runner}_bs_{bs}_rank{rank}.json.gz``) and
  the plugin's own: one key, each capture window in it a graph;
* **windows** — a trace of the whole capture (sglang's
  ``cuda_graph_capture-{runner}-TP-{rank}.json.gz``, the plugin's single mode) marks no
  size: its windows, in capture order, are mapped to the batch sizes the caller lists
  in that order (sglang captures the largest first), one key each; a size listed several
  times in a row is one key of that many graphs (a batch size that captures more than one).
  Sizes whose order the windows' own input shapes contradict are refused;
* otherwise one key, as :func:`~..naming.key_from_trace_name` reads it (``bs=?`` when
  the trace does not say).

A trace whose name or ranges give its keys keeps them: batch sizes map only a trace that marks none.

Only what lies inside a capture window is a graph's: warmup kernels and the eager
attention between PIECEWISE pieces, inside a key's range but outside its windows,
run eagerly and are left out.  The file is read once and every event is assigned to
its window in one pass, however many keys the trace holds.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Sequence, Union

from .._io import gc_paused
from ..errors import TraceFormatError, UsageError
from ..keys import CaptureKey, is_int
from ..naming import key_from_trace_name, trace_stem
from .files import collect_trace_file
from .graphs import of_graphs
from .model import Summary
from .normalize import DEFAULT_LEVEL, check_level
from .platform import environment_from_trace, platform_from_trace
from .scan import CaptureWindows, _build, _Scan, _span_order, build_summary, launching_ops

#: vLLM's range around one captured shape: ``capture_{bs}_{mode}``, after a subsystem's prefix where it has one.
CAPTURE_MARK = re.compile(
    r"^(?:(?P<prefix>[A-Za-z][A-Za-z0-9_]*?)_)?capture_(?P<bs>[0-9]{1,9})_(?P<mode>[A-Za-z][A-Za-z0-9_]*)$"
)

#: sglang's one trace of the whole capture (and the plugin's single mode): ``cuda_graph_capture-{runner}-TP-{rank}``.
SINGLE_TRACE = re.compile(r"^cuda_graph_capture-(?P<runner>.+)-TP-(?P<rank>[0-9]+)$")

#: The range the engine-loop gate records around each graph begun inside a forward (a piece), so a
#: trace without capture calls (the CPU stand-ins) still tells the pieces apart.
PIECE_MARK = "graph-capture: graph"

#: A per-size trace name, as sglang and the plugin write it.
_PER_SIZE = re.compile(r"^.+?_bs_[0-9]+(?:_.+?)?_rank[0-9]+$")

#: What a profiler's trace handler adds to a file name: ``.pt.trace``, and a time stamp in milliseconds.
_HANDLER_PARTS = re.compile(r"(?:\.[0-9]{10,})?(?:\.pt\.trace)?$")


@dataclass
class TraceKeys:
    """The keys of one trace file: a Summary per key (its graphs in ``graphs``), in trace order."""

    path: Path
    summaries: list
    #: How the keys were found: ``annotations``, ``file name``, ``windows`` or ``one key``.
    split_by: str
    #: Capture windows in the trace (0: none, an eager trace or a capture that recorded nothing).
    windows: int
    platform: str
    #: Keys whose range holds no capture window (an annotation around nothing captured).
    empty: list = field(default_factory=list)
    #: Capture calls that could not be paired (a capture cut off by the profiler window), one sentence each.
    problems: list = field(default_factory=list)
    #: Start times of the capture windows in no ``capture_{bs}_{mode}`` range (graphs of no key).
    unkeyed: list = field(default_factory=list)


def stable_runner(path: Union[str, Path]) -> str:
    """A runner name from a trace file name, without what changes run to run (a trace handler's time stamp)."""
    stem = trace_stem(path)
    return _HANDLER_PARTS.sub("", stem) or stem


def batch_sizes_problem(sizes: Sequence[int]) -> Optional[str]:
    """What is wrong with ``sizes`` as batch sizes in capture order (None: nothing).

    A size may repeat only in a row (one key of that many graphs): apart, it would be two keys.
    """
    if not sizes or not all(is_int(b) and b >= 1 for b in sizes):
        return "batch sizes must be positive integers in capture order"
    for i, bs in enumerate(sizes):
        if bs in sizes[:i] and sizes[i - 1] != bs:
            return (
                f"{bs} is given twice, apart; a size repeats only in a row (one key of that many graphs), "
                f"in capture order"
            )
    return None


def summarize_trace_keys(
    path: Union[str, Path],
    *,
    batch_sizes: Optional[Sequence[int]] = None,
    runner: Optional[str] = None,
    level: str = DEFAULT_LEVEL,
    max_bytes: Optional[int] = None,
    check_order: bool = True,
) -> TraceKeys:
    """Every capture key of the trace at ``path``, each with its graphs (the module docstring says how).

    ``batch_sizes`` maps a single-capture trace's windows, in capture order, to batch
    sizes (the count must match; the refusal says how many windows there are);
    ``check_order`` refuses sizes whose order the windows' input shapes contradict;
    ``runner`` names the runner of every key instead of the trace's own name.
    """
    check_level(level)
    path = Path(path)
    if batch_sizes is not None:
        batch_sizes = list(batch_sizes)
        problem = batch_sizes_problem(batch_sizes)
        if problem is not None:
            raise UsageError(f"batch sizes {_listed(batch_sizes)}: {problem}")
    with gc_paused():
        scan, top = collect_trace_file(path, max_bytes=max_bytes)
        platform, environment = platform_from_trace(top), environment_from_trace(top)
        windows = scan.windows()
        spans = windows.spans if windows is not None else []
        plan, split_by = _plan(path, scan, top, spans, batch_sizes, runner)
        summaries = _summaries(scan, windows, plan, platform, level, environment)
        if split_by == "windows" and check_order:
            _check_order(path, batch_sizes, [g for s in summaries for g in (s.graphs or [s])])
    keyed = {w for _, graphs in plan for w in graphs}
    unkeyed = [spans[w][0] for w in range(len(spans)) if w not in keyed] if split_by == "annotations" else []
    # A range around no capture window captured nothing (with no window at all, every range is empty).
    empty = [s.key for s, (_, graphs) in zip(summaries, plan) if not graphs and (spans or split_by == "annotations")]
    problems = list(windows.problems) if windows is not None else []
    return TraceKeys(path, summaries, split_by, len(spans), platform, empty, problems, unkeyed)


def _listed(sizes: Sequence) -> str:
    return ",".join(map(str, sizes))


def _check_order(path: Path, batch_sizes: list, windows: list) -> None:
    """Refuse ``batch_sizes`` when the windows' own input shapes show the same sizes in another order.

    A window shows size ``s`` when more of its ops' inputs lead with ``s`` than in the window with
    fewest (what leads with ``s`` whatever the batch size); a window showing no size or several is
    ambiguous, and nothing is refused unless every window shows one.
    """
    sizes = set(batch_sizes)
    if len(sizes) < 2:
        return
    counts = [_leading_dims(w, sizes) for w in windows]
    floor = {s: min(c[s] for c in counts) for s in sizes}
    shown = []
    for c in counts:
        above = [s for s in sizes if c[s] > floor[s]]
        if len(above) != 1:
            return
        shown.append(above[0])
    if sorted(shown) == sorted(batch_sizes) and shown != batch_sizes:
        raise TraceFormatError(
            path,
            f"the batch sizes given in capture order ({_listed(batch_sizes)}) contradict the windows: their "
            f"inputs' leading dimensions show {_listed(shown)} in capture order; give the sizes in that order",
        )


def _leading_dims(summary: Summary, sizes: set) -> Counter:
    """How many inputs of the ops of ``summary`` lead with each of ``sizes``."""
    found: Counter = Counter()
    for op in summary.ops:
        for dims in op.get("input_dims") or ():
            if isinstance(dims, list) and dims and is_int(dims[0]) and dims[0] in sizes:
                found[dims[0]] += op.get("count", 1)
    return found


def _plan(
    path: Path,
    scan: _Scan,
    top: dict,
    spans: list,
    batch_sizes: Optional[list],
    runner: Optional[str],
) -> tuple[list, str]:
    """``([(key, [window index, ...]), ...], how)``: which windows are the graphs of which key."""
    stem = trace_stem(path)
    single = SINGLE_TRACE.match(stable_runner(path))
    everything = list(range(len(spans)))
    if _PER_SIZE.match(stem):  # its name gives its key, whatever sizes were given for a single trace
        key = key_from_trace_name(path, scan.annotations, top)
        return [(_renamed(key, runner), everything)], "file name"
    base = runner or (single.group("runner") if single else stable_runner(path))
    rank = int(single.group("rank")) if single else key_from_trace_name(path, (), top, unknown_ok=True).rank
    marks = [(name, start, end, pid) for name, start, end, pid in scan.annotation_spans if CAPTURE_MARK.match(name)]
    if marks:  # its ranges give its keys
        return _by_marks(path, marks, spans, runner, base, rank), "annotations"
    if batch_sizes is not None:
        if len(batch_sizes) != len(spans):
            raise TraceFormatError(
                path,
                f"holds {len(spans)} capture window{'s' if len(spans) != 1 else ''} but {len(batch_sizes)} batch "
                f"size{'s' if len(batch_sizes) != 1 else ''} were given; give one batch size per window, in capture "
                f"order (sglang captures the largest first)",
            )
        plan: list = []
        for i, bs in enumerate(batch_sizes):  # a size repeated in a row: one key of several graphs
            if plan and plan[-1][0].batch_size == bs:
                plan[-1][1].append(i)
            else:
                plan.append((CaptureKey(base, bs, None, rank), [i]))
        return plan, "windows"
    if single:
        raise TraceFormatError(
            path,
            f"is one trace of a whole capture and holds {len(spans)} capture window"
            f"{'s' if len(spans) != 1 else ''} with no batch-size marker; give the batch sizes in capture order "
            f"(largest first for sglang): --batch-sizes B1,B2,... on the command line, or batch_sizes=[...]",
        )
    key = key_from_trace_name(path, scan.annotations, top, unknown_ok=True)
    return [(_renamed(key, runner), everything)], "one key"


def summarize_graphs(scan: _Scan, key: CaptureKey, platform: str, level: str, environment: Optional[dict]) -> Summary:
    """One key whose capture forward held graphs: a Summary per graph, in capture order, and their sum.

    The graphs are the trace's capture windows; a trace without capture calls (the CPU
    stand-ins) is split by the :data:`PIECE_MARK` ranges instead.  As for an engine's own
    trace, what ran outside every graph (the eager ops between pieces) is left out.
    """
    windows = scan.windows()
    if windows is None or not windows.spans:
        windows = _marked_windows(scan)
    plan = [(key, list(range(len(windows.spans))))]
    return _summaries(scan, windows, plan, platform, level, environment or {})[0]


def _marked_windows(scan: _Scan) -> CaptureWindows:
    """The :data:`PIECE_MARK` ranges of ``scan`` as capture windows, each lent to every thread of its process."""
    spans = sorted({(s, e, pid) for name, s, e, pid in scan.annotation_spans if name == PIECE_MARK}, key=_span_order)
    of = [[(s, e) for s, e, p in spans if p is None or pid is None or p == pid] for pid, _tid in scan.threads]
    return CaptureWindows(of, [], spans)


def _renamed(key: CaptureKey, runner: Optional[str]) -> CaptureKey:
    return key if runner is None else CaptureKey(runner, key.batch_size, key.variant, key.rank)


def _by_marks(path: Path, marks: list, spans: list, runner: Optional[str], base: str, rank: int) -> list:
    """A key per ``capture_{bs}_{mode}`` range, in time order; its graphs the windows that begin inside it.

    A window begun in nested ranges is the innermost one's; in ranges that overlap without
    nesting, or in an outer range that keeps none of its own, it would be two keys': refused.
    """
    marks = sorted(dict.fromkeys(marks), key=lambda mark: (mark[1], mark[2]))
    plan: list = []
    for name, _start, _end, _pid in marks:
        found = CAPTURE_MARK.match(name)
        prefix = found.group("prefix")
        plan.append((CaptureKey(runner or prefix or base, int(found.group("bs")), found.group("mode"), rank), []))
    held: list = [[] for _ in marks]
    for i, (s, _, p) in enumerate(spans):
        around = [
            m for m, (_, start, end, pid) in enumerate(marks) if start <= s <= end and (pid is None or p in (None, pid))
        ]
        if not around:
            continue
        inner = max(around, key=lambda m: (marks[m][1], -marks[m][2]))
        for m in around:
            held[m].append(i)
            _, start, end, _ = marks[m]
            if m != inner and not (
                start <= marks[inner][1] and marks[inner][2] <= end and marks[m][1:3] != marks[inner][1:3]
            ):
                raise TraceFormatError(
                    path,
                    f"the ranges {marks[m][0]} and {marks[inner][0]} overlap without one inside the other, and the "
                    f"capture window at ts={s} begins in both; a window belongs to exactly one key",
                )
        plan[inner][1].append(i)
    for m, (name, _, _, _) in enumerate(marks):
        if held[m] and not plan[m][1]:
            inner = next(marks[n][0] for n, (_, graphs) in enumerate(plan) if n != m and held[m][0] in graphs)
            raise TraceFormatError(
                path,
                f"the range {name} holds only capture windows of the range {inner} inside it, so it captured "
                f"nothing of its own; a window belongs to exactly one key (the innermost range)",
            )
    return plan


def _summaries(
    scan: _Scan,
    windows: Optional[CaptureWindows],
    plan: list,
    platform: str,
    level: str,
    environment: dict,
) -> list:
    """A Summary per planned key, every op and launch assigned to its window in one pass over the records."""
    if windows is None or not windows.spans:  # no capture window: the whole trace is the one key
        return [_build(scan, key, platform, level, environment) for key, _ in plan]
    spans = windows.spans
    index_of: dict = {}
    for i, (start, end, _) in enumerate(spans):
        index_of.setdefault((start, end), []).append(i)
    locate = [_Locator(of, index_of) for of in windows.of]
    fine: list = [dict() for _ in spans]
    for ts, group, thread in zip(scan.op_ts, scan.op_group, scan.op_thread):
        for w in locate[thread].find(ts):
            counts = fine[w]
            counts[group] = counts.get(group, 0) + 1
    launches: list = [[] for _ in spans]
    inside = []
    for i, (ts, thread) in enumerate(zip(scan.launch_ts, scan.launch_tid)):
        found = locate[thread].find(ts)
        for w in found:
            launches[w].append(i)
        if found:
            inside.append(i)
    by_all = dict(zip(inside, launching_ops(scan, inside)))
    open_ended = [i for i, (start, end, _) in enumerate(spans) if start == float("-inf") or end == float("inf")]
    out = []
    for key, graphs in plan:
        parts = []
        for w in graphs:
            problems = windows.problems if (w in open_ended or not open_ended) else []
            ops = scan.entries_of(fine[w])
            by = [by_all[i] for i in launches[w]]
            parts.append(build_summary(scan, key, platform, level, environment, ops, launches[w], by, problems))
        if not parts:  # a range around no capture window: an empty key, which the gate reports
            parts = [build_summary(scan, key, platform, level, environment, [], [], [], None)]
        out.append(of_graphs(parts))
    return out


class _Locator:
    """Which windows of one thread hold a time: a binary search where its windows do not overlap."""

    def __init__(self, windows: list, index_of: dict) -> None:
        items = sorted({(start, end) for start, end in windows})
        self.items = [(start, end, index_of.get((start, end), [])) for start, end in items]
        self.starts = [start for start, _ in items]
        self.overlap = any(items[i + 1][0] <= items[i][1] for i in range(len(items) - 1))

    def find(self, ts: float) -> list:
        if not self.items:
            return _NONE
        if self.overlap:
            return [w for start, end, ws in self.items if start <= ts <= end for w in ws]
        at = bisect_right(self.starts, ts) - 1
        if at >= 0:
            start, end, ws = self.items[at]
            if start <= ts <= end:
                return ws
        return _NONE


_NONE: list = []
