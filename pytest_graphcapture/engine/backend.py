"""Backends: how one capture key is warmed up and captured.

Every backend runs the same per-key sequence (:meth:`Backend.capture_one`); they
differ only in the primitives — what "synchronize", "barrier" and "the graph
context" mean:

* :class:`CudaGraphBackend` — real ``torch.cuda.CUDAGraph`` capture with one shared
  memory pool and a dedicated capture stream (also what runs on ROCm builds,
  where ``torch.cuda`` maps to HIP);
* :class:`EagerBackend` — CPU (or a GPU without graphs): the "capture" is a plain
  forward and replay re-runs it on the same static buffers;
* :class:`~pytest_graphcapture.testing.FakeBackend` — records the call sequence
  for contract tests.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Optional, Protocol

import torch

from ..keys import CaptureKey
from .memory import MemoryHistory, TorchMemoryHistory
from .result import KeyMetrics

Forward = Callable[[], Any]

WARMUPS = 2


class Steppable(Protocol):
    def step(self) -> None: ...


@dataclass
class CaptureProgress:
    """Where :meth:`Backend.capture_one` is, so a failure can name its stage.

    ``on_stage(key, stage)`` is told of every stage change (a rank process forwards
    them to its parent, which names the stage of a rank that hangs).
    """

    key: Optional[CaptureKey] = None
    stage: str = "not started"
    on_stage: Optional[Callable[[Optional[CaptureKey], str], None]] = None

    def enter(self, stage: str) -> None:
        self.stage = stage
        if self.on_stage is not None:
            self.on_stage(self.key, stage)


def distributed_barrier() -> None:
    """``torch.distributed.barrier()`` when a process group is initialized, else nothing."""
    dist = getattr(torch, "distributed", None)
    if dist is not None and dist.is_available() and dist.is_initialized():
        dist.barrier()


class EagerGraph:
    """Stand-in for a captured graph: replay re-runs the forward on the static buffers."""

    def __init__(self, forward: Forward) -> None:
        self._forward = forward

    def replay(self) -> None:
        self._forward()


class Backend:
    """The per-key capture sequence, shared by every backend.

    Subclasses override :meth:`synchronize`, :meth:`barrier`, :meth:`run_forward`
    and :meth:`graph_context`; they never reorder the sequence.
    """

    name = "base"
    #: Whether replaying a graph under the profiler shows its kernels (real GPU graphs only).
    replay_shows_kernels = False
    #: Whether a capture with no launch events (or a replay with no kernels) is a profiler fault:
    #: true on a GPU, where every real graph launches kernels (see :mod:`.guard`).
    kernel_evidence_required = False

    def __init__(self, device: torch.device | str = "cpu") -> None:
        self.device = torch.device(device)

    def synchronize(self) -> None:
        """Wait for the device to finish queued work (nothing on CPU)."""

    def barrier(self) -> None:
        """Wait for the other ranks (no-op when not distributed)."""
        distributed_barrier()

    def run_forward(self, forward: Forward) -> Any:
        return forward()

    @contextlib.contextmanager
    def graph_context(self, key: CaptureKey, forward: Forward) -> Iterator[Any]:
        """Context in which the capture forward runs; yields the graph object."""
        yield EagerGraph(forward)

    def replay(self, graph: Any) -> None:
        graph.replay()

    def memory_stats(self) -> Optional[tuple[int, int]]:
        """``(allocated, reserved)`` bytes of the device allocator now; None where there is none (CPU)."""
        return None

    def memory_history(self) -> Optional[MemoryHistory]:
        """The recorder of the allocator's history (``--graph-capture-memory-snapshot``); None on CPU."""
        return None

    def capture_one(
        self,
        key: CaptureKey,
        forward: Forward,
        *,
        profiler: Optional[Steppable] = None,
        profiling: bool = False,
        post_warmup: Optional[Callable[[CaptureKey], None]] = None,
        progress: Optional[CaptureProgress] = None,
        metrics: Optional[KeyMetrics] = None,
    ) -> Any:
        """Warm up ``key`` twice, capture it once, and return the graph.

        Each warmup is synchronize → barrier → forward → ``post_warmup(key)`` →
        ``profiler.step()`` (when profiling and a profiler is given), so nothing the
        hook does is recorded: the recorded step holds the capture forward alone.  The capture
        forward runs inside the graph context; the profiler steps once more only
        **after** the context has exited, because stepping (or stopping) a
        profiler synchronizes the device, which stream capture forbids.

        ``metrics`` (when given) receives the warmups' and the capture's host wall time
        (``torch.cuda.graph`` synchronizes the device on entry, so the last warmup's
        device work counts towards the capture) and the allocator growth across the
        graph context; a profiler that takes metadata (``add_metadata``) gets them while
        the key's cycle still records, so they land in its exported trace.
        """
        progress = progress if progress is not None else CaptureProgress()
        progress.key = key
        metrics = metrics if metrics is not None else KeyMetrics()
        stepping = profiling and profiler is not None
        started = time.perf_counter()
        for warmup in range(1, WARMUPS + 1):
            self.enter_stage(progress, f"warmup {warmup}")
            self.synchronize()
            self.barrier()
            self.run_forward(forward)
            # The hook runs before the step, so its work stays in the unrecorded wait
            # step: after the second warmup, stepping opens the recorded one.
            if post_warmup is not None:
                post_warmup(key)
            if stepping:
                profiler.step()
        self.enter_stage(progress, "capture")
        captured = time.perf_counter()
        metrics.warmup_seconds = captured - started
        before = self.memory_stats()
        with self.graph_context(key, forward) as graph:
            self.run_forward(forward)
        metrics.capture_seconds = time.perf_counter() - captured
        after = self.memory_stats()
        if before is not None and after is not None:
            metrics.memory_allocated, metrics.memory_reserved = after[0] - before[0], after[1] - before[1]
        if stepping and callable(getattr(profiler, "add_metadata", None)):
            profiler.add_metadata(metrics.to_dict())
        if stepping:
            # The step that closes the key's cycle is where its trace is summarized and exported.
            self.enter_stage(progress, "trace export")
            profiler.step()
        self.enter_stage(progress, "done")
        return graph

    def enter_stage(self, progress: CaptureProgress, stage: str) -> None:
        """Mark that the sequence enters ``stage`` (fakes inject faults here)."""
        progress.enter(stage)

    def release(self) -> None:
        """Free what the backend holds (memory pools, streams)."""


