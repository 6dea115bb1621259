"""Engine-written capture traces as a CaptureResult: each trace split into keys by the engine's markers.
Nothing to check is an error, never a pass; so are a window of no key (unless ignored) and sizes no trace takes."""

from __future__ import annotations

from pathlib import Path
from typing import Optional, Sequence, Union

from .._io import require_regular
from ..errors import TraceFormatError, UsageError
from ..keys import CaptureKey, key_label
from ..naming import is_hidden, is_merged_trace, is_trace_path
from ..result import CaptureResult, KeyMetrics, KeyResult
from ..summary.files import TraceKeys, handler_stamp, is_sidecar, size_shown, summarize_trace_keys
from ..summary.model import graph_count
from ..summary.platform import CPU

#: How a user checks a trace without its windows in no range (the CLI option and the keyword).
_IGNORE_UNKEYED = "--ignore-unkeyed-windows (golden.check_traces(..., ignore_unkeyed_windows=True))"

#: What to do when a folder holds no capture trace: only vLLM 0.26-0.33's V1 model runner writes them.
_EMPTY_HINT = (
    "an engine that profiled its capture writes them there (sglang: graph_capture_profile/; vLLM 0.26-0.33: "
    "capture_traces/, from its V1 model runner only; vLLM 0.34 writes none: gate its capture with "
    "graph_capture.engine, docs/engine-vllm.md)"
)

#: What the size of a key read from ``capture_{N}_{mode}`` ranges counts, as its golden records it.
_MARKED_SIZE = {"batch_size_counts": "tokens"}


def _trace_files(paths: Sequence[Union[str, Path]]) -> tuple[dict[Path, Optional[Path]], list[str]]:
    """The trace files ``paths`` names, each with the folder it was found in (None: named), and the folders' others."""
    if not paths:
        raise UsageError("no trace given: name the trace files or the folder the engine wrote them to")
    found: dict[Path, Optional[Path]] = {}
    other: list[str] = []
    for given in map(Path, paths):
        if given.is_dir():
            inside = sorted(
                p
                for p in given.rglob("*")
                if p.is_file() and not is_merged_trace(p)
                if not any(is_hidden(part) for part in p.relative_to(given).parts)
            )
            if not any(is_trace_path(p) for p in inside):
                raise UsageError(f"{given}: no capture traces (*.json, *.json.gz) in this folder; {_EMPTY_HINT}")
            found.update((p, given) for p in inside if is_trace_path(p) and p not in found)
            other += [p.relative_to(given).as_posix() for p in inside if not is_trace_path(p)]
        elif given.is_file():
            found.setdefault(given, None)
        elif given.exists():  # a FIFO or a device: reading it would block or never end
            require_regular(given, error=TraceFormatError)
        else:
            raise UsageError(f"{given}: no such file or folder")
    return found, other


