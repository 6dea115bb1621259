"""Merge per-rank capture traces into one Chrome trace per batch size.

A multi-rank capture writes one trace per rank and key
(``{runner}_bs_{bs}[_{variant}]_rank{r}.json.gz``, or
``cuda_graph_capture-{runner}-TP-{r}.json.gz`` in single-trace mode).  Reading
ranks side by side is how one finds the rank whose collective or shard differs,
so :func:`merge_rank_traces` writes, per batch size (or per single trace),
``{runner}_bs_{bs}[_{variant}]_merged.json.gz`` (``cuda_graph_capture-{runner}-merged.json.gz``)
next to the inputs, which Perfetto and chrome://tracing open:

* every event's ``pid`` becomes a new integer, unique per (rank, original pid),
  ``rank * PID_STRIDE + n`` (``n`` numbers the rank's original pids in sorted
  order), and its process is named ``[TP00] <original name>`` (``[TP01] …``) by
  ``process_name`` metadata events, with ``process_sort_index`` ordering ranks;
* flow/async ``id`` and ``bind_id`` values and ``args.correlation`` ids are made
  rank-unique (they are numbered per process), so a rank's CPU→GPU arrows never
  bind to another rank's events, and a kernel is never joined to another rank's
  launch call (``graphcapture summarize`` of a merged trace joins by correlation);
* timestamps are put on one time base (Kineto writes ``ts`` relative to each
  file's ``baseTimeNanoseconds``);
* events are sorted stably by (metadata first, ts, pid, tid, name), so merging the
  same inputs gives the same file byte for byte (gzip without a timestamp).

Only groups with at least two ranks are merged.  The ``graphcapture merge DIR``
command and the ``--graph-capture-merge`` option (merge at session end) use this.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any, Callable, Iterable, Optional, Union

from .._io import write_atomic
from ..errors import TraceFormatError
from ..naming import RankTrace, group_rank_traces
from ..summary.files import MERGED_CORRELATION, MERGED_FIELD
from ..summary.tracefile import load_trace
from .matrix import require_directory

PID_STRIDE = 1000
#: Flow/async and correlation ids of rank r are offset by r * ID_STRIDE (ints) or prefixed ``TP<r>:`` (others).
ID_STRIDE = 1 << 40


def _rank_id(value: Any, rank: int) -> Any:
    """A per-process id made unique across ranks: ints offset by ``rank * ID_STRIDE``, others prefixed."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value + rank * ID_STRIDE
    return f"TP{rank}:{value}"


def rank_label(rank: int) -> str:
    """``[TP00]``, ``[TP01]``, …: how merged traces name a rank's processes."""
    return f"[TP{rank:02d}]"


def _pid_order(pid: Any) -> tuple:
    return (isinstance(pid, str), str(pid) if isinstance(pid, str) else pid)


def _mixed(value: Any) -> tuple:
    """Sort key for values that may be ints, floats or strings."""
    if isinstance(value, bool) or value is None:
        return (2, str(value))
    if isinstance(value, (int, float)):
        return (0, value)
    return (1, str(value))


