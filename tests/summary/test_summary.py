"""Summary building from event dicts, the data-loss check, and the Summary contract."""

from __future__ import annotations

import gzip
import json
import random
import warnings
from pathlib import Path

import pytest

from pytest_graphcapture.errors import TraceFormatError, UsageError
from pytest_graphcapture.keys import CaptureKey
from pytest_graphcapture.naming import key_from_trace_name
from pytest_graphcapture.summary.files import summarize_trace_file
from pytest_graphcapture.summary.model import SCHEMA_VERSION, Summary, summary_from_dict
from pytest_graphcapture.summary.replay import KernelEvidenceWarning, with_replay
from pytest_graphcapture.summary.scan import replay_kernels_from_events, summarize_events

KEY = CaptureKey("decode", 8)
GEMM = "void gemm_kernel<float, 128>(float*, float const*)"
NORM = "void rms_norm_kernel<c10::BFloat16>(c10::BFloat16*)"


# ---- tiny event builders (Chrome trace dicts as Kineto writes them)


def op(name: str, ts: float, dims=None, types=None) -> dict:
    args = {"External id": int(ts)}
    if dims is not None:
        args["Input Dims"] = dims
    if types is not None:
        args["Input type"] = types
    return {"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": 1, "args": args}


def rt(name: str, ts: float, corr: int, **args) -> dict:
    return {
        "ph": "X",
        "cat": "cuda_runtime",
        "name": name,
        "pid": 1,
        "tid": 1,
        "ts": ts,
        "dur": 1,
        "args": {"correlation": corr, **args},
    }


def gpu(name: str, ts: float, corr: int, cat: str = "kernel", **args) -> dict:
    return {
        "ph": "X",
        "cat": cat,
        "name": name,
        "pid": 0,
        "tid": 7,
        "ts": ts,
        "dur": 1,
        "args": {"correlation": corr, "stream": 7, **args},
    }


def rocm_capture_events() -> list:
    """A ROCm-style capture: fill kernel before, 3 named launches + memcpy inside the window."""
    return [
        op("aten::fill_", 1, [[1], []], ["long int", "Scalar"]),
        rt("hipLaunchKernel", 2, 10, kernel="fill_kernel", grid=[1, 1, 1], block=[256, 1, 1]),
        gpu("fill_kernel", 3, 10, grid=[1, 1, 1], block=[256, 1, 1]),
        rt("hipStreamBeginCapture", 5, 11),
        op("aten::mm", 6, [[8, 64], [64, 64]], ["c10::BFloat16", "c10::BFloat16"]),
        rt("hipExtModuleLaunchKernel", 7, 12, kernel=GEMM, grid=[4, 1, 1], block=[256, 1, 1]),
        op("aten::mm", 8, [[8, 64], [64, 64]], ["c10::BFloat16", "c10::BFloat16"]),
        rt("hipExtModuleLaunchKernel", 9, 13, kernel=GEMM, grid=[4, 1, 1], block=[256, 1, 1]),
        op("aten::rms_norm", 10, [[8, 64]], ["c10::BFloat16"]),
        rt("hipLaunchKernel", 11, 14, kernel=NORM, grid=[8, 1, 1], block=[64, 1, 1]),
        rt("hipMemcpyAsync", 12, 15),
        rt("hipStreamGetCaptureInfo", 12.5, 16),
        rt("hipStreamEndCapture", 13, 17),
        op("aten::sum", 14, [[8]], ["float"]),
        rt("hipLaunchKernel", 15, 18, kernel="reduce_kernel"),
    ]


def replay_events(names, *, fill_after: bool = True) -> list:
    """A replay: one graph launch whose nodes carry its correlation, plus an unrelated fill kernel."""
    events = [rt("hipGraphLaunch", 100, 900)]
    for i, (kind, name) in enumerate(names):
        cat = {"kernel": "kernel", "memcpy": "gpu_memcpy", "memset": "gpu_memset"}[kind]
        events.append(gpu(name, 101 + i, 900, cat=cat))
    if fill_after:
        events += [rt("hipLaunchKernel", 99, 901, kernel="fill_kernel"), gpu("fill_kernel", 98, 901)]
    return events


ROCM_REPLAY = [("kernel", GEMM), ("kernel", GEMM), ("kernel", NORM), ("memcpy", "Memcpy DtoD (Device -> Device)")]


# ---- eager (no capture calls)


