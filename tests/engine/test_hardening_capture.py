"""Faults injected at each point of one key's capture: nothing lost, nothing mislabeled.

For every stage (warmup 1, warmup 2, capture, the trace-ready step, replay) and for
both an ordinary error and Ctrl-C: the other keys keep correctly named results and
files, no partial or temp file remains, the profiler is released (a new profiling
session in the same process works) and the error names the key.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from fakes import GpuLikeBackend
from helpers import cpu_op_names, load_trace

import pytest_graphcapture.engine.capture as summary_module
from pytest_graphcapture.engine.capture import CaptureSettings, capture_runner
from pytest_graphcapture.errors import CaptureError
from pytest_graphcapture.keys import CaptureKey
from pytest_graphcapture.naming import TRACE_SUBDIR, trace_dir, trace_file_name
from pytest_graphcapture.testing import FakeBackend, FakeRunner

SIZES = [1, 2, 4]
FAILING = CaptureKey("FakeRunner", 2)
STAGES = ["warmup 1", "warmup 2", "capture", "step", "replay"]


def settings(out: Path) -> CaptureSettings:
    return CaptureSettings(trace="per-bs", summarize=True, out_dir=out)


def all_files(root: Path) -> list[str]:
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())


def assert_profiler_reusable(tmp_path: Path) -> None:
    result = capture_runner(FakeRunner(SIZES), FakeBackend(), settings(tmp_path / "again"))
    assert [p.name for p in result.trace_paths] == [f"FakeRunner_bs_{bs}_rank0.json.gz" for bs in (4, 2, 1)]
    assert all(r.summary is not None for r in result)


@pytest.mark.parametrize("stage", STAGES)
def test_an_error_at_each_stage_keeps_the_other_keys_intact(tmp_path: Path, stage: str) -> None:
    backend = GpuLikeBackend(fail_stage=stage, fail_key=FAILING, replay_shows_kernels=True)
    with pytest.raises(CaptureError) as info:
        capture_runner(FakeRunner(SIZES), backend, settings(tmp_path))
    error = info.value
    assert error.key == FAILING and "bs=2" in str(error)
    kept = error.partial.keys
    files = all_files(tmp_path)
    if stage == "replay":
        # Every capture finished (all traces written, correctly named); the key whose replay failed has no result.
        assert sorted(k.batch_size for k in kept) == [1, 4]
        assert files == [f"graph_capture_profile/FakeRunner_bs_{bs}_rank0.json.gz" for bs in (1, 2, 4)]
    else:
        assert list(kept) == [CaptureKey("FakeRunner", 4)]
        assert files == ["graph_capture_profile/FakeRunner_bs_4_rank0.json.gz"]
    for key, key_result in kept.items():
        assert key_result.summary.key == key
        assert key_result.trace_path.name == trace_file_name(key)
        mm = [e for e in load_trace(key_result.trace_path)["traceEvents"] if e.get("name") == "aten::mm"]
        assert mm[0]["args"]["Input Dims"][0] == [key.batch_size, 8], "a trace holds its own key's capture"
    assert_profiler_reusable(tmp_path)


@pytest.mark.parametrize("stage", STAGES)
def test_ctrl_c_at_each_stage_propagates_and_leaves_no_partial_file(tmp_path: Path, stage: str) -> None:
    backend = GpuLikeBackend(fail_stage=stage, fail_key=FAILING, fault=KeyboardInterrupt, replay_shows_kernels=True)
    with pytest.raises(KeyboardInterrupt):
        capture_runner(FakeRunner(SIZES), backend, settings(tmp_path))
    files = all_files(tmp_path)
    assert not [f for f in files if "partial" in f or f.split("/")[-1].startswith(".")], files
    expected = (1, 2, 4) if stage == "replay" else (4,)
    assert files == sorted(f"graph_capture_profile/FakeRunner_bs_{bs}_rank0.json.gz" for bs in expected)
    assert_profiler_reusable(tmp_path)


def test_a_failing_summarizer_in_the_trace_ready_callback(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = summary_module.summarize_profile

    def summarize(prof, key, **kwargs):
        if key == FAILING:
            raise RuntimeError("summarizer broke")
        return real(prof, key, **kwargs)

    monkeypatch.setattr(summary_module, "summarize_profile", summarize)
    with pytest.raises(CaptureError) as info:
        capture_runner(FakeRunner(SIZES), FakeBackend(), settings(tmp_path))
    assert info.value.key == FAILING and info.value.stage == "trace export"
    assert all_files(tmp_path) == ["graph_capture_profile/FakeRunner_bs_4_rank0.json.gz"]
    monkeypatch.undo()
    assert_profiler_reusable(tmp_path)


def test_a_failure_inside_a_pytest_run_names_the_key(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("""
        from pytest_graphcapture.keys import CaptureKey
        from pytest_graphcapture.testing import FakeBackend, FakeRunner

        def test_capture(graph_capture):
            backend = FakeBackend()
            backend.inject_fault("capture", CaptureKey("FakeRunner", 2))
            graph_capture(FakeRunner([1, 2, 4]), backend=backend)
    """)
    result = pytester.runpytest("--graph-capture-trace", "--graph-capture-dir=out")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*CaptureError: capturing FakeRunner[[]bs=2, rank=0[]] failed during capture*"])
    written = sorted(p.relative_to(pytester.path / "out").as_posix() for p in (pytester.path / "out").rglob("*.gz"))
    assert written == [
        f"{TRACE_SUBDIR}/test_a_failure_inside_a_pytest_run_names_the_key.py/test_capture/FakeRunner_bs_4_rank0.json.gz"
    ]


def test_trace_of_the_capture_before_a_failure_holds_only_its_own_forward(tmp_path: Path) -> None:
    backend = GpuLikeBackend(fail_stage="warmup 2", fail_key=FAILING)
    with pytest.raises(CaptureError):
        capture_runner(FakeRunner(SIZES), backend, settings(tmp_path))
    ops = cpu_op_names(load_trace(trace_dir(tmp_path) / "FakeRunner_bs_4_rank0.json.gz"))
    assert ops.count("aten::mm") == 1
