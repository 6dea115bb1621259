"""Public fakes for contract-testing capture code on a CPU-only machine."""

from __future__ import annotations

import contextlib
import difflib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Optional, Sequence

import torch

from .engine.backend import Backend, CaptureProgress, Forward, Steppable
from .engine.capture import CaptureSettings, capture_runner
from .engine.contract import (
    BARRIER,
    FORWARD,
    GRAPH_ENTER,
    GRAPH_EXIT,
    HOOK,
    REPLAY,
    STEP,
    SYNCHRONIZE,
    KeyLike,
    as_key,
    key_sequence,
    warmup_count,
)
from .engine.observe import EagerCUDAGraph, eager_cuda_calls, patched
from .engine.runner import GraphRunner
from .keys import CaptureKey, capture_order
from .naming import trace_dir, trace_file_name
from .result import CaptureResult


@dataclass(frozen=True)
class Call:
    """One recorded call: what happened, for which key."""

    name: str
    key: Optional[CaptureKey] = None

    def __str__(self) -> str:
        if self.key is None:
            return self.name
        variant = f",{self.key.variant}" if self.key.variant is not None else ""
        return f"{self.name}(bs={self.key.batch_size}{variant})"


@dataclass
class CallLog:
    """The ordered calls a fake backend and recording profiler saw."""

    calls: list = field(default_factory=list)
    current_key: Optional[CaptureKey] = None

    def record(self, name: str) -> None:
        self.calls.append(Call(name, self.current_key))

    def names(self) -> list[str]:
        return [call.name for call in self.calls]

    def count(self, name: str, key: Optional[CaptureKey] = None) -> int:
        return sum(1 for c in self.calls if c.name == name and (key is None or c.key == key))

    def for_key(self, key: CaptureKey) -> list[str]:
        return [c.name for c in self.calls if c.key == key]

    def __str__(self) -> str:
        return "\n".join(str(call) for call in self.calls)


class InjectedFault(RuntimeError):
    """The error a :class:`FakeBackend` raises where it was told to fail."""


class RecordingProfiler:
    """Profiler stand-in: ``step()`` is recorded in the log, nothing is profiled."""

    def __init__(self, log: CallLog) -> None:
        self.log = log
        self.steps = 0

    def step(self) -> None:
        self.steps += 1
        self.log.record(STEP)


class _LoggingStepper:
    """Wraps the profiler a fake backend is given so its steps land in the log too."""

    def __init__(self, inner: Steppable, backend: "FakeBackend") -> None:
        self._inner, self._backend = inner, backend

    def step(self) -> None:
        inner_logs = isinstance(self._inner, RecordingProfiler) and self._inner.log is self._backend.log
        if not inner_logs:
            self._backend.log.record(STEP)
        if self._backend._stage == "trace export":
            # Fail before the real step: the key's cycle is still open and must be discarded.
            self._backend._maybe_fail("step")
        self._inner.step()

    def add_metadata(self, metrics: dict) -> None:
        """Forwarded to the wrapped profiler when it takes metadata (the real one does)."""
        add = getattr(self._inner, "add_metadata", None)
        if callable(add):
            add(metrics)


class FakeBackend(Backend):
    """Records the per-key call sequence; can fail at one stage of one key."""

    name = "fake"

    def __init__(self, log: Optional[CallLog] = None) -> None:
        super().__init__("cpu")
        self.log = log if log is not None else CallLog()
        self.fail_stage: Optional[str] = None
        self.fail_key: Optional[CaptureKey] = None
        self.fault: Callable[[str], BaseException] = InjectedFault
        self._stage = ""
        self.graphs: list[EagerCUDAGraph] = []

    #: Stages :meth:`inject_fault` accepts.
    FAULT_STAGES = ("warmup 1", "warmup 2", "capture", "step", "replay")

    def inject_fault(
        self, stage: str, key: Optional[CaptureKey] = None, fault: Callable[[str], BaseException] = InjectedFault
    ) -> None:
        """Fail at ``stage`` (one of :attr:`FAULT_STAGES`) of ``key`` (any key when None) from now on."""
        if stage not in self.FAULT_STAGES:
            raise ValueError(f"unknown stage {stage!r}; one of: {', '.join(self.FAULT_STAGES)}")
        self.fail_stage, self.fail_key, self.fault = stage, key, fault

    def _maybe_fail(self, stage: str) -> None:
        key = self.log.current_key
        if stage == self.fail_stage and (self.fail_key is None or key == self.fail_key):
            raise self.fault(f"injected fault at {stage} of {key}")

    def synchronize(self) -> None:
        self.log.record(SYNCHRONIZE)

    def barrier(self) -> None:
        self.log.record(BARRIER)

    def run_forward(self, forward: Forward) -> Any:
        self.log.record(FORWARD)
        self._maybe_fail(self._stage)
        return forward()

    @contextlib.contextmanager
    def graph_context(self, key: CaptureKey, forward: Forward) -> Iterator[Any]:
        self.log.record(GRAPH_ENTER)
        graph = EagerCUDAGraph.of(forward, key)
        try:
            yield graph
        finally:
            self.log.record(GRAPH_EXIT)
        self.graphs.append(graph)

    def replay(self, graph: Any) -> None:
        self.log.current_key = graph.key
        self.log.record(REPLAY)
        self._maybe_fail("replay")
        graph.replay()

    def enter_stage(self, progress: CaptureProgress, stage: str) -> None:
        super().enter_stage(progress, stage)
        self._stage = stage

    def capture_one(self, key: CaptureKey, forward: Forward, **options: Any) -> Any:
        """:meth:`Backend.capture_one` with every profiler step and post-warmup hook call logged."""
        self.log.current_key = key
        profiler = options.pop("profiler", None)
        post_warmup = options.pop("post_warmup", None)

        def hook(k: CaptureKey) -> None:
            self.log.record(HOOK)
            if post_warmup is not None:
                post_warmup(k)

        stepper = _LoggingStepper(profiler, self) if profiler is not None else None
        return super().capture_one(key, forward, profiler=stepper, post_warmup=hook, **options)


