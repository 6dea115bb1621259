"""The step contract of an engine's capture loop: which calls, in which order, per key."""

from __future__ import annotations

import contextlib
import dataclasses
import sys
from typing import Iterator, NoReturn, Optional, Union

from ..errors import GraphCaptureError, UsageError
from ..keys import CaptureKey, key_label

#: The events of the step contract (also the call names of :class:`~pytest_graphcapture.testing.CallLog`).
FORWARD, STEP, GRAPH_ENTER, GRAPH_EXIT = "forward", "profiler.step", "graph.enter", "graph.exit"
#: The calls a backend adds around them.
SYNCHRONIZE, BARRIER, HOOK, REPLAY = "synchronize", "barrier", "hook", "replay"
WARMUPS = 2
KeyLike = Union[CaptureKey, int, tuple]


def key_sequence(
    warmups: int = WARMUPS, *, profiling: bool = True, backend_calls: bool = False, hook: bool = True
) -> list[str]:
    """The calls of one key: each warmup forward then a step; the capture; a step (the step contract).

    A backend (``backend_calls``) also synchronizes and waits at the barrier before each warmup, then runs the hook.
    """
    warmup = [SYNCHRONIZE, BARRIER] if backend_calls else []
    warmup += [FORWARD] + ([HOOK] if backend_calls and hook else []) + ([STEP] if profiling else [])
    return warmup * warmups + [GRAPH_ENTER, FORWARD, GRAPH_EXIT] + ([STEP] if profiling else [])


#: The most warmup forwards per key ``warmups=`` accepts: engines run 0 to 3; more is a typo.
_MAX_WARMUPS = 1000


def warmup_count(warmups: object, where: str = "graph_capture.engine") -> int:
    """``warmups=`` checked to be a whole number of forwards from 0 to :data:`_MAX_WARMUPS`; UsageError naming it if not."""
    if isinstance(warmups, bool) or not isinstance(warmups, int) or not 0 <= warmups <= _MAX_WARMUPS:
        raise UsageError(
            f"{where}: warmups= must be the number of warmup forwards the loop runs per key before its "
            f"capture (a whole number from 0 to {_MAX_WARMUPS}; 2 by default); got {warmups!r}"
        )
    return warmups


def _event(position: int, warmups: int) -> str:
    """The call at ``position`` of :func:`key_sequence` (computed: the sequence is never built)."""
    if position < 2 * warmups:
        return STEP if position % 2 else FORWARD
    return (GRAPH_ENTER, FORWARD, GRAPH_EXIT, STEP)[position - 2 * warmups]


def _stage(position: int, warmups: int) -> str:
    """The stage ``position`` of :func:`key_sequence` belongs to, as failure lines name it."""
    if position < 2 * warmups:
        n = position // 2 + 1
        return f"profiler step after warmup {n}" if position % 2 else f"warmup {n}"
    return "profiler step after the capture" if position == 2 * warmups + 3 else "capture"


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


class CaptureContractError(GraphCaptureError):
    """An engine's capture loop broke the step contract; no summary (and no golden) comes from it."""


class StepContract:
    """Checks the observed calls of an engine's loop, as they happen, against :func:`key_sequence`."""

    def __init__(self, warmups: int = WARMUPS) -> None:
        # Positions are computed, never listed: memory does not grow with the warmup count.
        self.warmups = warmups
        self.length = 2 * warmups + 4
        self.key: Optional[CaptureKey] = None
        self.position = 0
        self.done: list[CaptureKey] = []

    @property
    def stage(self) -> str:
        """The stage the next call of the current key belongs to (``warmup 1`` … ``profiler step after the capture``)."""
        return _stage(min(self.position, self.length - 1), self.warmups)

    @property
    def last_stage(self) -> str:
        """The stage of the last call accepted: where a loop that raises now stopped."""
        return _stage(max(self.position - 1, 0), self.warmups)

    def feed(self, event: str, key: Optional[CaptureKey]) -> bool:
        """Accept one call of ``key``; True when it closes the key (its last profiler step)."""
        if key is not None and key != self.key:
            if self.key is not None and self.position != self.length:
                self.fail(
                    self.key,
                    f"{self.stage}: the loop moved on to {key_label(key)} before this key was captured; {self._rule()}",
                )
            self._begin(key)
        if self.key is None:
            self.fail(None, f"{_WHAT[event]} came before any forward; {self._rule()}")
        if self.position == self.length:
            self.fail(self.key, f"after the capture: {_WHAT[event]} of a key already captured; {self._rule()}")
        want = _event(self.position, self.warmups)
        if event != want:
            self.fail(
                self.key, f"{self.stage}: expected {_WHAT[want]}, but the loop ran {_WHAT[event]}; {self._rule()}"
            )
        self.position += 1
        if self.position == self.length:
            self.done.append(self.key)  # type: ignore[arg-type]
            return True
        return False

    def at_capture(self, key: CaptureKey) -> bool:
        """Whether ``key``'s capture is due now (its warmups done): a forward now may hold the key's graphs."""
        at = 2 * self.warmups
        if key == self.key:
            return self.position == at
        return at == 0 and key not in self.done

    def finish(self) -> None:
        """The loop returned: the last key must be complete and at least one key captured."""
        if self.key is not None and self.position != self.length:
            self.fail(
                self.key, f"{self.stage}: the capture function returned before this key was captured; {self._rule()}"
            )
        if not self.done:
            raise CaptureContractError("graph_capture.engine: the capture function captured no graph")

    def _begin(self, key: CaptureKey) -> None:
        if key in self.done:
            self.fail(key, "warmup 1: this key was captured already; an engine captures one graph per key")
        last = next((k for k in reversed(self.done) if (k.runner, k.variant) == (key.runner, key.variant)), None)
        if last is not None and key.batch_size > last.batch_size:
            self.fail(
                key,
                f"warmup 1: captured after {key_label(last)}; keys must be captured largest batch size first, "
                f"per variant (smaller graphs reuse the larger ones' memory pool)",
            )
        self.key, self.position = key, 0

    def new_pass(self) -> None:
        """A new capture pass begins (``passes=``): its keys may be the last pass's again."""
        if self.key is not None and self.position != self.length:
            self.fail(self.key, f"{self.stage}: a new capture pass began before this key was captured; {self._rule()}")
        self.key, self.position, self.done = None, 0, []

    def _rule(self) -> str:
        warmups = self.warmups
        first = {0: "no warmup forward", 1: "1 warmup forward, followed by a profiler step"}.get(
            warmups, f"{warmups} warmup forwards, each followed by a profiler step"
        )
        return (
            f"per key the loop must run {first}, then the graph capture (a graph around the forward, or graphs "
            f"begun inside it), then one more profiler step"
        )

    @staticmethod
    def fail(key: Optional[CaptureKey], problem: str) -> NoReturn:
        """Raise the one-line :class:`CaptureContractError` for ``key`` (None: before any key)."""
        where = f"{key.runner} {key_label(key)}: " if key is not None else ""
        raise CaptureContractError(f"graph_capture.engine: {where}{problem}")


