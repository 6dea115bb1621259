"""Merged multi-rank traces through the CLI: each rank's kernels keep their own ops; folders list ranks, not the merge."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from test_merge import write

from pytest_graphcapture.tools.cli import main
from pytest_graphcapture.tools.merge import ID_STRIDE

#: Rank r runs OPS[r], which launches KERNELS[r]: same pid-local thread, correlation id and times on both ranks.
OPS = ("aten::mm", "aten::add")
KERNELS = ("gemm_kernel", "add_kernel")


def eager_rank_trace(rank: int) -> dict:
    """One eager step of one rank as Kineto writes it: op → launch call → kernel, joined by correlation id."""
    pid = 4000 + rank
    dims = {"Input Dims": [[4, 8], [8, 8]], "Input type": ["float", "float"]}
    return {
        "schemaVersion": 1,
        "baseTimeNanoseconds": 1_000_000_000,
        "distributedInfo": {"rank": rank, "world_size": 2},
        "traceEvents": [
            {"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": "python"}},
            {"ph": "X", "cat": "cpu_op", "name": OPS[rank], "pid": pid, "tid": 7, "ts": 100, "dur": 5, "args": dims},
            {
                "ph": "X",
                "cat": "cuda_runtime",
                "name": "cudaLaunchKernel",
                "pid": pid,
                "tid": 7,
                "ts": 101,
                "dur": 1,
                "args": {"correlation": 11},
            },
            {"ph": "s", "cat": "ac2g", "name": "ac2g", "id": 11, "pid": pid, "tid": 7, "ts": 101},
            {
                "ph": "X",
                "cat": "kernel",
                "name": KERNELS[rank],
                "pid": 0,
                "tid": 7,
                "ts": 103,
                "dur": 1,
                "args": {"correlation": 11, "stream": 7, "device": 0},
            },
        ],
    }


@pytest.fixture
def ranks(tmp_path: Path) -> Path:
    for rank in (0, 1):
        write(tmp_path / f"Model_bs_4_rank{rank}.json.gz", eager_rank_trace(rank))
    return tmp_path


def test_summarize_of_a_merged_trace_names_each_rank_s_own_op(ranks: Path, capsys: pytest.CaptureFixture) -> None:
    assert main(["merge", str(ranks)]) == 0
    merged = ranks / "Model_bs_4_merged.json.gz"
    assert capsys.readouterr().out.strip() == str(merged)
    assert main(["summarize", str(merged)]) == 0
    summary = json.loads(capsys.readouterr().out)
    launched = sorted((k["name"], k["op"]["name"]) for k in summary["kernels"])
    assert launched == [("add_kernel", "aten::add"), ("gemm_kernel", "aten::mm")]
    assert summary["complete"]["value"] is True
    # Each rank summarized on its own names the same op for its kernel.
    for rank in (0, 1):
        assert main(["summarize", str(ranks / f"Model_bs_4_rank{rank}.json.gz")]) == 0
        alone = json.loads(capsys.readouterr().out)
        assert [(k["name"], k["op"]["name"]) for k in alone["kernels"]] == [(KERNELS[rank], OPS[rank])]


def test_show_lists_the_ranks_and_not_their_merged_trace(
    ranks: Path, tmp_path_factory: pytest.TempPathFactory, capsys: pytest.CaptureFixture
) -> None:
    assert main(["merge", str(ranks)]) == 0
    assert (ranks / "Model_bs_4_merged.json.gz").is_file()
    capsys.readouterr()
    assert main(["show", str(ranks)]) == 0
    titles = [line for line in capsys.readouterr().out.splitlines() if ", level " in line]
    assert titles == ["Model rank 0, cpu, level name", "Model rank 1, cpu, level name"]
    page = tmp_path_factory.mktemp("html") / "show.html"
    assert main(["show", str(ranks), "--html", str(page)]) == 0
    html = page.read_text(encoding="utf-8")
    assert "Model rank 0" in html and "Model rank 1" in html
    assert "merged" not in html


def test_a_trace_merged_with_colliding_correlation_ids_is_refused(ranks: Path, capsys: pytest.CaptureFixture) -> None:
    """Older merges kept each rank's correlation ids: such a trace is refused rather than summarized wrongly."""
    assert main(["merge", str(ranks)]) == 0
    merged = ranks / "Model_bs_4_merged.json.gz"
    old = json.loads(gzip.decompress(merged.read_bytes()))
    del old["graphcapture_merged"]["correlation"]
    for event in old["traceEvents"]:
        if "correlation" in event.get("args", {}):
            event["args"]["correlation"] %= ID_STRIDE
    (ranks / "old").mkdir()
    old_path = write(ranks / "old" / "Model_bs_4_merged.json.gz", old)
    capsys.readouterr()
    assert main(["summarize", str(old_path)]) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"graphcapture summarize: error: {old_path}: merged by an older graphcapture merge, which kept each "
        "rank's own correlation ids, so a kernel cannot be told from another rank's; merge the rank traces again "
        "(graphcapture merge DIR)"
    ]