class EagerBackend(Backend):
    """Eager stand-in for CPU, or a GPU without graphs: the same calls, no graph."""

    name = "eager"

    def synchronize(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)


class CudaGraphBackend(Backend):
    """Real CUDA (or HIP) graphs: shared memory pool, dedicated capture stream."""

    name = "cuda-graph"
    replay_shows_kernels = True
    kernel_evidence_required = True

    def __init__(self, device: torch.device | str = "cuda") -> None:
        super().__init__(device)
        if self.device.type != "cuda" or not torch.cuda.is_available():
            raise RuntimeError(f"CudaGraphBackend needs a CUDA/ROCm device, got {self.device}")
        self.pool = torch.cuda.graph_pool_handle()
        self.stream = torch.cuda.Stream(device=self.device)

    def synchronize(self) -> None:
        torch.cuda.synchronize(self.device)

    def memory_stats(self) -> Optional[tuple[int, int]]:
        return int(torch.cuda.memory_allocated(self.device)), int(torch.cuda.memory_reserved(self.device))

    def memory_history(self) -> Optional[MemoryHistory]:
        return TorchMemoryHistory()

    def run_forward(self, forward: Forward) -> Any:
        # Warmups run on the capture stream too, as engines do, so lazy
        # initialisation (cuBLAS handles, workspaces) happens on that stream.
        with torch.cuda.stream(self.stream):
            return forward()

    @contextlib.contextmanager
    def graph_context(self, key: CaptureKey, forward: Forward) -> Iterator[Any]:
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self.pool, stream=self.stream):
            yield graph

    def replay(self, graph: Any) -> None:
        graph.replay()

    def release(self) -> None:
        self.pool = None


def make_backend(device: torch.device | str, *, graphs: bool = True) -> Backend:
    """The backend for ``device``: real graphs on CUDA/ROCm, eager otherwise."""
    device = torch.device(device)
    if device.type == "cuda" and graphs:
        return CudaGraphBackend(device)
    return EagerBackend(device)
