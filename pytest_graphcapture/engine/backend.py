"""Backends: how one capture key is warmed up and captured."""

from __future__ import annotations

import contextlib
import inspect
import time
import warnings
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Callable, Iterator, Optional, Protocol

import torch

from ..keys import CaptureKey
from ..result import KeyMetrics
from ..summary.graph import CapturedGraph
from ..summary.platform import CPU, PROFILER_FLAGS, cuda_key, gfx_key, has_driver_version, rocm_gfx_from_compute
from .observe import EagerCUDAGraph
from .readout import (
    GraphDataUnusable,
    GraphReadoutError,
    GraphReadoutWarning,
    load_bindings,
    read_captured_graph,
    read_graph_data,
    say_once,
)

Forward = Callable[[], Any]

WARMUPS = 2


class Steppable(Protocol):
    def step(self) -> None: ...


@dataclass
class CaptureProgress:
    """Where :meth:`Backend.capture_one` is, so a failure can name its stage."""

    key: Optional[CaptureKey] = None
    stage: str = "not started"
    on_stage: Optional[Callable[[Optional[CaptureKey], str], None]] = None

    def enter(self, stage: str) -> None:
        self.stage = stage
        if self.on_stage is not None:
            self.on_stage(self.key, stage)


def _distributed_barrier() -> None:
    """``torch.distributed.barrier()`` when a process group is initialized, else nothing."""
    dist = getattr(torch, "distributed", None)
    if dist is not None and dist.is_available() and dist.is_initialized():
        dist.barrier()


class Backend:
    """The per-key capture sequence, shared by every backend."""

    name = "base"
    #: Whether replaying a graph under the profiler shows its kernels (real GPU graphs only).
    replay_shows_kernels = False
    #: Whether a capture with no launch events (or a replay with no kernels) is a profiler fault:
    #: true on a GPU, where every real graph launches kernels (see :mod:`.guard`).
    kernel_evidence_required = False

    def __init__(self, device: torch.device | str = "cpu") -> None:
        self.device = torch.device(device)
        #: Each key's graph as read from the graph object itself after capture (real CUDA graphs
        #: with cuda-bindings only), and how long each read took in seconds.
        self.graph_readouts: dict[CaptureKey, CapturedGraph] = {}
        #: Where each readout came from: ``graph-data`` (torch's get_graph_data()) or ``graph`` (cuda-bindings).
        self.readout_sources: dict[CaptureKey, str] = {}
        self.readout_seconds: dict[CaptureKey, float] = {}

    def synchronize(self) -> None:
        """Wait for the device to finish queued work (nothing on CPU)."""

    def barrier(self) -> None:
        """Wait for the other ranks (no-op when not distributed)."""
        _distributed_barrier()

    def run_forward(self, forward: Forward) -> Any:
        return forward()

    @contextlib.contextmanager
    def graph_context(self, key: CaptureKey, forward: Forward) -> Iterator[Any]:
        """Context in which the capture forward runs; yields the graph object."""
        yield EagerCUDAGraph.of(forward)

    def replay(self, graph: Any) -> None:
        graph.replay()

    def memory_stats(self) -> Optional[tuple[int, int]]:
        """``(allocated, reserved)`` bytes of the device allocator now; None where there is none (CPU)."""
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
        """Warm up ``key`` twice, capture it once, and return the graph."""
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
        #: cuda-bindings' (runtime, driver) when each graph is read after capture; None: not read.
        self.bindings = readout_bindings()

    def synchronize(self) -> None:
        torch.cuda.synchronize(self.device)

    def memory_stats(self) -> Optional[tuple[int, int]]:
        return int(torch.cuda.memory_allocated(self.device)), int(torch.cuda.memory_reserved(self.device))

    def run_forward(self, forward: Forward) -> Any:
        # Warmups run on the capture stream too, as engines do, so lazy
        # initialisation (cuBLAS handles, workspaces) happens on that stream.
        with torch.cuda.stream(self.stream):
            return forward()

    @contextlib.contextmanager
    def graph_context(self, key: CaptureKey, forward: Forward) -> Iterator[Any]:
        if self.bindings is None:
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=self.pool, stream=self.stream):
                yield graph
            return
        # keep_graph: the captured cudaGraph_t outlives capture_end, so its nodes can be read;
        # torch then leaves instantiation to the caller, done here right after the read.
        graph = torch.cuda.CUDAGraph(keep_graph=True)
        with torch.cuda.graph(graph, pool=self.pool, stream=self.stream):
            yield graph
        self.read_graph(key, graph)

    def read_graph(self, key: CaptureKey, graph: Any) -> None:
        """Instantiate ``graph`` (captured with ``keep_graph=True``), then :meth:`read_instantiated` it."""
        started = time.perf_counter()
        graph.instantiate()  # get_graph_data() needs the exec graph; the kept template stays readable
        self.read_instantiated(key, graph)
        self.readout_seconds[key] = time.perf_counter() - started

    def read_instantiated(self, key: CaptureKey, graph: Any) -> None:
        """Read an instantiated graph whose template is live into :attr:`graph_readouts`."""
        started = time.perf_counter()
        try:
            found = read_any(graph, self.bindings)
        except (GraphReadoutError, RuntimeError) as exc:
            warnings.warn(
                f"graph capture {key}: {_readout_problem(exc)}; its kernels come from the profiler replay",
                GraphReadoutWarning,
                stacklevel=2,
            )
            found = None
        self.readout_seconds[key] = time.perf_counter() - started
        if found is not None:
            self.graph_readouts[key], self.readout_sources[key] = found

    def replay(self, graph: Any) -> None:
        graph.replay()

    def release(self) -> None:
        self.pool = None


