"""A CPU stand-in for vLLM 0.34's capture path, shaped as the wheel has it (names, calls, order, pools):
``CudaGraphManager.capture`` (v1/worker/gpu/cudagraph_utils.py), ``GPUModelRunner.capture_model`` and
``profile_cudagraph_memory`` (model_runner.py, cudagraph_utils.py), ``Worker`` start-up (gpu_worker.py), and the
``CUDAGraphWrapper`` that captures each PIECEWISE piece inside the model (compilation/cuda_graph.py).

The model is a tiny decoder. ``Options`` changes what a test needs: an op in one pass (a regression), no estimate pass.
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
from typing import Optional

import torch


class CUDAGraphMode(enum.Enum):
    NONE = 0
    PIECEWISE = 1
    FULL = 2


@dataclasses.dataclass(frozen=True)
class BatchExecutionDescriptor:
    cg_mode: CUDAGraphMode
    num_tokens: int
    num_reqs: Optional[int] = None  # None for PIECEWISE


@dataclasses.dataclass
class ForwardContext:
    cudagraph_runtime_mode: CUDAGraphMode = CUDAGraphMode.NONE
    num_tokens: int = 0


_context = ForwardContext()


def get_forward_context() -> ForwardContext:
    return _context


@contextlib.contextmanager
def set_forward_context(num_tokens: int, cudagraph_runtime_mode: CUDAGraphMode):
    global _context
    saved, _context = _context, ForwardContext(cudagraph_runtime_mode, num_tokens)
    try:
        yield
    finally:
        _context = saved


class Platform:
    """``current_platform``: the global graph pool every manager and wrapper binds at construction."""

    _global_graph_pool = None

    @classmethod
    def get_global_graph_pool(cls):
        if cls._global_graph_pool is None:
            cls._global_graph_pool = torch.cuda.graph_pool_handle()
        return cls._global_graph_pool


@dataclasses.dataclass
class Options:
    piecewise_sizes: tuple = (4, 2)
    full_sizes: tuple = (4, 2, 1)
    pieces: int = 2
    estimate: bool = True  # VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS
    #: ``(pass, op)``: pass "estimate" or "real" runs an extra op in every piece (a change in that pass only).
    change: Optional[tuple] = None


class CUDAGraphWrapper:
    """One piece: captured on its first PIECEWISE call per size, into ``graph_pool``, and replayed after."""

    def __init__(self, piece, graph_pool) -> None:
        self.piece, self.graph_pool, self.graphs = piece, graph_pool, {}

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        context = get_forward_context()
        if context.cudagraph_runtime_mode != CUDAGraphMode.PIECEWISE:
            return self.piece(x)
        n = context.num_tokens
        if n not in self.graphs:
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=self.graph_pool, stream=torch.cuda.current_stream()):
                out = self.piece(x)
            self.graphs[n] = (graph, out)
            return out
        graph, out = self.graphs[n]
        graph.replay()
        return out


class TinyDecoder(torch.nn.Module):
    """PIECEWISE pieces (linear layers) with attention between them, which vLLM runs eagerly."""

    def __init__(self, options: Options, hidden: int = 16) -> None:
        super().__init__()
        self.options, self.phase = options, "real"
        self.embed = torch.nn.Embedding(64, hidden)
        self.layers = torch.nn.ModuleList(torch.nn.Linear(hidden, hidden) for _ in range(options.pieces))
        self.wrappers = [
            CUDAGraphWrapper(self._piece(i), Platform.get_global_graph_pool()) for i in range(options.pieces)
        ]

    def _piece(self, i: int):
        def piece(x: torch.Tensor) -> torch.Tensor:
            x = self.layers[i](x)
            if self.options.change is not None and self.options.change[0] == self.phase:
                x = getattr(torch, self.options.change[1])(x)
            return torch.nn.functional.silu(x)

        return piece

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        x = self.embed(input_ids)
        for i, wrapper in enumerate(self.wrappers):
            x = wrapper(x)
            if i < len(self.wrappers) - 1:
                x = torch.softmax(x, dim=-1) * x  # attention: eager between the pieces, inside a FULL graph
        return x


def prepare_inputs_to_capture(num_reqs: int, num_tokens: int, *, full_cudagraph: bool) -> None:
    """Attention metadata for a capture (FULL or not): what the real one builds before each ``forward_fn``."""


@contextlib.contextmanager
def capture_pool(pool):
    yield pool


@contextlib.contextmanager
def graph_capture(stream=None):
    """``distributed/parallel_state.graph_capture``: a new stream unless one is given."""
    stream = stream or torch.cuda.Stream()
    with torch.cuda.stream(stream):
        yield stream


class CudaGraphManager:
    def __init__(self, options: Options) -> None:
        self.pool = Platform.get_global_graph_pool()  # bound at construction
        self.graphs: dict = {}
        self._max_full_descs_to_capture: Optional[int] = None
        self._capture_descs = {
            CUDAGraphMode.PIECEWISE: [
                BatchExecutionDescriptor(CUDAGraphMode.PIECEWISE, n) for n in options.piecewise_sizes
            ],
            CUDAGraphMode.FULL: [BatchExecutionDescriptor(CUDAGraphMode.FULL, n, n) for n in options.full_sizes],
        }
        for descs in self._capture_descs.values():
            descs.sort(key=lambda d: d.num_tokens, reverse=True)

    @torch.inference_mode()
    def capture(self, create_forward_fn, stream=None) -> None:
        with graph_capture(stream) as self.capture_stream:
            for mode in [CUDAGraphMode.PIECEWISE, CUDAGraphMode.FULL]:
                descs = self._capture_descs[mode]
                if mode == CUDAGraphMode.FULL and self._max_full_descs_to_capture is not None:
                    descs = descs[: self._max_full_descs_to_capture]
                for desc in descs:
                    forward_fn = create_forward_fn(desc, warmup=True)
                    forward_fn(CUDAGraphMode.NONE)  # warmup
                    if desc.cg_mode == CUDAGraphMode.PIECEWISE:
                        forward_fn(CUDAGraphMode.PIECEWISE)  # the pieces are captured inside the model
                        continue
                    forward_fn = create_forward_fn(desc, warmup=False)  # fresh attention state
                    graph = torch.cuda.CUDAGraph()
                    with (
                        capture_pool(self.pool) as pool,
                        torch.cuda.graph(graph, pool, stream=torch.cuda.current_stream()),
                    ):
                        forward_fn(CUDAGraphMode.NONE)
                    self.graphs[desc] = graph


class ModelCudaGraphManager(CudaGraphManager):
    def capture(self, model: TinyDecoder, max_tokens: int) -> None:
        input_ids = torch.arange(max_tokens) % 64
        positions = torch.arange(max_tokens)
        self.hidden_states = None

        def create_forward_fn(desc: BatchExecutionDescriptor, warmup: bool):
            num_tokens = desc.num_tokens
            prepare_inputs_to_capture(
                desc.num_reqs or num_tokens, num_tokens, full_cudagraph=desc.cg_mode == CUDAGraphMode.FULL
            )

            def forward_fn(cg_mode: CUDAGraphMode) -> None:
                with set_forward_context(num_tokens, cg_mode):
                    out = model(input_ids=input_ids[:num_tokens], positions=positions[:num_tokens])
                if self.hidden_states is None:
                    self.hidden_states = torch.empty(max_tokens, out.shape[-1])
                self.hidden_states[:num_tokens] = out

            return forward_fn

        super().capture(create_forward_fn)


class GPUModelRunner:
    def __init__(self, options: Options) -> None:
        self.options = options
        self.model = TinyDecoder(options)
        self.max_tokens = max(options.piecewise_sizes + options.full_sizes)
        self.cudagraph_manager: Optional[ModelCudaGraphManager] = None

    @torch.inference_mode()
    def profile_run(self) -> None:
        """The eager forward at the largest size that start-up runs before any capture."""
        ids = torch.arange(self.max_tokens) % 64
        self.model(input_ids=ids, positions=torch.arange(self.max_tokens))

    def capture_model(self, *, profile_only: bool = False) -> int:
        self.cudagraph_manager.capture(self.model, self.max_tokens)
        return 0

    def profile_cudagraph_memory(self) -> int:
        """The memory estimate: every PIECEWISE graph, the two largest FULL ones, into a throwaway pool, then gone."""
        throwaway = torch.cuda.graph_pool_handle()
        saved_global, Platform._global_graph_pool = Platform._global_graph_pool, throwaway
        manager = ModelCudaGraphManager(self.options)
        manager.pool, manager._max_full_descs_to_capture = throwaway, 2
        saved_pools = [w.graph_pool for w in self.model.wrappers]
        for wrapper in self.model.wrappers:
            wrapper.graph_pool = throwaway
        self.cudagraph_manager, self.model.phase = manager, "estimate"
        try:
            return self.capture_model(profile_only=True)
        finally:
            for wrapper, pool in zip(self.model.wrappers, saved_pools):
                wrapper.graphs.clear()
                wrapper.graph_pool = pool
            self.cudagraph_manager, self.model.phase = None, "real"
            Platform._global_graph_pool = saved_global


class Worker:
    """Start-up as ``gpu_worker.py`` runs it: profile run, the memory estimate, the KV cache, the real capture."""

    def __init__(self, options: Options) -> None:
        self.options = options
        self.model_runner = GPUModelRunner(options)

    def determine_available_memory(self) -> None:
        self.model_runner.profile_run()
        if self.options.estimate:
            self.model_runner.profile_cudagraph_memory()

    def compile_or_warm_up_model(self) -> None:
        self.model_runner.cudagraph_manager = ModelCudaGraphManager(self.options)
        self.model_runner.capture_model()
        self.model_runner.profile_run()  # a warm-up forward after the capture, as vLLM's sampler warm-up runs


def start(options: Options) -> Worker:
    """What ``LLM(...)`` does for the capture, in start-up order."""
    Platform._global_graph_pool = None
    worker = Worker(options)
    worker.determine_available_memory()
    worker.compile_or_warm_up_model()
    return worker
