"""Gate an engine's own capture loop, unmodified: observe it, check the step contract, profile each key.

An engine captures its decode graphs in its own start-up loop: per batch size (and
variant) two warmup forwards, then the capture under ``torch.cuda.graph``, largest
batch size first.  :func:`capture_engine_loop` runs that loop for real while it

* wraps the forward method named by ``forward`` (the body every graph holds) so each
  call is attributed to a :class:`~pytest_graphcapture.keys.CaptureKey` through ``key``;
* wraps ``torch.cuda.CUDAGraph.capture_begin`` / ``capture_end`` (what ``torch.cuda.graph``
  calls) so it knows each graph the engine captures and which key it holds; a graph begun
  while a forward runs belongs to a library inside the forward, never to a key;
* on a device other than CUDA (CPU CI), replaces ``torch.cuda.CUDAGraph``, ``torch.cuda.graph``
  and the stream, pool and synchronize calls with eager stand-ins: the forward inside the
  graph context runs once, for real, and replaying the stand-in runs it again;
* drives the plugin's per-batch-size profiler: ``fn(profiler)`` steps it where the engine
  steps its own; ``fn()`` (an engine that takes no profiler) has it stepped for it after
  each forward outside a graph and when each graph's capture ends;
* checks the step contract on the way (:class:`StepContract`): a violation stops the
  capture with one line naming the key and the stage.

Everything patched is restored when ``fn`` returns or raises.  The observed sequence of
one key is :func:`user_key_sequence`; :mod:`pytest_graphcapture.contract` checks the
same sequence on recording fakes.
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import time
from typing import Any, Callable, Iterator, NoReturn, Optional, Union

import torch

from ..errors import CaptureError, GraphCaptureError, UsageError
from ..keys import CaptureKey, key_label
from .backend import CaptureProgress, make_backend
from .capture import (
    CaptureSettings,
    _attach_replay_kernels,
    _label,
    _replay_enabled,
    _stop_quietly,
    current_rank,
    make_profiler,
    refuse_cupti_conflict,
)
from .capture_observer import CaptureObserver, fire_torch_hooks, observe_captures
from .guard import check_capture_evidence
from .profiling import PerBatchSizeProfiler, SingleTraceProfiler
from .result import CaptureResult, KeyMetrics, KeyResult

#: The events of the step contract (also the call names of :class:`~pytest_graphcapture.testing.CallLog`).
FORWARD, STEP, GRAPH_ENTER, GRAPH_EXIT = "forward", "profiler.step", "graph.enter", "graph.exit"
WARMUPS = 2
KeyLike = Union[CaptureKey, int, tuple]


def user_key_sequence(warmups: int = WARMUPS) -> list[str]:
    """The calls of one key in an engine's capture loop: each warmup forward then a step; the capture; a step."""
    return [FORWARD, STEP] * warmups + [GRAPH_ENTER, FORWARD, GRAPH_EXIT, STEP]


def _stages(warmups: int) -> list[str]:
    """The stage each position of :func:`user_key_sequence` belongs to, as failure lines name it."""
    stages = []
    for n in range(1, warmups + 1):
        stages += [f"warmup {n}", f"profiler step after warmup {n}"]
    return stages + ["capture", "capture", "capture", "profiler step after the capture"]


_WHAT = {
    FORWARD: "a forward",
    STEP: "a profiler step",
    GRAPH_ENTER: "the start of the graph capture",
    GRAPH_EXIT: "the end of the graph capture",
}


def as_key(value: KeyLike, runner: str, rank: int = 0) -> CaptureKey:
    """A key function's answer as a key: a CaptureKey as is, else a batch size or ``(batch size, variant)``."""
    if isinstance(value, CaptureKey):
        return value
    if isinstance(value, tuple):
        return CaptureKey(runner, int(value[0]), value[1] if len(value) > 1 else None, rank)
    return CaptureKey(runner, int(value), None, rank)


@contextlib.contextmanager
def patched(owner: Any, name: str, value: Any) -> Iterator[None]:
    """``owner.name = value`` for the block; the previous attribute (or its absence) restored after."""
    missing = object()
    before = owner.__dict__.get(name, missing) if hasattr(owner, "__dict__") else getattr(owner, name, missing)
    setattr(owner, name, value)
    try:
        yield
    finally:
        if before is missing:
            delattr(owner, name)
        else:
            setattr(owner, name, before)


