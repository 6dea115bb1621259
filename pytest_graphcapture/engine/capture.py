"""The capture engine: every key of a runner, largest batch size first, under the profiler."""

from __future__ import annotations

import os
import sys
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Optional, Sequence

import torch

from ..errors import CaptureError, GraphCaptureError, UsageError
from ..keys import CaptureKey, key_label
from ..result import CaptureResult, KeyMetrics, KeyResult
from ..summary.live import replay_kernels_from_profile, summarize_profile
from ..summary.model import of_graphs
from ..summary.replay import KernelEvidenceWarning, with_graph, with_replay
from .backend import Backend, CaptureProgress
from .profiling import PerBatchSizeProfiler, SingleTraceProfiler
from .runner import GraphRunner

_TRACE_MODES = ("off", "per-bs", "single")


@dataclass
class CaptureSettings:
    """How to capture: what to export, whether to summarize, where files go."""

    trace: str = "off"
    summarize: bool = True
    out_dir: Path = Path(".")
    platform: str = "cpu"
    level: str = "exact"
    replay: Optional[bool] = None
    profiler_flags: frozenset = frozenset({"stack", "flops", "memory"})
    environment: dict = field(default_factory=dict)
    progress: Optional[Callable[[str], None]] = None
    #: Told of every stage change of every key (see :class:`~.backend.CaptureProgress`).
    on_stage: Optional[Callable[[Optional[CaptureKey], str], None]] = None
    #: Capture only these batch sizes of the runner (``--graph-capture-batch-sizes``); None = all it lists.
    batch_sizes: Optional[tuple[int, ...]] = None
    #: How messages name where ``batch_sizes`` came from.
    batch_sizes_origin: str = "batch_sizes"
    #: Exported traces go to this sub-folder of the trace folder (a test's own: :func:`~..naming.test_trace_group`).
    trace_group: Optional[str] = None

    def __post_init__(self) -> None:
        if self.trace not in _TRACE_MODES:
            raise ValueError(f"trace mode must be one of {', '.join(_TRACE_MODES)}, got {self.trace!r}")
        self.out_dir = Path(self.out_dir)


def current_rank() -> int:
    """The torch.distributed rank when a process group is initialized, else 0."""
    dist = getattr(torch, "distributed", None)
    if dist is not None and dist.is_available() and dist.is_initialized():
        return int(dist.get_rank())
    return 0


def capture_label(key: CaptureKey) -> str:
    """The prefix of a key's progress lines and messages."""
    return f"graph-capture: {key.runner} {key_label(key, explicit_rank=True)}"


def _summarizer(
    settings: CaptureSettings, graphs_inside: Optional[Callable[[CaptureKey], bool]] = None
) -> Callable[[Any, CaptureKey, Optional[Callable[[], Path]]], Any]:
    """The live summary of one key; ``graphs_inside(key)``: its capture forward began its graphs, one Summary each."""

    def summarize(prof: Any, key: CaptureKey, export: Optional[Callable[[], Path]] = None) -> Any:
        return summarize_profile(
            prof,
            key,
            platform=settings.platform,
            level=settings.level,
            environment=settings.environment,
            export=export,
            graphs=graphs_inside is not None and graphs_inside(key),
        )

    return summarize


def make_profiler(
    settings: CaptureSettings,
    device: torch.device,
    runner_name: str,
    rank: int,
    graphs_inside: Optional[Callable[[CaptureKey], bool]] = None,
    warmups: int = 2,
) -> Any:
    """The profiler ``settings`` ask for: per batch size (traces and/or live summaries), one trace, or None."""
    if settings.trace == "per-bs" or (settings.summarize and settings.trace != "single"):
        return PerBatchSizeProfiler(
            device,
            export_dir=settings.out_dir if settings.trace == "per-bs" else None,
            summarizer=_summarizer(settings, graphs_inside) if settings.summarize else None,
            flags=settings.profiler_flags,
            group=settings.trace_group,
            warmups=warmups,
        )
    if settings.trace == "single":
        return SingleTraceProfiler(device, settings.out_dir, runner_name, rank, settings.trace_group)
    return None


def refuse_cupti_conflict(backend: Backend, settings: CaptureSettings, what: str) -> None:
    """Before a capture that profiles GPU kernels (CUDA, not ROCm): CuptiConflictError if another CUPTI client is active."""
    profiles = settings.summarize or settings.trace != "off"
    if backend.kernel_evidence_required and profiles and not getattr(torch.version, "hip", None):
        refuse_other_clients(what)


