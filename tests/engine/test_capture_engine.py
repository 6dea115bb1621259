"""The capture engine with the real torch profiler on CPU and the recording fake backend."""

from __future__ import annotations

import gc
from pathlib import Path

import pytest
from fakes import GpuLikeBackend
from helpers import cpu_op_names, load_trace

from pytest_graphcapture.engine.capture import CaptureSettings, capture_runner
from pytest_graphcapture.engine.contract import STEP
from pytest_graphcapture.errors import CaptureError
from pytest_graphcapture.keys import CaptureKey
from pytest_graphcapture.naming import trace_dir
from pytest_graphcapture.testing import CallLog, FakeBackend, FakeRunner, InjectedFault


def per_bs(out: Path, **kwargs) -> CaptureSettings:
    return CaptureSettings(trace="per-bs", summarize=False, out_dir=out, **kwargs)


def files_in(out: Path) -> list[str]:
    folder = trace_dir(out)
    return sorted(p.name for p in folder.iterdir()) if folder.exists() else []


def test_per_bs_traces_are_named_by_key_in_capture_order(tmp_path: Path) -> None:
    log = CallLog()
    result = capture_runner(FakeRunner([1, 4, 2]), FakeBackend(log), per_bs(tmp_path))
    assert [k.batch_size for k in result.keys] == [4, 2, 1], "largest batch size is captured first"
    assert [p.name for p in result.trace_paths] == [
        "FakeRunner_bs_4_rank0.json.gz",
        "FakeRunner_bs_2_rank0.json.gz",
        "FakeRunner_bs_1_rank0.json.gz",
    ]
    assert all(log.count(STEP, key) == 3 for key in result.keys)


def test_each_trace_holds_only_the_capture_forward(tmp_path: Path) -> None:
    result = capture_runner(FakeRunner([2, 8]), FakeBackend(), per_bs(tmp_path))
    for key_result in result:
        trace = load_trace(key_result.trace_path)
        mms = [e for e in trace["traceEvents"] if e.get("name") == "aten::mm"]
        assert len(mms) == 1, "the two warmup forwards must not be recorded"
        assert mms[0]["args"]["Input Dims"] == [[key_result.key.batch_size, 8], [8, 8]]


def test_capture_is_not_wrapped_in_record_function(tmp_path: Path) -> None:
    result = capture_runner(FakeRunner([2]), FakeBackend(), per_bs(tmp_path))
    trace = load_trace(result.trace_paths[0])
    annotations = [e["name"] for e in trace["traceEvents"] if e.get("cat") == "user_annotation"]
    assert all(name.startswith("ProfilerStep#") for name in annotations), annotations


def test_two_variants_per_batch_size_are_named_and_recorded_separately(tmp_path: Path) -> None:
    runner = FakeRunner([1, 2], variants=[None, "relu"])
    result = capture_runner(runner, FakeBackend(), per_bs(tmp_path))
    names = {k: r.trace_path.name for k, r in result.keys.items()}
    assert names == {
        CaptureKey("FakeRunner", 2): "FakeRunner_bs_2_rank0.json.gz",
        CaptureKey("FakeRunner", 2, "relu"): "FakeRunner_bs_2_relu_rank0.json.gz",
        CaptureKey("FakeRunner", 1): "FakeRunner_bs_1_rank0.json.gz",
        CaptureKey("FakeRunner", 1, "relu"): "FakeRunner_bs_1_relu_rank0.json.gz",
    }
    for key, key_result in result.keys.items():
        ops = cpu_op_names(load_trace(key_result.trace_path))
        assert ("aten::relu" in ops) == (key.variant == "relu"), f"{key_result.trace_path.name} holds {ops}"


def test_rank_suffix_comes_from_the_rank(tmp_path: Path) -> None:
    result = capture_runner(FakeRunner([2]), FakeBackend(), per_bs(tmp_path), rank=3)
    assert result.trace_paths[0].name == "FakeRunner_bs_2_rank3.json.gz"


def test_directory_is_created_only_when_exporting(tmp_path: Path) -> None:
    capture_runner(FakeRunner([1, 2]), FakeBackend(), CaptureSettings(trace="off", summarize=False, out_dir=tmp_path))
    assert not trace_dir(tmp_path).exists()
    capture_runner(FakeRunner([1, 2]), FakeBackend(), per_bs(tmp_path))
    assert files_in(tmp_path) == ["FakeRunner_bs_1_rank0.json.gz", "FakeRunner_bs_2_rank0.json.gz"]


