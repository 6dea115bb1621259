"""Merging per-rank traces: pids relabelled by rank, ids kept apart, one time base, stable order, CLI."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from helpers import load_trace

from pytest_graphcapture.errors import TraceFormatError
from pytest_graphcapture.naming import parse_rank_trace
from pytest_graphcapture.tools.cli import main
from pytest_graphcapture.tools.merge import ID_STRIDE, PID_STRIDE, merge_rank_traces, merge_trace_files


def rank_trace(rank: int, base_ns: int, ts0: float) -> dict:
    pid = 4000 + rank
    return {
        "schemaVersion": 1,
        "baseTimeNanoseconds": base_ns,
        "distributedInfo": {"rank": rank, "world_size": 2},
        "traceEvents": [
            {"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": "python"}},
            {"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0, "args": {"sort_index": pid}},
            {"ph": "X", "cat": "cpu_op", "name": "c10d::allreduce_", "pid": pid, "tid": 7, "ts": ts0 + 5, "dur": 2},
            {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": pid, "tid": 7, "ts": ts0, "dur": 3},
            {"ph": "s", "cat": "ac2g", "name": "flow", "id": 11, "pid": pid, "tid": 7, "ts": ts0 + 1},
            {
                "ph": "X",
                "cat": "kernel",
                "name": "gemm",
                "pid": 0,
                "tid": "stream 7",
                "ts": ts0 + 2,
                "dur": 1,
                "args": {"correlation": 11},
            },
            {"ph": "i", "name": "Iteration Start", "pid": "Spans", "tid": "PyTorch Profiler", "ts": ts0},
        ],
    }


def write(path: Path, trace: dict) -> Path:
    path.write_bytes(gzip.compress(json.dumps(trace).encode()))
    return path


@pytest.fixture
def two_ranks(tmp_path: Path) -> Path:
    write(tmp_path / "Model_bs_4_rank0.json.gz", rank_trace(0, 1_000_000_000, 100.0))
    # Rank 1's file counts from a base 1 ms later: its events move 1000 us later on the merged timeline.
    write(tmp_path / "Model_bs_4_rank1.json.gz", rank_trace(1, 1_001_000_000, 100.0))
    write(tmp_path / "Model_bs_8_rank0.json.gz", rank_trace(0, 1_000_000_000, 50.0))  # one rank only: not merged
    (tmp_path / "notes.json").write_text("{}")
    return tmp_path


def test_merge_labels_every_rank_s_processes_and_keeps_ids_and_time_apart(two_ranks: Path) -> None:
    written = merge_rank_traces(two_ranks)
    assert [p.name for p in written] == ["Model_bs_4_merged.json.gz"]
    merged = load_trace(written[0])
    events = merged["traceEvents"]
    names = {e["pid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    # Sorted original pids per rank: 0 (GPU), 4000+r (CPU), "Spans" → rank * PID_STRIDE + index.
    assert names == {
        0: "[TP00] pid 0",
        1: "[TP00] python",
        2: "[TP00] pid Spans",
        PID_STRIDE: "[TP01] pid 0",
        PID_STRIDE + 1: "[TP01] python",
        PID_STRIDE + 2: "[TP01] pid Spans",
    }
    sort_index = {e["pid"]: e["args"]["sort_index"] for e in events if e["name"] == "process_sort_index"}
    assert sort_index == {pid: pid for pid in names}
    allreduce = {e["pid"]: e["ts"] for e in events if e["name"] == "c10d::allreduce_"}
    assert allreduce == {1: 105.0, PID_STRIDE + 1: 1105.0}
    assert merged["baseTimeNanoseconds"] == 1_000_000_000
    assert sorted(e["id"] for e in events if e["ph"] == "s") == [11, 11 + ID_STRIDE]
    timed = [e for e in events if e["ph"] != "M"]
    assert all(e["ph"] == "M" for e in events[: len(events) - len(timed)])  # metadata first
    assert [(e["ts"], e["pid"]) for e in timed] == sorted((e["ts"], e["pid"]) for e in timed)
    assert merged["graphcapture_merged"]["ranks"] == [0, 1] and "distributedInfo" not in merged


def test_merging_is_byte_stable(two_ranks: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    first = merge_rank_traces(two_ranks)[0].read_bytes()
    other = merge_rank_traces(two_ranks, out_dir=tmp_path_factory.mktemp("out"))[0]
    assert other.read_bytes() == first == merge_rank_traces(two_ranks)[0].read_bytes()


def test_single_trace_mode_files_merge_by_their_tp_suffix(tmp_path: Path) -> None:
    for rank in (0, 1):
        write(tmp_path / f"cuda_graph_capture-Model-TP-{rank}.json.gz", rank_trace(rank, 0, 10.0))
    assert parse_rank_trace(tmp_path / "cuda_graph_capture-Model-TP-1.json.gz").rank == 1
    assert parse_rank_trace(tmp_path / ".Model_bs_1_rank0.json.gz.123.partial.json.gz") is None
    assert [p.name for p in merge_rank_traces(tmp_path)] == ["cuda_graph_capture-Model-merged.json.gz"]


def test_bad_inputs_name_the_file(tmp_path: Path) -> None:
    write(tmp_path / "M_bs_1_rank0.json.gz", rank_trace(0, 0, 1.0))
    (tmp_path / "M_bs_1_rank1.json.gz").write_bytes(b"not gzip, not json")
    with pytest.raises(TraceFormatError, match="M_bs_1_rank1.json.gz"):
        merge_rank_traces(tmp_path)
    with pytest.raises(TraceFormatError, match="missing: no such file or directory"):
        merge_rank_traces(tmp_path / "missing")
    with pytest.raises(TraceFormatError):
        merge_trace_files({0: tmp_path / "M_bs_1_rank1.json.gz"}, tmp_path / "x.json.gz")


def test_cli_merge(
    two_ranks: Path, tmp_path_factory: pytest.TempPathFactory, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path_factory.mktemp("merged")
    assert main(["merge", str(two_ranks), "--out-dir", str(out)]) == 0
    assert capsys.readouterr().out.strip() == str(out / "Model_bs_4_merged.json.gz")
    empty = tmp_path_factory.mktemp("empty")
    assert main(["merge", str(empty)]) == 2
    assert "no group of per-rank traces with two or more ranks" in capsys.readouterr().err
