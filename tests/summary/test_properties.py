"""Property-based checks of the summarizer: order-free, JSON round-trip, normalization idempotent."""

from __future__ import annotations

import json
import random

import pytest
from helpers import real_traces_dir
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_graphcapture.keys import CaptureKey
from pytest_graphcapture.summary.files import summarize_trace_file
from pytest_graphcapture.summary.model import summary_from_dict
from pytest_graphcapture.summary.normalize import LEVELS, normalize_kernel_name
from pytest_graphcapture.summary.scan import summarize_events

KEY = CaptureKey("Prop", 8)
OP_NAMES = st.sampled_from(["aten::mm", "aten::add", "aten::copy_", "aten::softmax", "c10d::allreduce_"])
DIMS = st.lists(st.lists(st.integers(0, 64), max_size=3), max_size=3)
KERNELS = st.sampled_from(
    [
        "void at::native::vectorized_elementwise_kernel<4, float>(int)",
        "Cijk_Alik_Bljk_BBS_BH_MT64x64",
        "sm90_xmma_gemm_bf16",
        "triton_poi_fused_add_0",
    ]
)


@st.composite
def capture_events(draw: st.DrawFn) -> list[dict]:
    """A ROCm-style capture: ops and named launches inside Begin/EndCapture, noise outside."""
    events: list[dict] = [
        {"ph": "X", "cat": "cuda_runtime", "name": "hipStreamBeginCapture", "ts": 100, "dur": 1, "args": {}},
        {"ph": "X", "cat": "cuda_runtime", "name": "hipStreamEndCapture", "ts": 10_000, "dur": 1, "args": {}},
    ]
    for index in range(draw(st.integers(0, 25))):
        ts = draw(st.integers(0, 11_000))
        events.append(
            {
                "ph": "X",
                "cat": "cpu_op",
                "name": draw(OP_NAMES),
                "ts": ts,
                "dur": 1,
                "args": {"Input Dims": draw(DIMS), "Input type": ["float"]},
            }
        )
        if draw(st.booleans()):
            events.append(
                {
                    "ph": "X",
                    "cat": "cuda_runtime",
                    "name": "hipLaunchKernel",
                    "ts": ts + 0.5,
                    "dur": 1,
                    "args": {"kernel": draw(KERNELS), "grid": [1, 1, 1], "block": [64, 1, 1], "correlation": index + 1},
                }
            )
    return events


@settings(max_examples=60, deadline=None)
@given(capture_events(), st.randoms(use_true_random=False))
def test_event_order_does_not_change_a_summary(events: list[dict], rng: random.Random) -> None:
    expected = summarize_events(events, key=KEY, platform="rocm-gfx942")
    shuffled = list(events)
    rng.shuffle(shuffled)
    actual = summarize_events(shuffled, key=KEY, platform="rocm-gfx942")
    assert actual.to_dict() == expected.to_dict()


@settings(max_examples=60, deadline=None)
@given(capture_events(), st.sampled_from(LEVELS))
def test_summaries_round_trip_through_json_unchanged(events: list[dict], level: str) -> None:
    summary = summarize_events(
        events, key=KEY, platform="rocm-gfx942", level=level, environment={"torch_version": "2.13.0"}
    )
    text = json.dumps(summary.to_dict(), sort_keys=True)
    again = summary_from_dict(json.loads(text))
    assert again == summary
    assert json.dumps(again.to_dict(), sort_keys=True) == text, "environment included, byte for byte"


@settings(max_examples=200, deadline=None)
@given(st.one_of(KERNELS, st.text(max_size=60)), st.sampled_from(LEVELS))
def test_normalizing_twice_equals_normalizing_once(name: str, level: str) -> None:
    once = normalize_kernel_name(name, level)
    assert normalize_kernel_name(once, level) == once


def test_shuffling_a_real_capture_trace_keeps_its_summary(tmp_path) -> None:
    source = real_traces_dir() / "tracelens_sglang_decode_capture__bs_32_rank0.json.gz"
    if not source.exists():
        pytest.skip(f"real traces not found at {source.parent}; set GRAPH_CAPTURE_REAL_TRACES to their folder")
    from pytest_graphcapture.summary.tracefile import load_trace

    trace = load_trace(source)
    expected = summarize_trace_file(source)
    random.Random(0).shuffle(trace["traceEvents"])
    shuffled = tmp_path / "shuffled_bs_32_rank0.json"
    shuffled.write_text(json.dumps(trace))
    actual = summarize_trace_file(shuffled, key=expected.key)
    assert actual == expected
    assert len(actual.kernels) and sum(k["count"] for k in actual.kernels) == 544
