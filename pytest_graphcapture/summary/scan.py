"""Building a summary from trace events: one pass into compact records (:mod:`.collect`), then the summary.

Two inputs give one result:

* :func:`summarize_profile` reads a live ``torch.profiler.profile`` inside its
  ``on_trace_ready`` callback through ``prof.profiler.kineto_results.events()``
  (names, shapes, dtypes, activity types, correlation ids) — no export, no
  re-parse.  Each relevant ``_KinetoEvent`` is turned into the same small dict a
  Chrome trace holds, so both inputs go through one code path and summaries of
  the same capture are equal.
* :func:`summarize_trace_file` / :func:`summarize_events` read Chrome/Kineto
  trace files or their event dicts.

How the summary is built:

* **Capture window** — events between a stream's BeginCapture and EndCapture
  runtime calls (``cudaStreamBeginCapture*``, ``hipStreamBeginCapture*``,
  ``cuStreamBeginCapture*`` … ``*StreamEndCapture*``), inclusive of their start
  times; several pairs form a union.  Without capture calls (eager CPU backend,
  or an eager GPU step) the window is the whole trace, i.e. the profiler's active
  step.
* **ops** — every ``cpu_op`` event in the window, *at all nesting levels*
  (``aten::linear`` and the ``aten::addmm`` inside it both count).  Counting
  every level needs no call-tree reconstruction, so it is cheap and identical for
  live and file inputs, and a change anywhere in the dispatch shows up.  Ops are
  grouped by (name, ``Input Dims``, ``Input type``).
* **launches** — launch runtime events in the window: the kernel launch APIs
  (:data:`KERNEL_LAUNCH_APIS`) plus ``*Memcpy*Async``/``*Memset*Async`` (and
  ``hipMemcpyWithStream``).  ``by_api`` uses the base API name (CUPTI version
  suffixes such as ``_v7000``/``_ptsz`` dropped).
* **kernels** — with a capture window, from the launch events: on ROCm they carry
  ``args.kernel``/``grid``/``block``; on NVIDIA they carry no kernel name, so the
  summary is marked incomplete until :func:`with_replay` supplies the graph's
  kernels.  Without a capture window, the executed ``kernel``/``gpu_memcpy``/
  ``gpu_memset`` events are the kernels.  Memcpy/memset nodes are listed with
  ``kind`` ``memcpy``/``memset`` and keep their recorded name (they are not
  symbols, so normalization levels do not touch them).
* **attribution** — each kernel entry names the op whose call launched it
  (:mod:`.attribute`): the innermost ``cpu_op`` around the launch call on its thread.
* **replay** — :func:`replay_kernels_from_events` / ``_from_profile`` pick the
  GPU events whose ``correlation`` equals a ``cudaGraphLaunch``/``hipGraphLaunch``
  (``cuGraphLaunch``) correlation, which excludes fill kernels launched outside
  the graph; :func:`with_replay` makes them the kernels and runs the data-loss
  check (:mod:`.replay`).
"""

from __future__ import annotations

from array import array
from collections import Counter
from typing import Any, Iterable, Optional

from ..errors import UsageError
from ..keys import CaptureKey
from .attribute import enclosing_ops
from .collect import (  # noqa: F401  (re-exported: the live reader classifies with the same rules)
    _GPU_CATS,
    _INTERESTING_RUNTIME,
    _RUNTIME_CATS,
    KERNEL_LAUNCH_APIS,
    Collector,
    _api_base,
)
from .model import Summary, _merge_kernel
from .normalize import DEFAULT_LEVEL, check_level, normalize_kernel_name