class _AlreadyFailed(GraphCaptureError):
    """Raised into an engine's loop that goes on after the gate saw a failure; the first failure is reported."""


@dataclasses.dataclass
class Failure:
    """The first failure the observer saw: the error, and the key and stage it happened at."""

    error: BaseException
    key: Optional[CaptureKey]
    stage: str


def ended_with_error(what: str) -> RuntimeError:
    """The failure of a capture torch ended with an error on its hooks: no end hook ran, the engine caught the error."""
    return RuntimeError(
        f"torch ended {what} with an error (its capture-end hook never ran); the error itself was caught by the "
        f"capture function, so the gate cannot show it"
    )


def cudagraph_skips() -> int:
    """How many compiled graphs inductor has kept out of CUDA graphs in this process (0 before torch.compile ran)."""
    utils = sys.modules.get("torch._dynamo.utils")
    counters = getattr(utils, "counters", None)
    try:
        return int(counters["inductor"]["cudagraph_skips"]) if counters is not None else 0
    except (KeyError, TypeError, ValueError):
        return 0


def no_graph_reason(other_graph_warmup: Optional[str], skips: int, warmups: int) -> str:
    """What the gate saw of why a capture forward began no graph (``""``: nothing), as its one-line refusal."""
    problem = "capture: the capture forward ran with no graph around it and began none inside it"
    if other_graph_warmup is not None:
        n = int(other_graph_warmup.split()[-1]) - 1
        return (
            f"{problem}, but the forward of {other_graph_warmup} began one: this loop records its graph after "
            f"{n} warmup forward{'' if n == 1 else 's'}, not {warmups}; pass warmups={n} to graph_capture.engine "
            f'(torch.compile(mode="reduce-overhead") records a compiled function\'s graph on its second call: '
            f"warmups=1)"
        )
    if skips:
        return (
            f"{problem}; inductor kept {skips} compiled graph{'' if skips == 1 else 's'} out of CUDA graphs while the "
            f'loop ran (torch.compile(mode="reduce-overhead") captures no graph on CPU, and on a GPU it logs '
            f"'skipping cudagraphs due to …' with the reason)"
        )
    return ""


def other_thread_reason(what: str, thread: str, gate_thread: str) -> str:
    """Why a call of the engine's loop on a thread other than the gate's is refused: its profile would be empty."""
    return (
        f"{what} ran on thread {thread!r}, not on the thread that called graph_capture.engine ({gate_thread}): "
        f"torch's profiler records only the ops of the thread it was started on, so the key's golden would hold "
        f"nothing of its forward; run the engine's capture loop on the calling thread (call its capture function "
        f"directly, not in a worker thread or pool)"
    )


class FailureKeeper:
    """Keeps the first failure of an observed loop (:attr:`failure`) and refuses every call after it."""

    def __init__(self) -> None:
        self.failure: Optional[Failure] = None

    def current_place(self) -> tuple[Optional[CaptureKey], str]:
        """The key and stage the loop is at now (a failure without its own is kept there)."""
        raise NotImplementedError

    def _record(self, error: BaseException, key: Optional[CaptureKey] = None, stage: Optional[str] = None) -> None:
        """Keep ``error`` as the capture's failure unless an earlier one is kept already."""
        if self.failure is None:
            at_key, at_stage = self.current_place()
            self.failure = Failure(error, key or at_key, stage or at_stage)

    @contextlib.contextmanager
    def _recorded(self) -> Iterator[None]:
        """The gate's own errors raised in the block are kept as the failure, then raised on."""
        try:
            yield
        except GraphCaptureError as exc:
            self._record(exc)
            raise

    def _raise_kept(self) -> None:
        """The capture failed already: every later call of the loop raises :class:`_AlreadyFailed`."""
        if self.failure is not None:
            where = f"{self.failure.key.runner} {key_label(self.failure.key)}" if self.failure.key else "a key"
            raise _AlreadyFailed(
                f"graph_capture.engine: the capture failed at {where} ({self.failure.stage}): "
                f"{type(self.failure.error).__name__}: {self.failure.error}; no later key is captured"
            )
