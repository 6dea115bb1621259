"""What a rank runs and what it is told: the target, its :class:`RankContext`, the backend.

A *target* is a module-level callable or a ``"package.module:function"`` string;
it has to reach a freshly started process, so it is resolved (and, for a
callable, pickled) once in the parent first: a lambda, a closure or a name that
does not import is a one-line :class:`~pytest_graphcapture.errors.UsageError`
there, not a traceback from every rank.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, Callable, Optional, Union

from ...errors import UsageError

Target = Union[str, Callable[..., Any]]


@dataclass(frozen=True)
class RankContext:
    """What a rank's target or runner factory is told about its rank.

    ``device`` is ``"cpu"`` or ``"cuda:<i>"`` (``i = rank mod visible devices``),
    ``backend`` the process group backend, ``batch_sizes`` the session's
    ``--graph-capture-batch-sizes`` (None: no selection) — which sizes are captured, not
    what a factory builds: a runner built for fewer sizes captures other graphs.
    """

    rank: int
    world_size: int
    device: str
    backend: str
    batch_sizes: Optional[tuple[int, ...]] = None

    @property
    def torch_device(self) -> Any:
        import torch

        return torch.device(self.device)


def default_backend(device_type: str) -> str:
    """``nccl`` for CUDA/ROCm devices (RCCL answers to that name), ``gloo`` otherwise."""
    return "nccl" if device_type == "cuda" else "gloo"


def resolve_target(target: Target, *, what: str = "factory") -> Callable[..., Any]:
    """The callable named by ``"package.module:function"``, or ``target`` itself if callable."""
    if callable(target):
        return target
    if not isinstance(target, str) or ":" not in target:
        raise UsageError(f"{what} {target!r}: expected a callable or a 'module:function' string")
    module_name, _, attr = target.partition(":")
    try:
        obj: Any = importlib.import_module(module_name)
        for part in attr.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError) as exc:
        raise UsageError(f"{what} {target!r} cannot be imported: {type(exc).__name__}: {exc}") from None
    if not callable(obj):
        raise UsageError(f"{what} {target!r} is not callable")
    return obj


def check_picklable(target: Target, *, what: str = "factory") -> None:
    """UsageError unless ``target`` can be sent to a spawned process (a string always can)."""
    if isinstance(target, str):
        resolve_target(target, what=what)
        return
    if not callable(target):
        raise UsageError(f"{what} {target!r}: expected a callable or a 'module:function' string")
    from multiprocessing.reduction import ForkingPickler  # what spawn sends the target with

    try:
        ForkingPickler.dumps(target)
    except Exception as exc:
        name = getattr(target, "__qualname__", repr(target))
        raise UsageError(
            f"{what} {name} cannot be sent to the rank processes ({type(exc).__name__}: {exc}); use a module-level "
            f"function (not a lambda, closure or runner object) or a 'module:function' string"
        ) from None
