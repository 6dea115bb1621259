"""Observe every graph capture while an engine's capture function runs."""

from __future__ import annotations

import contextlib
import dataclasses
import re
from typing import Any, Callable, Iterator, Optional

import torch

from ..errors import GraphCaptureError
from ..summary.platform import graph_hooks

#: torch's private registries of global hooks (torch/cuda/graphs.py) that ``_run_global_hooks`` runs, by event.
_REGISTRIES = {
    "capture start": "_global_capture_start_hooks",
    "capture end": "_global_capture_end_hooks",
    "instantiate": "_global_instantiate_hooks",
    "replay start": "_global_replay_start_hooks",
    "replay end": "_global_replay_end_hooks",
}


class HookFailure(GraphCaptureError):
    """Something other than the gate's own check failed inside one of its capture hooks (kept, then raised)."""


@dataclasses.dataclass
class Kept:
    """One failure inside the observer's hooks: the event it happened at, and the error."""

    event: str
    error: BaseException


class CaptureObserver:
    """The observation of one block: how (``mode``: ``"hooks"`` or ``"patch"``) and the failures kept."""

    def __init__(self, mode: str, on_failure: Optional[Callable[[BaseException], None]]) -> None:
        self.mode = mode
        self.failures: list[Kept] = []
        self._on_failure = on_failure

    def keep(self, event: str, error: BaseException) -> BaseException:
        """Keep ``error`` raised at ``event``; the gate's own errors as they are, anything else as a HookFailure."""
        if not isinstance(error, GraphCaptureError):
            wrapped = HookFailure(
                f"graph_capture.engine: the gate's graph {event} hook failed: {type(error).__name__}: {error}"
            )
            wrapped.__cause__ = error
            error = wrapped
        self.failures.append(Kept(event, error))
        if self._on_failure is not None:
            try:
                self._on_failure(error)
            except Exception:  # the failure is kept here either way
                pass
        return error

    def raise_kept(self) -> None:
        """Raise the first failure kept, if any: at the end of the capture, none is lost."""
        if self.failures:
            raise self.failures[0].error


def _fire_torch_hooks(event: str, graph: Any) -> None:
    """Run torch's global hooks of ``event`` with ``graph``, as ``torch/cuda/graphs.py`` runs them (a stand-in's use)."""
    graphs = getattr(torch.cuda, "graphs", None)
    registry = getattr(graphs, _REGISTRIES[event], None)
    run = getattr(graphs, "_run_global_hooks", None)
    if registry and callable(run):
        run(registry, graph)


def _stand_in_fires_hooks() -> bool:
    """Whether :func:`_fire_torch_hooks` reaches torch's registries (so the hook path can run off CUDA)."""
    graphs = getattr(torch.cuda, "graphs", None)
    return callable(getattr(graphs, "_run_global_hooks", None)) and all(
        isinstance(getattr(graphs, name, None), dict) for name in _REGISTRIES.values()
    )


def still_capturing(graph: Any, beginning: Any = None) -> bool:
    """Whether ``graph``'s capture is still under way (asked on torch's hooks, where a failed end runs no hook)."""
    capturing = getattr(graph, "capturing", None)
    if isinstance(capturing, bool):
        return capturing
    if beginning is not None:
        return True
    is_capturing = getattr(torch.cuda, "is_current_stream_capturing", None)
    return bool(is_capturing()) if callable(is_capturing) else True


def observation_mode(real_graphs: bool) -> str:
    """``"hooks"`` where torch has the global capture hooks (and, off CUDA, the stand-in can fire them), else ``"patch"``."""
    if graph_hooks(torch) is None:
        return "patch"
    return "hooks" if real_graphs or _stand_in_fires_hooks() else "patch"


@contextlib.contextmanager
def observe_captures(
    listener: Any,
    *,
    real_graphs: bool,
    before_begin: Optional[Callable[[], None]] = None,
    on_failure: Optional[Callable[[BaseException], None]] = None,
    mode: Optional[str] = None,
) -> Iterator[CaptureObserver]:
    """Tell ``listener`` of every graph captured in the block; yield the :class:`CaptureObserver`."""
    mode = mode or observation_mode(real_graphs)
    observer = CaptureObserver(mode, on_failure)
    with contextlib.ExitStack() as stack:
        if mode == "hooks":
            _register_hooks(stack, observer, listener, before_begin)
        else:
            _patch_graph_class(stack, observer, listener, before_begin)
        yield observer


def _register_hooks(
    stack: contextlib.ExitStack, observer: CaptureObserver, listener: Any, before_begin: Optional[Callable[[], None]]
) -> None:
    hooks = graph_hooks(torch)
    if hooks is None:
        raise GraphCaptureError("graph_capture.engine: this torch has no global graph capture hooks")
    register_start, register_end, register_instantiate = hooks
    instantiated = getattr(listener, "graph_instantiated", None)

    def guarded(event: str, call: Callable[[Any], Any]) -> Callable[[Any], None]:
        def hook(graph: Any) -> None:
            try:
                call(graph)
            except Exception as exc:  # torch would swallow it: keep it
                observer.keep(event, exc)

        return hook

    def begin(graph: Any) -> None:
        if before_begin is not None:
            before_begin()
        listener.capture_begin(graph)

    for register, event, call in (
        (register_start, "capture start", begin),
        (register_end, "capture end", listener.capture_end),
        (register_instantiate, "instantiate", instantiated),
    ):
        if call is not None:
            stack.callback(register(guarded(event, call)).remove)


