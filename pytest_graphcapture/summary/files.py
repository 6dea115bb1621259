"""Summaries of files: capture traces (split into keys by engine markers), replays, graph dumps, summary JSON."""

from __future__ import annotations

import gzip
import re
import zlib
from bisect import bisect_right
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Sequence, Union

from .._io import JSONProblem, gc_paused, loads_strict, require_regular
from ..errors import TraceEventError, TraceFormatError, UsageError
from ..keys import CaptureKey, is_int
from ..naming import key_from_trace_name, trace_stem
from .dot import is_dump_name
from .model import Summary, of_graphs, summary_from_dict
from .normalize import DEFAULT_LEVEL, check_level
from .platform import environment_from_trace, platform_from_trace
from .replay import with_replay
from .scan import CaptureWindows, Scan, build_summary, launching_ops, scan_events, window_order, window_summary
from .tracefile import Unusual, load_trace, stream_trace

#: The top-level field of a merged multi-rank trace (``graphcapture merge``) that describes the merge.
MERGED_FIELD = "graphcapture_merged"

#: The field of :data:`MERGED_FIELD` that says the ranks' correlation ids were made rank-unique.
MERGED_CORRELATION = "correlation"

#: How a graph dump starts (after a byte-order mark, white space and comments): Graphviz's graph header.
_DOT_START = re.compile(rb"(?:\xef\xbb\xbf)?(?:\s+|//[^\n]*|/\*.*?\*/|#[^\n]*)*(?:strict\s+)?(?:di)?graph\b", re.DOTALL)


def is_graph_dump(path: Union[str, Path]) -> bool:
    """Whether ``path`` is a graph dump (DOT): named ``.dot``/``.gv`` (maybe ``.gz``), or a file that starts like one."""
    if is_dump_name(path):
        return True
    if not Path(path).is_file():  # a FIFO or a device would block the read: the reader refuses them
        return False
    try:
        with open(path, "rb") as handle:
            head = handle.read(4096)
        if head[:2] == b"\x1f\x8b":
            with gzip.open(path, "rb") as handle:
                head = handle.read(4096)
    except (OSError, EOFError, zlib.error):
        return False
    return _DOT_START.match(head) is not None


def collect_trace_file(path: Union[str, Path], *, max_bytes: Optional[int] = None) -> tuple[Scan, dict]:
    """The collected events of a trace file and its top-level fields, read in slices (bounded memory)."""
    scan = Scan()
    try:
        top = stream_trace(path, scan, max_bytes=max_bytes)
    except Unusual:
        trace = load_trace(path, max_bytes=max_bytes)
        _refuse_colliding_ranks(path, trace)
        try:
            return scan_events(trace["traceEvents"]), trace
        except TraceEventError as exc:
            raise TraceFormatError(path, str(exc)) from None
    _refuse_colliding_ranks(path, top)
    return scan, top


def _refuse_colliding_ranks(path: Union[str, Path], top: dict) -> None:
    """Refuse a merged trace whose ranks share correlation ids: kernels would join another rank's launches."""
    merged = top.get(MERGED_FIELD)
    if isinstance(merged, dict) and MERGED_CORRELATION not in merged:
        raise TraceFormatError(
            path,
            "merged by an older graphcapture merge, which kept each rank's own correlation ids, so a kernel "
            "cannot be told from another rank's; merge the rank traces again (graphcapture merge DIR)",
        )


def summarize_trace_file(
    path: Union[str, Path],
    *,
    key: Optional[CaptureKey] = None,
    level: str = DEFAULT_LEVEL,
    replay_path: Union[str, Path, None] = None,
    max_bytes: Optional[int] = None,
    batch_size: Optional[int] = None,
    unknown_batch_size_ok: bool = False,
) -> Summary:
    """Summarize a ``.json``/``.json.gz`` trace file, optionally with the graph's replay trace."""
    check_level(level)
    with gc_paused():
        scan, trace = collect_trace_file(path, max_bytes=max_bytes)
        if key is None:
            key = key_from_trace_name(
                path, scan.annotations, trace, batch_size=batch_size, unknown_ok=unknown_batch_size_ok
            )
        summary = build_summary(scan, key, platform_from_trace(trace), level, environment_from_trace(trace))
        del trace, scan
        replay = None
        if replay_path is not None:
            replay = collect_trace_file(replay_path, max_bytes=max_bytes)[0].replay_kernels()
    if replay is not None:
        summary = with_replay(summary, replay)
    return summary


