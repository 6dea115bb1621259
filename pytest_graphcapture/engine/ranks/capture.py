"""Capture on N ranks: each rank builds its runner from a factory, captures it and sends back plain data."""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

from ...errors import UsageError
from ...keys import capture_order
from ...result import CaptureResult
from ..backend import make_backend
from ..capture import CaptureSettings, capture_runner
from ..decode_model import TinyDecodeRunner
from .supervisor import (
    DEFAULT_TIMEOUT,
    RankContext,
    Target,
    check_picklable,
    default_backend,
    progress_to_parent,
    report_stage,
    resolve_target,
    run_on_ranks,
)

DEFAULT_FACTORY = "pytest_graphcapture.engine.ranks.capture:tensor_parallel_decode_runner"


@dataclass
class MultiRankCaptureResult(CaptureResult):
    """A :class:`CaptureResult` over all ranks: ``keys`` holds every rank's keys."""

    world_size: int = 1
    per_rank: dict[int, CaptureResult] = field(default_factory=dict)
    single_trace_paths: dict[int, Path] = field(default_factory=dict)
    seconds: float = 0.0

    def for_rank(self, rank: int) -> CaptureResult:
        """Rank ``rank``'s result; KeyError naming the ranks when absent."""
        if rank not in self.per_rank:
            raise KeyError(f"no rank {rank}; ranks: {sorted(self.per_rank)}")
        return self.per_rank[rank]


def _settings_dict(settings: Any) -> dict:
    data = {
        f.name: getattr(settings, f.name)
        for f in dataclasses.fields(settings)
        if f.name not in ("progress", "on_stage")
    }  # callbacks stay in this process
    data["out_dir"] = str(data["out_dir"])
    data["profiler_flags"] = sorted(data["profiler_flags"])
    data["environment"] = dict(data["environment"])
    return data


def _capture_target(ctx: RankContext, factory: Target, settings: dict, graphs: bool) -> dict:
    """Rank side of :func:`capture_on_ranks`: build the runner, capture it, return plain data."""
    report_stage("building the runner")
    runner = resolve_target(factory)(ctx)
    if not callable(getattr(runner, "capture_keys", None)):
        raise UsageError(f"runner factory {factory!r} returned {type(runner).__name__}, not a GraphRunner")
    backend = make_backend(getattr(runner, "device", None) or ctx.device, graphs=graphs)
    values = dict(settings)
    values["profiler_flags"] = frozenset(values["profiler_flags"])
    values["progress"] = progress_to_parent()
    values["on_stage"] = lambda key, stage: report_stage(f"{key} {stage}")  # named when a rank hangs
    result = capture_runner(runner, backend, CaptureSettings(**values), rank=ctx.rank)
    report_stage("returning the summaries")
    return result.to_dict()


def capture_on_ranks(
    factory: Target,
    world_size: int,
    settings: Any = None,
    *,
    device_type: str = "cpu",
    backend: Optional[str] = None,
    timeout: float = DEFAULT_TIMEOUT,
    batch_sizes: Optional[Sequence[int]] = None,
    graphs: bool = True,
    progress: Optional[Callable[[str], None]] = None,
) -> MultiRankCaptureResult:
    """Capture the runner ``factory(ctx)`` builds on each of ``world_size`` ranks."""
    settings = settings or CaptureSettings()
    check_picklable(factory)
    backend = backend or default_backend(device_type)
    values = _settings_dict(settings)
    values["environment"]["distributed"] = {"backend": backend, "world_size": world_size}
    report = progress or settings.progress

    def on_progress(rank: int, line: str) -> None:
        if report is not None:
            report(line)

    started = time.perf_counter()
    outputs = run_on_ranks(
        _capture_target,
        world_size,
        args=(factory, values, graphs),
        device_type=device_type,
        backend=backend,
        timeout=timeout,
        batch_sizes=batch_sizes,
        on_progress=on_progress,
    )
    names = {out["runner_name"] for out in outputs}
    if len(names) != 1:
        raise UsageError(
            f"the ranks built differently named runners: {sorted(names)}; a runner factory must name "
            f"its runner the same on every rank"
        )
    first = outputs[0]
    merged = MultiRankCaptureResult(
        runner_name=first["runner_name"], platform=first["platform"], rank=0, mode=first["mode"], world_size=world_size
    )
    for rank, out in enumerate(outputs):
        own = CaptureResult.from_dict(out, source=f"rank {rank}")
        if own.single_trace_path is not None:
            merged.single_trace_paths[rank] = own.single_trace_path
        merged.per_rank[rank] = own
    for rank in sorted(merged.per_rank):  # rank by rank, each in capture order
        own_keys = merged.per_rank[rank].keys
        for key in capture_order(own_keys):
            merged.keys[key] = own_keys[key]
    merged.single_trace_path = merged.single_trace_paths.get(0)
    merged.seconds = time.perf_counter() - started
    return merged


def tensor_parallel_decode_runner(ctx: RankContext) -> Any:
    """Default runner factory of multi-rank captures: rank ``ctx.rank``'s shard of the embedded decoder."""
    return TinyDecodeRunner(device=ctx.device, tp_size=ctx.world_size, tp_rank=ctx.rank)