def capture_runner(
    runner: GraphRunner, backend: Backend, settings: Optional[CaptureSettings] = None, *, rank: Optional[int] = None
) -> CaptureResult:
    """Capture every key of ``runner`` on ``backend``; return the per-key results."""
    settings = settings or CaptureSettings()
    rank = current_rank() if rank is None else rank
    keys = _selected_keys(runner, rank, settings)
    result = CaptureResult(runner_name=runner.name, platform=settings.platform, rank=rank, mode=settings.trace)
    refuse_cupti_conflict(backend, settings, f"graph capture {runner.name}")
    profiler = make_profiler(settings, backend.device, runner.name, rank)
    per_bs = isinstance(profiler, PerBatchSizeProfiler)

    progress = CaptureProgress(on_stage=settings.on_stage)
    # The first key whose recorded capture holds nothing of its forward, and why: no golden may come from it.
    unseen: Optional[EmptyCaptureError] = None
    unseen_key: Optional[CaptureKey] = None
    try:
        if profiler is not None:
            profiler.__enter__()
        for key in keys:
            started = time.perf_counter()
            progress.key = key
            progress.enter("setup")
            if per_bs:
                profiler.begin_key(key)
            metrics = KeyMetrics()
            graph = backend.capture_one(
                key,
                _forward(runner, key),
                profiler=profiler if per_bs else None,
                profiling=per_bs,
                post_warmup=runner.post_warmup,
                progress=progress,
                metrics=metrics,
            )
            seconds = time.perf_counter() - started
            done = profiler.results.get(key) if per_bs else None
            if done is not None:
                try:
                    check_forward_seen(key, done.summary, f"{capture_label(key)}: ")
                except EmptyCaptureError as exc:
                    # Raised once every key ran: a forward that raises at a later key is reported as itself.
                    if unseen is None:
                        unseen, unseen_key = exc, key
                    continue
            if backend.kernel_evidence_required and done is not None:
                progress.enter("kernel evidence check")
                check_capture_evidence(key, done.summary)
            record_key(result, key, done, graph, seconds, metrics, settings.progress)
        if unseen is not None:
            progress.key = unseen_key
            progress.enter("capture")
            raise unseen
        close_profiler(profiler, result, progress)
        profiler = None
        finish_capture(result, backend, settings, progress)
    except KeyboardInterrupt:
        stop_quietly(profiler)
        raise
    except Exception as exc:
        stop_quietly(profiler)
        if exc is unseen:  # already one line naming the runner, the key and what to do
            raise
        if progress.stage == "replay":
            # Its graph could not be read back: the key keeps its trace file but gets no result.
            result.keys.pop(progress.key, None)
        raise CaptureError(progress.key or runner.name, progress.stage, exc, partial=result) from exc
    return result


def _selected_keys(runner: GraphRunner, rank: int, settings: CaptureSettings) -> list[CaptureKey]:
    """The runner's keys in capture order, cut to ``settings.batch_sizes``; UsageError for a bad list."""
    try:
        keys = runner.capture_keys(rank)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    return selected_sizes(keys, settings, lambda have: f"runner {runner.name} does not capture (it lists {have})")


def selected_sizes(keys: list[CaptureKey], settings: CaptureSettings, lacks: Callable[[str], str]) -> list[CaptureKey]:
    """``keys`` cut to ``settings.batch_sizes``; UsageError for a size none has (``lacks(the sizes there are)``)."""
    if settings.batch_sizes is None:
        return keys
    have = sorted({k.batch_size for k in keys})
    lacking = [bs for bs in settings.batch_sizes if bs not in have]
    if lacking:
        raise UsageError(
            f"{settings.batch_sizes_origin} asks for batch size {', '.join(map(str, lacking))}, which "
            + lacks(", ".join(map(str, have)))
        )
    return [k for k in keys if k.batch_size in settings.batch_sizes]


def _forward(runner: GraphRunner, key: CaptureKey) -> Callable[[], Any]:
    """``runner.forward_for(key)``, checked to be what the backend can call."""
    forward = runner.forward_for(key)
    if not callable(forward):
        raise TypeError(
            f"{type(runner).__name__}.forward_for({key}) returned a {type(forward).__name__}, not a callable: "
            f"it must return a function taking no arguments that runs one forward on the static buffers"
        )
    return forward