def load_summary_file(path: Union[str, Path]) -> Summary:
    """Read a summary JSON file written by :meth:`Summary.to_json`."""
    require_regular(path, error=TraceFormatError)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise TraceFormatError(path, f"cannot read summary: {exc}") from None
    try:
        data = loads_strict(text)
    except JSONProblem as exc:
        raise TraceFormatError(path, str(exc)) from None
    return summary_from_dict(data, str(path))


#: vLLM's range around one captured shape: ``capture_{bs}_{mode}``, after a subsystem's prefix where it has one.
_CAPTURE_MARK = re.compile(
    r"^(?:(?P<prefix>[A-Za-z][A-Za-z0-9_]*?)_)?capture_(?P<bs>[0-9]{1,9})_(?P<mode>[A-Za-z][A-Za-z0-9_]*)$"
)

#: sglang's one trace of the whole capture (and the plugin's single mode): ``cuda_graph_capture-{runner}-TP-{rank}``.
_SINGLE_TRACE = re.compile(r"^cuda_graph_capture-(?P<runner>.+)-TP-(?P<rank>[0-9]+)$")

#: The engine loop's marker around each graph begun in a forward: a trace without capture calls still splits.
PIECE_MARK = "graph-capture: graph"

#: A per-size trace name, as sglang and the plugin write it.
_PER_SIZE = re.compile(r"^(?:.+?_)?bs_[0-9]+(?:_.+?)?_rank[0-9]+$")

#: What a profiler's trace handler adds to a file name: ``.pt.trace``, and a time stamp (vLLM's: ``time_ns``).
_HANDLER_PARTS = re.compile(r"(?:\.(?P<stamp>[0-9]{10,}))?(?:\.pt\.trace)?$")


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


def _stable_runner(path: Union[str, Path]) -> str:
    """A runner name from a trace file name, without what changes run to run (a trace handler's time stamp)."""
    stem = trace_stem(path)
    return _HANDLER_PARTS.sub("", stem) or stem


def handler_stamp(path: Union[str, Path]) -> Optional[int]:
    """The time stamp a trace handler put in the file name (``name.<time_ns>.pt.trace.json.gz``), or None."""
    stamp = _HANDLER_PARTS.search(trace_stem(path)).group("stamp")  # type: ignore[union-attr]
    return int(stamp) if stamp else None


def batch_sizes_problem(sizes: Sequence[int]) -> Optional[str]:
    """What is wrong with ``sizes`` as batch sizes in capture order (None: nothing)."""
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
    variants: Optional[Sequence[str]] = None,
) -> TraceKeys:
    """Every capture key of the trace at ``path`` with its graphs: by engine markers, file name or sizes given (each
    size one window per ``variants`` label, in capture order: sglang's LoRA and attention variants)."""
    check_level(level)
    path = Path(path)
    if batch_sizes is not None:
        batch_sizes = list(batch_sizes)
        problem = batch_sizes_problem(batch_sizes)
        if problem is not None:
            raise UsageError(f"batch sizes {_listed(batch_sizes)}: {problem}")
    if variants is not None and (not batch_sizes or len(set(variants)) != len(variants) or not all(variants)):
        raise UsageError(f"--variants {_listed(variants)}: distinct labels in capture order, with --batch-sizes")
    sized = [(bs, v) for bs in batch_sizes for v in variants or [None]] if batch_sizes is not None else None
    with gc_paused():
        scan, top = collect_trace_file(path, max_bytes=max_bytes)
        platform, environment = platform_from_trace(top), environment_from_trace(top)
        windows = scan.windows()
        spans = windows.spans if windows is not None else []
        plan, split_by = _plan(path, scan, top, spans, sized, runner)
        summaries = _summaries(scan, windows, plan, platform, level, environment)
        if split_by == "windows" and check_order:
            _check_order(path, [bs for bs, _ in sized], [g for s in summaries for g in (s.graphs or [s])])
    keyed = {w for _, graphs in plan for w in graphs}
    unkeyed = [spans[w][0] for w in range(len(spans)) if w not in keyed] if split_by == "annotations" else []
    # A range around no capture window captured nothing (with no window at all, every range is empty).
    empty = [s.key for s, (_, graphs) in zip(summaries, plan) if not graphs and (spans or split_by == "annotations")]
    problems = list(windows.problems) if windows is not None else []
    return TraceKeys(path, summaries, split_by, len(spans), platform, empty, problems, unkeyed)