def test_eager_cpu_counts_every_op_in_the_trace() -> None:
    events = [
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#2", "ts": 0, "dur": 100},
        op("aten::linear", 1, [[3, 8], [16, 8], [16]], ["float", "float", "float"]),
        op("aten::addmm", 2, [[16], [3, 8], [8, 16], [], []], ["float", "float", "float", "Scalar", "Scalar"]),
        op("aten::linear", 3, [[3, 8], [16, 8], [16]], ["float", "float", "float"]),
        op("aten::relu", 4, [[3, 16]], ["float"]),
        op("aten::relu", 5, [[3, 32]], ["float"]),
        op("aten::empty", 6),  # record_shapes off for this one: no Input Dims
    ]
    summary = summarize_events(events, key=KEY, platform="cpu")
    assert summary.kernels == [] and summary.complete
    assert summary.launches == {"total": 0, "by_api": {}}
    assert [(o["name"], o["input_dims"], o["count"]) for o in summary.ops] == [
        ("aten::addmm", [[16], [3, 8], [8, 16], [], []], 1),
        ("aten::empty", [], 1),
        ("aten::linear", [[3, 8], [16, 8], [16]], 2),
        ("aten::relu", [[3, 16]], 1),
        ("aten::relu", [[3, 32]], 1),
    ]
    assert summary.ops[2]["input_types"] == ["float", "float", "float"]


def test_eager_gpu_uses_executed_kernels_with_grid_and_block() -> None:
    events = [
        rt("cudaLaunchKernel", 1, 1),
        gpu(GEMM, 2, 1, grid=[4, 1, 1], block=[128, 1, 1]),
        rt("cudaLaunchKernel", 3, 2),
        gpu(GEMM, 4, 2, grid=[4, 1, 1], block=[128, 1, 1]),
        rt("cudaMemsetAsync", 5, 3),
        gpu("Memset (Device)", 6, 3, cat="gpu_memset"),
        gpu("kernel_without_config", 7, 4),
    ]
    summary = summarize_events(events, key=KEY, platform="cuda-sm90")
    assert summary.kernels == [
        {"name": "Memset", "kind": "memset", "count": 1},
        {"name": "kernel_without_config", "kind": "kernel", "count": 1},
        {"name": "void gemm_kernel<float, 128>", "kind": "kernel", "count": 2, "grid": [4, 1, 1], "block": [128, 1, 1]},
    ]
    assert summary.launches == {"total": 3, "by_api": {"cudaLaunchKernel": 2, "cudaMemsetAsync": 1}}


# ---- capture window


def test_rocm_capture_window() -> None:
    summary = summarize_events(rocm_capture_events(), key=KEY, platform="rocm-gfx942")
    assert summary.complete and summary.incomplete_reason is None
    assert summary.launches == {
        "total": 4,
        "by_api": {"hipExtModuleLaunchKernel": 2, "hipLaunchKernel": 1, "hipMemcpyAsync": 1},
    }
    assert summary.kernels == [
        {"name": "hipMemcpyAsync", "kind": "memcpy", "count": 1},
        {
            "name": "void gemm_kernel<float, 128>",
            "kind": "kernel",
            "count": 2,
            "grid": [4, 1, 1],
            "block": [256, 1, 1],
            "op": {"name": "aten::mm", "input_dims": [[8, 64], [64, 64]]},
        },
        {
            "name": "void rms_norm_kernel<c10::BFloat16>",
            "kind": "kernel",
            "count": 1,
            "grid": [8, 1, 1],
            "block": [64, 1, 1],
            "op": {"name": "aten::rms_norm", "input_dims": [[8, 64]]},
        },
    ]
    # ops before BeginCapture / after EndCapture are not part of the graph
    assert [(o["name"], o["count"]) for o in summary.ops] == [("aten::mm", 2), ("aten::rms_norm", 1)]


