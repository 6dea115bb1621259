"""The failures an observed engine loop keeps: the first one fails the capture, even when the engine caught it.

An engine may wrap each size in its own ``try``/``except`` and go on without that size.
The observer of its loop (:class:`~.loop_observer.LoopObserver`) therefore keeps the first
failure it saw — a contract violation, a key function or a forward that raised, an
exception leaving a graph's capture, a capture torch ended with an error — as
:attr:`FailureKeeper.failure`; every later call of the loop raises :class:`AlreadyFailed`,
so no key after it is captured, and the gate raises the kept failure when the loop returns.

It also says what the gate can see of the reasons behind a capture forward that holds no
graph: a graph begun in one of the key's warmup forwards instead (the loop records earlier
than ``warmups=`` says), and inductor skipping its CUDA graphs while the loop ran (on CPU
``torch.compile(mode="reduce-overhead")`` captures none).
"""

from __future__ import annotations

import contextlib
import dataclasses
import sys
from typing import Iterator, Optional

from ..errors import GraphCaptureError
from ..keys import CaptureKey, key_label


class AlreadyFailed(GraphCaptureError):
    """Raised into an engine's loop that goes on after the gate saw a failure; the first failure is reported."""


@dataclasses.dataclass
class Failure:
    """The first failure the observer saw: the error, and the key and stage it happened at."""

    error: BaseException
    key: Optional[CaptureKey]
    stage: str


def ended_with_error(what: str) -> RuntimeError:
    """The failure of a capture torch ended with an error on its hooks: no end hook ran, the engine caught the error.

    ``what``: ``"this graph's capture"`` or ``"the capture of piece 2 (a graph begun inside the forward)"``.
    """
    return RuntimeError(
        f"torch ended {what} with an error (its capture-end hook never ran); the error itself was caught by the "
        f"capture function, so the gate cannot show it"
    )


def cudagraph_skips() -> int:
    """How many compiled graphs inductor has kept out of CUDA graphs in this process (0 before torch.compile ran).

    inductor counts each in ``torch._dynamo.utils.counters["inductor"]["cudagraph_skips"]`` —
    silently for a graph on CPU, with a "skipping cudagraphs due to …" warning on a GPU.
    """
    utils = sys.modules.get("torch._dynamo.utils")
    counters = getattr(utils, "counters", None)
    try:
        return int(counters["inductor"]["cudagraph_skips"]) if counters is not None else 0
    except (KeyError, TypeError, ValueError):
        return 0


def no_graph_reason(warmup_graph: Optional[str], skips: int, warmups: int) -> str:
    """What the gate saw of why a capture forward held no graph (``""``: nothing), as its one-line refusal.

    ``warmup_graph``: the last warmup of the key whose forward began a graph (``"warmup 2"``);
    ``skips``: the compiled graphs inductor kept out of CUDA graphs while the loop ran.
    """
    problem = "capture: the capture forward ran with no graph around it and began none inside it"
    if warmup_graph is not None:
        n = int(warmup_graph.split()[-1]) - 1
        return (
            f"{problem}, but the forward of {warmup_graph} began one: this loop records its graph after "
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
        """The capture failed already: every later call of the loop raises :class:`AlreadyFailed`."""
        if self.failure is not None:
            where = f"{self.failure.key.runner} {key_label(self.failure.key)}" if self.failure.key else "a key"
            raise AlreadyFailed(
                f"graph_capture.engine: the capture failed at {where} ({self.failure.stage}): "
                f"{type(self.failure.error).__name__}: {self.failure.error}; no later key is captured"
            )


__all__ = [
    "AlreadyFailed",
    "Failure",
    "FailureKeeper",
    "cudagraph_skips",
    "ended_with_error",
    "no_graph_reason",
    "other_thread_reason",
]
