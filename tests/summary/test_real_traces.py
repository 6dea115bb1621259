"""Summaries of real Kineto traces recorded on MI300X, H100 and A100 (see SOURCES.md there).

The traces are read in place from GRAPH_CAPTURE_REAL_TRACES (default
``<repo>/../shared/testdata/real_traces``).  Expected values are computed here by a
deliberately naive pass over the raw events (or taken from SOURCES.md), never from
the summarizer itself.
"""

from __future__ import annotations

import warnings
from collections import Counter
from pathlib import Path

import pytest
from helpers import real_trace, real_traces_dir

from pytest_graphcapture.keys import CaptureKey
from pytest_graphcapture.summary.files import summarize_trace_file
from pytest_graphcapture.summary.normalize import normalize_kernel_name
from pytest_graphcapture.summary.platform import platform_from_trace
from pytest_graphcapture.summary.replay import KernelEvidenceWarning, with_replay
from pytest_graphcapture.summary.scan import replay_kernels_from_events, summarize_events
from pytest_graphcapture.summary.tracefile import load_trace as safe_load_trace

SGLANG_CAPTURE = "tracelens_sglang_decode_capture__bs_32_rank0.json.gz"
SGLANG_REPLAY = "tracelens_sglang_decode__sglang_Qwen3-8B_decode.json.gz"
H100 = "tracelens_h100__Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"
HTA_A100 = "hta_negative_queue_length_values_check__rank0.json.gz"


def _path(name: str) -> Path:
    path = real_traces_dir() / name
    if not path.is_file():
        pytest.skip(
            f"real trace {name} not found in {real_traces_dir()}; set GRAPH_CAPTURE_REAL_TRACES to the "
            "folder holding the shared real_traces (see tests/helpers.py)"
        )
    return path


def _events(name: str) -> list:
    """The trace's events, read once per process (shared: no test changes them)."""
    return real_trace(_path(name))["traceEvents"]


def _naive_capture_kernels(events: list) -> Counter:
    """Kernel names of hip launches between hipStreamBeginCapture and hipStreamEndCapture."""
    begin = next(e["ts"] for e in events if e.get("name") == "hipStreamBeginCapture")
    end = next(e["ts"] for e in events if e.get("name") == "hipStreamEndCapture")
    return Counter(
        e["args"]["kernel"]
        for e in events
        if e.get("cat") == "cuda_runtime"
        and e["name"] in ("hipLaunchKernel", "hipExtModuleLaunchKernel")
        and begin <= e["ts"] <= end
    )


def _naive_graph_kernels(events: list, launch: str) -> Counter:
    corr = {e["args"]["correlation"] for e in events if e.get("cat") == "cuda_runtime" and e["name"] == launch}
    return Counter(
        "Memset" if e["cat"] == "gpu_memset" else e["name"]  # every memset form is one entry
        for e in events
        if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset") and e.get("args", {}).get("correlation") in corr
    )


# ---- AMD MI300X: sglang capture vs. replay


def test_sglang_capture_window_matches_graph_replay() -> None:
    capture_events, replay_events = _events(SGLANG_CAPTURE), _events(SGLANG_REPLAY)
    expected_capture = _naive_capture_kernels(capture_events)
    expected_replay = _naive_graph_kernels(replay_events, "hipGraphLaunch")
    assert sum(expected_replay.values()) == 544  # SOURCES.md: hipGraphLaunch 544 (one launch)
    assert expected_capture == expected_replay

    key = CaptureKey("sglang", 32)
    capture = summarize_events(capture_events, key=key, platform="rocm-gfx942", level="exact")
    by_name: Counter = Counter()
    for k in capture.kernels:
        by_name[k["name"]] += k["count"]
    expected_exact: Counter = Counter()
    for name, count in expected_capture.items():
        expected_exact[normalize_kernel_name(name, "exact")] += count
    assert by_name == expected_exact
    assert capture.launches["total"] == 544 and capture.complete

    replay = replay_kernels_from_events(replay_events)
    assert Counter(k["name"] for k in replay) == expected_replay  # fill kernels outside the graph excluded
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        checked = with_replay(capture, replay)
    assert checked.complete and checked.incomplete_reason is None
    assert checked.kernel_count() == 544


def test_sglang_summary_from_files_with_replay() -> None:
    summary = summarize_trace_file(_path(SGLANG_CAPTURE), replay_path=_path(SGLANG_REPLAY))
    assert summary.key == CaptureKey("tracelens_sglang_decode_capture_", 32, None, 0)
    assert summary.platform == "rocm-gfx942" and summary.complete
    assert summary.kernel_count() == 544
    assert summary.launches == {"total": 544, "by_api": {"hipExtModuleLaunchKernel": 145, "hipLaunchKernel": 399}}
    events = _events(SGLANG_CAPTURE)
    begin = next(e["ts"] for e in events if e.get("name") == "hipStreamBeginCapture")
    end = next(e["ts"] for e in events if e.get("name") == "hipStreamEndCapture")
    assert summary.op_count() == sum(1 for e in events if e.get("cat") == "cpu_op" and begin <= e["ts"] <= end)
    assert all("grid" in k and "block" in k for k in summary.kernels)  # ROCm launch args carry them
    assert summary.environment["device_name"] == "AMD Instinct MI300X"
    # byte-stable across runs
    assert (
        summarize_trace_file(_path(SGLANG_CAPTURE)).to_json() == summarize_trace_file(_path(SGLANG_CAPTURE)).to_json()
    )


