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
  more the longer the GPU idled before it (replays only).

The cure for the first three is a fresh process: the isolated capture mode.
"""

from __future__ import annotations

from typing import Any, Optional

from ..errors import GraphCaptureError
from ..keys import CaptureKey

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


def check_replay_evidence(key: CaptureKey, replay_kernels: list) -> None:
    """EmptyCaptureError when the replay of a GPU graph recorded no kernels."""
    if not replay_kernels:
        raise EmptyCaptureError(
            _message(key, "the replay of its graph recorded no kernels", _PROCESS_CAUSES + (_OUT_OF_RANGE,))
        )
