"""The capture step contract, checked on a CPU-only machine: on a runner, or on your own capture code.

Per capture key: two warmup forwards, then the capture; a profiler step after each
of the three and none inside the graph; keys captured largest batch size first;
one trace per key.  :class:`CaptureContract` checks it either way:

* :meth:`CaptureContract.check_runner` captures a
  :class:`~pytest_graphcapture.engine.runner.GraphRunner` the way the plugin does,
  on a :class:`~pytest_graphcapture.testing.FakeBackend` under the real per-batch-size
  profiler, and checks the recorded calls and the exported traces;
* :meth:`CaptureContract.check_capture` runs *your* capture function with
  ``torch.cuda.CUDAGraph``, ``torch.cuda.graph`` and the stream/synchronize calls
  around them replaced by recording fakes, your forward wrapped to record which key
  it runs, and a :class:`~pytest_graphcapture.testing.RecordingProfiler` to step.

A broken contract fails with the expected-vs-actual call listing
(:func:`~pytest_graphcapture.testing.assert_call_sequence`).  The pytest fixtures
``fake_backend``, ``recording_profiler`` and ``capture_contract`` hand these out.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

import torch

from .engine.capture import CaptureSettings, capture_runner
from .engine.runner import GraphRunner
from .engine.stand_ins import eager_cuda_calls, patched
from .engine.step_contract import KeyLike, as_key, user_key_sequence, warmup_count
from .keys import capture_order
from .naming import trace_dir, trace_file_name
from .result import CaptureResult
from .testing import (
    FORWARD,
    GRAPH_ENTER,
    GRAPH_EXIT,
    STEP,
    SYNCHRONIZE,
    Call,
    CallLog,
    FakeBackend,
    RecordingProfiler,
    assert_call_sequence,
    expected_key_sequence,
)

#: What the contract of user capture code looks at: forwards, graph enter/exit and profiler steps.
CONTRACT_CALLS = (FORWARD, STEP, GRAPH_ENTER, GRAPH_EXIT)


class RecordingCUDAGraph:
    """Stand-in for ``torch.cuda.CUDAGraph``: nothing is captured, replays are counted."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.replays = 0

    def replay(self) -> None:
        self.replays += 1

    def reset(self) -> None:
        pass

    def pool(self) -> object:
        return object()


class CaptureContract:
    """Checks the capture step contract (see the module docstring) with a shared :class:`CallLog`."""

    def __init__(self, backend: FakeBackend, profiler: RecordingProfiler, trace_dir: Path) -> None:
        self.backend = backend
        self.profiler = profiler
        self.log: CallLog = backend.log
        self.trace_dir = Path(trace_dir)

    # ------------------------------------------------------------------ runners

    def check_runner(self, runner: GraphRunner) -> CaptureResult:
        """Capture ``runner`` as the plugin does (fake backend, real per-bs profiler) and check the contract.

        Returns the capture result; its traces are under :attr:`trace_dir`.
        """
        settings = CaptureSettings(trace="per-bs", summarize=False, out_dir=self.trace_dir, profiler_flags=frozenset())
        result = capture_runner(runner, self.backend, settings)
        keys = runner.capture_keys(result.rank)
        expected = [Call(name, key) for key in keys for name in expected_key_sequence(profiling=True)]
        actual = [call for call in self.log.calls if call.name in expected_key_sequence(profiling=True)]
        assert_call_sequence(actual, expected, what=f"capture calls of {runner.name}")
        folder = trace_dir(self.trace_dir)
        traces = sorted(p.name for p in folder.iterdir() if p.name.endswith(".json.gz")) if folder.is_dir() else []
        assert_call_sequence(traces, sorted(trace_file_name(k) for k in keys), what="trace files (one per key)")
        return result

    # ------------------------------------------------------------------ your own capture code

    def check_capture(
        self,
        capture: Callable[[RecordingProfiler], Any],
        *,
        forward: tuple[Any, str],
        key: Callable[..., KeyLike],
        runner: Optional[str] = None,
        warmups: int = 2,
    ) -> CallLog:
        """Run ``capture(profiler)`` with CUDA graphs faked; check the contract; return the call log.

        ``forward`` is ``(object, method name)`` of the body your code captures: it is
        wrapped to record each call under the key ``key(*args, **kwargs)`` returns (a
        :class:`CaptureKey`, a batch size, or ``(batch size, variant)`` of runner
        ``runner``; failures name the runner).  Step the
        ``profiler`` passed in where your code steps its profiler.
        """
        warmups = warmup_count(warmups, "capture_contract.check_capture")
        owner, name = forward
        original = getattr(owner, name)

        def recorded(*args: Any, **kwargs: Any) -> Any:
            self.log.current_key = as_key(key(*args, **kwargs), runner or "capture")
            self.log.record(FORWARD)
            return original(*args, **kwargs)

        with self._fake_cuda_graphs(), patched(owner, name, recorded):
            capture(self.profiler)
        actual = [call for call in self.log.calls if call.name in CONTRACT_CALLS]
        keys = capture_order(dict.fromkeys(c.key for c in actual if c.key is not None))
        expected = [Call(name, k) for k in keys for name in user_key_sequence(warmups)]
        label = runner or ", ".join(sorted({k.runner for k in keys})) or "the capture function"
        assert_call_sequence(actual, expected, what=f"capture calls of {label} (largest batch size first)")
        return self.log

    @contextlib.contextmanager
    def _fake_cuda_graphs(self) -> Iterator[None]:
        log = self.log

        @contextlib.contextmanager
        def graph(cuda_graph: Any, *args: Any, **kwargs: Any) -> Iterator[Any]:
            log.record(GRAPH_ENTER)
            try:
                yield cuda_graph
            finally:
                log.record(GRAPH_EXIT)

        fakes = {
            **eager_cuda_calls(synchronize=lambda *args, **kwargs: log.record(SYNCHRONIZE)),
            "CUDAGraph": RecordingCUDAGraph,
            "graph": graph,
        }
        with contextlib.ExitStack() as stack:
            for attr, fake in fakes.items():
                stack.enter_context(patched(torch.cuda, attr, fake))
            yield


__all__ = ["CONTRACT_CALLS", "CaptureContract", "RecordingCUDAGraph", "user_key_sequence"]