def _patch_graph_class(
    stack: contextlib.ExitStack, observer: CaptureObserver, listener: Any, before_begin: Optional[Callable[[], None]]
) -> None:
    graph_class = torch.cuda.CUDAGraph
    begin, end = graph_class.capture_begin, graph_class.capture_end
    failed = getattr(listener, "capture_failed", None)

    def kept(event: str, call: Callable[[], Any]) -> Any:
        try:
            return call()
        except Exception as exc:
            observer.keep(event, exc)
            raise

    def capture_begin(graph: Any, *args: Any, **kwargs: Any) -> Any:
        if before_begin is not None:
            kept("capture start", before_begin)
        kept("capture start", lambda: listener.capture_begin(graph))
        try:
            return begin(graph, *args, **kwargs)
        except Exception as exc:  # torch refused the capture: the graph never began
            if failed is not None:
                failed(graph, exc)
            raise

    def capture_end(graph: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            out = end(graph, *args, **kwargs)
        except Exception as exc:  # e.g. a capture an error inside it invalidated
            if failed is not None:
                failed(graph, exc)
            raise
        kept("capture end", lambda: listener.capture_end(graph))
        return out

    stack.enter_context(patched(graph_class, "capture_begin", capture_begin))
    stack.enter_context(patched(graph_class, "capture_end", capture_end))


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


class EagerCUDAGraph:
    """Stand-in for ``torch.cuda.CUDAGraph`` off CUDA: capture runs the body once, replay runs it again."""

    def __init__(self, keep_graph: bool = False, *args: Any, **kwargs: Any) -> None:
        self.calls: list[tuple[Callable[..., Any], tuple, dict]] = []
        self.capturing = False
        self.keep_graph = keep_graph
        self.instantiated = False
        self.key: Any = None
        self.replays = 0

    @classmethod
    def of(cls, forward: Callable[[], Any], key: Any = None) -> EagerCUDAGraph:
        """A captured stand-in whose replay runs ``forward()``: the graph of the eager and fake backends."""
        graph = cls()
        graph.calls.append((forward, (), {}))
        graph.key, graph.instantiated = key, True
        return graph

    def capture_begin(self, *args: Any, **kwargs: Any) -> None:
        self.capturing = True
        _fire_torch_hooks("capture start", self)

    def capture_end(self) -> None:
        self.capturing = False
        _fire_torch_hooks("capture end", self)
        if not self.keep_graph:
            self.instantiate()

    def instantiate(self) -> None:
        self.instantiated = True
        _fire_torch_hooks("instantiate", self)

    def replay(self) -> None:
        self.replays += 1
        if not self.instantiated:
            self.instantiate()
        _fire_torch_hooks("replay start", self)
        try:
            for forward, args, kwargs in self.calls:
                forward(*args, **kwargs)
        finally:
            _fire_torch_hooks("replay end", self)

    def reset(self) -> None:
        self.calls.clear()
        self.instantiated = False

    def pool(self) -> object:
        return object()


class _eager_graph:  # noqa: N801 - stands in for the class torch.cuda.graph
    """Stand-in for the ``torch.cuda.graph`` context: begins and ends the (stand-in) graph's capture."""

    def __init__(self, cuda_graph: Any, pool: Any = None, stream: Any = None, **kwargs: Any) -> None:
        self.cuda_graph = cuda_graph

    def __enter__(self) -> Any:
        self.cuda_graph.capture_begin()
        return self.cuda_graph

    def __exit__(self, *exc_info: Any) -> None:
        self.cuda_graph.capture_end()


class _EagerSync:
    """Stand-in for ``torch.cuda.Stream`` and ``Event`` off CUDA: nothing to wait for, timings are 0."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def wait_stream(self, *args: Any) -> None:
        pass

    record = wait = synchronize = wait_stream

    def query(self) -> bool:
        return True

    def elapsed_time(self, other: Any) -> float:
        return 0.0


def eager_cuda_calls(synchronize: Callable[..., Any] = lambda *args, **kwargs: None) -> dict[str, Any]:
    """The ``torch.cuda`` attributes an engine's capture loop uses, as eager stand-ins (``synchronize`` given)."""
    return {
        "CUDAGraph": EagerCUDAGraph,
        "graph": _eager_graph,
        "synchronize": synchronize,
        "graph_pool_handle": lambda: object(),
        "Stream": _EagerSync,
        "Event": _EagerSync,
        "stream": lambda *args, **kwargs: contextlib.nullcontext(),
        "current_stream": lambda *args, **kwargs: _EagerSync(),
    }


#: The message torch's CPU build raises when one of its CUDA placeholder classes is instantiated.
_PLACEHOLDER = re.compile(r"Tried to instantiate dummy base class (\w+)|torch\.cuda\.(\w+) requires CUDA support")


def placeholder_message(name: str, where: str = "") -> str:
    """The one line saying that the engine used torch's CPU placeholder of ``torch.cuda.<name>``."""
    return (
        f"graph_capture.engine: {where}the engine made a torch.cuda.{name} from a name bound before the gate put "
        f"its CPU stand-ins in place (as `from torch.cuda import {name}` at import does), so it got torch's CPU "
        f"placeholder; look it up as torch.cuda.{name} where it is called (docs/adapting.md, 'On a machine "
        f"without a GPU')"
    )


def placeholder_classes(torch_cuda: Any) -> dict[str, type]:
    """torch's own classes (CPU placeholders off CUDA) that :func:`eager_cuda_calls` stands in for, by name."""
    stood_in = eager_cuda_calls()
    return {name: value for name, value in vars(torch_cuda).items() if name in stood_in and isinstance(value, type)}


def bound_too_early(exc: BaseException) -> Optional[str]:
    """The ``torch.cuda`` name behind ``exc`` when it is torch's CPU placeholder of a stood-in class, else None."""
    found = _PLACEHOLDER.search(str(exc)) if isinstance(exc, (RuntimeError, TypeError)) else None
    name = found and (found.group(1) or found.group(2))
    return name if name in eager_cuda_calls() else None
