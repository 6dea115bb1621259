"""The capture engine: every key of a runner, largest batch size first, under the profiler.

It ties the stages together — runner (forward per key) → backend (warmups and
capture) → profiler schedule (one cycle per key) → summary — and returns a
:class:`~pytest_graphcapture.result.CaptureResult`.  It is what the
``graph_capture`` fixture calls, and what a user's own start-up code can call.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

import torch

from ..errors import CaptureError, UsageError
from ..keys import CaptureKey, key_label
from ..naming import memory_snapshot_path
from ..result import CaptureResult, KeyMetrics, KeyResult
from ..summary.live import replay_kernels_from_profile, summarize_profile
from ..summary.model import of_graphs
from ..summary.replay import with_graph, with_replay
from .backend import Backend, CaptureProgress
from .cupti_clients import refuse_other_clients, suspected_clients
from .guard import (
    EmptyCaptureError,
    check_capture_evidence,
    check_forward_seen,
    check_replay_evidence,
    mark_silent,
    silent_replay_reason,
)
from .memory import Recording
from .profiling import PerBatchSizeProfiler, SingleTraceProfiler
from .runner import GraphRunner

TRACE_MODES = ("off", "per-bs", "single")


@dataclass
class CaptureSettings:
    """How to capture: what to export, whether to summarize, where files go.

    * ``trace``: ``off`` (no trace files), ``per-bs`` (one trace per key) or
      ``single`` (one trace for the whole capture phase);
    * ``summarize``: profile each key (per-bs schedule) to build its summary —
      the input of golden checks — even when no trace is exported;
    * ``replay``: replay each captured graph once under the profiler to read its
      kernels (``None`` = when the backend's graphs show kernels, i.e. on GPU);
    * ``profiler_flags``: stack / flops / memory recording for exported traces;
    * ``memory_snapshot``: record the CUDA allocator's history during capture and
      write one snapshot per runner and rank into the trace directory (GPU only).
    """

    trace: str = "off"
    summarize: bool = True
    out_dir: Path = Path(".")
    platform: str = "cpu"
    level: str = "exact"
    replay: Optional[bool] = None
    profiler_flags: frozenset = frozenset({"stack", "flops", "memory"})
    environment: dict = field(default_factory=dict)
    memory_snapshot: bool = False
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
        if self.trace not in TRACE_MODES:
            raise ValueError(f"trace mode must be one of {', '.join(TRACE_MODES)}, got {self.trace!r}")
        self.out_dir = Path(self.out_dir)


def current_rank() -> int:
    """The torch.distributed rank when a process group is initialized, else 0."""
    dist = getattr(torch, "distributed", None)
    if dist is not None and dist.is_available() and dist.is_initialized():
        return int(dist.get_rank())
    return 0


def _label(key: CaptureKey) -> str:
    return f"graph-capture: {key.runner} {key_label(key, explicit_rank=True)}"


def _summarizer(
    settings: CaptureSettings, held_graphs: Optional[Callable[[CaptureKey], bool]] = None
) -> Callable[[Any, CaptureKey, Optional[Callable[[], Path]]], Any]:
    """The live summary of one key; ``held_graphs(key)``: its capture forward held graphs, one Summary each."""

    def summarize(prof: Any, key: CaptureKey, export: Optional[Callable[[], Path]] = None) -> Any:
        return summarize_profile(
            prof,
            key,
            platform=settings.platform,
            level=settings.level,
            environment=settings.environment,
            export=export,
            graphs=held_graphs is not None and held_graphs(key),
        )

    return summarize


def make_profiler(
    settings: CaptureSettings,
    device: torch.device,
    runner_name: str,
    rank: int,
    held_graphs: Optional[Callable[[CaptureKey], bool]] = None,
    warmups: int = 2,
) -> Any:
    """The profiler ``settings`` ask for: per batch size (traces and/or live summaries), one trace, or None.

    Summaries need per-batch-size profiling unless the run asked for one single trace.
    ``held_graphs(key)``: whether a key's capture forward held its graphs (summarized one per graph);
    ``warmups``: the warmup forwards (each followed by a step) before each key's recorded capture.
    """
    if settings.trace == "per-bs" or (settings.summarize and settings.trace != "single"):
        return PerBatchSizeProfiler(
            device,
            export_dir=settings.out_dir if settings.trace == "per-bs" else None,
            summarizer=_summarizer(settings, held_graphs) if settings.summarize else None,
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
    """Capture every key of ``runner`` on ``backend``; return the per-key results.

    If a key fails, the keys captured before it keep their results and files,
    the failing key's partial profile is discarded (no file, no summary), the
    profiler is stopped, and :class:`~pytest_graphcapture.errors.CaptureError`
    names the key and stage (its ``partial`` holds the result so far).  A
    ``KeyboardInterrupt`` cleans up the same way and propagates unchanged.

    A key whose recorded capture holds no op, no kernel and no launch fails with an
    :class:`~pytest_graphcapture.engine.guard.EmptyCaptureError` naming it once every key
    ran (so a forward that raises is reported as itself); no result comes back.

    On a GPU (``backend.kernel_evidence_required``) a key whose capture recorded
    no launch events, or whose replay recorded no kernels, fails the same way with an
    :class:`~pytest_graphcapture.engine.guard.EmptyCaptureError` naming the likely causes;
    on CUDA another CUPTI client active before the capture refuses it at once
    (:class:`~pytest_graphcapture.engine.cupti_clients.CuptiConflictError`, one line naming it).
    """
    settings = settings or CaptureSettings()
    rank = current_rank() if rank is None else rank
    keys = selected_keys(runner, rank, settings)
    result = CaptureResult(runner_name=runner.name, platform=settings.platform, rank=rank, mode=settings.trace)
    refuse_cupti_conflict(backend, settings, f"graph capture {runner.name}")
    profiler = make_profiler(settings, backend.device, runner.name, rank)
    per_bs = isinstance(profiler, PerBatchSizeProfiler)

    progress = CaptureProgress(on_stage=settings.on_stage)
    # The first key whose recorded capture holds nothing of its forward, and why: no golden may come from it.
    unseen: Optional[EmptyCaptureError] = None
    unseen_key: Optional[CaptureKey] = None
    history = backend.memory_history() if settings.memory_snapshot else None
    snapshot = Recording(history, memory_snapshot_path(settings.out_dir, runner.name, rank, settings.trace_group))
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
                    check_forward_seen(key, done.summary, f"{_label(key)}: ")
                except EmptyCaptureError as exc:
                    # Raised once every key ran: a forward that raises at a later key is reported as itself.
                    if unseen is None:
                        unseen, unseen_key = exc, key
                    continue
            if backend.kernel_evidence_required and done is not None:
                progress.enter("kernel evidence check")
                check_capture_evidence(key, done.summary)
            result.keys[key] = KeyResult(
                key,
                trace_path=done.trace_path if done else None,
                summary=done.summary if done else None,
                graph=graph,
                seconds=seconds,
                metrics=metrics,
            )
            if settings.progress is not None:
                settings.progress(f"{_label(key)} captured in {seconds:.3f}s ({metrics.describe()})")
        if unseen is not None:
            progress.key = unseen_key
            progress.enter("capture")
            raise unseen
        result.memory_snapshot_path = snapshot.finish()
        if profiler is not None:
            progress.key = None
            progress.enter("trace export")
            profiler.__exit__(None, None, None)
            if isinstance(profiler, SingleTraceProfiler):
                result.single_trace_path = profiler.trace_path
            profiler = None
        if _replay_enabled(settings, backend) and settings.summarize:
            _attach_replay_kernels(result, backend, progress, settings.progress)
        elif settings.summarize:
            _attach_graph_readouts(result, backend)
    except KeyboardInterrupt:
        _stop_quietly(profiler)
        snapshot.abandon()
        raise
    except Exception as exc:
        _stop_quietly(profiler)
        snapshot.abandon()
        if exc is unseen:  # already one line naming the runner, the key and what to do
            raise
        if progress.stage == "replay":
            # Its graph could not be read back: the key keeps its trace file but gets no result.
            result.keys.pop(progress.key, None)
        raise CaptureError(progress.key or runner.name, progress.stage, exc, partial=result) from exc
    return result


def selected_keys(runner: GraphRunner, rank: int, settings: CaptureSettings) -> list[CaptureKey]:
    """The runner's keys in capture order, cut to ``settings.batch_sizes``; UsageError for a bad list.

    The batch-size setting applies to every runner: a size the runner does not
    list is an error naming the setting, never silently skipped.
    """
    try:
        keys = runner.capture_keys(rank)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    if settings.batch_sizes is None:
        return keys
    listed = sorted({k.batch_size for k in keys})
    lacking = [bs for bs in settings.batch_sizes if bs not in listed]
    if lacking:
        raise UsageError(
            f"{settings.batch_sizes_origin} asks for batch size {', '.join(map(str, lacking))}, which runner "
            f"{runner.name} does not capture (it lists {', '.join(map(str, listed))})"
        )
    wanted = set(settings.batch_sizes)
    return [k for k in keys if k.batch_size in wanted]


def _forward(runner: GraphRunner, key: CaptureKey) -> Callable[[], Any]:
    """``runner.forward_for(key)``, checked to be what the backend can call."""
    forward = runner.forward_for(key)
    if not callable(forward):
        raise TypeError(
            f"{type(runner).__name__}.forward_for({key}) returned a {type(forward).__name__}, not a callable: "
            f"it must return a function taking no arguments that runs one forward on the static buffers"
        )
    return forward


def _stop_quietly(profiler: Any) -> None:
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
    """Replay each graph once timed, then once under a short profiler; its kernels join the summary.

    The timed replay also keeps the device busy right before the profiler starts:
    kernel records at the start of a session after the device idled can be dropped.
    """
    from torch.profiler import profile

    from .profiling import profiler_activities, quiet_kineto

    for key, key_result in result.keys.items():
        if key_result.summary is None:
            continue
        progress.key = key
        progress.enter("replay")
        # A key whose capture forward held its graphs (pieces) replays each, one profile per graph.
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
            report(f"{_label(key)} replayed in {key_result.metrics.replay_seconds * 1e3:.3f} ms")
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
            key_result.no_golden = mark_silent(key_result.summary, silent_replay_reason(suspected_clients()))
        else:
            key_result.summary = with_graph(key_result.summary, readout, source=source, replay_kernels=kernels)
    else:
        key_result.summary = with_replay(key_result.summary, kernels)