class FakeRunner(GraphRunner):
    """A tiny runner over static buffers: ``out[:bs] = x[:bs] @ w`` (+ a variant op)."""

    def __init__(
        self,
        batch_sizes: Sequence[int] = (1, 2, 4),
        *,
        variants: Sequence[Optional[str]] = (None,),
        hidden: int = 8,
        extra_op: bool = False,
        name: Optional[str] = None,
    ) -> None:
        self._sizes = list(batch_sizes)
        self._variants = list(variants)
        self.runner_name = name
        self.extra_op = extra_op
        max_bs = max(self._sizes)
        generator = torch.Generator().manual_seed(0)
        self.x = torch.randn(max_bs, hidden, generator=generator)
        self.w = torch.randn(hidden, hidden, generator=generator)
        self.out = torch.zeros(max_bs, hidden)
        self.forward_calls = 0

    def batch_sizes(self) -> Sequence[int]:
        return self._sizes

    def variants(self) -> Sequence[Optional[str]]:
        return self._variants

    def forward_for(self, key: CaptureKey) -> Forward:
        bs = key.batch_size

        def forward() -> None:
            self.forward_calls += 1
            y = torch.mm(self.x[:bs], self.w)
            if key.variant is not None:
                y = torch.relu(y)
            if self.extra_op:
                y = y * 2.0
            self.out[:bs].copy_(y)

        return forward


def assert_call_sequence(actual: Sequence[Any], expected: Sequence[Any], *, what: str = "call sequence") -> None:
    """Fail with a readable side-by-side diff when ``actual`` differs from ``expected``."""
    actual_lines = [str(item) for item in actual]
    expected_lines = [str(item) for item in expected]
    if actual_lines == expected_lines:
        return
    diff = "\n".join(difflib.unified_diff(expected_lines, actual_lines, "expected", "actual", lineterm=""))
    raise AssertionError(f"{what} differs from what was expected:\n{diff}")


class CaptureContract:
    """Checks the capture step contract (see the module docstring) with a shared :class:`CallLog`."""

    def __init__(self, backend: FakeBackend, profiler: RecordingProfiler, trace_dir: Path) -> None:
        self.backend = backend
        self.profiler = profiler
        self.log: CallLog = backend.log
        self.trace_dir = Path(trace_dir)

    def check_runner(self, runner: GraphRunner) -> CaptureResult:
        """Capture ``runner`` as the plugin does (fake backend, real per-bs profiler) and check the contract."""
        settings = CaptureSettings(trace="per-bs", summarize=False, out_dir=self.trace_dir, profiler_flags=frozenset())
        result = capture_runner(runner, self.backend, settings)
        keys = runner.capture_keys(result.rank)
        expected = [Call(name, key) for key in keys for name in key_sequence(backend_calls=True)]
        actual = [call for call in self.log.calls if call.name in key_sequence(backend_calls=True)]
        assert_call_sequence(actual, expected, what=f"capture calls of {runner.name}")
        folder = trace_dir(self.trace_dir)
        traces = sorted(p.name for p in folder.iterdir() if p.name.endswith(".json.gz")) if folder.is_dir() else []
        assert_call_sequence(traces, sorted(trace_file_name(k) for k in keys), what="trace files (one per key)")
        return result

    def check_capture(
        self,
        capture: Callable[[RecordingProfiler], Any],
        *,
        forward: tuple[Any, str],
        key: Callable[..., KeyLike],
        runner: Optional[str] = None,
        warmups: int = 2,
    ) -> CallLog:
        """Run ``capture(profiler)`` with CUDA graphs faked; check the contract; return the call log."""
        warmups = warmup_count(warmups, "capture_contract.check_capture")
        owner, name = forward
        original = getattr(owner, name)

        def recorded(*args: Any, **kwargs: Any) -> Any:
            self.log.current_key = as_key(key(*args, **kwargs), runner or "capture")
            self.log.record(FORWARD)
            return original(*args, **kwargs)

        with self._fake_cuda_graphs(), patched(owner, name, recorded):
            capture(self.profiler)
        actual = [call for call in self.log.calls if call.name in (FORWARD, STEP, GRAPH_ENTER, GRAPH_EXIT)]
        keys = capture_order(dict.fromkeys(c.key for c in actual if c.key is not None))
        expected = [Call(name, k) for k in keys for name in key_sequence(warmups)]
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

        # The stand-in graphs hold nothing of the forward: a replay runs nothing and logs nothing.
        fakes = {**eager_cuda_calls(synchronize=lambda *args, **kwargs: log.record(SYNCHRONIZE)), "graph": graph}
        with contextlib.ExitStack() as stack:
            for attr, fake in fakes.items():
                stack.enter_context(patched(torch.cuda, attr, fake))
            yield