class CaptureContractError(GraphCaptureError):
    """An engine's capture loop broke the step contract; no summary (and no golden) comes from it."""


class StepContract:
    """Checks the observed calls of an engine's loop, as they happen, against :func:`user_key_sequence`.

    Per key: ``warmups`` forwards each followed by a profiler step, then one graph
    holding one forward of that key, then a step; keys largest batch size first
    (variants of one size in any order), one graph per key.  :meth:`feed` raises
    :class:`CaptureContractError` naming the key and the stage at the first call out of place.
    """

    def __init__(self, warmups: int = WARMUPS) -> None:
        self.expected = user_key_sequence(warmups)
        self.stages = _stages(warmups)
        self.key: Optional[CaptureKey] = None
        self.position = 0
        self.done: list[CaptureKey] = []

    @property
    def stage(self) -> str:
        """The stage the next call of the current key belongs to (``warmup 1`` … ``profiler step after the capture``)."""
        return self.stages[min(self.position, len(self.stages) - 1)]

    @property
    def last_stage(self) -> str:
        """The stage of the last call accepted: where a loop that raises now stopped."""
        return self.stages[max(self.position - 1, 0)]

    def feed(self, event: str, key: Optional[CaptureKey]) -> bool:
        """Accept one call of ``key``; True when it closes the key (its last profiler step)."""
        if key is not None and key != self.key:
            if self.key is not None and self.position != len(self.expected):
                self.fail(
                    self.key,
                    f"{self.stage}: the loop moved on to {key_label(key)} before this key was captured; {self._rule()}",
                )
            self._begin(key)
        if self.key is None:
            self.fail(None, f"{_WHAT[event]} came before any forward; {self._rule()}")
        if self.position == len(self.expected):
            self.fail(self.key, f"after the capture: {_WHAT[event]} of a key already captured; {self._rule()}")
        want = self.expected[self.position]
        if event != want:
            self.fail(
                self.key, f"{self.stage}: expected {_WHAT[want]}, but the loop ran {_WHAT[event]}; {self._rule()}"
            )
        self.position += 1
        if self.position == len(self.expected):
            self.done.append(self.key)  # type: ignore[arg-type]
            return True
        return False

    def finish(self) -> None:
        """The loop returned: the last key must be complete and at least one key captured."""
        if self.key is not None and self.position != len(self.expected):
            self.fail(
                self.key, f"{self.stage}: the capture function returned before this key was captured; {self._rule()}"
            )
        if not self.done:
            raise CaptureContractError("graph_capture.engine: the capture function captured no graph")

    def _begin(self, key: CaptureKey) -> None:
        if key in self.done:
            self.fail(key, "warmup 1: this key was captured already; an engine captures one graph per key")
        if self.done and key.batch_size > self.done[-1].batch_size:
            self.fail(
                key,
                f"warmup 1: captured after {key_label(self.done[-1])}; keys must be captured largest "
                f"batch size first (smaller graphs reuse the larger ones' memory pool)",
            )
        self.key, self.position = key, 0

    def _rule(self) -> str:
        warmups = self.expected.count(FORWARD) - 1
        return (
            f"per key the loop must run {warmups} warmup forwards, each followed by a profiler step, then the "
            f"graph capture, then one more profiler step"
        )

    @staticmethod
    def fail(key: Optional[CaptureKey], problem: str) -> NoReturn:
        """Raise the one-line :class:`CaptureContractError` for ``key`` (None: before any key)."""
        where = f"{key.runner} {key_label(key)}: " if key is not None else ""
        raise CaptureContractError(f"graph_capture.engine: {where}{problem}")


# ---------------------------------------------------------------------- eager stand-ins (no CUDA device)