def test_dropped_replay_record_flips_complete_with_warning() -> None:
    capture = summarize_trace_file(_path(SGLANG_CAPTURE))
    replay_events = _events(SGLANG_REPLAY)
    graph_corr = {e["args"]["correlation"] for e in replay_events if e.get("name") == "hipGraphLaunch"}
    victim = next(
        i
        for i, e in enumerate(replay_events)
        if e.get("cat") == "kernel" and e["args"].get("correlation") in graph_corr
    )
    lossy = replay_events[:victim] + replay_events[victim + 1 :]
    with pytest.warns(KernelEvidenceWarning, match=r"tracelens_sglang_decode_capture_\[bs=32, rank=0\]"):
        result = with_replay(capture, replay_kernels_from_events(lossy))
    assert result.complete is False
    assert "544 launches but the replay ran 543" in result.incomplete_reason
    assert "missing from the replay" in result.incomplete_reason


def test_sglang_replay_trace_eager_summary() -> None:
    summary = summarize_trace_file(_path(SGLANG_REPLAY))
    assert summary.key == CaptureKey("tracelens_sglang_decode__sglang_Qwen3-8B_decode", 32)  # from step[DECODE bs=32]
    events = _events(SGLANG_REPLAY)
    executed = sum(1 for e in events if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"))
    assert summary.kernel_count() == executed == 558
    assert summary.op_count() == 61


# ---- NVIDIA


def test_h100_summary() -> None:
    path = _path(H100)
    summary = summarize_trace_file(path, key=CaptureKey("qwen", 16))
    events = _events(H100)
    kernels = [e for e in events if e.get("cat") == "kernel"]
    assert summary.platform == "cuda-sm90"
    assert sum(k["count"] for k in summary.kernels if k["kind"] == "kernel") == len(kernels) == 1465
    assert all("grid" in k and "block" in k for k in summary.kernels if k["kind"] == "kernel")
    assert sum(k["count"] for k in summary.kernels if k["kind"] == "memset") == 241
    ops = [e for e in events if e.get("cat") == "cpu_op"]
    assert summary.op_count() == len(ops) == 4186
    assert all(o["input_dims"] for o in summary.ops)  # all H100 cpu_ops carry Input Dims
    embedding = [o for o in summary.ops if o["name"] == "aten::embedding"]
    assert embedding and embedding[0]["input_dims"][:2] == [[151936, 1024], [16, 559]]
    assert summary.launches["by_api"]["cudaLaunchKernel"] == 860
    assert summary.launches["by_api"]["cudaLaunchKernelExC"] == 168
    assert summary.launches["by_api"]["cuLaunchKernel"] == 1
    assert summary.complete
    assert replay_kernels_from_events(events) == []  # no CUDA graphs in this trace


def test_hta_a100_graph_launch_attribution() -> None:
    events = _events(HTA_A100)
    replay = replay_kernels_from_events(events)
    expected = _naive_graph_kernels(events, "cudaGraphLaunch")
    assert Counter(k["name"] for k in replay) == expected
    assert sum(1 for k in replay if k["kind"] == "kernel") == 135  # SOURCES.md: kernel by cudaGraphLaunch 135
    assert all("grid" in k and "block" in k for k in replay if k["kind"] == "kernel")

    summary = summarize_trace_file(_path(HTA_A100), key=CaptureKey("dlrm", 1))
    assert summary.platform == "cuda-sm80"
    assert summary.op_count() == 25185
    ops_with_dims = Counter(
        (e["name"], str(e["args"]["Input Dims"]))
        for e in events
        if e.get("cat") == "cpu_op" and "Input Dims" in e.get("args", {})
    )
    assert sum(ops_with_dims.values()) == 24015
    for o in summary.ops:
        if o["input_dims"]:
            assert ops_with_dims[(o["name"], str(o["input_dims"]))] >= o["count"]
    assert summary.launches["by_api"]["cudaLaunchKernel"] == 5240
    assert summary.environment["distributed"]["world_size"] == 16


@pytest.mark.parametrize(
    "name, platform",
    [(SGLANG_CAPTURE, "rocm-gfx942"), (SGLANG_REPLAY, "rocm-gfx942"), (H100, "cuda-sm90"), (HTA_A100, "cuda-sm80")],
)
def test_platform_keys(name: str, platform: str) -> None:
    assert platform_from_trace(safe_load_trace(_path(name))) == platform