def stop_quietly(profiler: Any) -> None:
    """Stop a profiler after a failure, discarding its open cycle."""
    if profiler is None:
        return
    try:
        if isinstance(profiler, PerBatchSizeProfiler):
            profiler.abort_key()
        else:
            profiler.__exit__(RuntimeError, RuntimeError("capture failed"), None)
    except Exception:  # the original failure is the one to report
        pass


def record_key(
    result: CaptureResult,
    key: CaptureKey,
    done: Any,
    graph: Any,
    seconds: float,
    metrics: KeyMetrics,
    report: Optional[Callable[[str], None]],
) -> None:
    """A captured key joins the result, with the trace and live summary its profiler cycle gave (``done``)."""
    summary = done.summary if done else None
    trace = done.trace_path if done else None
    result.keys[key] = KeyResult(key, trace_path=trace, summary=summary, graph=graph, seconds=seconds, metrics=metrics)
    if report is not None:
        report(f"{capture_label(key)} captured in {seconds:.3f}s ({metrics.describe()})")


def close_profiler(profiler: Any, result: CaptureResult, progress: CaptureProgress) -> None:
    """Close the profiler of a capture that succeeded, writing its trace; a single trace's path joins the result."""
    if profiler is None:
        return
    progress.key = None
    progress.enter("trace export")
    profiler.__exit__(None, None, None)
    if isinstance(profiler, SingleTraceProfiler):
        result.single_trace_path = profiler.trace_path


def finish_capture(
    result: CaptureResult, backend: Backend, settings: CaptureSettings, progress: CaptureProgress
) -> None:
    """The last step of both capture routes: each key's kernels from a replay of its graphs, else their readouts."""
    if _replay_enabled(settings, backend) and settings.summarize:
        _attach_replay_kernels(result, backend, progress, settings.progress)
    elif settings.summarize:
        _attach_graph_readouts(result, backend)


def _replay_enabled(settings: CaptureSettings, backend: Backend) -> bool:
    return backend.replay_shows_kernels if settings.replay is None else bool(settings.replay)


def _attach_graph_readouts(result: CaptureResult, backend: Backend) -> None:
    """Without a replay, each key whose graph was read takes its kernels from the graph alone."""
    for key, key_result in result.keys.items():
        readout = backend.graph_readouts.get(key)
        if key_result.summary is not None and readout is not None:
            key_result.summary = with_graph(
                key_result.summary, readout, source=backend.readout_sources.get(key, "graph")
            )


def _attach_replay_kernels(
    result: CaptureResult, backend: Backend, progress: CaptureProgress, report: Optional[Callable[[str], None]]
) -> None:
    """Replay each graph once timed, then once under a short profiler; its kernels join the summary."""
    from torch.profiler import profile

    from .profiling import profiler_activities, quiet_kineto

    for key, key_result in result.keys.items():
        if key_result.summary is None:
            continue
        progress.key = key
        progress.enter("replay")
        # A key whose capture forward began its graphs replays each, one profile per graph.
        graphs = key_result.graph if isinstance(key_result.graph, tuple) else (key_result.graph,)
        backend.synchronize()
        started = time.perf_counter()
        for graph in graphs:
            backend.replay(graph)
        backend.synchronize()
        key_result.metrics.replay_seconds = time.perf_counter() - started
        per_graph = []
        for graph in graphs:
            with quiet_kineto(), profile(activities=profiler_activities(backend.device)) as prof:
                backend.replay(graph)
                backend.synchronize()
            per_graph.append(replay_kernels_from_profile(prof))
        kernels = [kernel for replayed in per_graph for kernel in replayed]
        parts = key_result.summary.graphs
        if isinstance(key_result.graph, tuple) and parts and len(parts) == len(per_graph):
            if backend.kernel_evidence_required and not kernels:
                check_replay_evidence(key, kernels, suspected_clients())
            key_result.summary = of_graphs([with_replay(g, k) for g, k in zip(parts, per_graph)])
        else:
            _attach_one_replay(key, key_result, backend, kernels)
        if report is not None:
            report(f"{capture_label(key)} replayed in {key_result.metrics.replay_seconds * 1e3:.3f} ms")
    progress.enter("done")


