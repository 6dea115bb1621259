"""Gate an engine's own capture loop, unmodified: observe it, check the step contract, profile each key.

An engine captures its decode graphs in its own start-up loop: per batch size (and
variant) two warmup forwards, then the capture under ``torch.cuda.graph``, largest
batch size first.  :func:`capture_engine_loop` runs that loop for real while it

* wraps the forward method named by ``forward`` (the body a graph holds, or the forward that
  holds a key's graphs, :mod:`.held_capture`) and observes
  every graph capture (:mod:`.capture_observer`: torch's global capture hooks where torch
  has them, else wrapping ``torch.cuda.CUDAGraph.capture_begin`` / ``capture_end``), routing
  each call to a :class:`~.loop_observer.LoopObserver` that attributes forwards and graphs
  to keys through ``key``;
* on a device other than CUDA (CPU CI), replaces the CUDA graph, stream and event calls
  with the eager stand-ins of :mod:`.stand_ins`;
* drives the plugin's per-batch-size profiler: ``fn(profiler)`` steps it where the engine
  steps its own; ``fn()`` (an engine that takes no profiler) has it stepped for it after
  each forward outside a graph and when each graph's capture ends;
* checks the step contract on the way (:mod:`.step_contract`): a violation stops the
  capture with one line naming the key and the stage.

A failure the gate sees fails the capture even when the engine catches the exception
and goes on; no result (so no golden) comes from a failed capture.  Everything patched
is restored when ``fn`` returns or raises.
"""

from __future__ import annotations

import contextlib
import inspect
from typing import Any, Callable, Iterator, Optional, Union

import torch

