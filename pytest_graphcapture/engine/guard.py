"""The empty-capture guard: on a GPU, a capture with no kernel evidence is a profiler fault, never a golden.

A CUDA graph that launched nothing is not a real decode step: when a GPU capture
records no launch events, or its replay no kernels, the profiler saw nothing —
and a golden written from that would accept any later kernel set.  The known
causes are all in the process, not in the model:

* the profiler was first initialised without CUDA (a CPU-only session ran before
  any CUDA context existed), so CUPTI records no GPU activity for the process;
* an empty "warm-up" profiler session before graph capture (as
  ``torch.profiler._utils._init_for_cuda_graphs`` runs) leaves kernel collection
  dead for the life of the process (seen with CUDA 13.0 / torch 2.13 and on ROCm);
* in a pytest session, any other test may have started the profiler first;
* kernel records at the start of a profiler session are dropped as "out of range",
  more the longer the GPU idled before it (replays only);
* another CUPTI client holds CUPTI (:mod:`.cupti_clients`): only one can subscribe per
  process, and then the profiler records no GPU activity at all.

The cure for the first three is a fresh process: the isolated capture mode.  A replay
that recorded no kernels of a graph whose own nodes were read (so it does launch
kernels) marks the key incomplete, naming the CUPTI client found; no golden is written
or replaced from it (:func:`silent_replay_reason`).
"""

from __future__ import annotations

import warnings
from typing import Any, Optional, Sequence

from ..errors import GraphCaptureError
from ..keys import CaptureKey
from ..summary.replay import KernelEvidenceWarning

ISOLATE_HINT = (
    "run the capture in a fresh process: mark the test @pytest.mark.graph_capture_isolated "
    "or pass --graph-capture-isolate=on (the runner then comes from a module-level factory, "
    "as with graph_capture_ranks)"
)

_PROCESS_CAUSES = (
    "the profiler was first initialised before CUDA was (e.g. a CPU-only profiler session ran earlier in "
    "this process), so it records no GPU activity",
    "an empty warm-up profiler session ran before graph capture (torch.profiler._utils._init_for_cuda_graphs "
    "does this), which leaves kernel collection dead for the life of the process",
    "another test in this pytest session started the profiler first",
)
_OUT_OF_RANGE = (
    "kernel records at the start of a profiler session were dropped as out of range (more the longer the "
    "GPU idled before it)"
)


class EmptyCaptureError(GraphCaptureError):
    """A GPU capture or replay recorded no kernel evidence; no golden may come from it."""


def _message(key: CaptureKey, what: str, causes: tuple[str, ...]) -> str:
    listed = "; ".join(f"({n}) {cause}" for n, cause in enumerate(causes, 1))
    return (
        f"graph capture {key}: {what}, so the profiler saw nothing of this graph and no golden is written. "
        f"Likely causes: {listed}. To rule out the first ones, {ISOLATE_HINT}."
    )


def check_capture_evidence(key: CaptureKey, summary: Optional[Any]) -> None:
    """EmptyCaptureError when a GPU capture's summary counts no kernel launch events."""
    if summary is not None and not int(summary.launches.get("total", 0)):
        raise EmptyCaptureError(_message(key, "the capture recorded no kernel launch events", _PROCESS_CAUSES))


def check_forward_seen(key: CaptureKey, summary: Optional[Any], where: str) -> None:
    """EmptyCaptureError when a key's recorded capture holds no op, no kernel and no launch (on any device).

    The gate saw the forward run, so a profile without anything of it is a capture the
    profiler did not see (work skipped at the capture, or run where it does not record):
    an empty golden would pass any later forward.  ``where`` begins the line.
    """
    if summary is None or summary.ops or summary.kernels or int(summary.launches.get("total", 0)):
        return
    raise EmptyCaptureError(
        f"{where}capture: the profile holds nothing of the capture forward (no op, no kernel, no launch) although "
        f"the forward ran, so no golden is written: the forward did no work the profiler could see (it returned "
        f"a cached result, or ran its work on another thread); make the capture forward run, on this thread, the "
        f"work its graph replays"
    )


def _cupti_causes(suspects: Sequence[str]) -> tuple[str, ...]:
    return tuple(f"another CUPTI client holds CUPTI, so the profiler records no GPU activity: {s}" for s in suspects)


def check_replay_evidence(key: CaptureKey, replay_kernels: list, suspects: Sequence[str] = ()) -> None:
    """EmptyCaptureError when the replay of a GPU graph recorded no kernels; ``suspects``: CUPTI clients, named first."""
    if not replay_kernels:
        raise EmptyCaptureError(
            _message(
                key,
                "the replay of its graph recorded no kernels",
                _cupti_causes(suspects) + _PROCESS_CAUSES + (_OUT_OF_RANGE,),
            )
        )


def silent_replay_reason(suspects: Sequence[str]) -> str:
    """Why a key is incomplete whose profiled replay recorded no kernels while its graph's nodes hold kernels.

    Names the CUPTI clients found (``suspects``) first; without one, the process causes of
    a dead profiler.  The key gets no golden: a profiler that saw nothing proves nothing.
    """
    if suspects:
        why = f"another CUPTI client holds CUPTI ({'; '.join(suspects)}), so the profiler records no GPU activity"
    else:
        why = f"the profiler recorded no GPU activity (likely: {'; '.join(_PROCESS_CAUSES)})"
    return f"its profiled replay recorded no kernels although the graph launches kernels: {why}; no golden is written"


def mark_silent(summary: Any, reason: str) -> str:
    """Mark ``summary`` incomplete with ``reason`` (said as a KernelEvidenceWarning naming its key); return the reason."""
    summary.complete = False
    summary.incomplete_reason = reason
    warnings.warn(
        f"graph capture {summary.key}: kernel evidence incomplete: {reason}", KernelEvidenceWarning, stacklevel=3
    )
    return reason