def _rank_events(trace: dict, rank: int, shift_us: float) -> list[dict]:
    events = trace.get("traceEvents", [])
    pids = sorted({e.get("pid", "") for e in events if isinstance(e.get("pid", ""), (int, str))}, key=_pid_order)
    if len(pids) > PID_STRIDE:
        raise TraceFormatError("<rank trace>", f"rank {rank} has {len(pids)} processes, more than {PID_STRIDE}")
    new_pid = {pid: rank * PID_STRIDE + n for n, pid in enumerate(pids)}
    named: set[int] = set()
    out: list[dict] = []
    for event in events:
        event = dict(event)
        old = event.get("pid", "")
        pid = new_pid.get(old, rank * PID_STRIDE)
        event["pid"] = pid
        if isinstance(event.get("ts"), (int, float)) and shift_us:
            event["ts"] = event["ts"] + shift_us
        for field in ("id", "bind_id"):
            if field in event:
                event[field] = _rank_id(event[field], rank)
        args = event.get("args")
        if isinstance(args, dict) and args.get("correlation") is not None:
            event["args"] = dict(args, correlation=_rank_id(args["correlation"], rank))
        if event.get("ph") == "M":
            args = dict(event.get("args") or {})
            if event.get("name") == "process_name":
                original = args.get("name") or f"pid {old}"
                args["name"] = f"{rank_label(rank)} {original}"
                named.add(pid)
            elif event.get("name") == "process_sort_index":
                args["sort_index"] = pid
            event["args"] = args
        out.append(event)
    for old, pid in new_pid.items():
        if pid not in named:
            what = f"pid {old}" if old != "" else "events without pid"
            out.append(
                {
                    "ph": "M",
                    "name": "process_name",
                    "pid": pid,
                    "tid": 0,
                    "args": {"name": f"{rank_label(rank)} {what}"},
                }
            )
            out.append({"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0, "args": {"sort_index": pid}})
    return out


def _event_order(event: dict) -> tuple:
    meta = event.get("ph") == "M"
    return (
        not meta,
        _mixed(event.get("ts", 0)),
        _mixed(event.get("pid")),
        _mixed(event.get("tid")),
        str(event.get("name", "")),
    )


def merge_trace_files(paths: dict[int, Path], out_path: Union[str, Path]) -> Path:
    """Merge ``{rank: trace path}`` into one Chrome trace at ``out_path`` (gzipped when it ends in .gz)."""
    traces = {rank: load_trace(path) for rank, path in sorted(paths.items())}
    bases = {rank: t.get("baseTimeNanoseconds") for rank, t in traces.items()}
    usable = [b for b in bases.values() if isinstance(b, int) and not isinstance(b, bool)]
    base = min(usable) if len(usable) == len(bases) and usable else None
    events: list[dict] = []
    for rank, trace in traces.items():
        shift = (bases[rank] - base) / 1000.0 if base is not None else 0.0
        events.extend(_rank_events(trace, rank, shift))
    events.sort(key=_event_order)
    first = traces[min(traces)]
    merged: dict[str, Any] = {
        k: v for k, v in first.items() if k not in ("traceEvents", "distributedInfo", "trace_id", "traceName")
    }
    if base is not None:
        merged["baseTimeNanoseconds"] = base
    merged[MERGED_FIELD] = {
        "ranks": sorted(traces),
        "sources": {str(rank): Path(path).name for rank, path in sorted(paths.items())},
        "distributedInfo": {
            str(rank): t.get("distributedInfo") for rank, t in traces.items() if t.get("distributedInfo") is not None
        },
        "pid": f"rank * {PID_STRIDE} + index of the rank's original pid",
        MERGED_CORRELATION: f"rank * {ID_STRIDE} + the rank's correlation id ('TP<rank>:' before one not an int)",
    }
    merged["traceEvents"] = events
    data = json.dumps(merged, separators=(",", ":"), sort_keys=False).encode("utf-8")
    out_path = Path(out_path)
    if out_path.name.endswith(".gz"):
        data = gzip.compress(data, mtime=0)
    write_atomic(out_path, data, error=TraceFormatError)
    return out_path


def _rank_list(ranks: Iterable[int]) -> str:
    """``1, 3-6``: ranks as runs."""
    runs: list[list[int]] = []
    for rank in sorted(ranks):
        if runs and rank == runs[-1][-1] + 1:
            runs[-1].append(rank)
        else:
            runs.append([rank])
    return ", ".join(f"{r[0]}-{r[-1]}" if len(r) > 2 else ", ".join(map(str, r)) for r in runs)


def merge_rank_traces(
    directory: Union[str, Path],
    *,
    only: Optional[Iterable[Union[str, Path]]] = None,
    out_dir: Optional[Union[str, Path]] = None,
    warn: Optional[Callable[[str], None]] = None,
) -> list[Path]:
    """Merge every group of per-rank traces (two ranks or more) in ``directory``; return the merged paths.

    ``only`` restricts the inputs to these files (what one session wrote);
    ``out_dir`` defaults to ``directory``.  ``warn`` hears, per group, what a
    reader would otherwise miss: ranks missing between 0 and the highest rank
    (merged anyway), and a group of one rank (not merged).  Raises
    TraceFormatError for a missing directory, an ``out_dir`` that is not a
    folder, or an unreadable trace.
    """
    directory = Path(directory)
    if only is None:
        require_directory(directory)
        candidates: Iterable[Path] = sorted(p for p in directory.iterdir() if p.is_file())
    else:
        candidates = [Path(p) for p in only]
    target = Path(out_dir) if out_dir is not None else directory
    if target.exists() and not target.is_dir():
        raise TraceFormatError(target, "is a file, expected a folder for the merged traces (--out-dir)")
    written = []
    for (stem, single), ranks in sorted(group_rank_traces(candidates).items()):
        name = RankTrace(stem, 0, Path(), single).merged_name
        if len(ranks) < 2:
            if warn is not None:
                (rank,) = ranks
                warn(f"{name}: not written, only rank {rank} has a trace ({ranks[rank].name})")
            continue
        gaps = sorted(set(range(max(ranks) + 1)) - set(ranks))
        if gaps and warn is not None:
            warn(
                f"{name}: rank{'s' if len(gaps) > 1 else ''} {_rank_list(gaps)} missing "
                f"(merged ranks {_rank_list(ranks)})"
            )
        written.append(merge_trace_files(ranks, target / name))
    return written