from ..errors import CaptureError, GraphCaptureError, UsageError
from ..keys import key_label
from ..result import CaptureResult
from .backend import make_backend
from .capture import (
    CaptureSettings,
    _attach_graph_readouts,
    _attach_replay_kernels,
    _replay_enabled,
    _stop_quietly,
    current_rank,
    make_profiler,
    refuse_cupti_conflict,
)
from .capture_observer import observe_captures
from .loop_observer import LoopObserver, Stepper
from .profiling import SingleTraceProfiler
from .stand_ins import (
    EagerCUDAGraph,
    bound_too_early,
    eager_cuda_calls,
    patched,
    placeholder_classes,
    placeholder_message,
)
from .step_contract import (
    FORWARD,
    GRAPH_ENTER,
    GRAPH_EXIT,
    STEP,
    WARMUPS,
    CaptureContractError,
    KeyLike,
    StepContract,
    as_key,
    user_key_sequence,
    warmup_count,
)


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
    the key and stage; a loop that breaks the step contract with :class:`CaptureContractError`;
    the first failure the gate saw is raised even when ``fn`` caught it and returned.  Either
    way every patch is restored, the profiler is stopped and no result is returned.

    ``warmups`` is how many forwards (each followed by a profiler step) the loop runs per
    key before its capture forward: 2 as sglang runs, 1 for vLLM's loop and for a
    ``torch.compile(mode="reduce-overhead")`` model (inductor records on a compiled
    function's second call); at most :data:`~.step_contract.MAX_WARMUPS`.  The profiler's
    schedule waits that many steps, so the recorded step is still each key's capture.
    """
    warmups = warmup_count(warmups)
    owner, name = _forward_target(forward)
    settings = settings or CaptureSettings()
    device = torch.device(device if device is not None else getattr(owner, "device", None) or "cpu")
    runner_name = runner_name or _owner_name(owner)
    rank = current_rank()
    backend = make_backend(device) if device.type == "cuda" else make_backend("cpu")
    result = CaptureResult(runner_name=runner_name, platform=settings.platform, rank=rank, mode=settings.trace)
    refuse_cupti_conflict(backend, settings, f"graph_capture.engine {runner_name}")
    # A key whose capture forward held its graphs is summarized one Summary per graph.
    profiler = make_profiler(
        settings, backend.device, runner_name, rank, held_graphs=lambda k: k in loop.held_keys, warmups=warmups
    )
    with_profiler = takes_profiler(fn)
    loop = LoopObserver(
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
    real_graphs = device.type == "cuda"
    try:
        if profiler is not None:
            profiler.__enter__()
        with _observed(loop, owner, name, real_graphs=real_graphs):
            try:
                fn(Stepper(loop)) if with_profiler else fn()
            except Exception as exc:
                raise _failure(loop, exc, real_graphs) from _cause(loop, exc)
            if loop.failure is not None:  # the engine caught what failed and carried on
                raise _failure(loop, None, real_graphs) from _cause(loop, None)
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
        elif settings.summarize:  # the graphs read from torch's instantiate hook give the kernels alone
            _attach_graph_readouts(result, backend)
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


#: Said of a failure the engine's capture function caught: the gate fails the capture all the same.
CAUGHT = (
    " (the capture function caught this error and carried on; a failure the gate saw fails the capture, "
    "and no golden is written)"
)


def _failure(loop: LoopObserver, raised: Optional[BaseException], real_graphs: bool) -> BaseException:
    """The error a failed capture ends with: the first failure the gate saw, else what ``fn`` raised.

    A failure the engine caught (``raised`` is not it) is said to have been caught; torch's
    CPU placeholder of a stood-in class is explained as a name bound before the stand-ins.
    """
    kept = loop.failure
    error = kept.error if kept is not None else raised
    assert error is not None
    key = kept.key if kept is not None else loop.progress.key
    stage = kept.stage if kept is not None else loop.progress.stage
    # A failure inside a capture hook was swallowed by torch, not caught by the engine.
    caught = CAUGHT if kept is not None and raised is not kept.error and kept.error is not loop.swallowed else ""
    placeholder = None if real_graphs else _placeholder_in(error)
    if placeholder is not None:
        where = f"{key.runner} {key_label(key)}: " if key is not None else ""
        return UsageError(placeholder_message(placeholder, where) + caught)
    if isinstance(error, GraphCaptureError):
        return type(error)(f"{error}{caught}") if caught and not isinstance(error, CaptureError) else error
    failed = CaptureError(key or loop.runner_name, stage, error, partial=loop.result)
    failed.args = (f"{failed}{caught}",)
    return failed


def _cause(loop: LoopObserver, raised: Optional[BaseException]) -> Optional[BaseException]:
    """What the failure is chained to: the engine's own exception (its frames are shown), else nothing."""
    kept = loop.failure.error if loop.failure is not None else raised
    return None if isinstance(kept, GraphCaptureError) else kept


def _placeholder_in(error: BaseException) -> Optional[str]:
    """The stood-in ``torch.cuda`` name whose CPU placeholder raised ``error`` or an exception it chains."""
    seen: set[int] = set()
    current: Optional[BaseException] = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        name = bound_too_early(current)
        if name is not None:
            return name
        current = current.__cause__ or current.__context__
    return None


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
    if name.startswith("__") and name.endswith("__") and not isinstance(owner, type):
        # Python looks special methods up on the type: a call ``owner(...)`` never meets a
        # wrapper set on the object, so the gate would see no forward at all.
        raise UsageError(
            f"graph_capture.engine: forward=({_owner_name(owner)}, {name!r}) cannot be observed: Python looks "
            f"special methods such as {name} up on the class, never on the object; name the method {name} runs, "
            f'e.g. forward=(model, "forward") for a torch module'
        )
    return owner, name


def _placeholder_new(loop: LoopObserver, name: str) -> Callable[..., Any]:
    """``__new__`` of torch's placeholder ``torch.cuda.<name>`` for the block: the observer's one-line failure."""

    def refuse(cls: type, *args: Any, **kwargs: Any) -> Any:
        loop.placeholder_used(placeholder_message(name, loop.where()))

    return refuse


@contextlib.contextmanager
def _observed(loop: LoopObserver, owner: Any, name: str, *, real_graphs: bool) -> Iterator[None]:
    """The forward, the graph capture calls and (off CUDA) their eager stand-ins patched for the block."""
    original = getattr(owner, name)

    def observed_forward(*args: Any, **kwargs: Any) -> Any:
        return loop.forward(original, args, kwargs)

    with contextlib.ExitStack() as stack:
        if not real_graphs:
            # torch's own classes stay reachable through names bound before the stand-ins: using
            # one is a failure the gate sees (and explains), even when the engine catches it.
            for attr, placeholder in placeholder_classes(torch.cuda).items():
                stack.enter_context(patched(placeholder, "__new__", _placeholder_new(loop, attr)))
            for attr, stand_in in eager_cuda_calls().items():
                stack.enter_context(patched(torch.cuda, attr, stand_in))
        # On CUDA each capture begins only without another CUPTI client (an engine's torch.cuda.graph
        # with the cupti annotation backend brings one up right before it).
        check = (
            (lambda: refuse_cupti_conflict(loop.backend, loop.settings, loop.refusal_name())) if real_graphs else None
        )
        loop.captures = stack.enter_context(
            observe_captures(loop, real_graphs=real_graphs, before_begin=check, on_failure=loop.hook_failed)
        )
        stack.enter_context(patched(owner, name, observed_forward))
        yield


__all__ = [
    "FORWARD",
    "GRAPH_ENTER",
    "GRAPH_EXIT",
    "STEP",
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