class _Scan(Collector):
    """The collected records of one trace, and what a summary reads from them."""

    def windows(self) -> Optional[list]:
        """List of (start, end) capture windows; None when the trace has no capture calls."""
        if not self.begins and not self.ends:
            return None
        begins = sorted(b for b in self.begins if b is not None)
        ends = sorted(e for e in self.ends if e is not None)
        windows = []
        inf = float("inf")
        if ends and (not begins or ends[0] < begins[0]):
            windows.append((-inf, ends[0]))  # capture began before the profiled window
        for start in begins:
            end = next((e for e in ends if e >= start), inf)
            windows.append((start, end))
        return windows

    def replay_kernels(self) -> list:
        """GPU events correlated with a graph launch, in time order."""
        graph_corr = self.graph_corr
        if not graph_corr:
            return []
        picked = [i for i, corr in enumerate(self.gpu_corr) if corr is not None and corr in graph_corr]
        gpu_ts = self.gpu_ts
        picked.sort(key=lambda i: gpu_ts[i] if gpu_ts[i] == gpu_ts[i] else 0)
        rows = self.gpu_rows
        kernels = [_raw_kernel(*rows[self.gpu_desc[i]]) for i in picked]
        for kernel, i in zip(kernels, picked):
            if self.gpu_node[i] is not None:
                kernel["node"] = self.gpu_node[i]
        return kernels

    def gpu_kernels(self) -> dict:
        """``{(gpu description, op index): count}`` of the executed kernels/memcpys/memsets, in event order.

        The kernels of an eager step; the op index (into ``op_refs``, -1 for none) is
        the op whose call launched the kernel, linked by correlation id.
        """
        launch_at = self.launch_at
        nan = float("nan")
        call_ts = array("d")
        call_tid = array("l")
        for corr in self.gpu_corr:
            index = launch_at.get(corr) if corr is not None else None
            if index is None:
                call_ts.append(nan)
                call_tid.append(-1)
            else:
                call_ts.append(self.launch_ts[index])
                call_tid.append(self.launch_tid[index])
        ops = enclosing_ops(self, call_ts, call_tid)
        counted: dict = {}
        for pair in zip(self.gpu_desc, ops):
            counted[pair] = counted.get(pair, 0) + 1
        return counted

    def op_entries(self, windows: Optional[list]) -> list:
        """Op groups with their counts in the windows, in the order they first occur there."""
        fine: dict = {}
        op_group = self.op_group
        if windows is None:
            for group in op_group:
                fine[group] = fine.get(group, 0) + 1
        else:
            inside = _inside
            for ts, group in zip(self.op_ts, op_group):
                if inside(ts, windows):
                    fine[group] = fine.get(group, 0) + 1
        mapping, rows = self.op_groups()
        counts: dict = {}
        for group, count in fine.items():
            coarse = mapping[group]
            counts[coarse] = counts.get(coarse, 0) + count
        out = []
        for group, count in counts.items():
            name, dims, types = rows[group]
            out.append(
                {
                    "name": name,
                    "input_dims": list(dims) if isinstance(dims, list) else [],
                    "input_types": list(types) if isinstance(types, list) else [],
                    "count": count,
                }
            )
        return out


def _inside(ts: Any, windows: Optional[list]) -> bool:
    if windows is None:
        return True
    if ts is None:
        return False
    for start, end in windows:
        if start <= ts <= end:
            return True
    return False


def _raw_kernel(kind: str, name: str, grid: Any, block: Any, op: Optional[dict] = None) -> dict:
    entry = {"name": name, "kind": kind}
    if op:
        entry["op"] = op
    if grid is not None:
        entry["grid"] = grid
    if block is not None:
        entry["block"] = block
    return entry


def _scan(events: Iterable[dict]) -> _Scan:
    scan = _Scan()
    scan.feed_dicts(events)
    return scan