def collect_traces(
    paths: Sequence[Union[str, Path]],
    *,
    batch_sizes: Optional[Sequence[int]] = None,
    runner: Optional[str] = None,
    level: str = "name",
    max_bytes: Optional[int] = None,
    ignore_unkeyed_windows: bool = False,
    variants: Optional[Sequence[str]] = None,
) -> CaptureResult:
    """Every key of the traces ``paths`` names, checked for emptiness (module docstring), as one result; a folder's
    files that are no trace (TraceLens's ``execution_details.json``) are passed over, and said."""
    files, passed_over = _trace_files(paths)
    sizes = {"batch_sizes": batch_sizes, "variants": variants}
    read = []
    for path, folder in files.items():
        try:
            read.append(summarize_trace_keys(path, runner=runner, level=level, max_bytes=max_bytes, **sizes))
        except TraceFormatError:
            if folder is None or not is_sidecar(path):  # a file named or shaped like a trace fails as it is
                raise
            passed_over.append(path.relative_to(folder).as_posix())
    if not read:
        raise UsageError(f"no capture traces in {', '.join(map(str, paths))}, only {_passed_over(passed_over)}")
    if batch_sizes is not None and not any(t.split_by == "windows" for t in read):
        raise UsageError(
            f"batch sizes {','.join(map(str, batch_sizes))} were given, but no trace is one trace of a whole "
            f"capture without size markers: each names its own keys ({', '.join(sorted({t.split_by for t in read}))}); "
            f"leave the batch sizes out"
        )
    platforms = sorted({t.platform for t in read})
    if len(platforms) > 1:
        where = "; ".join(f"{t.path}: {t.platform}" for t in read)
        raise UsageError(f"the traces come from {len(platforms)} platforms ({where}); check each platform's on its own")
    whole = any(Path(p).is_dir() for p in paths)
    result = CaptureResult(_runner_name(read), platforms[0], traces=read, whole=whole)
    _marked_keys(read)
    result.passed_over = _passed_over(sorted(passed_over)) if passed_over else None
    _refuse_mislabelled(read)
    seen: dict = {}
    for trace in read:
        _refuse_empty(trace)
        if trace.unkeyed and not ignore_unkeyed_windows:
            them = "it" if len(trace.unkeyed) == 1 else "them"
            raise TraceFormatError(
                trace.path, f"{unkeyed_windows(trace)}; to check the trace without {them}, pass {_IGNORE_UNKEYED}"
            )
        for summary in trace.summaries:
            if seen.get(summary.key) == trace.path:
                raise TraceFormatError(
                    trace.path,
                    f"{key_label(summary.key, explicit_rank=True)} of {summary.key.runner} is captured twice in "
                    f"this trace (its keys by {trace.split_by}); a key is one capture",
                )
            if summary.key in seen:
                raise UsageError(
                    f"{key_label(summary.key, explicit_rank=True)} of {summary.key.runner} is in two traces "
                    f"({seen[summary.key]} and {trace.path}); give each trace once"
                )
            seen[summary.key] = trace.path
            result.keys[summary.key] = KeyResult(summary.key, trace.path, summary)
    return result


def _marked_keys(read: list) -> None:
    """Mark the sizes of marked ranges as tokens; and where vLLM (``cudagraph_specialize_lora``) wrote one range in
    several files, one per LoRA case, make each file's key its own: variant ``{mode}_lora_case_{i}``, i from 1 in
    capture order (the handler's time stamp), never merged."""
    files: dict = {}
    order: dict = {}  # per runner and rank, the time stamps of its files in capture order
    for trace in (t for t in read if t.split_by == "annotations"):
        stamp = handler_stamp(trace.path)
        for summary in trace.summaries:
            summary.environment = {**summary.environment, **_MARKED_SIZE}
            if stamp is not None:
                files.setdefault(summary.key, []).append((stamp, summary))
                order.setdefault((summary.key.runner, summary.key.rank), set()).add(stamp)
    for key, found in files.items():
        stamps = sorted(stamp for stamp, _ in found)
        if len(found) < 2 or len(set(stamps)) < len(found):
            continue  # one file, or one trace given twice: refused below
        all_stamps = sorted(order[key.runner, key.rank])
        first = all_stamps.index(stamps[0])
        if all_stamps[first : first + len(stamps)] != stamps:
            raise UsageError(
                f"{key_label(key, explicit_rank=True)} of {key.runner} is in {len(found)} traces with other shapes' "
                f"traces between them (time stamps {stamps[0]}, {stamps[1]}, ...), but vLLM writes a shape's LoRA "
                f"cases one after another: traces of several runs? check one run's traces"
            )
        for i, (_, summary) in enumerate(sorted(found, key=lambda item: item[0]), 1):
            case = CaptureKey(key.runner, key.batch_size, f"{key.variant_name}_lora_case_{i}", key.rank)
            summary.key = case
            for graph in summary.graphs or ():
                graph.key = case


def unkeyed_windows(trace: TraceKeys) -> str:
    """What the windows of ``trace`` in no capture range are, in words."""
    n = len(trace.unkeyed)
    return (
        f"{n} capture window{'s' if n != 1 else ''} (the first at ts={trace.unkeyed[0]}) in no "
        f"capture_{{bs}}_{{mode}} range belong{'s' if n == 1 else ''} to no key"
    )


