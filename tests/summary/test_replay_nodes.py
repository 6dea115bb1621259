"""NVIDIA graph replays whose kernels carry graph node ids: each node names the op that launched it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_graphcapture.keys import CaptureKey
from pytest_graphcapture.summary import summarize_trace_file
from pytest_graphcapture.summary.replay import KernelEvidenceWarning
from pytest_graphcapture.summary.scan import REPLAY_NODES_DIFFER, REPLAY_UNATTRIBUTED, op_label

KEY = CaptureKey("Runner", 8)
GRAPH_CORR = 900

# (op name, input dims, launch API, replayed node kind, kernel name, graph node id), in call order.
CALLS = [
    ("aten::mm", [[8, 64], [64, 256]], "cudaLaunchKernel", "kernel", "gemm_128x64", 41),
    ("aten::add", [[8, 256], [8, 256]], "cudaLaunchKernel", "kernel", "elementwise_add", 42),
    ("aten::copy_", [[8, 256], [8, 256]], "cudaMemcpyAsync", "gpu_memcpy", "Memcpy DtoD (Device -> Device)", 43),
    ("aten::mm", [[8, 256], [256, 64]], "cudaLaunchKernel", "kernel", "gemm_64x64", 44),
]


def _write(path: Path, events: list) -> Path:
    path.write_text(json.dumps({"traceEvents": events}), encoding="utf-8")
    return path


def _capture(path: Path, *, bare: int = -1) -> Path:
    """The capture window; the launch call number ``bare`` runs outside any op."""
    events = [
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaStreamBeginCapture", "ts": 100, "dur": 1, "tid": 1},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaStreamEndCapture", "ts": 1000, "dur": 1, "tid": 1},
    ]
    for i, (op, dims, api, _, _, _) in enumerate(CALLS):
        start = 200 + 100 * i
        if i != bare:
            events.append(
                {"ph": "X", "cat": "cpu_op", "name": op, "ts": start, "dur": 50, "tid": 1, "args": {"Input Dims": dims}}
            )
        events.append(
            {
                "ph": "X",
                "cat": "cuda_runtime",
                "name": api,
                "ts": start + 10,
                "dur": 5,
                "tid": 1,
                "args": {"correlation": i + 1},
            }
        )
    return _write(path, events)


def _replay(path: Path, *, node_ids: bool = True, drop: int = -1) -> Path:
    """The graph's replay: nodes run on two streams, so their time order is not the call order."""
    events = [
        {
            "ph": "X",
            "cat": "cuda_runtime",
            "name": "cudaGraphLaunch",
            "ts": 10,
            "dur": 3,
            "tid": 1,
            "args": {"correlation": GRAPH_CORR},
        },
        {"ph": "X", "cat": "kernel", "name": "fill_outside_the_graph", "ts": 5, "dur": 1, "args": {"correlation": 7}},
    ]
    run_order = [1, 0, 3, 2]  # second-stream work ran first
    for slot, i in enumerate(run_order):
        if i == drop:
            continue
        _, _, _, kind, name, node = CALLS[i]
        args = {"correlation": GRAPH_CORR, "stream": 7 + i % 2}
        if node_ids:
            args["graph node id"] = node
        events.append({"ph": "X", "cat": kind, "name": name, "ts": 20 + slot, "dur": 1, "args": args})
    return _write(path, events)


def _ops_by_kernel(summary) -> dict:
    return {k["name"]: op_label(k.get("op")) for k in summary.kernels}


def test_replay_nodes_name_their_launching_op_in_graph_node_order(tmp_path):
    summary = summarize_trace_file(_capture(tmp_path / "c.json"), key=KEY, replay_path=_replay(tmp_path / "r.json"))
    assert summary.complete and summary.unattributed is None
    # Matched by time instead, gemm_128x64 (run second) would have been given aten::add.
    assert _ops_by_kernel(summary) == {
        "gemm_128x64": "aten::mm [[8,64],[64,256]]",
        "elementwise_add": "aten::add [[8,256],[8,256]]",
        "Memcpy DtoD (Device -> Device)": "aten::copy_ [[8,256],[8,256]]",
        "gemm_64x64": "aten::mm [[8,256],[256,64]]",
    }
    assert "fill_outside_the_graph" not in _ops_by_kernel(summary)


def test_without_graph_node_ids_replay_kernels_stay_unattributed_and_say_why(tmp_path):
    replay = _replay(tmp_path / "r.json", node_ids=False)
    summary = summarize_trace_file(_capture(tmp_path / "c.json"), key=KEY, replay_path=replay)
    assert summary.complete
    assert summary.unattributed == REPLAY_UNATTRIBUTED
    assert all("op" not in k for k in summary.kernels if k["kind"] == "kernel")


def test_node_ids_that_do_not_line_up_with_the_launches_are_not_trusted(tmp_path):
    replay = _replay(tmp_path / "r.json", drop=2)  # the memcpy node's record was dropped
    with pytest.warns(KernelEvidenceWarning, match="recorded 4 launches but the replay ran 3 graph nodes"):
        summary = summarize_trace_file(_capture(tmp_path / "c.json"), key=KEY, replay_path=replay)
    assert not summary.complete
    assert summary.unattributed == REPLAY_NODES_DIFFER
    assert all("op" not in k for k in summary.kernels if k["kind"] == "kernel")


def test_a_matched_node_whose_launch_ran_outside_any_op_names_none_and_nothing_is_blamed(tmp_path):
    replay = _replay(tmp_path / "r.json")
    summary = summarize_trace_file(_capture(tmp_path / "c.json", bare=3), key=KEY, replay_path=replay)
    assert summary.complete and summary.unattributed is None
    ops = _ops_by_kernel(summary)
    assert ops["gemm_64x64"] == "(no op)" and ops["gemm_128x64"] == "aten::mm [[8,64],[64,256]]"