def _listed(sizes: Sequence) -> str:
    return ",".join(map(str, sizes))


def _check_order(path: Path, batch_sizes: list, windows: list) -> None:
    """Refuse ``batch_sizes`` when the windows' own input shapes show the same sizes in another order."""
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


def size_shown(summary: Summary, named: int, sizes: set) -> Optional[int]:
    """The size of ``sizes`` a window's inputs lead with most when none leads with its ``named`` size; else None."""
    found = _leading_dims(summary, sizes | {named})
    shown = max(sorted(sizes), key=lambda s: found[s], default=named)
    return shown if found[named] == 0 and found[shown] > 0 else None


def is_sidecar(path: Union[str, Path], *, max_bytes: int = 1 << 24) -> bool:
    """A small JSON file that is no trace and not named like one (TraceLens's ``execution_details.json``)."""
    if "trace" in (name := trace_stem(path)).lower() or _PER_SIZE.match(name) or _SINGLE_TRACE.match(name):
        return False
    try:
        with open(path, "rb") as handle:
            data = handle.read(max_bytes + 1)
        data = gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data
        top = loads_strict(data.decode("utf-8")) if len(data) <= max_bytes else None
    except (OSError, EOFError, zlib.error, UnicodeDecodeError, JSONProblem):
        return False
    return top is not None and not (isinstance(top, dict) and "traceEvents" in top)


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
    scan: Scan,
    top: dict,
    spans: list,
    batch_sizes: Optional[list],
    runner: Optional[str],
) -> tuple[list, str]:
    """``([(key, [window index, ...]), ...], how)``: which windows are the graphs of which key."""
    stem = trace_stem(path)
    single = _SINGLE_TRACE.match(_stable_runner(path))
    everything = list(range(len(spans)))
    if _PER_SIZE.match(stem):  # its name gives its key, whatever sizes were given for a single trace
        key = key_from_trace_name(path, scan.annotations, top)
        return [(_renamed(key, runner), everything)], "file name"
    base = runner or (single.group("runner") if single else _stable_runner(path))
    rank = int(single.group("rank")) if single else key_from_trace_name(path, (), top, unknown_ok=True).rank
    markers = [(name, start, end, pid) for name, start, end, pid in scan.annotation_spans if _CAPTURE_MARK.match(name)]
    if markers:  # its ranges give its keys
        return _keys_by_marker(path, markers, spans, runner, base, rank), "annotations"
    if batch_sizes is not None:
        if len(batch_sizes) != len(spans):
            n = len({variant for _, variant in batch_sizes})
            per = f" ({len(batch_sizes) // n} sizes x {n} variants)" if n > 1 else ""
            raise TraceFormatError(
                path,
                f"holds {len(spans)} capture window{'s' if len(spans) != 1 else ''} but {len(batch_sizes)} batch "
                f"size{'s' if len(batch_sizes) != 1 else ''} were given{per}; give one batch size per window, in capture "
                f"order (sglang captures the largest first)",
            )
        plan: list = []
        for i, (bs, variant) in enumerate(batch_sizes):  # a key repeated in a row: one key of several graphs
            key = CaptureKey(base, bs, variant, rank)
            if plan and plan[-1][0] == key:
                plan[-1][1].append(i)
            else:
                plan.append((key, [i]))
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


