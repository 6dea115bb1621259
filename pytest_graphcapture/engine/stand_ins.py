"""Eager stand-ins for the CUDA graph calls of an engine's capture loop, on a machine without CUDA.

Off CUDA (CPU CI) the engine-loop gate replaces ``torch.cuda.CUDAGraph``,
``torch.cuda.graph``, the stream and event classes, and the pool and synchronize
calls with the stand-ins here, for the duration of the engine's capture function:
the forward inside a graph context runs once, for real, and replaying the stand-in
graph runs it again.  :func:`patched` sets and restores one attribute;
:func:`bound_too_early` explains the error torch raises when an engine bound one of
these names before the stand-ins replaced it.
"""

from __future__ import annotations

import contextlib
import re
from typing import Any, Callable, Optional

from .capture_observer import fire_torch_hooks, patched


class EagerCUDAGraph:
    """Stand-in for ``torch.cuda.CUDAGraph`` off CUDA: capture runs the body once, replay runs it again.

    It fires torch's global graph hooks where torch has them, where and in the order
    ``torch/cuda/graphs.py`` fires them (:func:`~.capture_observer.fire_torch_hooks`): the
    start hooks once the capture began, the end hooks when it ended and then, for
    ``keep_graph=False``, ``instantiate()`` with its hooks; a replay instantiates first if
    needed and runs the replay-start and (even when it raises) replay-end hooks around itself.
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


class EagerEvent:
    """Stand-in for ``torch.cuda.Event`` off CUDA: recorded at once, so waits return and timings are 0."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def record(self, *args: Any) -> None:
        pass

    def wait(self, *args: Any) -> None:
        pass

    def query(self) -> bool:
        return True

    def synchronize(self) -> None:
        pass

    def elapsed_time(self, other: Any) -> float:
        return 0.0


def eager_cuda_calls(synchronize: Callable[..., Any] = lambda *args, **kwargs: None) -> dict[str, Any]:
    """The ``torch.cuda`` attributes an engine's capture loop uses, as eager stand-ins (``synchronize`` given)."""
    return {
        "CUDAGraph": EagerCUDAGraph,
        "graph": eager_graph,
        "synchronize": synchronize,
        "graph_pool_handle": lambda: object(),
        "Stream": EagerStream,
        "Event": EagerEvent,
        "stream": lambda *args, **kwargs: contextlib.nullcontext(),
        "current_stream": lambda *args, **kwargs: EagerStream(),
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
    """The ``torch.cuda`` name behind ``exc`` when it is torch's CPU placeholder of a stood-in class, else None.

    An engine module that did ``from torch.cuda import CUDAGraph`` (or ``Event``, ``Stream``)
    holds torch's placeholder, bound before the gate replaced the attribute: instantiating it
    off CUDA raises "Tried to instantiate dummy base class CUDAGraph", which by itself names
    neither the cause nor the fix.
    """
    found = _PLACEHOLDER.search(str(exc)) if isinstance(exc, (RuntimeError, TypeError)) else None
    name = found and (found.group(1) or found.group(2))
    return name if name in eager_cuda_calls() else None


__all__ = [
    "EagerCUDAGraph",
    "EagerEvent",
    "EagerStream",
    "bound_too_early",
    "eager_cuda_calls",
    "eager_graph",
    "patched",
    "placeholder_classes",
    "placeholder_message",
]