def test_nvidia_capture_needs_replay_and_driver_names_count() -> None:
    events = [
        rt("cudaStreamBeginCapture_v10000", 1, 1),
        rt("cudaLaunchKernel_v7000", 2, 2),
        {"ph": "X", "cat": "cuda_driver", "name": "cuLaunchKernel", "ts": 3, "dur": 1, "args": {"correlation": 3}},
        rt("cudaLaunchKernelExC_v11060", 4, 4),
        rt("cudaMemsetAsync_ptsz", 5, 5),
        rt("cudaStreamEndCapture_v10000", 6, 6),
        rt("cudaLaunchKernel", 7, 7),
        gpu("after_capture", 8, 7),
    ]
    summary = summarize_events(events, key=KEY, platform="cuda-sm90")
    assert summary.launches == {
        "total": 4,
        "by_api": {"cuLaunchKernel": 1, "cudaLaunchKernel": 1, "cudaLaunchKernelExC": 1, "cudaMemsetAsync": 1},
    }
    assert not summary.complete and "3 of 4 launches" in summary.incomplete_reason
    assert summary.kernels == [{"name": "Memset", "kind": "memset", "count": 1}]  # the API stays in by_api

    replay = [
        rt("cudaGraphLaunch_v10000", 50, 500),
        gpu("k1", 51, 500, grid=[1, 1, 1], block=[32, 1, 1]),
        gpu("k2", 52, 500),
        gpu("k1", 53, 500, grid=[1, 1, 1], block=[32, 1, 1]),
        gpu("Memset (Device)", 54, 500, cat="gpu_memset"),
        rt("cudaLaunchKernel", 40, 400),
        gpu("fill", 41, 400),
    ]
    kernels = replay_kernels_from_events(replay)
    assert [k["name"] for k in kernels] == ["k1", "k2", "k1", "Memset"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        complete = with_replay(summary, kernels)
    assert complete.complete and complete.incomplete_reason is None
    assert complete.kernels == [
        {"name": "Memset", "kind": "memset", "count": 1},
        {"name": "k1", "kind": "kernel", "count": 2, "grid": [1, 1, 1], "block": [32, 1, 1]},
        {"name": "k2", "kind": "kernel", "count": 1},
    ]
    assert complete.ops == summary.ops and complete.launches == summary.launches

    with pytest.warns(KernelEvidenceWarning, match=r"decode\[bs=8, rank=0\]"):
        lossy = with_replay(summary, kernels[:-1])
    assert not lossy.complete and "4 launches but the replay ran 3" in lossy.incomplete_reason


def test_rocm_replay_agreeing_keeps_capture_entries() -> None:
    summary = summarize_events(rocm_capture_events(), key=KEY, platform="rocm-gfx942")
    replay = replay_kernels_from_events(replay_events(ROCM_REPLAY))
    assert len(replay) == 4  # the fill kernel outside the graph is excluded
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        result = with_replay(summary, replay)
    assert result == summary  # same kernels; the capture's entries keep grid/block
    assert any("grid" in k for k in result.kernels)


def test_rocm_replay_with_a_different_kernel_is_incomplete() -> None:
    summary = summarize_events(rocm_capture_events(), key=KEY, platform="rocm-gfx942")
    swapped = [("kernel", GEMM), ("kernel", "other_kernel"), ("kernel", NORM), ("memcpy", "Memcpy DtoD")]
    with pytest.warns(KernelEvidenceWarning, match=r"decode\[bs=8") as record:
        result = with_replay(summary, replay_kernels_from_events(replay_events(swapped)))
    assert not result.complete
    assert "kernel multiset differs" in result.incomplete_reason
    assert "other_kernel" in result.incomplete_reason and "gemm_kernel" in result.incomplete_reason
    assert "other_kernel" in str(record[0].message)
    assert {k["name"] for k in result.kernels} >= {"other_kernel"}  # replay is the kernel source


def test_capture_without_end_is_flagged() -> None:
    events = [rt("hipStreamBeginCapture", 1, 1), rt("hipLaunchKernel", 2, 2, kernel="k")]
    summary = summarize_events(events, key=KEY, platform="rocm-gfx942")
    assert not summary.complete and "no EndCapture" in summary.incomplete_reason
    assert summary.launches["total"] == 1


def test_robust_to_odd_events() -> None:
    events = [
        {"ph": "M", "name": "process_name", "args": {"name": "x"}},
        {"cat": "cpu_op", "name": 7, "ts": 1},  # non-string name: ignored
        {"cat": "cpu_op", "name": "aten::a", "ts": 1, "args": "junk"},
        {"cat": "cpu_op", "name": "aten::a", "ts": 2},
        {"cat": "kernel", "name": "k", "args": {"grid": [1, "x", 1], "block": None}},
        {"cat": "kernel", "name": "k", "ts": 5},
        {"cat": "cuda_runtime", "name": None},
        {"name": "no category"},
    ]
    summary = summarize_events(events, key=KEY, platform="cuda-sm80")
    assert summary.ops == [{"name": "aten::a", "input_dims": [], "input_types": [], "count": 2}]
    assert summary.kernels == [{"name": "k", "kind": "kernel", "count": 2}]


def test_int_and_float_timestamps_agree() -> None:
    as_float = rocm_capture_events()
    # scaled, order preserved
    as_int = [dict(e, ts=int(e["ts"] * 2), dur=int(e.get("dur", 0) * 2)) for e in rocm_capture_events()]
    a = summarize_events(as_float, key=KEY, platform="rocm-gfx942")
    b = summarize_events(as_int, key=KEY, platform="rocm-gfx942")
    assert a == b


def test_byte_stable_regardless_of_event_order() -> None:
    events = rocm_capture_events()
    first = summarize_events(events, key=KEY, platform="rocm-gfx942").to_json()
    shuffled = list(events)
    random.Random(7).shuffle(shuffled)
    assert summarize_events(shuffled, key=KEY, platform="rocm-gfx942").to_json() == first
    assert first.endswith("}\n") and json.loads(first)["schema_version"] == SCHEMA_VERSION


# ---- Summary contract


def _summary() -> Summary:
    return summarize_events(
        rocm_capture_events(),
        key=CaptureKey("r", 8, "DECODE", 1),
        platform="rocm-gfx942",
        environment={"device_name": "MI300X"},
    )


def test_to_dict_layout_and_round_trip() -> None:
    summary = _summary()
    data = summary.to_dict()
    assert list(data) == [
        "schema_version",
        "key",
        "platform",
        "level",
        "kernels",
        "ops",
        "launches",
        "complete",
        "environment",
        "unattributed",
        "kernel_source",
    ]
    assert data["kernel_source"] == "capture-window"  # ROCm's launch events name the kernels
    assert data["key"] == {"runner": "r", "batch_size": 8, "variant": "DECODE", "rank": 1}
    assert data["complete"] == {"value": True, "reason": None}
    again = summary_from_dict(json.loads(json.dumps(data)))
    assert again == summary and again.environment == {"device_name": "MI300X"}
    assert again.to_json() == summary.to_json()


def test_equality_ignores_environment_only() -> None:
    a, b = _summary(), _summary()
    b.environment = {"device_name": "other", "torch_version": "9"}
    assert a == b and "environment" not in a.comparable()
    b.platform = "rocm-gfx950"
    assert a != b


@pytest.mark.parametrize(
    "mutate, problem",
    [
        (lambda d: d.pop("kernels"), "missing kernels"),
        (lambda d: d.update(schema_version=99), "schema_version 99"),
        (lambda d: d.update(schema_version="1"), "schema_version must be an integer"),
        (lambda d: d["key"].update(batch_size="8"), "batch_size"),
        (lambda d: d["key"].update(batch_size=-1), "bad key"),
        (lambda d: d.update(platform=""), "platform"),
        (lambda d: d.update(level="fuzzy"), "level"),
        (lambda d: d["kernels"][0].update(count=0), "kernels[0].count"),
        (lambda d: d["kernels"][0].update(kind="graph"), "kernels[0].kind"),
        (lambda d: d["kernels"][1].update(grid="4x1x1"), "kernels[1].grid"),
        (lambda d: d["ops"].append({"name": "x", "input_dims": {}, "input_types": [], "count": 1}), "ops[2]"),
        (lambda d: d["launches"].update(total=None), "launches"),
        (lambda d: d["launches"]["by_api"].update(x="1"), "by_api"),
        (lambda d: d.update(complete="yes"), "complete"),
        (lambda d: d.update(environment=[]), "environment"),
    ],
)
def test_from_dict_names_the_problem(mutate, problem: str) -> None:
    data = json.loads(json.dumps(_summary().to_dict()))
    mutate(data)
    with pytest.raises(TraceFormatError) as info:
        summary_from_dict(data, "golden/r_bs_8.json")
    assert info.value.path == "golden/r_bs_8.json" and problem in info.value.problem
    with pytest.raises(TraceFormatError, match="JSON object"):
        summary_from_dict([], "x")


def test_normalized_merges_filters_and_refuses_finer_levels() -> None:
    events = [
        gpu("void k<1>(int)", 1, 1),
        gpu("void k<2>(int)", 2, 2),
        gpu("Cijk_Alik_MT64", 3, 3),
        gpu("Memset (Device)", 4, 4, cat="gpu_memset"),
        op("aten::mm", 5),
        op("aten::fill_", 6),
    ]
    exact = summarize_events(events, key=KEY, platform="cuda-sm90", level="exact")
    assert exact.level == "exact" and len(exact.kernels) == 4
    family = exact.normalized("family", ignore_kernels=[r"^Memset"], ignore_ops=["fill"])
    assert family.level == "family"
    assert family.kernels == [
        {"name": "GEMM", "kind": "kernel", "count": 1},
        {"name": "k", "kind": "kernel", "count": 2},
    ]
    assert [o["name"] for o in family.ops] == ["aten::mm"]
    assert family.normalized("family") == family  # idempotent
    assert exact.normalized("name") == summarize_events(events, key=KEY, platform="cuda-sm90", level="name")
    with pytest.raises(UsageError, match="finer level 'exact'"):
        family.normalized("exact")
    with pytest.raises(UsageError, match="not a valid regular expression"):
        exact.normalized("name", ignore_kernels=["("])


# ---- keys from file names and annotations


@pytest.mark.parametrize(
    "name, key",
    [
        ("llama_bs_32_rank0.json.gz", CaptureKey("llama", 32, None, 0)),
        ("llama_bs_32_DECODE_rank3.json", CaptureKey("llama", 32, "DECODE", 3)),
        ("my_run_bs_1_spec_v2_rank1.json.gz", CaptureKey("my_run", 1, "spec_v2", 1)),
        ("trace_bs=4.json.gz", CaptureKey("trace_bs=4", 4, None, 0)),
        ("decode_bs_16_step3_rank2.json.gz", CaptureKey("decode", 16, "step3", 2)),
    ],
)
def test_key_from_trace_name(name: str, key: CaptureKey) -> None:
    assert key_from_trace_name(name) == key


def test_key_from_annotations_and_errors() -> None:
    assert key_from_trace_name("x.json.gz", ["ProfilerStep#3", "step[DECODE bs=32]"]) == CaptureKey("x", 32)
    assert key_from_trace_name("x.json.gz", ["capture_16_DECODE"]) == CaptureKey("x", 16)
    assert key_from_trace_name("x.json.gz", ["capture_16_DECODE"], {"distributedInfo": {"rank": 2}}).rank == 2
    with pytest.raises(TraceFormatError, match=r"x\.json\.gz: cannot tell the batch size"):
        key_from_trace_name("x.json.gz", ["ProfilerStep#1"])
    with pytest.raises(TraceFormatError, match=r"several batch sizes \[8, 16\]"):
        key_from_trace_name("x.json.gz", ["bs=8", "bs=16"])


def test_summarize_trace_file_with_replay(tmp_path: Path) -> None:
    trace = {
        "schemaVersion": 1,
        "hip_runtime_version": 1,
        "deviceProperties": [{"id": 0, "name": "", "computeMajor": 9, "computeMinor": 4}],
        "traceEvents": rocm_capture_events(),
    }
    capture = tmp_path / "eng_bs_8_rank0.json.gz"
    capture.write_bytes(gzip.compress(json.dumps(trace).encode()))
    replay = tmp_path / "replay.json"
    replay.write_text(json.dumps({"traceEvents": replay_events(ROCM_REPLAY)}))
    summary = summarize_trace_file(capture, replay_path=replay)
    assert summary.key == CaptureKey("eng", 8) and summary.platform == "rocm-gfx942" and summary.complete
    assert summary == summarize_events(rocm_capture_events(), key=CaptureKey("eng", 8), platform="rocm-gfx942")
    assert summary.environment["device_name"] is None
    with pytest.raises(UsageError):
        summarize_trace_file(capture, level="coarse")


def test_op_entries_are_packed_equal_with_shared_strings_and_their_own_shape_lists() -> None:
    """A summary's ops are rebuilt on construction: equal, strings shared between summaries, lists its own."""

    def entry(bs: int) -> dict:
        # Names and types built at run time, as a profiler hands them over: a new string object each.
        return {
            "name": "".join(["aten::", "linear"]),
            "input_dims": [[bs, 64], [256, 64], []],
            "input_types": ["".join(["flo", "at"]), "float", ""],
            "count": 3,
        }

    given = [entry(2), {**entry(2), "name": "".join(["aten::", "mm"])}]
    summaries = [Summary(key=CaptureKey("R", bs), platform="cpu", ops=[entry(bs)]) for bs in (2, 4)]
    packed = Summary(key=CaptureKey("R", 2), platform="cpu", ops=given)
    assert packed.ops == sorted(given, key=lambda o: o["name"])  # equal content, canonical order
    a, b = (s.ops[0] for s in summaries)
    assert a["name"] is b["name"] and a["input_types"][0] is b["input_types"][0] is a["input_types"][1]
    assert all(p is not g and p["input_dims"][0] is not g["input_dims"][0] for p, g in zip(packed.ops, given))
    # An entry of another shape (a field more, a tuple) is kept as given: nothing is converted.
    odd = [{**entry(2), "note": "x"}, {**entry(4), "input_dims": ((4, 64),)}]
    kept = Summary(key=CaptureKey("R", 2), platform="cpu", ops=odd).ops
    assert all(any(k is o for o in odd) for k in kept)