def _passed_over(names: list) -> str:
    n, shown = len(names), ", ".join(names[:5]) + (f", … {len(names) - 5} more" if len(names) > 5 else "")
    return f"passed over {n} file{'s that are not traces' if n != 1 else ' that is not a trace'}: {shown}"


def _refuse_mislabelled(read: list) -> None:
    """Refuse a per-size file whose window shows another of its runner's sizes than its name (sglang #39092)."""
    named: dict = {}
    for trace in read:
        for summary in trace.summaries if trace.split_by == "file name" else ():
            named.setdefault((summary.key.runner, summary.key.rank), []).append((trace.path, summary))
    for files in named.values():
        for path, summary in sorted(files, key=lambda file: -file[1].key.batch_size):  # capture order
            shown = size_shown(summary, summary.key.batch_size, {s.key.batch_size for _, s in files})
            if shown is not None:
                raise TraceFormatError(
                    path,
                    f"is named bs={summary.key.batch_size}, but its inputs lead with {shown}, never with "
                    f"{summary.key.batch_size}: sglang 0.5.18-0.5.21 mislabel sizes that capture several graphs "
                    "(LoRA, DSA, PD-multiplexing; sglang #39092); use 0.5.22 or later",
                )


def _runner_name(read: list) -> str:
    runners = sorted({s.key.runner for t in read for s in t.summaries})
    return ", ".join(runners) if runners else "traces"


def _refuse_empty(trace: TraceKeys) -> None:
    """One line for a trace or key that holds nothing to check (the module docstring lists them)."""
    gpu = trace.platform != CPU
    if not trace.summaries:
        raise TraceFormatError(trace.path, "holds no capture key: nothing to check")
    if trace.windows == 0 and gpu:
        raise TraceFormatError(
            trace.path,
            "holds no capture window (no BeginCapture/EndCapture call): the profiler did not record a graph "
            "capture, so there is nothing to check",
        )
    for key in trace.empty:
        raise TraceFormatError(
            trace.path, f"the range of {key_label(key)} holds no capture window: that shape captured nothing"
        )
    for summary in trace.summaries:
        if gpu and summary.launches["total"] == 0 and not summary.kernels:
            raise TraceFormatError(
                trace.path, f"{key_label(summary.key)}: the capture launched nothing, so there is nothing to check"
            )
    if trace.problems:
        raise TraceFormatError(trace.path, f"incomplete capture: {'; '.join(trace.problems)}")


def describe(result: CaptureResult) -> list[str]:
    """One line per trace: how its keys were found, and how many graphs each key holds where more than one."""
    lines = []
    for trace in result.traces:
        keys = ", ".join(
            key_label(s.key) + (f" ({graph_count(s)} graphs)" if graph_count(s) > 1 else "") for s in trace.summaries
        )
        ignored = f"; {unkeyed_windows(trace)}: not checked" if trace.unkeyed else ""
        lines.append(f"{trace.path}: {len(trace.summaries)} key(s) by {trace.split_by}: {keys}{ignored}")
    return lines


def split_single_capture(result: CaptureResult) -> Optional[CaptureResult]:
    """The keys of a run with one trace for the whole capture: its windows, in capture order, are its keys."""
    path = result.single_trace_path
    items = list(result)
    if path is None or not items or not Path(path).is_file():
        return None
    runner = str(result.runner_name or "capture")
    try:
        # One window per key, in the order they were captured: the keys' own sizes may repeat (variants).
        read = summarize_trace_keys(path, batch_sizes=list(range(1, len(items) + 1)), runner=runner, check_order=False)
    except TraceFormatError as exc:
        if "holds 0 capture windows" in exc.problem:
            return None
        raise UsageError(
            f"golden.check: the capture's single trace {exc}; the keys captured were {len(items)}"
        ) from None
    out = CaptureResult(runner, str(result.platform), traces=[read], world_size=result.world_size, whole=False)
    for item, summary in zip(items, read.summaries):
        summary.key = item.key
        for graph in summary.graphs or ():
            graph.key = item.key
        out.keys[item.key] = KeyResult(item.key, Path(path), summary, metrics=item.metrics or KeyMetrics())
    return out