class EagerCUDAGraph:
    """Stand-in for ``torch.cuda.CUDAGraph`` off CUDA: capture runs the body once, replay runs it again.

    It fires torch's global graph hooks where torch has them, where and in the order
    ``torch/cuda/graphs.py`` fires them (:func:`~.capture_observer.fire_torch_hooks`).
    """

    def __init__(self, keep_graph: bool = False, *args: Any, **kwargs: Any) -> None:
        self.calls: list[tuple[Callable[..., Any], tuple, dict]] = []
        self.capturing = False
        self.keep_graph = keep_graph
        self.instantiated = False

    def capture_begin(self, *args: Any, **kwargs: Any) -> None:
        self.capturing = True
        fire_torch_hooks("capture start", self)

    def capture_end(self) -> None:
        self.capturing = False
        fire_torch_hooks("capture end", self)
        if not self.keep_graph:
            self.instantiate()

    def instantiate(self) -> None:
        self.instantiated = True
        fire_torch_hooks("instantiate", self)

    def replay(self) -> None:
        if not self.instantiated:
            self.instantiate()
        fire_torch_hooks("replay start", self)
        try:
            for forward, args, kwargs in self.calls:
                forward(*args, **kwargs)
        finally:
            fire_torch_hooks("replay end", self)

    def reset(self) -> None:
        self.calls.clear()
        self.instantiated = False

    def pool(self) -> object:
        return object()


class eager_graph:  # noqa: N801 - stands in for the class torch.cuda.graph
    """Stand-in for the ``torch.cuda.graph`` context: begins and ends the (stand-in) graph's capture."""

    def __init__(self, cuda_graph: Any, pool: Any = None, stream: Any = None, **kwargs: Any) -> None:
        self.cuda_graph = cuda_graph

    def __enter__(self) -> Any:
        self.cuda_graph.capture_begin()
        return self.cuda_graph

    def __exit__(self, *exc_info: Any) -> None:
        self.cuda_graph.capture_end()


class EagerStream:
    """Stand-in for ``torch.cuda.Stream`` off CUDA: nothing to wait for."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def wait_stream(self, *args: Any) -> None:
        pass

    def synchronize(self) -> None:
        pass


def eager_cuda_calls(synchronize: Callable[..., Any] = lambda *args, **kwargs: None) -> dict[str, Any]:
    """The ``torch.cuda`` attributes an engine's capture loop uses, as eager stand-ins (``synchronize`` given)."""
    return {
        "CUDAGraph": EagerCUDAGraph,
        "graph": eager_graph,
        "synchronize": synchronize,
        "graph_pool_handle": lambda: object(),
        "Stream": EagerStream,
        "stream": lambda *args, **kwargs: contextlib.nullcontext(),
        "current_stream": lambda *args, **kwargs: EagerStream(),
    }


# ---------------------------------------------------------------------- the observer


@dataclasses.dataclass
class _Graph:
    """One graph the engine began: the key of the forward inside it, once one ran."""

    graph: Any
    key: Optional[CaptureKey] = None
    started: float = 0.0
    memory: Optional[tuple[int, int]] = None


class _Stepper:
    """The profiler handed to ``fn(profiler)``: each ``step()`` is checked against the contract first."""

    def __init__(self, loop: "_EngineLoop") -> None:
        self._loop = loop

    def step(self) -> None:
        self._loop.on_step()