def summarize_graphs(scan: Scan, key: CaptureKey, platform: str, level: str, environment: Optional[dict]) -> Summary:
    """One key whose capture forward held graphs: a Summary per graph, in capture order, and their sum."""
    windows = scan.windows()
    if windows is None or not windows.spans:
        windows = _windows_by_marker(scan)
    plan = [(key, list(range(len(windows.spans))))]
    return _summaries(scan, windows, plan, platform, level, environment or {})[0]


def _windows_by_marker(scan: Scan) -> CaptureWindows:
    """The :data:`PIECE_MARK` ranges of ``scan`` as capture windows, each lent to every thread of its process."""
    spans = sorted({(s, e, pid) for name, s, e, pid in scan.annotation_spans if name == PIECE_MARK}, key=window_order)
    of = [[(s, e) for s, e, p in spans if p is None or pid is None or p == pid] for pid, _tid in scan.threads]
    return CaptureWindows(of, [], spans)


def _renamed(key: CaptureKey, runner: Optional[str]) -> CaptureKey:
    return key if runner is None else CaptureKey(runner, key.batch_size, key.variant, key.rank)


def _keys_by_marker(path: Path, markers: list, spans: list, runner: Optional[str], base: str, rank: int) -> list:
    """A key per ``capture_{bs}_{mode}`` range, in time order; its graphs the windows that begin inside it."""
    markers = sorted(dict.fromkeys(markers), key=lambda marker: (marker[1], marker[2]))
    plan: list = []
    for name, _start, _end, _pid in markers:
        found = _CAPTURE_MARK.match(name)
        prefix = found.group("prefix")
        plan.append((CaptureKey(runner or prefix or base, int(found.group("bs")), found.group("mode"), rank), []))
    held: list = [[] for _ in markers]
    for i, (s, _, p) in enumerate(spans):
        around = [
            m
            for m, (_, start, end, pid) in enumerate(markers)
            if start <= s <= end and (pid is None or p in (None, pid))
        ]
        if not around:
            continue
        inner = max(around, key=lambda m: (markers[m][1], -markers[m][2]))
        for m in around:
            held[m].append(i)
            _, start, end, _ = markers[m]
            if m != inner and not (
                start <= markers[inner][1] and markers[inner][2] <= end and markers[m][1:3] != markers[inner][1:3]
            ):
                raise TraceFormatError(
                    path,
                    f"the ranges {markers[m][0]} and {markers[inner][0]} overlap without one inside the other, and the "
                    f"capture window at ts={s} begins in both; a window belongs to exactly one key",
                )
        plan[inner][1].append(i)
    for m, (name, _, _, _) in enumerate(markers):
        if held[m] and not plan[m][1]:
            inner = next(markers[n][0] for n, (_, graphs) in enumerate(plan) if n != m and held[m][0] in graphs)
            raise TraceFormatError(
                path,
                f"the range {name} holds only capture windows of the range {inner} inside it, so it captured "
                f"nothing of its own; a window belongs to exactly one key (the innermost range)",
            )
    return plan


def _summaries(
    scan: Scan,
    windows: Optional[CaptureWindows],
    plan: list,
    platform: str,
    level: str,
    environment: dict,
) -> list:
    """A Summary per planned key, every op and launch assigned to its window in one pass over the records."""
    if windows is None or not windows.spans:  # no capture window: the whole trace is the one key
        return [build_summary(scan, key, platform, level, environment) for key, _ in plan]
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
            parts.append(window_summary(scan, key, platform, level, environment, ops, launches[w], by, problems))
        if not parts:  # a range around no capture window: an empty key, which the gate reports
            parts = [window_summary(scan, key, platform, level, environment, [], [], [], None)]
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