def _build(scan: _Scan, key: CaptureKey, platform: str, level: str, environment: Optional[dict]) -> Summary:
    check_level(level)
    if not isinstance(key, CaptureKey):
        raise UsageError(f"key must be a CaptureKey, got {type(key).__name__}")
    windows = scan.windows()
    ops = scan.op_entries(windows)

    rows = scan.desc_rows
    launch_desc = scan.launch_desc
    if windows is None:
        launches_in = range(len(launch_desc))
    else:
        launches_in = [i for i, ts in enumerate(scan.launch_ts) if _inside(ts, windows)]
    by_api = Counter(rows[launch_desc[i]][0] for i in launches_in)
    launches = {"total": len(launches_in), "by_api": dict(by_api)}

    complete, reason = True, None
    launch_ops = None
    if windows is not None:
        call_ts = array("d", (scan.launch_ts[i] for i in launches_in))
        call_tid = array("l", (scan.launch_tid[i] for i in launches_in))
        by = enclosing_ops(scan, call_ts, call_tid) if launches_in else []
        named = [j for j, i in enumerate(launches_in) if rows[launch_desc[i]][1] != "kernel" or rows[launch_desc[i]][2]]
        counted: dict = {}
        for j in named:
            pair = (launch_desc[launches_in[j]], by[j])
            counted[pair] = counted.get(pair, 0) + 1
        op_refs = scan.op_refs
        in_call_order = sorted(range(len(launches_in)), key=lambda j: call_ts[j])
        launch_ops = [
            (rows[launch_desc[launches_in[j]]][1], op_refs[by[j]] if by[j] >= 0 else None) for j in in_call_order
        ]
        found = []
        for (desc, op), count in counted.items():
            api, kind, kernel, grid, block = rows[desc]
            if kind == "kernel":
                found.append(("kernel", kernel, grid, block, op, count))
            else:
                found.append((kind, api, None, None, op, count))
        unnamed = len(launches_in) - len(named)
        if unnamed:
            complete = False
            reason = (
                f"{unnamed} of {len(launches_in)} launches in the capture window carry no kernel name "
                "(NVIDIA records names only for executed kernels); a graph replay must supply the kernels"
            )
        if not scan.begins or not scan.ends:
            complete = False
            missing = "EndCapture" if scan.begins and not scan.ends else "BeginCapture"
            extra = f"the trace has no {missing} call, so the capture window is cut off by the profiler window"
            reason = f"{reason}; {extra}" if reason else extra
    else:
        gpu_rows = scan.gpu_rows
        found = [(*gpu_rows[desc], op, count) for (desc, op), count in scan.gpu_kernels().items()]
    kernels = _counted_entries(found, scan.op_refs, level)
    return Summary(
        key=key,
        platform=platform,
        kernels=kernels,
        ops=ops,
        launches=launches,
        complete=complete,
        incomplete_reason=reason,
        environment=dict(environment or {}),
        level=level,
        launch_ops=launch_ops,
    )


def _counted_entries(found: Iterable[tuple], op_refs: list, level: str) -> list:
    """Summary entries at ``level`` from ``(kind, name, grid, block, op index, count)`` in first-seen order."""
    cache: dict[str, str] = {}
    merged: dict[tuple, dict] = {}
    for kind, name, grid, block, op, count in found:
        if kind == "kernel":
            normal = cache.get(name)
            if normal is None:
                normal = cache[name] = normalize_kernel_name(name, level)
            name = normal
        _merge_kernel(merged, name, kind, grid, block, count, op_refs[op] if op >= 0 else None)
    return list(merged.values())


def _entries(raw_kernels: Iterable[dict], level: str) -> list:
    """Group raw per-launch kernel dicts into summary entries at ``level``."""
    cache: dict[str, str] = {}
    merged: dict[tuple, dict] = {}
    for raw in raw_kernels:
        kind = raw.get("kind", "kernel")
        name = raw["name"]
        if kind == "kernel":
            normal = cache.get(name)
            if normal is None:
                normal = cache[name] = normalize_kernel_name(name, level)
            name = normal
        _merge_kernel(merged, name, kind, raw.get("grid"), raw.get("block"), 1, raw.get("op"))
    return list(merged.values())


def summarize_events(
    events: Iterable[dict],
    *,
    key: CaptureKey,
    platform: str,
    level: str = DEFAULT_LEVEL,
    environment: Optional[dict] = None,
) -> Summary:
    """Summarize Chrome-trace-style event dicts (the ``traceEvents`` of a trace)."""
    return _build(_scan(events), key, platform, level, environment)


def replay_kernels_from_events(events: Iterable[dict]) -> list:
    """The graph's kernels in a replay trace: GPU events correlated with a graph launch.

    Returns one dict per executed node (``name``, ``kind`` and ``grid``/``block`` when
    recorded), in time order; kernels launched outside the graph are excluded.
    """
    return _scan(events).replay_kernels()
