"""Gate an engine's own capture loop, unmodified: observe it, check the step contract, profile each key."""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import sys
import threading
import time
from typing import Any, Callable, Iterator, NoReturn, Optional, Union

import torch

from ..errors import CaptureError, GraphCaptureError, UsageError
from ..keys import CaptureKey, key_label
from ..result import CaptureResult, KeyMetrics
from ..summary.files import PIECE_MARK
from .backend import CaptureProgress, make_backend
from .capture import (
    CaptureSettings,
    check_capture_evidence,
    check_forward_seen,
    close_profiler,
    current_rank,
    finish_capture,
    make_profiler,
    record_key,
    refuse_cupti_conflict,
    selected_sizes,
    stop_quietly,
)
from .contract import (
    FORWARD,
    GRAPH_ENTER,
    GRAPH_EXIT,
    STEP,
    WARMUPS,
    CaptureContractError,
    FailureKeeper,
    KeyLike,
    StepContract,
    as_key,
    cudagraph_skips,
    ended_with_error,
    no_graph_reason,
    other_thread_reason,
    warmup_count,
)
from .observe import (
    CaptureObserver,
    EagerCUDAGraph,
    bound_too_early,
    eager_cuda_calls,
    observe_captures,
    patched,
    placeholder_classes,
    placeholder_message,
    still_capturing,
)
from .profiling import PerBatchSizeProfiler