class _EngineLoop:
    """The state of one observed run of an engine's capture function."""

    def __init__(
        self,
        *,
        key: Callable[..., KeyLike],
        runner_name: str,
        rank: int,
        backend: Any,
        profiler: Any,
        settings: CaptureSettings,
        result: CaptureResult,
        plugin_steps: bool,
        warmups: int,
        method: str,
    ) -> None:
        self.key_of, self.method = key, method
        self.runner_name, self.rank = runner_name, rank
        self.backend, self.profiler, self.settings, self.result = backend, profiler, settings, result
        self.plugin_steps = plugin_steps
        self.contract = StepContract(warmups)
        self.progress = CaptureProgress(on_stage=settings.on_stage)
        self.depth = 0  # forwards running now (a library's graph begun inside one is not a key)
        self.graph: Optional[_Graph] = None
        self.library_graphs: set[int] = set()
        self.metrics: dict[CaptureKey, KeyMetrics] = {}
        self.started: dict[CaptureKey, float] = {}
        self.graphs: dict[CaptureKey, Any] = {}
        self.captures: Optional[CaptureObserver] = None

    # ------------------------------------------------------------------ events

    def _feed(self, event: str, key: Optional[CaptureKey]) -> None:
        if self.captures is not None:
            self.captures.raise_kept()  # a failure in a capture hook comes first: torch swallowed it
        first = key is not None and key != self.contract.key
        closes = self.contract.feed(event, key)
        current = self.contract.key
        self.progress.key = current
        self.progress.enter(self.contract.last_stage if not closes else "trace export")
        if first and current is not None:
            self.started[current] = time.perf_counter()
            self.metrics[current] = KeyMetrics()
            if isinstance(self.profiler, PerBatchSizeProfiler):
                self.profiler.begin_key(current)
        if event == STEP:
            if closes and isinstance(self.profiler, PerBatchSizeProfiler):
                self.profiler.add_metadata(self.metrics[current].to_dict())  # type: ignore[index]
            if isinstance(self.profiler, PerBatchSizeProfiler):
                self.profiler.step()
        if closes:
            self._close(current)  # type: ignore[arg-type]

    def forward(self, original: Callable[..., Any], args: tuple, kwargs: dict) -> Any:
        if self.depth:  # the forward called from within itself: one forward
            return original(*args, **kwargs)
        try:
            key = as_key(self.key_of(*args, **kwargs), self.runner_name, self.rank)
        except Exception as exc:
            shown = ", ".join([type(a).__name__ for a in args] + [f"{k}=" for k in kwargs])
            raise UsageError(
                f"graph_capture.engine: key= could not tell the key of a call {self.method}({shown}): "
                f"{type(exc).__name__}: {exc}; it must return a CaptureKey, a batch size or (batch size, variant)"
            ) from None
        if self.graph is not None:
            if self.graph.key is None:
                self.graph.key = key
                self._feed(GRAPH_ENTER, key)
                self.graph.started = time.perf_counter()
                metrics = self.metrics[key]
                metrics.warmup_seconds = self.graph.started - self.started[key]
            elif self.graph.key != key:
                self.contract.fail(
                    self.graph.key,
                    f"capture: one graph ran forwards of two keys ({key_label(self.graph.key)} and {key_label(key)}), "
                    f"so its key cannot be told; capture one key per graph",
                )
            else:
                self.contract.fail(key, "capture: the graph ran the forward twice; capture one forward per graph")
            if isinstance(self.graph.graph, EagerCUDAGraph):
                self.graph.graph.calls.append((original, args, kwargs))
        self._feed(FORWARD, key)
        self.depth += 1
        try:
            out = original(*args, **kwargs)
        finally:
            self.depth -= 1
        if self.graph is None and self.plugin_steps:
            self._feed(STEP, key)
        return out

    def capture_begin(self, graph: Any) -> bool:
        """A graph begins; False when it is a library's (begun inside a forward), not the engine's."""
        if self.depth:
            self.library_graphs.add(id(graph))
            return False
        if self.graph is not None:
            self.contract.fail(self.contract.key, "capture: a graph was begun inside another graph")
        self.graph = _Graph(graph, memory=self.backend.memory_stats())
        return True

    def capture_end(self, graph: Any) -> None:
        if self.library_graphs and id(graph) in self.library_graphs:
            self.library_graphs.discard(id(graph))
            return
        entered, self.graph = self.graph, None
        if entered is None:
            return
        if entered.key is None:
            after = f" after {key_label(self.contract.done[-1])}" if self.contract.done else ""
            where = self.contract.key if self.contract.key not in self.contract.done else None
            self.contract.fail(
                where,
                f"capture: a graph{after} ran no forward of the method given as forward=, so its key cannot be "
                f"told; capture the engine's forward inside the graph, or name the method it calls",
            )
        key = entered.key
        metrics = self.metrics[key]
        metrics.capture_seconds = time.perf_counter() - entered.started
        after = self.backend.memory_stats()
        if entered.memory is not None and after is not None:
            metrics.memory_allocated = after[0] - entered.memory[0]
            metrics.memory_reserved = after[1] - entered.memory[1]
        self.graphs[key] = entered.graph
        self._feed(GRAPH_EXIT, key)
        if self.plugin_steps:
            self._feed(STEP, key)

    def graph_instantiated(self, graph: Any) -> None:
        """torch instantiated a graph: a key's real graph is read now, while its template is live."""
        read = getattr(self.backend, "read_instantiated", None)
        key = next((k for k, g in self.graphs.items() if g is graph), None)
        if read is not None and key is not None and key not in self.backend.graph_readouts:
            read(key, graph)

    def refusal_name(self) -> str:
        """``graph_capture.engine Runner bs=4`` for the key the loop is at, as refusals name it."""
        key = self.contract.key
        return f"graph_capture.engine {self.runner_name}" + (f" {key_label(key)}" if key is not None else "")

    def on_step(self) -> None:
        key = self.graph.key if self.graph is not None else self.contract.key
        if self.graph is not None:
            self.contract.fail(
                key or self.contract.key,
                "capture: the profiler was stepped inside the graph (a step synchronizes the device, which "
                "capture forbids); step it after the graph's context has exited",
            )
        self._feed(STEP, key)

    def _close(self, key: CaptureKey) -> None:
        done = self.profiler.results.get(key) if isinstance(self.profiler, PerBatchSizeProfiler) else None
        if self.backend.kernel_evidence_required and done is not None:
            check_capture_evidence(key, done.summary)
        seconds = time.perf_counter() - self.started[key]
        self.result.keys[key] = KeyResult(
            key,
            trace_path=done.trace_path if done else None,
            summary=done.summary if done else None,
            graph=self.graphs.get(key),
            seconds=seconds,
            metrics=self.metrics[key],
        )
        if self.settings.progress is not None:
            self.settings.progress(f"{_label(key)} captured in {seconds:.3f}s ({self.metrics[key].describe()})")


