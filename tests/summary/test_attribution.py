"""Each kernel names the op that launched it: real traces, threads, replays, goldens and the diff."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from helpers import load_trace, real_traces_dir

from pytest_graphcapture.golden import store
from pytest_graphcapture.golden.diff import compare
from pytest_graphcapture.keys import CaptureKey
from pytest_graphcapture.summary.files import summarize_trace_file
from pytest_graphcapture.summary.normalize import normalize_kernel_name
from pytest_graphcapture.summary.replay import with_replay
from pytest_graphcapture.summary.scan import REPLAY_UNATTRIBUTED, attributed_share, summarize_events

SGLANG_CAPTURE = "tracelens_sglang_decode_capture__bs_32_rank0.json.gz"
KEY = CaptureKey("decode", 32)
MM = "aten::mm [[32,4096],[4096,4096]]"


def _real(name: str) -> Path:
    path = real_traces_dir() / name
    if not path.is_file():
        pytest.skip(f"real trace {name} not found in {real_traces_dir()}; set GRAPH_CAPTURE_REAL_TRACES")
    return path


def _naive_attribution(events: list) -> Counter:
    """(kernel, op name, dims) per launch in the capture window, by brute force over every op."""
    begin = next(e["ts"] for e in events if e.get("name") == "hipStreamBeginCapture")
    end = next(e["ts"] for e in events if e.get("name") == "hipStreamEndCapture")
    ops = [e for e in events if e.get("cat") == "cpu_op"]
    found: Counter = Counter()
    for e in events:
        if e.get("cat") == "cuda_runtime" and "kernel" in e.get("args", {}) and begin <= e["ts"] <= end:
            around = [o for o in ops if o["tid"] == e["tid"] and o["ts"] <= e["ts"] <= o["ts"] + o["dur"]]
            inner = max(around, key=lambda o: (o["ts"], -o["dur"]), default=None)
            op = (inner["name"], json.dumps(inner["args"]["Input Dims"])) if inner else None
            found[(normalize_kernel_name(e["args"]["kernel"], "exact"), op)] += 1
    return found


def test_sglang_capture_names_the_launching_op_of_every_kernel() -> None:
    path = _real(SGLANG_CAPTURE)
    summary = summarize_trace_file(path, key=KEY, level="exact")
    named, total = attributed_share(summary.kernels)
    assert total == 544 and named / total >= 0.95  # all 544 here
    ours = Counter()
    for k in summary.kernels:
        op = (k["op"]["name"], json.dumps(k["op"]["input_dims"])) if k.get("op") else None
        ours[(k["name"], op)] += k["count"]
    assert ours == _naive_attribution(load_trace(path)["traceEvents"])
    gemm = [k for k in summary.kernels if k.get("op", {}).get("name") == "aten::mm"]
    assert {json.dumps(k["op"]["input_dims"]) for k in gemm} >= {"[[32, 4096], [4096, 4096]]"}
    assert all(k["name"].startswith("Cijk_") for k in gemm)  # hipBLASLt GEMMs under aten::mm


@pytest.mark.parametrize(
    ("name", "share"),
    [
        ("tracelens_h100__Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz", (1198, 1707)),
        ("hta_negative_queue_length_values_check__rank0.json.gz", (6440, 7747)),
    ],
)
def test_eager_kernels_are_linked_to_their_op_by_correlation(name: str, share: tuple) -> None:
    # Unattributed ones were launched before the profiler's CPU window (no runtime event) or outside any op.
    summary = summarize_trace_file(_real(name), key=KEY)
    assert attributed_share(summary.kernels) == share


def _op(name: str, ts: float, dur: float, tid: int, dims: list) -> dict:
    return {"ph": "X", "cat": "cpu_op", "name": name, "ts": ts, "dur": dur, "tid": tid, "args": {"Input Dims": dims}}


def _launch(ts: float, tid: int, kernel: str) -> dict:
    args = {"kernel": kernel, "correlation": int(ts * 10)}
    return {"ph": "X", "cat": "cuda_runtime", "name": "hipLaunchKernel", "ts": ts, "dur": 0.1, "tid": tid, "args": args}


def _window(*events: dict) -> list:
    begin = {"ph": "X", "cat": "cuda_runtime", "name": "hipStreamBeginCapture", "ts": 0, "dur": 0.1, "tid": 1}
    end = {"ph": "X", "cat": "cuda_runtime", "name": "hipStreamEndCapture", "ts": 99, "dur": 0.1, "tid": 1}
    return [begin, *events, end]


def test_innermost_op_on_the_launching_thread() -> None:
    events = _window(
        _op("aten::linear", 1, 10, 1, [[2, 8]]),
        _op("aten::addmm", 2, 5, 1, [[2, 8], [8, 8]]),
        _launch(3, 1, "gemm"),  # inside addmm inside linear: addmm launched it
        _launch(9, 1, "bias"),  # addmm ended: linear
        _op("aten::mul", 2, 5, 2, [[4]]),  # another thread's op around the same time
        _launch(12, 1, "stray"),  # outside every op of thread 1
    )
    kernels = {k["name"]: k.get("op") for k in summarize_events(events, key=KEY, platform="rocm-gfx942").kernels}
    assert kernels == {
        "gemm": {"name": "aten::addmm", "input_dims": [[2, 8], [8, 8]]},
        "bias": {"name": "aten::linear", "input_dims": [[2, 8]]},
        "stray": None,
    }


def test_nvidia_replay_kernels_are_unattributed_and_the_summary_says_why() -> None:
    capture = summarize_events(
        [
            {"ph": "X", "cat": "cuda_runtime", "name": "cudaStreamBeginCapture", "ts": 0, "dur": 1, "tid": 1},
            _op("aten::mm", 1, 3, 1, [[2, 2]]),
            {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": 2, "dur": 1, "tid": 1},
            {"ph": "X", "cat": "cuda_runtime", "name": "cudaStreamEndCapture", "ts": 5, "dur": 1, "tid": 1},
        ],
        key=KEY,
        platform="cuda-sm90",
    )
    replayed = with_replay(capture, [{"name": "gemm", "kind": "kernel"}])
    assert replayed.complete and replayed.kernels == [{"name": "gemm", "kind": "kernel", "count": 1}]
    assert replayed.unattributed == REPLAY_UNATTRIBUTED
    assert replayed.to_dict()["unattributed"] == REPLAY_UNATTRIBUTED


def _swapped_copy(tmp_path: Path, new_kernel: str) -> Path:
    """A copy of the sglang capture whose aten::mm [[32,4096],[4096,4096]] launches run ``new_kernel``."""
    trace = load_trace(_real(SGLANG_CAPTURE))
    old = next(
        k["name"]
        for k in summarize_events(trace["traceEvents"], key=KEY, platform="rocm-gfx942", level="exact").kernels
        if k.get("op") == {"name": "aten::mm", "input_dims": [[32, 4096], [4096, 4096]]}
    )
    for event in trace["traceEvents"]:
        if event.get("args", {}).get("kernel") == old:
            event["args"]["kernel"] = new_kernel
    path = tmp_path / "decode_bs_32_rank0.json"
    path.write_text(json.dumps(trace))
    return path


def test_kernel_swap_reads_as_one_line_per_op(tmp_path: Path) -> None:
    before = summarize_trace_file(_real(SGLANG_CAPTURE), key=KEY)
    after = summarize_trace_file(_swapped_copy(tmp_path, "Cijk_Alik_Bljk_NEW_MT32x32x128"), key=KEY)
    diff = compare(before, after)
    (change,) = diff.changes
    text = change.render(None)
    assert text.startswith(f"~ {MM}: Cijk_Alik_Bljk_BBS_BH_Bias_HA_S_SAV_UserArgs_MT16x32x512_")
    assert text.endswith(" → Cijk_Alik_Bljk_NEW_MT32x32x128 grid=[65536,1,1] block=[256,1,1] (×36)")
    assert change.section == "kernels" and change.kind == "changed"
    short = change.render()  # failure messages shorten long kernel names, never the op or the count
    assert short.startswith(f"~ {MM}: Cijk_") and short.endswith(
        " → Cijk_Alik_Bljk_NEW_MT32x32x128 grid=[65536,1,1] block=[256,1,1] (×36)"
    )
    assert "…" in short and len(short) < len(text)


def test_schema_1_golden_without_ops_still_passes_and_is_rewritten_with_them(tmp_path: Path) -> None:
    capture = summarize_trace_file(_real(SGLANG_CAPTURE), key=KEY)
    old = capture.to_dict()
    old["schema_version"] = 1
    del old["unattributed"]
    for k in old["kernels"]:
        del k["op"]
    path = tmp_path / "decode_bs_32.json"
    path.write_text(json.dumps(old))
    golden = store.read_golden(path)
    assert golden.schema_version == 2 and not any(k.get("op") for k in golden.kernels)
    assert compare(golden, capture).ok  # no attribution on one side: kernels compared alone
    assert store.write_golden(path, capture.to_dict()) == "updated"
    assert all(k.get("op") for k in store.read_golden(path).kernels)