def _attach_one_replay(key: CaptureKey, key_result: KeyResult, backend: Backend, kernels: list) -> None:
    """The replay's kernels join a key of one graph, cross-checked against the graph's own readout if read."""
    readout = backend.graph_readouts.get(key)
    silent = backend.kernel_evidence_required and not kernels
    if silent and readout is None:
        check_replay_evidence(key, kernels, suspected_clients())
    if readout is not None:  # the graph's own kernels; the replay is their cross-check
        source = backend.readout_sources.get(key, "graph")
        if silent and any(node.type == "kernel" for node in readout.walk()):
            key_result.summary = with_graph(key_result.summary, readout, source=source)
            key_result.no_golden = _mark_silent(key_result.summary, silent_replay_reason(suspected_clients()))
        else:
            key_result.summary = with_graph(key_result.summary, readout, source=source, replay_kernels=kernels)
    else:
        key_result.summary = with_replay(key_result.summary, kernels)


_ISOLATE_HINT = (
    "run the capture in a fresh process: mark the test @pytest.mark.graph_capture_isolated "
    "or pass --graph-capture-isolate=on (the runner then comes from a module-level factory, "
    "as with graph_capture_ranks)"
)

_PROCESS_CAUSES = (
    "the profiler was first initialised before CUDA was (e.g. a CPU-only profiler session ran earlier in "
    "this process), so it records no GPU activity",
    "an empty warm-up profiler session ran before graph capture (torch.profiler._utils._init_for_cuda_graphs "
    "does this), which leaves kernel collection dead for the life of the process",
    "another test in this pytest session started the profiler first",
)
_OUT_OF_RANGE = (
    "kernel records at the start of a profiler session were dropped as out of range (more the longer the "
    "GPU idled before it)"
)


class EmptyCaptureError(GraphCaptureError):
    """A GPU capture or replay recorded no kernel evidence; no golden may come from it."""


def _message(key: CaptureKey, what: str, causes: tuple[str, ...]) -> str:
    listed = "; ".join(f"({n}) {cause}" for n, cause in enumerate(causes, 1))
    return (
        f"graph capture {key}: {what}, so the profiler saw nothing of this graph and no golden is written. "
        f"Likely causes: {listed}. To rule out the first ones, {_ISOLATE_HINT}."
    )


def check_capture_evidence(key: CaptureKey, summary: Optional[Any]) -> None:
    """EmptyCaptureError when a GPU capture's summary counts no kernel launch events."""
    if summary is not None and not int(summary.launches.get("total", 0)):
        raise EmptyCaptureError(_message(key, "the capture recorded no kernel launch events", _PROCESS_CAUSES))


def check_forward_seen(key: CaptureKey, summary: Optional[Any], where: str) -> None:
    """EmptyCaptureError when a key's recorded capture holds no op, no kernel and no launch (on any device)."""
    if summary is None or summary.ops or summary.kernels or int(summary.launches.get("total", 0)):
        return
    raise EmptyCaptureError(
        f"{where}capture: the profile holds nothing of the capture forward (no op, no kernel, no launch) although "
        f"the forward ran, so no golden is written: the forward did no work the profiler could see (it returned "
        f"a cached result, or ran its work on another thread); make the capture forward run, on this thread, the "
        f"work its graph replays"
    )


def _cupti_causes(suspects: Sequence[str]) -> tuple[str, ...]:
    return tuple(f"another CUPTI client holds CUPTI, so the profiler records no GPU activity: {s}" for s in suspects)


def check_replay_evidence(key: CaptureKey, replay_kernels: list, suspects: Sequence[str] = ()) -> None:
    """EmptyCaptureError when the replay of a GPU graph recorded no kernels; ``suspects``: CUPTI clients, named first."""
    if not replay_kernels:
        raise EmptyCaptureError(
            _message(
                key,
                "the replay of its graph recorded no kernels",
                _cupti_causes(suspects) + _PROCESS_CAUSES + (_OUT_OF_RANGE,),
            )
        )


def silent_replay_reason(suspects: Sequence[str]) -> str:
    """Why a key is incomplete whose profiled replay recorded no kernels while its graph's nodes hold kernels."""
    if suspects:
        why = f"another CUPTI client holds CUPTI ({'; '.join(suspects)}), so the profiler records no GPU activity"
    else:
        why = f"the profiler recorded no GPU activity (likely: {'; '.join(_PROCESS_CAUSES)})"
    return f"its profiled replay recorded no kernels although the graph launches kernels: {why}; no golden is written"