#: Said once when torch cannot hand over a captured graph for the readout.
NO_KEEP_GRAPH = (
    "torch {version} cannot keep a captured CUDA graph for reading (torch.cuda.CUDAGraph(keep_graph=True) "
    "and raw_cuda_graph() need torch >= 2.8), so kernels come from the profiler replay"
)


def _keeps_graphs() -> bool:
    """Whether this torch can keep a captured graph and hand it over (``CUDAGraph(keep_graph=True)``, ``raw_cuda_graph()``)."""
    graph_class = getattr(torch.cuda, "CUDAGraph", None)
    if graph_class is None or not callable(getattr(graph_class, "raw_cuda_graph", None)):
        return False
    if not callable(getattr(graph_class, "instantiate", None)):
        return False
    try:
        return "keep_graph" in inspect.signature(graph_class).parameters
    except (TypeError, ValueError):
        return False


def readout_bindings() -> Optional[tuple[ModuleType, ModuleType]]:
    """cuda-bindings' ``(runtime, driver)`` when captured graphs can be read in process; None otherwise."""
    if getattr(torch.version, "hip", None):
        return None
    if not _keeps_graphs():
        say_once(NO_KEEP_GRAPH.format(version=torch.__version__))
        return None
    return load_bindings()


def read_any(graph: Any, bindings: Optional[tuple[ModuleType, ModuleType]]) -> Optional[tuple[CapturedGraph, str]]:
    """An instantiated graph's nodes and their source: ``get_graph_data()`` where whole, else the walk, else None."""
    try:
        return read_graph_data(graph), "graph-data"
    except GraphDataUnusable:
        pass
    if bindings is None:
        return None
    runtime, driver = bindings
    readout = read_captured_graph(graph.raw_cuda_graph(), runtime=runtime, driver=driver)
    return (readout, "graph") if readout is not None else None


def _readout_problem(exc: BaseException) -> str:
    """A failed readout as one line: the readout's own error, or cuda-bindings' RuntimeError prefixed."""
    return str(exc) if isinstance(exc, GraphReadoutError) else f"reading the captured graph: {exc}"


def make_backend(device: torch.device | str, *, graphs: bool = True) -> Backend:
    """The backend for ``device``: real graphs on CUDA/ROCm, eager otherwise."""
    device = torch.device(device)
    if device.type == "cuda" and graphs:
        return CudaGraphBackend(device)
    return EagerBackend(device)


def _device_index(device: Any) -> Optional[int]:
    """CUDA device index for ``device`` (None for CPU)."""
    if device is None:
        return torch.cuda.current_device() if torch.cuda.is_available() else None
    if isinstance(device, int) and not isinstance(device, bool):
        return device
    dev = torch.device(device)
    if dev.type != "cuda":
        return None
    return dev.index if dev.index is not None else torch.cuda.current_device()


def detect_platform(device: Any = None) -> str:
    """Platform key of a live torch device (``"cuda:0"``, ``torch.device``, index, or None = current)."""
    index = _device_index(device)
    if index is None:
        return CPU
    props = torch.cuda.get_device_properties(index)
    if getattr(torch.version, "hip", None):
        arch = getattr(props, "gcnArchName", "") or ""
        if arch:
            return gfx_key(arch)
        return f"rocm-{rocm_gfx_from_compute(props.major, props.minor)}"
    return cuda_key(props.major, props.minor)


def environment_from_device(device: Any = None, *, profiler: Any = None) -> dict:
    """Informational environment of a live device: name, torch/CUDA/HIP versions, driver."""
    env: dict[str, Any] = {"torch_version": str(torch.__version__)}
    index = _device_index(device)
    if index is None:
        env["device_name"] = "cpu"
    else:
        props = torch.cuda.get_device_properties(index)
        env["device_name"] = props.name or None
        env["device_count"] = torch.cuda.device_count()
        if getattr(torch.version, "hip", None):
            env["hip_runtime_version"] = str(torch.version.hip)
            arch = getattr(props, "gcnArchName", None)
            if arch:
                env["gcn_arch_name"] = arch
        else:
            env["cuda_runtime_version"] = str(torch.version.cuda)
        try:
            driver = torch.cuda.driver_version() if has_driver_version(torch) else None
        except Exception:  # informational only: a missing driver query must not fail a capture
            driver = None
        if driver is not None:
            env["driver_version"] = driver
    if profiler is not None:
        env["profiler"] = {flag: bool(getattr(profiler, flag, False)) for flag in PROFILER_FLAGS}
    return env
