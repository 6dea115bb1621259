"""What a graph costs (time and graph-pool memory per key), allocator snapshots per runner and rank,
and the empty-capture guard — with fakes that play the GPU's part on CPU."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any, Optional

import pytest
from fakes import GpuLikeBackend
from helpers import load_trace

import pytest_graphcapture.engine.capture as capture_module
from pytest_graphcapture.engine.backend import EagerBackend
from pytest_graphcapture.engine.capture import CaptureSettings, EmptyCaptureError, capture_runner
from pytest_graphcapture.errors import CaptureError
from pytest_graphcapture.keys import CaptureKey
from pytest_graphcapture.result import CaptureResult, KeyMetrics
from pytest_graphcapture.summary.replay import KernelEvidenceWarning, with_replay
from pytest_graphcapture.testing import FakeRunner

MIB = 1 << 20


class MemoryBackend(GpuLikeBackend):
    """A fake GPU allocator: each capture grows the pool by ``grow[bs]`` MiB (reserved twice that)."""

    def __init__(self, grow: dict[int, int], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.grow, self.allocated, self.reserved = grow, 0, 0

    def memory_stats(self) -> Optional[tuple[int, int]]:
        return self.allocated, self.reserved

    def run_forward(self, forward: Any) -> Any:
        value = super().run_forward(forward)
        if self._stage == "capture":
            bs = self.log.current_key.batch_size
            self.allocated += self.grow[bs] * MIB
            self.reserved += 2 * self.grow[bs] * MIB
        return value


def test_each_key_gets_its_own_graph_memory_and_times_and_they_reach_progress_and_the_trace(tmp_path: Path) -> None:
    lines: list[str] = []
    backend = MemoryBackend({4: 3, 2: 1, 1: 0})
    settings = CaptureSettings(trace="per-bs", out_dir=tmp_path, replay=True, progress=lines.append)
    result = capture_runner(FakeRunner((1, 2, 4)), backend, settings)

    memory = {kr.key.batch_size: (kr.metrics.memory_allocated, kr.metrics.memory_reserved) for kr in result}
    assert memory == {4: (3 * MIB, 6 * MIB), 2: (1 * MIB, 2 * MIB), 1: (0, 0)}
    for kr in result:
        m = kr.metrics
        assert 0 < m.warmup_seconds and 0 < m.capture_seconds and m.replay_seconds is not None
        assert m.warmup_seconds + m.capture_seconds <= kr.seconds
    assert any("bs=4" in line and "graph memory +3.0 MiB allocated / +6.0 MiB reserved" in line for line in lines)
    assert sum("replayed in" in line for line in lines) == 3, lines
    # The exported trace of bs=4 carries bs=4's own figures.
    for bs, reserved in ((4, 6 * MIB), (2, 2 * MIB)):
        key_result = result.for_batch_size(bs)
        metadata = load_trace(key_result.trace_path)["graph_capture_metrics"]
        assert metadata["memory_reserved"] == reserved and metadata["capture_seconds"] > 0
        # Every figure but the replay's, which is timed after the trace is written (docs/golden-workflow.md).
        assert set(metadata) == set(key_result.metrics.to_dict()) - {"replay_seconds"}


def test_metrics_survive_the_process_boundary_and_cpu_has_no_memory_figures(tmp_path: Path) -> None:
    result = capture_runner(FakeRunner((1, 2)), EagerBackend("cpu"), CaptureSettings(out_dir=tmp_path))
    for kr in result:
        assert kr.metrics.memory_allocated is None and kr.metrics.memory_reserved is None
        assert kr.metrics.replay_seconds is None  # CPU graphs are not replayed by default
        assert "graph memory" not in kr.metrics.describe()
    back = CaptureResult.from_dict(result.to_dict())
    assert [kr.metrics for kr in back] == [kr.metrics for kr in result]
    full = KeyMetrics(1.0, 0.5, 0.001, 10, 20)
    assert KeyMetrics.from_dict(full.to_dict()) == full


def test_a_gpu_capture_without_launch_events_fails_naming_the_causes_and_keeps_no_result(tmp_path: Path) -> None:
    # On CPU a capture records no launches: exactly what a dead GPU profiler looks like.
    backend = GpuLikeBackend(replay_shows_kernels=True, kernel_evidence_required=True)
    with pytest.raises(CaptureError) as info:
        capture_runner(FakeRunner((1, 2)), backend, CaptureSettings(out_dir=tmp_path))
    error = info.value
    assert isinstance(error.cause, EmptyCaptureError)
    assert error.key == CaptureKey("FakeRunner", 2) and len(error.partial) == 0
    text = str(error)
    for needle in (
        "no kernel launch events",
        "no golden is written",
        "before CUDA",
        "_init_for_cuda_graphs",
        "another test",
        "@pytest.mark.graph_capture_isolated",
        "--graph-capture-isolate=on",
    ):
        assert needle in text, needle
    # The same capture without the guard (CPU semantics) passes.
    capture_runner(FakeRunner((1, 2)), GpuLikeBackend(replay_shows_kernels=True), CaptureSettings(out_dir=tmp_path))


def test_a_gpu_replay_without_kernels_fails_and_names_out_of_range_records(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = capture_module.summarize_profile

    def with_launches(prof: Any, key: CaptureKey, **kwargs: Any) -> Any:
        summary = real(prof, key, **kwargs)
        summary.launches = {"total": 2, "by_api": {"cudaLaunchKernel": 2}}
        return summary

    monkeypatch.setattr(capture_module, "summarize_profile", with_launches)
    backend = GpuLikeBackend(replay_shows_kernels=True, kernel_evidence_required=True)
    with pytest.raises(CaptureError) as info:
        capture_runner(FakeRunner((1, 2)), backend, CaptureSettings(out_dir=tmp_path))
    assert info.value.stage == "replay" and isinstance(info.value.cause, EmptyCaptureError)
    assert "replay of its graph recorded no kernels" in str(info.value)
    assert "out of range" in str(info.value)
    assert CaptureKey("FakeRunner", 2) not in info.value.partial.keys


def test_the_replay_data_loss_check_names_records_dropped_at_the_start_of_a_session() -> None:
    from pytest_graphcapture.summary.model import Summary

    summary = Summary(
        key=CaptureKey("R", 1),
        platform="cuda-sm90",
        kernels=[],
        ops=[],
        launches={"total": 3, "by_api": {"cudaLaunchKernel": 3}},
        complete=False,
        incomplete_reason="no kernels in the capture window",
        environment={},
    )
    replay = [{"name": "gemm", "kind": "kernel"}]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = with_replay(summary, replay)
    assert not result.complete
    assert "out of range" in result.incomplete_reason and "idled" in result.incomplete_reason
    assert any(issubclass(w.category, KernelEvidenceWarning) for w in caught)