def _mark_silent(summary: Any, reason: str) -> str:
    """Mark ``summary`` incomplete with ``reason`` (said as a KernelEvidenceWarning naming its key); return the reason."""
    summary.complete = False
    summary.incomplete_reason = reason
    warnings.warn(
        f"graph capture {summary.key}: kernel evidence incomplete: {reason}", KernelEvidenceWarning, stacklevel=3
    )
    return reason


#: The environment variable through which CUDA loads a CUPTI injection library into the process.
INJECTION = "CUDA_INJECTION64_PATH"


@dataclass(frozen=True)
class _CuptiClient:
    """Another CUPTI client in the process: what it is, and what to do about it."""

    name: str
    fix: str


class CuptiConflictError(GraphCaptureError):
    """Another CUPTI client is active where the gate's profiler must record GPU kernels; nothing is captured."""


def _proton_active(modules: Mapping[str, Any]) -> bool:
    flags_module = modules.get("triton.profiler.flags")
    if flags_module is None:
        return False
    flags = getattr(flags_module, "flags", flags_module)  # a flags object (newer Proton) or module globals
    return bool(getattr(flags, "profiling_on", False) or getattr(flags, "command_line", False))


def _cuspy_subscribed(modules: Mapping[str, Any]) -> bool:
    probe = getattr(modules.get("torch.profiler._cuspy.core"), "has_live_subscription", None)
    try:
        return bool(probe()) if callable(probe) else False
    except Exception:  # a probe that cannot answer names nothing
        return False


def _annotation_callbacks(modules: Mapping[str, Any]) -> bool:
    return getattr(modules.get("torch.cuda._graph_node_callbacks"), "_HANDLER", None) is not None


def active_clients(
    environ: Optional[Mapping[str, str]] = None, modules: Optional[Mapping[str, Any]] = None
) -> list[_CuptiClient]:
    """The other CUPTI clients active in this process now (``environ`` and ``modules`` default to the process's)."""
    environ = os.environ if environ is None else environ
    modules = sys.modules if modules is None else modules
    found = []
    if environ.get(INJECTION):
        found.append(
            _CuptiClient(
                f"a CUPTI injection library ({INJECTION}={environ[INJECTION]})",
                f"run the gate's tests without {INJECTION} (unset it for them; a kernel recorder loaded this way "
                f"is another CUPTI client)",
            )
        )
    if _proton_active(modules):
        found.append(
            _CuptiClient(
                "Triton's Proton profiler (a triton.profiler session is active)",
                "call triton.profiler.finalize() before the capture, or run the gate without Proton",
            )
        )
    if _annotation_callbacks(modules):
        found.append(
            _CuptiClient(
                "the cupti annotation backend of torch.cuda.graph(enable_annotations=True, "
                "annotation_config={'backend': 'cupti'})",
                "capture with annotation_config={'backend': 'edge_walk'} (or without annotations) under the gate",
            )
        )
    elif _cuspy_subscribed(modules):
        found.append(
            _CuptiClient(
                "torch's CUPTI-Python profiler backend (torch.profiler._cuspy holds a CUPTI subscription; "
                "torch.cuda.graph(enable_annotations=True, annotation_config={'backend': 'cupti'}) and "
                "record_py_stacks=True bring it up)",
                "it keeps its subscription for the life of the process: capture in a process in which nothing "
                "brings it up (for a runner, @pytest.mark.graph_capture_isolated), with annotation_config="
                "{'backend': 'edge_walk'} where annotations are wanted",
            )
        )
    return found


def refuse_other_clients(what: str, environ: Optional[Mapping[str, str]] = None, modules: Any = None) -> None:
    """:class:`CuptiConflictError` naming the first other CUPTI client active, before ``what`` profiles GPU kernels."""
    clients = active_clients(environ, modules)
    if clients:
        client = clients[0]
        raise CuptiConflictError(
            f"{what}: another CUPTI client is active in this process: {client.name}; only one can subscribe per "
            f"process, so the torch profiler would record no GPU kernels and no golden could be trusted; "
            f"{client.fix}"
        )


def suspected_clients(environ: Optional[Mapping[str, str]] = None, modules: Any = None) -> list[str]:
    """What may have silenced the profiler: the active clients, and a cupti-python import (which cannot be asked)."""
    modules = sys.modules if modules is None else modules
    names = [client.name for client in active_clients(environ, modules)]
    if modules.get("cupti.cupti") is not None or modules.get("cupti") is not None:
        names.append("cupti-python is imported in this process (a subscriber it made holds CUPTI)")
    return names