def takes_profiler(fn: Callable[..., Any]) -> bool:
    """Whether ``fn`` is called with the profiler: it accepts a positional argument (``fn(profiler)``)."""
    try:
        parameters = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):  # a builtin without a signature: the engine steps nothing of ours
        return False
    kinds = (
        inspect.Parameter.POSITIONAL_ONLY,
        inspect.Parameter.POSITIONAL_OR_KEYWORD,
        inspect.Parameter.VAR_POSITIONAL,
    )
    return any(p.kind in kinds for p in parameters)


def _owner_name(owner: Any) -> str:
    return getattr(owner, "__name__", None) or type(owner).__name__


def capture_engine_loop(
    fn: Callable[..., Any],
    *,
    forward: tuple[Any, str],
    key: Callable[..., KeyLike],
    runner_name: Optional[str] = None,
    device: Optional[Union[torch.device, str]] = None,
    settings: Optional[CaptureSettings] = None,
    warmups: int = WARMUPS,
) -> CaptureResult:
    """Run the engine's capture function ``fn`` under the gate; return every key it captured.

    ``forward`` is ``(object, "method")``: the body each graph holds; ``key(*args, **kwargs)``
    turns one call's arguments into its key (a CaptureKey, a batch size, or ``(batch size,
    variant)`` of ``runner_name``, default the object's class name).  ``device`` (default: the
    object's ``device``, else CPU) decides real graphs (CUDA) or eager stand-ins.

    A forward that raises fails with :class:`~pytest_graphcapture.errors.CaptureError` naming
    the key and stage; a loop that breaks the step contract with :class:`CaptureContractError`.
    Either way every patch is restored, the profiler is stopped and no result is returned.
    """
    owner, name = _forward_target(forward)
    settings = settings or CaptureSettings()
    device = torch.device(device if device is not None else getattr(owner, "device", None) or "cpu")
    runner_name = runner_name or _owner_name(owner)
    rank = current_rank()
    backend = make_backend(device) if device.type == "cuda" else make_backend("cpu")
    result = CaptureResult(runner_name=runner_name, platform=settings.platform, rank=rank, mode=settings.trace)
    refuse_cupti_conflict(backend, settings, f"graph_capture.engine {runner_name}")
    profiler = make_profiler(settings, backend.device, runner_name, rank)
    with_profiler = takes_profiler(fn)
    loop = _EngineLoop(
        key=key,
        runner_name=runner_name,
        rank=rank,
        backend=backend,
        profiler=profiler,
        settings=settings,
        result=result,
        plugin_steps=not with_profiler,
        warmups=warmups,
        method=f"{_owner_name(owner)}.{name}",
    )
    try:
        if profiler is not None:
            profiler.__enter__()
        with _observed(loop, owner, name, real_graphs=device.type == "cuda"):
            if with_profiler:
                fn(_Stepper(loop))
            else:
                fn()
            loop.captures.raise_kept()  # a failure inside a capture hook, which torch would have swallowed
        loop.contract.finish()
        _keep_selected_sizes(result, settings)
        if profiler is not None:
            loop.progress.key = None
            loop.progress.enter("trace export")
            profiler.__exit__(None, None, None)
            if isinstance(profiler, SingleTraceProfiler):
                result.single_trace_path = profiler.trace_path
            profiler = None
        if _replay_enabled(settings, backend) and settings.summarize:
            _attach_replay_kernels(result, backend, loop.progress, settings.progress)
    except KeyboardInterrupt:
        _stop_quietly(profiler)
        raise
    except GraphCaptureError:
        _stop_quietly(profiler)
        raise
    except Exception as exc:
        _stop_quietly(profiler)
        raise CaptureError(loop.progress.key or runner_name, loop.progress.stage, exc, partial=result) from exc
    return result