def _takes_profiler(fn: Callable[..., Any]) -> bool:
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
    passes: Optional[tuple[Any, str]] = None,
) -> CaptureResult:
    """Run the engine's capture function ``fn`` under the gate; return every key it captured (in its last pass)."""
    warmups = warmup_count(warmups)
    owner, name = _forward_target(forward)
    settings = settings or CaptureSettings()
    if passes is not None:
        passes = _forward_target(passes, "passes")
        if settings.trace == "single":
            raise UsageError(
                "graph_capture.engine: passes= with --graph-capture-trace=single: the one trace would hold the graphs "
                "of every pass; use per-bs traces"
            )
    device = torch.device(device if device is not None else getattr(owner, "device", None) or "cpu")
    runner_name = runner_name or _owner_name(owner)
    rank = current_rank()
    backend = make_backend(device) if device.type == "cuda" else make_backend("cpu")
    result = CaptureResult(runner_name=runner_name, platform=settings.platform, rank=rank, mode=settings.trace)
    refuse_cupti_conflict(backend, settings, f"graph_capture.engine {runner_name}")
    # A key whose capture forward began its graphs is summarized one Summary per graph.
    profiler = make_profiler(
        settings, backend.device, runner_name, rank, graphs_inside=lambda k: k in loop.keys_with_graphs, warmups=warmups
    )
    with_profiler = _takes_profiler(fn)
    loop = _LoopObserver(
        key=key,
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
        with _observed(loop, owner, name, real_graphs=real_graphs, passes=passes):
            try:
                fn(_Stepper(loop)) if with_profiler else fn()
            except Exception as exc:
                raise _failure(loop, exc, real_graphs) from _cause(loop, exc)
            if loop.failure is not None:  # the engine caught what failed and carried on
                raise _failure(loop, None, real_graphs) from _cause(loop, None)
        loop.contract.finish()
        lacks = f"the capture loop of {runner_name} did not capture (it captured "
        kept = set(selected_sizes(list(result.keys), settings, lambda have: f"{lacks}{have})"))
        for key in [k for k in result.keys if k not in kept]:
            del result.keys[key]
        close_profiler(profiler, result, loop.progress)
        profiler = None
        # Without a replay, the graphs read from torch's instantiate hook give the kernels alone.
        finish_capture(result, backend, settings, loop.progress)
    except KeyboardInterrupt:
        stop_quietly(profiler)
        raise
    except GraphCaptureError:
        stop_quietly(profiler)
        raise
    except Exception as exc:
        stop_quietly(profiler)
        raise CaptureError(loop.progress.key or runner_name, loop.progress.stage, exc, partial=result) from exc
    return result


#: Said of a failure the engine's capture function caught: the gate fails the capture all the same.
_CAUGHT = (
    " (the capture function caught this error and carried on; a failure the gate saw fails the capture, "
    "and no golden is written)"
)


def _failure(loop: _LoopObserver, raised: Optional[BaseException], real_graphs: bool) -> BaseException:
    """The error a failed capture ends with: the first failure the gate saw, else what ``fn`` raised."""
    kept = loop.failure
    error = kept.error if kept is not None else raised
    assert error is not None
    key = kept.key if kept is not None else loop.progress.key
    stage = kept.stage if kept is not None else loop.progress.stage
    # A failure inside a capture hook was swallowed by torch, not caught by the engine.
    caught = _CAUGHT if kept is not None and raised is not kept.error and kept.error is not loop.swallowed else ""
    placeholder = None if real_graphs else _placeholder_in(error)
    if placeholder is not None:
        where = f"{key.runner} {key_label(key)}: " if key is not None else ""
        return UsageError(placeholder_message(placeholder, where) + caught)
    if isinstance(error, GraphCaptureError):
        return type(error)(f"{error}{caught}") if caught and not isinstance(error, CaptureError) else error
    failed = CaptureError(key or loop.runner_name, stage, error, partial=loop.result)
    failed.args = (f"{failed}{caught}",)
    return failed


def _cause(loop: _LoopObserver, raised: Optional[BaseException]) -> Optional[BaseException]:
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


def _forward_target(forward: Any, option: str = "forward") -> tuple[Any, str]:
    """``forward`` checked to be ``(object, "method name")`` naming a callable attribute; UsageError if not."""
    if not (isinstance(forward, tuple) and len(forward) == 2 and isinstance(forward[1], str)):
        raise UsageError(
            f'graph_capture.engine: {option}= must be (object, "method name"), e.g. (engine, "forward_decode"); '
            f"got {forward!r}"
        )
    owner, name = forward
    if not callable(getattr(owner, name, None)):
        raise UsageError(f"graph_capture.engine: {option}=: {_owner_name(owner)} has no method {name!r}")
    if name.startswith("__") and name.endswith("__") and not isinstance(owner, type):
        # Python looks special methods up on the type: a call ``owner(...)`` never meets a
        # wrapper set on the object, so the gate would see no forward at all.
        raise UsageError(
            f"graph_capture.engine: {option}=({_owner_name(owner)}, {name!r}) cannot be observed: Python looks "
            f"special methods such as {name} up on the class, never on the object; name the method {name} runs, "
            f'e.g. forward=(model, "forward") for a torch module'
        )
    return owner, name


def _placeholder_new(loop: _LoopObserver, name: str) -> Callable[..., Any]:
    """``__new__`` of torch's placeholder ``torch.cuda.<name>`` for the block: the observer's one-line failure."""

    def refuse(cls: type, *args: Any, **kwargs: Any) -> Any:
        loop.placeholder_used(placeholder_message(name, loop.where()))

    return refuse


@contextlib.contextmanager
def _observed(
    loop: _LoopObserver, owner: Any, name: str, *, real_graphs: bool, passes: Optional[tuple[Any, str]]
) -> Iterator[None]:
    """The forward, the graph capture calls, ``passes`` and (off CUDA) their eager stand-ins patched for the block."""
    original = getattr(owner, name)
    begin_pass = getattr(*passes) if passes is not None else None

    def observed_forward(*args: Any, **kwargs: Any) -> Any:
        return loop.forward(original, args, kwargs)

    def observed_pass(*args: Any, **kwargs: Any) -> Any:
        loop.new_pass()
        return begin_pass(*args, **kwargs)  # type: ignore[misc]

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
        if passes is not None:
            stack.enter_context(patched(*passes, observed_pass))
        yield


@dataclasses.dataclass
class _Graph:
    """One graph the engine began: the key of the forward inside it, once one ran."""

    graph: Any
    key: Optional[CaptureKey] = None
    started: float = 0.0
    memory: Optional[tuple[int, int]] = None
    #: The exception being handled where the graph began (an engine may capture inside an ``except``).
    handling: Optional[BaseException] = None


class _Stepper:
    """The profiler handed to ``fn(profiler)``: each ``step()`` is checked against the contract first."""

    def __init__(self, loop: "_LoopObserver") -> None:
        self._loop = loop

    def step(self) -> None:
        self._loop.on_step()


class _LoopObserver(FailureKeeper):
    """The state of one observed run of an engine's capture function."""

    def __init__(
        self,
        *,
        key: Callable[..., KeyLike],
        backend: Any,
        profiler: Any,
        settings: CaptureSettings,
        result: CaptureResult,
        plugin_steps: bool,
        warmups: int,
        method: str,
    ) -> None:
        super().__init__()
        self.key_of, self.method = key, method
        self.runner_name, self.rank = result.runner_name, result.rank
        self.backend, self.profiler, self.settings, self.result = backend, profiler, settings, result
        self.plugin_steps = plugin_steps
        self.contract = StepContract(warmups)
        self.warmups = warmups
        #: Per key, the last warmup whose forward began a graph (another graph, or a loop recording early).
        self.other_graph_warmups: dict[CaptureKey, str] = {}
        self.skips_before = cudagraph_skips()
        self.progress = CaptureProgress(on_stage=settings.on_stage)
        self.depth = 0  # forwards running now (a graph begun inside one is one of its key's graphs)
        self.graph: Optional[_Graph] = None
        #: The capture forward running now that may hold its key's graphs; the keys whose forward began them.
        self.inside: Optional[_KeyGraphs] = None
        self.keys_with_graphs: set[CaptureKey] = set()
        #: Graphs begun inside a graph being captured: other graphs, part of that graph.
        self.other_graphs: set[int] = set()
        self.metrics: dict[CaptureKey, KeyMetrics] = {}
        self.started: dict[CaptureKey, float] = {}
        self.graphs: dict[CaptureKey, Any] = {}
        #: How graph captures are observed (set by the gate); a failure kept in one of its hooks that
        #: torch swallowed is :attr:`swallowed` (the engine never saw it, so it did not catch it).
        self.captures: Optional[CaptureObserver] = None
        self.swallowed: Optional[BaseException] = None
        #: The thread that runs the gate and started the profiler: the only one whose ops it records.
        self.thread = threading.current_thread()

    def current_place(self) -> tuple[Optional[CaptureKey], str]:
        return self.progress.key, self.progress.stage

    def hook_failed(self, error: BaseException) -> None:
        """A failure inside one of the capture hooks: kept like any other; on torch's hooks, torch swallowed it."""
        self._record(error)
        if self.captures is not None and self.captures.mode == "hooks" and self.failure is not None:
            if self.failure.error is error:
                self.swallowed = error

    def refusal_name(self) -> str:
        """``graph_capture.engine Runner bs=4`` for the key the loop is at, as a refusal names it."""
        key = self.contract.key
        return f"graph_capture.engine {self.runner_name}" + (f" {key_label(key)}" if key is not None else "")

    def where(self) -> str:
        """``"Runner bs=4: "`` for the key the loop is at, as failure lines begin; empty before any key."""
        key = self.progress.key
        return f"{key.runner} {key_label(key)}: " if key is not None else ""

    def elsewhere(self, what: str, key: Optional[CaptureKey] = None) -> bool:
        """Whether this call runs on a thread other than the gate's: then kept as the failure and passed through."""
        thread = threading.current_thread()
        if thread is self.thread:
            return False
        if self.failure is None:
            key = key or self.contract.key
            where = f"{key.runner} {key_label(key)}: " if key is not None else ""
            error = CaptureContractError(
                f"graph_capture.engine: {where}{other_thread_reason(what, thread.name, self.thread.name)}"
            )
            self._record(error, key)
            self.swallowed = error  # raised in no frame of the engine's: it did not catch it
        return True

    def new_pass(self) -> None:
        """A call of ``passes=`` begins a capture pass: what the passes before captured is dropped, never gated."""
        if self.elsewhere("a capture pass"):
            return
        self._raise_kept()
        with self._recorded():
            self.contract.new_pass()
        if isinstance(self.profiler, PerBatchSizeProfiler):
            for done in self.profiler.results.values():
                if done.trace_path is not None:
                    done.trace_path.unlink(missing_ok=True)
            self.profiler.results.clear()
        for kept in (self.result.keys, self.graphs, self.metrics, self.started, self.other_graph_warmups):
            kept.clear()
        self.keys_with_graphs.clear()
        for readouts in (getattr(self.backend, "graph_readouts", {}), getattr(self.backend, "readout_sources", {})):
            readouts.clear()

    def placeholder_used(self, message: str) -> NoReturn:
        """The engine instantiated torch's CPU placeholder of a stood-in class: kept as the failure, raised."""
        error = UsageError(message)
        self._record(error)
        raise error

    def _feed(self, event: str, key: Optional[CaptureKey]) -> None:
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
            key, failed = self._key(args, kwargs), None
        except UsageError as exc:
            key, failed = None, exc
        if key is None and failed is None:  # a forward of no key (an engine's profile or warm-up run): not watched
            return original(*args, **kwargs)
        if self.elsewhere("a forward", key):
            return original(*args, **kwargs)
        self._ended_unseen()
        self._raise_kept()
        with self._recorded():
            if failed is not None:
                raise failed
            assert key is not None
            if self.graph is not None:
                self._enter_graph(key, original, args, kwargs)
                self._feed(FORWARD, key)
            elif self.contract.at_capture(key):  # the capture is due: this forward may hold the graphs
                self.inside = _KeyGraphs(key)
            else:
                self._feed(FORWARD, key)
        self.depth += 1
        try:
            out = original(*args, **kwargs)
        except Exception as exc:
            self._record(exc, key, self.contract.last_stage)
            raise
        finally:
            self.depth -= 1
            inside, self.inside = self.inside, None
            if inside is not None:
                inside.close_range()
        if inside is not None:
            with self._recorded():
                self._inside_ended_unseen(inside)
                if self.failure is not None:  # a graph failed and the forward caught it: so did the key
                    return out
                if inside.open is not None:
                    self.contract.fail(
                        key,
                        "capture: the forward returned while a graph begun inside it was still capturing; end "
                        "each graph's capture inside the forward that began it",
                    )
                if inside.graphs:
                    self._close_key_graphs(inside)
                else:  # the capture was due and the forward inside no graph: refused, saying what the gate saw
                    skips = cudagraph_skips() - self.skips_before
                    reason = no_graph_reason(self.other_graph_warmups.get(key), skips, self.warmups)
                    if reason:
                        self.contract.fail(key, reason)
                    self._feed(FORWARD, key)
            return out
        if self.graph is None and self.plugin_steps:
            with self._recorded():
                self._feed(STEP, key)
        return out

    def _key(self, args: tuple, kwargs: dict) -> Optional[CaptureKey]:
        try:
            value = self.key_of(*args, **kwargs)
            return None if value is None else as_key(value, self.runner_name, self.rank)
        except Exception as exc:
            shown = ", ".join([type(a).__name__ for a in args] + [f"{k}=" for k in kwargs])
            raise UsageError(
                f"graph_capture.engine: key= could not tell the key of a call {self.method}({shown}): "
                f"{type(exc).__name__}: {exc}; it must return a CaptureKey, a batch size or (batch size, variant)"
            ) from None

    def _enter_graph(self, key: CaptureKey, original: Callable[..., Any], args: tuple, kwargs: dict) -> None:
        """The first forward inside the open graph gives the graph its key; a second one is refused."""
        graph = self.graph
        assert graph is not None
        if graph.key is None:
            graph.key = key
            self._feed(GRAPH_ENTER, key)
            graph.started = time.perf_counter()
            self.metrics[key].warmup_seconds = graph.started - self.started[key]
        elif graph.key != key:
            self.contract.fail(
                graph.key,
                f"capture: one graph ran forwards of two keys ({key_label(graph.key)} and {key_label(key)}), "
                f"so its key cannot be told; capture one key per graph",
            )
        else:
            self.contract.fail(key, "capture: the graph ran the forward twice; capture one forward per graph")
        if isinstance(graph.graph, EagerCUDAGraph):
            graph.graph.calls.append((original, args, kwargs))

    def capture_begin(self, graph: Any) -> bool:
        """A graph begins: one around a forward, or (inside a forward) one of the key's graphs."""
        if self.elsewhere("a graph capture"):
            return False
        if self.depth:
            return self._begin_inside(graph)
        self._ended_unseen(beginning=graph)
        self._raise_kept()
        if self.graph is not None:
            with self._recorded():
                self.contract.fail(
                    self.graph.key or self.contract.key,
                    "capture: a graph was begun inside another graph (before that graph's capture ended); "
                    "capture one graph at a time",
                )
        self.graph = _Graph(graph, memory=self.backend.memory_stats(), handling=sys.exc_info()[1])
        return True

    def _begin_inside(self, graph: Any) -> bool:
        """A graph begun inside a forward: one of the key's graphs, else another graph (False)."""
        self._inside_ended_unseen(self.inside, beginning=graph)
        inside = self.inside
        if inside is None or inside.open is not None or self.graph is not None:
            self.other_graphs.add(id(graph))
            if inside is None and self.graph is None and self.contract.last_stage.startswith("warmup "):
                self.other_graph_warmups[self.contract.key] = self.contract.last_stage  # type: ignore[index]
            return False
        self._raise_kept()
        with self._recorded():
            if not inside.graphs:  # the key's capture begins with its first graph
                self._feed(GRAPH_ENTER, inside.key)
                self._feed(FORWARD, inside.key)
                inside.memory = self.backend.memory_stats()
            inside.begin(graph)
            if not inside.graphs:
                self.metrics[inside.key].warmup_seconds = inside.started - self.started[inside.key]
        return True

    def _end_inside(self, graph: Any) -> bool:
        """The end of a graph begun inside the capture forward (True), kept unless an exception leaves it."""
        inside = self.inside
        if inside is None or inside.open is not graph:
            return False
        leaving = sys.exc_info()[1]
        failed = leaving is not None and leaving is not inside.handling
        inside.end(graph, kept=not failed)
        if failed:  # the key failed during its capture; nothing raised here replaces that exception
            self._record(leaving, inside.key, "capture")  # type: ignore[arg-type]
        return True

    def _close_key_graphs(self, inside: _KeyGraphs) -> None:
        """The capture forward returned holding graphs: they are the key's, in capture order."""
        key = inside.key
        self._measure(key, inside.started, inside.memory)
        self.graphs[key] = tuple(inside.graphs)
        self.keys_with_graphs.add(key)  # before the step after the capture, which summarizes the key
        self._feed(GRAPH_EXIT, key)
        if self.plugin_steps:
            self._feed(STEP, key)

    def _measure(self, key: CaptureKey, started: float, memory: Optional[tuple[int, int]]) -> None:
        metrics = self.metrics[key]
        metrics.capture_seconds = time.perf_counter() - started
        after = self.backend.memory_stats()
        if memory is not None and after is not None:
            metrics.memory_allocated = after[0] - memory[0]
            metrics.memory_reserved = after[1] - memory[1]

    def capture_end(self, graph: Any) -> None:
        """A graph's capture ended: its key moves on, unless the capture is being left by an exception."""
        if self.elsewhere("a graph capture"):
            return
        if self.other_graphs and id(graph) in self.other_graphs:
            self.other_graphs.discard(id(graph))
            return
        if self._end_inside(graph):
            return
        entered, self.graph = self.graph, None
        if entered is None:
            return
        leaving = sys.exc_info()[1]
        if leaving is not None and leaving is not entered.handling:
            # An exception leaves the graph's context: the key failed during its capture. Nothing is
            # fed (no step, no trace of the failed key) and nothing raised here replaces that exception.
            self._record(leaving, entered.key or self.contract.key, "capture")
            return
        if self.failure is not None:
            return
        with self._recorded():
            self._exit_graph(entered)

    def _ended_unseen(self, beginning: Any = None) -> None:
        """On torch's hooks: the open graph's capture ended with an error, which runs no end hook; fail its key now."""
        open_graph = self.graph
        if open_graph is None or self.captures is None or self.captures.mode != "hooks":
            return
        if still_capturing(open_graph.graph, beginning=beginning):
            return
        self.capture_failed(open_graph.graph, ended_with_error("this graph's capture"))

    def _inside_ended_unseen(self, inside: Optional[_KeyGraphs], beginning: Any = None) -> None:
        """On torch's hooks: a graph whose capture end raised (no end hook ran) fails its key, as a wrapping graph does."""
        if inside is None or inside.open is None or self.captures is None or self.captures.mode != "hooks":
            return
        if still_capturing(inside.open, beginning=beginning):
            return
        n = len(inside.graphs) + 1
        what = f"the capture of piece {n} (graph {n} begun inside the forward)"
        self._inside_failed(inside, inside.open, ended_with_error(what))

    def capture_failed(self, graph: Any, error: BaseException) -> None:
        """torch's own ``capture_begin`` / ``capture_end`` raised: the key fails during its capture."""
        if self.elsewhere("a graph capture"):
            return
        if self.other_graphs and id(graph) in self.other_graphs:
            self.other_graphs.discard(id(graph))
            return
        inside = self.inside
        if inside is not None and inside.open is graph:
            self._inside_failed(inside, graph, error)
            return
        entered, self.graph = self.graph, None
        handling = entered.handling if entered is not None else None
        root = error.__context__ if error.__context__ is not None and error.__context__ is not handling else error
        key = entered.key if entered is not None and entered.key is not None else self.contract.key
        self._record(root, key, "capture")

    def _inside_failed(self, inside: _KeyGraphs, graph: Any, error: BaseException) -> None:
        """A graph's capture failed: closed (not one of the key's graphs), and the key fails during its capture."""
        inside.end(graph, kept=False)
        context = error.__context__
        self._record(
            context if context is not None and context is not inside.handling else error, inside.key, "capture"
        )

    def _exit_graph(self, entered: _Graph) -> None:
        if entered.key is None:
            after = f" after {key_label(self.contract.done[-1])}" if self.contract.done else ""
            where = self.contract.key if self.contract.key not in self.contract.done else None
            self.contract.fail(
                where,
                f"capture: a graph{after} ran no forward of the method given as forward=, so its key cannot be "
                f"told; capture the engine's forward inside the graph, or name the method it calls",
            )
        key = entered.key
        self._measure(key, entered.started, entered.memory)
        self.graphs[key] = entered.graph
        self._feed(GRAPH_EXIT, key)
        if self.plugin_steps:
            self._feed(STEP, key)

    def graph_instantiated(self, graph: Any) -> None:
        """torch instantiated a graph: a key's real graph is read now, while its template is live (GPU only)."""
        read = getattr(self.backend, "read_instantiated", None)
        key = next((k for k, g in self.graphs.items() if g is graph), None)
        if read is not None and key is not None and key not in self.backend.graph_readouts:
            read(key, graph)

    def on_step(self) -> None:
        if self.elsewhere("a profiler step"):
            return
        self._ended_unseen()
        self._raise_kept()
        with self._recorded():
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
        if done is not None:
            check_forward_seen(key, done.summary, f"graph_capture.engine: {key.runner} {key_label(key)}: ")
        if self.backend.kernel_evidence_required and done is not None:
            check_capture_evidence(key, done.summary)
        seconds = time.perf_counter() - self.started[key]
        record_key(self.result, key, done, self.graphs.get(key), seconds, self.metrics[key], self.settings.progress)


class _KeyGraphs:
    """The capture forward of ``key`` running now, and the graphs begun inside it so far."""

    def __init__(self, key: CaptureKey) -> None:
        self.key = key
        self.graphs: list[Any] = []
        #: The graph whose capture is under way (None between graphs).
        self.open: Optional[Any] = None
        #: The exception being handled where the open graph began (an engine may capture inside an ``except``).
        self.handling: Optional[BaseException] = None
        self.started = 0.0
        self.memory: Optional[tuple[int, int]] = None
        self._range: Optional[Any] = None

    def begin(self, graph: Any) -> None:
        """A graph's capture begins inside the forward: its range opens in the profile."""
        if not self.graphs and self.open is None:
            self.started = time.perf_counter()
        self.open, self.handling = graph, sys.exc_info()[1]
        self._range = torch.profiler.record_function(PIECE_MARK)
        self._range.__enter__()

    def end(self, graph: Any, *, kept: bool) -> None:
        """The open graph's capture ended (``kept``: it ended well, so it is one of the key's graphs)."""
        self.close_range()
        self.open = None
        if kept:
            self.graphs.append(graph)

    def close_range(self) -> None:
        """Close the open graph's range (a forward that raised during a capture leaves it open)."""
        opened, self._range = self._range, None
        if opened is not None:
            opened.__exit__(None, None, None)