def test_single_mode_writes_one_trace_for_the_whole_capture_phase(tmp_path: Path) -> None:
    result = capture_runner(
        FakeRunner([1, 2]), FakeBackend(), CaptureSettings(trace="single", summarize=False, out_dir=tmp_path)
    )
    assert files_in(tmp_path) == ["cuda_graph_capture-FakeRunner-TP-0.json.gz"]
    assert result.single_trace_path == trace_dir(tmp_path) / "cuda_graph_capture-FakeRunner-TP-0.json.gz"
    assert result.trace_paths == []
    # Six warmups and two captures, all in the one trace.
    assert cpu_op_names(load_trace(result.single_trace_path)).count("aten::mm") == 6


@pytest.mark.parametrize("stage", ["warmup 1", "warmup 2", "capture", "step"])
def test_a_failing_key_leaves_no_file_and_no_mislabeled_file(tmp_path: Path, stage: str) -> None:
    failing = CaptureKey("FakeRunner", 2)
    backend = GpuLikeBackend(fail_stage=stage, fail_key=failing)
    with pytest.raises(CaptureError) as info:
        capture_runner(FakeRunner([1, 2, 4]), backend, per_bs(tmp_path))
    error = info.value
    assert error.key == failing
    assert error.stage == ("trace export" if stage == "step" else stage)
    assert "bs=2" in str(error) and isinstance(error.cause, InjectedFault)
    # bs=4 was captured before and keeps its correctly named trace; nothing else exists.
    assert list(error.partial.keys) == [CaptureKey("FakeRunner", 4)]
    assert files_in(tmp_path) == ["FakeRunner_bs_4_rank0.json.gz"]
    assert cpu_op_names(load_trace(trace_dir(tmp_path) / "FakeRunner_bs_4_rank0.json.gz")).count("aten::mm") == 1
    # The profiler was released: a new profiling session in this process works.
    again = tmp_path / "again"
    result = capture_runner(FakeRunner([1, 2, 4]), FakeBackend(), per_bs(again))
    assert files_in(again) == [
        "FakeRunner_bs_1_rank0.json.gz",
        "FakeRunner_bs_2_rank0.json.gz",
        "FakeRunner_bs_4_rank0.json.gz",
    ]
    assert len(result) == 3


def test_keyboard_interrupt_propagates_and_leaves_no_partial_file(tmp_path: Path) -> None:
    backend = GpuLikeBackend(fail_stage="capture", fail_key=CaptureKey("FakeRunner", 1), fault=KeyboardInterrupt)
    with pytest.raises(KeyboardInterrupt):
        capture_runner(FakeRunner([1, 2]), backend, per_bs(tmp_path))
    assert files_in(tmp_path) == ["FakeRunner_bs_2_rank0.json.gz"]
    gc.collect()
    result = capture_runner(FakeRunner([1]), FakeBackend(), per_bs(tmp_path / "after"))
    assert result.trace_paths[0].exists()


def test_a_failing_export_names_the_key_and_leaves_no_temp_file(tmp_path: Path) -> None:
    blocker = tmp_path / "graph_capture_profile"
    blocker.write_text("a file where the trace directory should be")
    with pytest.raises(CaptureError) as info:
        capture_runner(FakeRunner([1, 2]), FakeBackend(), per_bs(tmp_path))
    assert info.value.key == CaptureKey("FakeRunner", 2)
    assert info.value.stage == "trace export"
    assert blocker.read_text() == "a file where the trace directory should be"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["graph_capture_profile"]


def test_runner_and_variant_names_cannot_leave_the_trace_directory(tmp_path: Path) -> None:
    runner = FakeRunner([1], variants=["../../escape", "a/b\\c"], name="../../../evil\x00runner")
    result = capture_runner(runner, FakeBackend(), per_bs(tmp_path / "out"))
    folder = trace_dir(tmp_path / "out").resolve()
    paths = [p.resolve() for p in result.trace_paths]
    assert len(set(paths)) == 2
    assert all(p.parent == folder for p in paths), paths
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]