def _keep_selected_sizes(result: CaptureResult, settings: CaptureSettings) -> None:
    """Cut the result to ``settings.batch_sizes`` (the engine's loop captured them all); UsageError for a size it lacks.

    The batch-size setting applies to an engine's loop as to every runner: the result
    holds only the sizes asked for, and a size the loop did not capture is an error
    naming the setting, never silently skipped.
    """
    if settings.batch_sizes is None:
        return
    captured = sorted({k.batch_size for k in result.keys})
    lacking = [bs for bs in settings.batch_sizes if bs not in captured]
    if lacking:
        raise UsageError(
            f"{settings.batch_sizes_origin} asks for batch size {', '.join(map(str, lacking))}, which the capture "
            f"loop of {result.runner_name} did not capture (it captured {', '.join(map(str, captured))})"
        )
    for key in [k for k in result.keys if k.batch_size not in settings.batch_sizes]:
        del result.keys[key]


def _forward_target(forward: Any) -> tuple[Any, str]:
    """``forward`` checked to be ``(object, "method name")`` naming a callable attribute; UsageError if not."""
    if not (isinstance(forward, tuple) and len(forward) == 2 and isinstance(forward[1], str)):
        raise UsageError(
            f'graph_capture.engine: forward= must be (object, "method name"), e.g. (engine, "forward_decode"); '
            f"got {forward!r}"
        )
    owner, name = forward
    if not callable(getattr(owner, name, None)):
        raise UsageError(f"graph_capture.engine: forward=: {_owner_name(owner)} has no method {name!r}")
    return owner, name


@contextlib.contextmanager
def _observed(loop: _EngineLoop, owner: Any, name: str, *, real_graphs: bool) -> Iterator[None]:
    """The forward, the graph capture calls and (off CUDA) their eager stand-ins patched for the block."""
    original = getattr(owner, name)

    def observed_forward(*args: Any, **kwargs: Any) -> Any:
        return loop.forward(original, args, kwargs)

    with contextlib.ExitStack() as stack:
        if not real_graphs:
            for attr, stand_in in eager_cuda_calls().items():
                stack.enter_context(patched(torch.cuda, attr, stand_in))
        # On CUDA each capture begins only without another CUPTI client (an engine's torch.cuda.graph
        # with the cupti annotation backend brings one up right before it).
        check = (
            (lambda: refuse_cupti_conflict(loop.backend, loop.settings, loop.refusal_name())) if real_graphs else None
        )
        loop.captures = stack.enter_context(observe_captures(loop, real_graphs=real_graphs, before_begin=check))
        stack.enter_context(patched(owner, name, observed_forward))
        yield


__all__ = [
    "CaptureContractError",
    "EagerCUDAGraph",
    "StepContract",
    "as_key",
    "capture_engine_loop",
    "eager_cuda_calls",
    "patched",
    "takes_profiler",
    "user_key_sequence",
]
